package topology

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/internal/plural"
)

// Difference is one field in which two specs differ: its path as the
// spec's JSON names it (datapath, services.proxy, hosts[1].podCIDR) and
// the value on each side ("none" where a side has no such field).
type Difference struct {
	Path string
	A, B string
}

// Diff lists the fields in which a differs from b, in the spec's field
// order (then alphabetically, then by index), the fields Same compares.
// A list of another length is one difference ("3 items").
func Diff(a, b *Spec) []Difference {
	x, y := *a, *b
	x.Source, y.Source = "", ""
	var out []Difference
	diffJSON("", jsonRoundTrip(&x), jsonRoundTrip(&y), &out)
	return out
}

// DescribeDiff says what differs between a running lab (a) and the one
// asked for (b): its first max differences as "datapath iptables (you
// asked for nftables)", and how many more.
func DescribeDiff(a, b *Spec, max int) string {
	d := Diff(a, b)
	if len(d) == 0 {
		return "the same topology"
	}
	var parts []string
	for i, x := range d {
		if i == max {
			parts = append(parts, "and "+plural.N(len(d)-max, "more difference"))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s (you asked for %s)", x.Path, x.A, x.B))
	}
	return strings.Join(parts, ", ")
}

// specOrder ranks Spec's top-level JSON keys in the struct's order.
var specOrder = func() map[string]int {
	m := map[string]int{}
	t := reflect.TypeOf(Spec{})
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			m[name] = i
		}
	}
	return m
}()

func diffJSON(path string, a, b any, out *[]Difference) {
	if reflect.DeepEqual(a, b) {
		return
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		var ks []string
		for k := range keys {
			ks = append(ks, k)
		}
		sort.Slice(ks, func(i, j int) bool {
			if path == "" {
				ri, oki := specOrder[ks[i]]
				rj, okj := specOrder[ks[j]]
				if oki != okj {
					return oki
				}
				if oki && ri != rj {
					return ri < rj
				}
			}
			return ks[i] < ks[j]
		})
		for _, k := range ks {
			p := k
			if path != "" {
				p = path + "." + k
			}
			ea, oka := av[k]
			eb, okb := bv[k]
			if !oka || !okb {
				*out = append(*out, Difference{Path: p, A: show(ea, oka), B: show(eb, okb)})
				continue
			}
			diffJSON(p, ea, eb, out)
		}
		return
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			break
		}
		for i := range av {
			diffJSON(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i], out)
		}
		return
	}
	*out = append(*out, Difference{Path: path, A: show(a, true), B: show(b, true)})
}

// show is a JSON value as a difference names it: a scalar as itself, a
// list by its length, a mapping by its keys.
func show(v any, present bool) string {
	switch x := v.(type) {
	case nil:
		if !present {
			return "none"
		}
		return "null"
	case string:
		if x == "" {
			return `""`
		}
		return x
	case []any:
		if len(x) == 1 {
			return "1 item"
		}
		return fmt.Sprintf("%d items", len(x))
	case map[string]any:
		var ks []string
		for k := range x {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return "{" + strings.Join(ks, ", ") + "}"
	}
	data, _ := json.Marshal(v)
	return string(data)
}
