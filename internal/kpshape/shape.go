package kpshape

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Shape is a proxy's rules reduced to what compares: per key, an ordered
// list of normalized rules (or facts). Keys name a frontend by what both
// sides share (its cluster IP, port and protocol, "10.96.0.12:80/tcp")
// and the part of it ("service", "endpoint 10.244.0.21:8080",
// "node port", "external", "no endpoints", ...), or a part of the
// proxy's frame ("chain POSTROUTING", "hook nat PREROUTING", ...).
// Chains a rule jumps to are named by role (SVC, SEP(ADDR:PORT), EXT,
// MARK-MASQ, ...), never by their hashed names.
type Shape map[string][]string

// Clone returns a deep copy of s.
func (s Shape) Clone() Shape {
	out := Shape{}
	for k, v := range s {
		out[k] = slices.Clone(v)
	}
	return out
}

// Keys returns s's keys, sorted.
func (s Shape) Keys() []string { return slices.Sorted(maps.Keys(s)) }

// String prints s, one key a paragraph.
func (s Shape) String() string {
	var b strings.Builder
	for _, k := range s.Keys() {
		fmt.Fprintf(&b, "%s\n", k)
		for _, r := range s[k] {
			fmt.Fprintf(&b, "    %s\n", r)
		}
	}
	return b.String()
}

// Diff lists every key whose rules differ between real (kube-proxy) and
// mine (cnlab), with both sides; nil when the shapes are equal.
func Diff(real, mine Shape) []string {
	keys := map[string]bool{}
	for k := range real {
		keys[k] = true
	}
	for k := range mine {
		keys[k] = true
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		r, rok := real[k]
		m, mok := mine[k]
		if rok && mok && slices.Equal(r, m) {
			continue
		}
		side := func(ok bool, rules []string) string {
			if !ok {
				return "(none)"
			}
			if len(rules) == 0 {
				return "(empty)"
			}
			return strings.Join(rules, " ; ")
		}
		out = append(out, fmt.Sprintf("%s:\n    kube-proxy: %s\n    cnlab:      %s", k, side(rok, r), side(mok, m)))
	}
	return out
}

// Edit is one known difference: Apply rewrites the two shapes so that
// the difference is gone, and reports whether it found the difference
// (on either side) to rewrite.
type Edit struct {
	Name  string // short name, as docs/services.md lists it
	Why   string // one line: why the two differ
	Apply func(real, mine Shape) bool
}

// Reconcile applies edits in order to copies of real and mine. It returns
// the edits that found nothing to rewrite (a listed difference that is
// gone) and the differences left (one not listed).
func Reconcile(real, mine Shape, edits []Edit) (stale []string, left []string) {
	r, m := real.Clone(), mine.Clone()
	for _, e := range edits {
		if !e.Apply(r, m) {
			stale = append(stale, e.Name)
		}
	}
	return stale, Diff(r, m)
}

// Frontends returns the frontend prefixes ("10.96.0.12:80/tcp") of s's
// keys, sorted.
func (s Shape) Frontends() []string {
	set := map[string]bool{}
	for k := range s {
		if f, _, ok := strings.Cut(k, " "); ok && strings.Contains(f, ":") && strings.Contains(f, "/") {
			set[f] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Only keeps the frontends among keep and every key that is no
// frontend's (the frame), dropping other frontends (a cluster's
// kubernetes Service).
func (s Shape) Only(keep []string) Shape {
	out := Shape{}
	for k, v := range s {
		f, _, _ := strings.Cut(k, " ")
		if strings.Contains(f, ":") && strings.Contains(f, "/") && !slices.Contains(keep, f) {
			continue
		}
		out[k] = v
	}
	return out
}

// EditKeys rewrites every key's rules whose key matches (by f) with
// rewrite, returning whether any changed. rewrite returning nil deletes
// the key.
func (s Shape) EditKeys(match func(key string) bool, rewrite func(key string, rules []string) []string) bool {
	changed := false
	for _, k := range s.Keys() {
		if !match(k) {
			continue
		}
		n := rewrite(k, slices.Clone(s[k]))
		if n == nil {
			delete(s, k)
			changed = true
			continue
		}
		if !slices.Equal(n, s[k]) {
			s[k] = n
			changed = true
		}
	}
	return changed
}

// DropRules removes from the keys matched the rules for which drop is
// true, returning whether any went.
func (s Shape) DropRules(match func(key string) bool, drop func(rule string) bool) bool {
	return s.EditKeys(match, func(_ string, rules []string) []string {
		return slices.DeleteFunc(rules, drop)
	})
}

// Suffix matches keys ending with suffix.
func Suffix(suffix string) func(string) bool {
	return func(k string) bool { return strings.HasSuffix(k, suffix) }
}

// Prefix matches keys starting with prefix.
func Prefix(prefix string) func(string) bool {
	return func(k string) bool { return strings.HasPrefix(k, prefix) }
}

// Contains matches keys containing part.
func Contains(part string) func(string) bool {
	return func(k string) bool { return strings.Contains(k, part) }
}
