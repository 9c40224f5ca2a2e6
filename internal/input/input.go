// Package input defines the one error type for bad user input: a topology,
// policy or experiment file, a flag or an argument that cnlab refuses. The
// CLI maps it to exit code 2 whatever package returned it. It never does
// I/O.
package input

import (
	"errors"
	"fmt"
	"strings"
)

// Error is a problem with the user's input: it names the file (or the flag
// or argument), the document within a multi-document file when there are
// several, the YAML path of the offending field, and what is wrong.
type Error struct {
	File string // file name, "preset NAME", or a flag such as --datapath
	Doc  string // "document 2 (NetworkPolicy x/web)"; empty for one-document files
	Path string // YAML path such as hosts[1].podCIDR; empty for the document
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	for _, s := range []string{e.Doc, e.Path} {
		if s != "" {
			b.WriteString(": ")
			b.WriteString(s)
		}
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Is reports whether err is (or wraps) bad input rather than a failure of
// the machine.
func Is(err error) bool {
	var ie *Error
	return errors.As(err, &ie)
}

// Errors is every problem found in one input, in file order, as a compiler
// lists them: one line each. Its first line is the first problem's, as a
// single *Error would print it, so what matched that line still does.
type Errors []*Error

// MaxErrors is how many problems Errors prints before saying how many more
// there are.
const MaxErrors = 20

func (l Errors) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i == MaxErrors {
			fmt.Fprintf(&b, "\n... and %d more", len(l)-MaxErrors)
			break
		}
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap lets errors.As find the first problem (and Is tell bad input).
func (l Errors) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// Join returns nil for no problem, the problem itself for one, and Errors
// for several.
func Join(errs []*Error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return Errors(errs)
}
