package topology

import (
	"errors"
	"fmt"
	"strings"
)

// InputError is a problem with a topology file or preset: it names the
// file, the YAML path of the offending field, and what is wrong with it.
type InputError struct {
	File string // file name, or "preset NAME"
	Path string // YAML path such as hosts[1].podCIDR; empty for the document
	Msg  string
}

func (e *InputError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Path != "" {
		b.WriteString(": ")
		b.WriteString(e.Path)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// IsInputError reports whether err is (or wraps) an InputError, i.e. bad
// user input rather than a failure of the machine.
func IsInputError(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}

// NotFoundError says a named lab object does not exist.
type NotFoundError struct {
	What, Name, Lab string
}

func (e *NotFoundError) Error() string {
	if e.Lab == "" {
		return fmt.Sprintf("%s %q not found", e.What, e.Name)
	}
	return fmt.Sprintf("%s %q not found in lab %s", e.What, e.Name, e.Lab)
}

// AmbiguousError says a bare name matches several objects.
type AmbiguousError struct {
	What       string // "endpoint" when empty
	Name, Lab  string
	Candidates []string
}

func (e *AmbiguousError) Error() string {
	what := e.What
	if what == "" {
		what = "endpoint"
	}
	return fmt.Sprintf("%s %q is ambiguous in lab %s: use one of %s",
		what, e.Name, e.Lab, strings.Join(e.Candidates, ", "))
}

// ErrAlreadyUp is returned by Up when the lab already exists.
var ErrAlreadyUp = errors.New("lab is already up")
