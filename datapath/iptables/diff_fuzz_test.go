package iptables

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// restore applies an iptables-restore --noflush script of the forms
// diffScript writes to chains, as the kernel would: declaring a chain
// creates or flushes it, -A appends, -X deletes a chain that must be empty
// and unreferenced.
func restore(t *testing.T, chains map[string][]string, script string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(script), "\n") {
		switch {
		case line == "*filter" || line == "COMMIT" || line == "":
		case strings.HasPrefix(line, ":"):
			chains[strings.Fields(line[1:])[0]] = []string{}
		case strings.HasPrefix(line, "-A "):
			name, rule, _ := strings.Cut(line[3:], " ")
			if _, ok := chains[name]; !ok {
				t.Fatalf("append to missing chain %s", name)
			}
			chains[name] = append(chains[name], rule)
		case strings.HasPrefix(line, "-X "):
			name := line[3:]
			if len(chains[name]) > 0 {
				t.Fatalf("delete of non-empty chain %s", name)
			}
			for other, rules := range chains {
				for _, r := range rules {
					if strings.HasSuffix(r, "-j "+name) && other != name {
						t.Fatalf("delete of chain %s still referenced from %s", name, other)
					}
				}
			}
			delete(chains, name)
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
}

// FuzzDiffScript: from any chains to any chains (rules jumping between
// them included), the script diffScript writes takes the kernel from the
// one to the other, never deletes a chain still in use, and is empty when
// nothing changes.
func FuzzDiffScript(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 3, 1}, []byte{0, 2, 1, 4})
	f.Add([]byte{}, []byte{1, 1, 1, 2, 2, 2})
	f.Add([]byte{5, 0, 5, 1, 5, 2}, []byte{})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		build := func(bs []byte) map[string][]string {
			out := map[string][]string{}
			for i := 0; i+1 < len(bs) && i < 40; i += 2 {
				name := fmt.Sprintf("CNLAB-E-%08x", bs[i]%6)
				var rule string
				switch k := bs[i+1] % 6; k {
				case 0, 1, 2: // a jump to another chain of the set
					rule = fmt.Sprintf("-j CNLAB-E-%08x", (bs[i]+k+1)%6)
				default:
					rule = fmt.Sprintf("-p tcp --dport %d -j ACCEPT", bs[i+1])
				}
				out[name] = append(out[name], rule)
			}
			// A jump to a chain that does not exist would be refused by
			// iptables: keep jumps inside the set.
			for name, rules := range out {
				kept := rules[:0]
				for _, r := range rules {
					if target, ok := strings.CutPrefix(r, "-j "); !ok || out[target] != nil {
						kept = append(kept, r)
					}
				}
				out[name] = kept
			}
			return out
		}
		have, want := build(a), build(b)
		script := diffScript(have, want)
		if maps.EqualFunc(have, want, slices.Equal[[]string]) != (script == "") {
			t.Fatalf("have == want is %v but the script is %q", maps.EqualFunc(have, want, slices.Equal[[]string]), script)
		}
		got := maps.Clone(have)
		restore(t, got, script)
		if !maps.EqualFunc(got, want, slices.Equal[[]string]) {
			t.Fatalf("after the script:\n got %v\nwant %v\nscript:\n%s", got, want, script)
		}
	})
}
