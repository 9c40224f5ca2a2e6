package l7

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// HeaderMatch is one header a request must carry: Value == "" means the
// header must be present (with any value), otherwise one of its values
// must equal Value exactly. Name is case-insensitive.
type HeaderMatch struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

// Rule is one http rule; empty fields match anything. Method, Path and
// Host are RE2 regexps matched against the whole string.
type Rule struct {
	Method  string        `json:"method,omitempty"`
	Path    string        `json:"path,omitempty"`
	Host    string        `json:"host,omitempty"`
	Headers []HeaderMatch `json:"headers,omitempty"`
}

// Request is what the matcher sees of one request: the method as sent
// (case-sensitive), the request-target as sent (query string included),
// the Host header or :authority as sent (port included, if any) and the
// headers.
type Request struct {
	Method, Path, Host string
	Header             http.Header
}

// ParseHeader turns a `headers:` list item ("X" or "X: v") into a
// HeaderMatch: the item is split at its first ':' and both halves are
// trimmed of spaces. It returns an error on an empty or invalid name.
func ParseHeader(s string) (HeaderMatch, error) {
	name, value, _ := strings.Cut(s, ":")
	h := HeaderMatch{Name: strings.TrimSpace(name), Value: strings.TrimSpace(value)}
	if err := checkHeaderName(h.Name); err != nil {
		return HeaderMatch{}, fmt.Errorf("header %q: %w", s, err)
	}
	return h, nil
}

// Check validates a rule: each regexp must compile under RE2 syntax and
// each header name must be a valid HTTP token. On error, field names the
// field at fault ("method", "path", "host" or "headers").
func (r Rule) Check() (field string, err error) {
	for _, f := range []struct{ name, re string }{{"method", r.Method}, {"path", r.Path}, {"host", r.Host}} {
		if _, err := parseRE(f.re); err != nil {
			return f.name, err
		}
	}
	for i, h := range r.Headers {
		if err := checkHeaderName(h.Name); err != nil {
			return "headers", fmt.Errorf("header %d (%q): %w", i, h.Name, err)
		}
	}
	return "", nil
}

// parseRE parses one rule regexp on its own (so that `a)|(b` or `\Qa`
// cannot leak out of the anchors put around it) and checks that its
// full-match form compiles. An empty regexp gives nil: no check.
func parseRE(re string) (*syntax.Regexp, error) {
	if re == "" {
		return nil, nil
	}
	t, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("invalid regexp: %w", err)
	}
	if _, err := regexp.Compile(fullMatch([]string{t.String()})); err != nil {
		return nil, fmt.Errorf("invalid regexp %q: %w", re, err)
	}
	return uncapture(t), nil
}

// uncapture replaces the capture groups of t by their contents: the
// matcher needs no submatches, and Go's NFA copies every thread's
// captures at each step, which makes a large alternation quadratic.
func uncapture(t *syntax.Regexp) *syntax.Regexp {
	for t.Op == syntax.OpCapture {
		t = t.Sub[0]
	}
	for i, s := range t.Sub {
		t.Sub[i] = uncapture(s)
	}
	return t
}

// fullMatch is the source of a regexp matching a whole string that one of
// alts (each a complete regexp) matches.
func fullMatch(alts []string) string {
	return `^(?:(?:` + strings.Join(alts, `)|(?:`) + `))$`
}

// checkHeaderName reports whether name is a non-empty HTTP token
// (RFC 9110, section 5.6.2).
func checkHeaderName(name string) error {
	if name == "" {
		return errors.New("empty header name")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return fmt.Errorf("invalid character %q in header name", c)
		}
	}
	return nil
}

// maxSet is the most strings a regexp may stand for to be indexed as a set
// of literals rather than run as a regexp.
const maxSet = 64

// literals returns the finite set of strings t matches as a whole, or
// ok == false if it is not a set of at most maxSet strings this function
// knows how to list. atStart and atEnd say whether t begins at the start
// and ends at the end of the subject, where \A and \z match the empty
// string.
func literals(t *syntax.Regexp, atStart, atEnd bool) (set []string, ok bool) {
	switch t.Op {
	case syntax.OpEmptyMatch:
		return []string{""}, true
	case syntax.OpBeginText:
		return []string{""}, atStart
	case syntax.OpEndText:
		return []string{""}, atEnd
	case syntax.OpLiteral:
		return []string{string(t.Rune)}, t.Flags&syntax.FoldCase == 0 && exactRunes(t.Rune)
	case syntax.OpQuest:
		sub, ok := literals(t.Sub[0], atStart, atEnd)
		return append(sub, ""), ok && len(sub) < maxSet
	case syntax.OpCharClass:
		for i := 0; i+1 < len(t.Rune); i += 2 {
			for r := t.Rune[i]; r <= t.Rune[i+1]; r++ {
				if len(set) == maxSet || !exactRunes([]rune{r}) {
					return nil, false
				}
				set = append(set, string(r))
			}
		}
		return set, true
	case syntax.OpAlternate:
		for _, s := range t.Sub {
			sub, ok := literals(s, atStart, atEnd)
			if !ok || len(set)+len(sub) > maxSet {
				return nil, false
			}
			set = append(set, sub...)
		}
		return set, true
	case syntax.OpConcat:
		set = []string{""}
		for i, s := range t.Sub {
			sub, ok := literals(s, atStart && i == 0, atEnd && i == len(t.Sub)-1)
			if !ok || len(set)*len(sub) > maxSet {
				return nil, false
			}
			next := make([]string, 0, len(set)*len(sub))
			for _, a := range set {
				for _, b := range sub {
					next = append(next, a+b)
				}
			}
			set = next
		}
		return set, true
	}
	return nil, false
}

// literalPrefix returns a string every match of t begins with.
func literalPrefix(t *syntax.Regexp) string {
	subs := []*syntax.Regexp{t}
	if t.Op == syntax.OpConcat {
		subs = t.Sub
	}
	var b strings.Builder
	for i, s := range subs {
		switch {
		case s.Op == syntax.OpBeginText && i == 0:
		case s.Op == syntax.OpLiteral && s.Flags&syntax.FoldCase == 0:
			for _, r := range s.Rune {
				if !exactRunes([]rune{r}) {
					return b.String()
				}
				b.WriteRune(r)
			}
		default:
			return b.String()
		}
	}
	return b.String()
}

// exactRunes reports whether the UTF-8 of rs matches a subject byte for
// byte as the regexp engine matches rs: not so for U+FFFD, which the
// engine also finds in each invalid byte of the subject.
func exactRunes(rs []rune) bool {
	for _, r := range rs {
		if r == utf8.RuneError || !utf8.ValidRune(r) {
			return false
		}
	}
	return true
}
