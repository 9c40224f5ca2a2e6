package l7

import (
	"fmt"
	"net/http"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
)

// The fields a rule is indexed by, in the order of Rule.
const (
	fMethod = iota
	fPath
	fHost
	nFields
)

var fieldNames = [nFields]string{"method", "path", "host"}

// key is the index key of an entry: for each field either a literal
// value or, when its bit is set in wild, any value.
type key struct {
	method, path, host string
	wild               uint8
}

// Matcher decides requests against a set of rules (ORed). A nil or empty
// Matcher allows nothing. A Matcher is safe for concurrent use.
type Matcher struct {
	n       int
	entries map[key]*entry
	shapes  []uint8 // the distinct wild masks of entries' keys
}

// entry holds the rules of one key, in groups.
type entry struct {
	groups     []*group            // groups whose path is indexed or any
	byPrefix   map[string][]*group // groups with a path regexp, by its literal prefix
	prefixLens []prefixLen         // the lengths of byPrefix's keys, ascending
}

// prefixLen is a length of prefixes, with the set of their last bytes: a
// path whose byte n-1 is not in it has none of these prefixes, and the
// map lookup (hashing n bytes) is skipped.
type prefixLen struct {
	n    int
	last [4]uint64
}

// group is what is left to check of one or more rules: nil regexps and
// no headers check nothing.
type group struct {
	re      [nFields]*regexp.Regexp
	headers []HeaderMatch // names canonical
}

// Len is the number of rules compiled.
func (m *Matcher) Len() int {
	if m == nil {
		return 0
	}
	return m.n
}

// Allows reports whether at least one rule matches r.
func (m *Matcher) Allows(r Request) bool {
	if m == nil {
		return false
	}
	for _, w := range m.shapes {
		k := key{wild: w}
		if w&(1<<fMethod) == 0 {
			k.method = r.Method
		}
		if w&(1<<fPath) == 0 {
			k.path = r.Path
		}
		if w&(1<<fHost) == 0 {
			k.host = r.Host
		}
		if e := m.entries[k]; e != nil && e.allows(r) {
			return true
		}
	}
	return false
}

func (e *entry) allows(r Request) bool {
	for _, g := range e.groups {
		if g.allows(r) {
			return true
		}
	}
	for _, l := range e.prefixLens {
		if l.n > len(r.Path) {
			break
		}
		if l.n > 0 && l.last[r.Path[l.n-1]/64]&(1<<(r.Path[l.n-1]%64)) == 0 {
			continue
		}
		for _, g := range e.byPrefix[r.Path[:l.n]] {
			if g.allows(r) {
				return true
			}
		}
	}
	return false
}

func (g *group) allows(r Request) bool {
	if g.re[fMethod] != nil && !g.re[fMethod].MatchString(r.Method) ||
		g.re[fHost] != nil && !g.re[fHost].MatchString(r.Host) {
		return false
	}
	for _, h := range g.headers {
		if !hasHeader(r.Header, h) {
			return false
		}
	}
	return g.re[fPath] == nil || g.re[fPath].MatchString(r.Path)
}

// hasHeader reports whether hdr carries m: a header named m.Name in any
// case with some value if m.Value is empty, with the value m.Value if not.
func hasHeader(hdr http.Header, m HeaderMatch) bool {
	if valuesMatch(hdr[m.Name], m.Value) {
		return true
	}
	for k, vs := range hdr { // names not in canonical form
		if k != m.Name && asciiEqualFold(k, m.Name) && valuesMatch(vs, m.Value) {
			return true
		}
	}
	return false
}

func valuesMatch(vs []string, want string) bool {
	if want == "" {
		return len(vs) > 0
	}
	return slices.Contains(vs, want)
}

func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// pending is a group being built: the rules that share everything but the
// regexp of field main (-1: no regexp left), whose sources are alts.
type pending struct {
	main    int
	alts    []*syntax.Regexp
	rest    [nFields]string // sources of the other regexps, "" for none
	headers []HeaderMatch
	prefix  string // literal prefix of every path alt (main == fPath)
}

