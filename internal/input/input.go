// Package input defines the one error type for bad user input: a topology,
// policy or experiment file, a flag or an argument that cnlab refuses. The
// CLI maps it to exit code 2 whatever package returned it. It never does
// I/O.
package input

import (
	"errors"
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
