package topology

import (
	"fmt"
	"strings"
)

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