// Compile checks rules (see Rule.Check) and indexes them. The error names
// the rule by its index and the field at fault.
func Compile(rules []Rule) (*Matcher, error) {
	pend := map[key]map[string]*pending{}
	for i, r := range rules {
		if field, err := r.Check(); err != nil {
			return nil, fmt.Errorf("rule %d: %s: %w", i, field, err)
		}
		var trees [nFields]*syntax.Regexp
		var sets [nFields][]string // indexed fields' values; nil: wild
		for f, src := range [nFields]string{r.Method, r.Path, r.Host} {
			trees[f], _ = parseRE(src) // checked above
			if trees[f] == nil {
				continue
			}
			if set, ok := literals(trees[f], true, true); ok {
				slices.Sort(set)
				sets[f] = slices.Compact(set)
			}
		}
		demote(&sets)

		p := &pending{main: -1, headers: canonHeaders(r.Headers)}
		for _, f := range []int{fPath, fHost, fMethod} {
			if trees[f] == nil || sets[f] != nil {
				continue
			}
			if p.main < 0 {
				p.main = f
				p.alts = []*syntax.Regexp{trees[f]}
				if f == fPath {
					p.prefix = literalPrefix(trees[f])
				}
			} else {
				p.rest[f] = trees[f].String()
			}
		}
		gk := fmt.Sprintf("%d %q %q %q %q %q", p.main, p.prefix, p.rest[0], p.rest[1], p.rest[2], p.headers)
		for _, k := range keys(sets) {
			groups := pend[k]
			if groups == nil {
				groups = map[string]*pending{}
				pend[k] = groups
			}
			if q := groups[gk]; q != nil {
				q.alts = append(q.alts, p.alts...)
			} else {
				c := *p
				c.alts = slices.Clone(p.alts)
				groups[gk] = &c
			}
		}
	}
	return build(len(rules), pend)
}

// demote turns indexed fields back into regexps, largest set first, until
// a rule's sets make at most maxSet keys.
func demote(sets *[nFields][]string) {
	for {
		n, big := 1, -1
		for f, s := range sets {
			if s != nil {
				n *= len(s)
				if big < 0 || len(s) > len(sets[big]) {
					big = f
				}
			}
		}
		if n <= maxSet {
			return
		}
		sets[big] = nil
	}
}

// keys lists the index keys of a rule's sets (a nil set is wild).
func keys(sets [nFields][]string) []key {
	ks := []key{{}}
	for f, set := range sets {
		if set == nil {
			for i := range ks {
				ks[i].wild |= 1 << f
			}
			continue
		}
		var next []key
		for _, k := range ks {
			for _, v := range set {
				switch f {
				case fMethod:
					k.method = v
				case fPath:
					k.path = v
				case fHost:
					k.host = v
				}
				next = append(next, k)
			}
		}
		ks = next
	}
	return ks
}

// canonHeaders returns hs with canonical names, sorted, without repeats.
func canonHeaders(hs []HeaderMatch) []HeaderMatch {
	if len(hs) == 0 {
		return nil
	}
	out := make([]HeaderMatch, len(hs))
	for i, h := range hs {
		out[i] = HeaderMatch{Name: http.CanonicalHeaderKey(h.Name), Value: h.Value}
	}
	slices.SortFunc(out, func(a, b HeaderMatch) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	return slices.Compact(out)
}

// build compiles the pending groups into a Matcher.
func build(n int, pend map[key]map[string]*pending) (*Matcher, error) {
	m := &Matcher{n: n, entries: make(map[key]*entry, len(pend))}
	cache := map[string]*regexp.Regexp{}
	compile := func(src string) (*regexp.Regexp, error) {
		if re := cache[src]; re != nil {
			return re, nil
		}
		re, err := regexp.Compile(fullMatch([]string{src}))
		cache[src] = re
		return re, err
	}
	shapes := map[uint8]bool{}
	for k, groups := range pend {
		e := &entry{}
		gks := make([]string, 0, len(groups))
		for gk := range groups {
			gks = append(gks, gk)
		}
		sort.Strings(gks) // a deterministic order
		for _, gk := range gks {
			p := groups[gk]
			var rest group
			rest.headers = p.headers
			for f, src := range p.rest {
				if src == "" {
					continue
				}
				var err error
				if rest.re[f], err = compile(src); err != nil {
					return nil, fmt.Errorf("%s regexp %q: %w", fieldNames[f], src, err)
				}
			}
			mains := []*regexp.Regexp{nil}
			if p.main >= 0 {
				var err error
				if mains, err = compileSplit(dedupe(p.alts), compile); err != nil {
					return nil, fmt.Errorf("%s regexps: %w", fieldNames[p.main], err)
				}
			}
			for _, re := range mains {
				g := rest
				if p.main >= 0 {
					g.re[p.main] = re
				}
				if p.main != fPath {
					e.groups = append(e.groups, &g)
					continue
				}
				if e.byPrefix == nil {
					e.byPrefix = map[string][]*group{}
				}
				e.byPrefix[p.prefix] = append(e.byPrefix[p.prefix], &g)
			}
		}
		lens := map[int]*prefixLen{}
		for prefix := range e.byPrefix {
			n := len(prefix)
			if lens[n] == nil {
				lens[n] = &prefixLen{n: n}
			}
			if n > 0 {
				lens[n].last[prefix[n-1]/64] |= 1 << (prefix[n-1] % 64)
			}
		}
		for _, l := range lens {
			e.prefixLens = append(e.prefixLens, *l)
		}
		slices.SortFunc(e.prefixLens, func(a, b prefixLen) int { return a.n - b.n })
		m.entries[k] = e
		shapes[k.wild] = true
	}
	for w := range shapes {
		m.shapes = append(m.shapes, w)
	}
	slices.Sort(m.shapes) // literal keys, the most selective, first
	return m, nil
}

// compileSplit compiles the alternation of alts, split in halves as long
// as it is too large for the regexp package.
func compileSplit(alts []*syntax.Regexp, compile func(string) (*regexp.Regexp, error)) ([]*regexp.Regexp, error) {
	re, err := compile(factor(alts).String())
	if err == nil {
		return []*regexp.Regexp{re}, nil
	}
	if len(alts) == 1 {
		return nil, err
	}
	a, err := compileSplit(alts[:len(alts)/2], compile)
	if err != nil {
		return nil, err
	}
	b, err := compileSplit(alts[len(alts)/2:], compile)
	return append(a, b...), err
}

// factor returns a regexp that matches what one of alts matches, with the
// leading subexpression of neighbours taken out once (AB|AC = A(B|C) as
// languages), recursively. Go's parser does so for literal prefixes only;
// without it, an NFA runs one thread per alternative for as long as they
// all match, as `(/v1)?/x<i>` or `.*/x<i>` do for several bytes.
func factor(alts []*syntax.Regexp) *syntax.Regexp {
	type alt struct {
		head string
		t    *syntax.Regexp
	}
	as := make([]alt, len(alts))
	for i, t := range alts {
		as[i] = alt{head(t).String(), t}
	}
	slices.SortFunc(as, func(a, b alt) int { return strings.Compare(a.head, b.head) })
	var out []*syntax.Regexp
	for i := 0; i < len(as); {
		h, j := head(as[i].t), i+1
		for j < len(as) && head(as[j].t).Equal(h) {
			j++
		}
		if j == i+1 {
			out = append(out, as[i].t)
		} else {
			var tails []*syntax.Regexp
			empty := false // one empty tail is enough, and ends the recursion
			for _, a := range as[i:j] {
				t := tail(a.t)
				if t.Op != syntax.OpEmptyMatch || !empty {
					tails = append(tails, t)
				}
				empty = empty || t.Op == syntax.OpEmptyMatch
			}
			out = append(out, &syntax.Regexp{Op: syntax.OpConcat, Sub: []*syntax.Regexp{h, factor(tails)}})
		}
		i = j
	}
	if len(out) == 1 {
		return out[0]
	}
	return &syntax.Regexp{Op: syntax.OpAlternate, Sub: out}
}

// dedupe returns ts without the regexps written as an earlier one is.
func dedupe(ts []*syntax.Regexp) []*syntax.Regexp {
	seen := map[string]bool{}
	return slices.DeleteFunc(ts, func(t *syntax.Regexp) bool {
		s := t.String()
		defer func() { seen[s] = true }()
		return seen[s]
	})
}

// head is the first subexpression of a concatenation, t itself otherwise.
func head(t *syntax.Regexp) *syntax.Regexp {
	if t.Op == syntax.OpConcat && len(t.Sub) > 0 {
		return t.Sub[0]
	}
	return t
}

// tail is what follows head(t) in t.
func tail(t *syntax.Regexp) *syntax.Regexp {
	switch {
	case t.Op != syntax.OpConcat || len(t.Sub) < 2:
		return &syntax.Regexp{Op: syntax.OpEmptyMatch}
	case len(t.Sub) == 2:
		return t.Sub[1]
	}
	return &syntax.Regexp{Op: syntax.OpConcat, Sub: t.Sub[1:]}
}
