package iptables

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/policy"
)

// With peers: ipsets, each peer term of a rule as written (policy.Term)
// is one rule matching a set of the term's addresses (policy.PeerSet),
// as Calico's felix renders selectors, instead of one rule per address.
//
// Sets live in the host's network namespace like the chains (ipset is
// per network namespace), so labs and hosts never share one, and they go
// with the namespace when the lab is taken down, killed runs included.
// Their names carry a hash of the term: a set's members are a function
// of its name for the life of a lab (endpoints and labels are fixed at
// up), so writing the sets before the rules changes no verdict; the
// iptables-restore commit that follows is the one switch. A set is
// written into a temporary set and swapped in (ipset swap is atomic), so
// a set that did hold something else (a rebuild) never shows half its
// members. Sets no longer named by a rule are destroyed after the commit.

// setPrefix starts every set name of cnlab's.
const setPrefix = "cnlab-"

// Set types.
const (
	hashIP  = "hash:ip"  // endpoint addresses of a selector
	hashNet = "hash:net" // prefixes of a CIDR term
)

// ipset is one kernel set as a host's state records it.
type ipset struct {
	Type    string   `json:"type"`
	Members []string `json:"members"`
	Term    string   `json:"term"` // what it holds (policy.PeerSet.Key), for people
}

func (s ipset) equal(o ipset) bool { return s.Type == o.Type && slices.Equal(s.Members, o.Members) }

// setName names the kernel set of a peer set: cnlab-s- (selector,
// hash:ip) or cnlab-n- (CIDR, hash:net) and 16 hex digits of a hash of its
// key. 24 characters, within ipset's 31.
func setName(ps *policy.PeerSet) string {
	sum := sha256.Sum256([]byte(ps.Key))
	kind := "s-"
	if ps.Net {
		kind = "n-"
	}
	return setPrefix + kind + hex.EncodeToString(sum[:8])
}

// tmpName is the set a set is built in before it is swapped in.
func tmpName(name string) string { return name + tmpSuffix }

const tmpSuffix = "-new"

// renderSet returns the kernel set of a peer set. hash:net refuses a /0
// member: 0.0.0.0/0 is its two halves (as Calico writes it).
func renderSet(ps *policy.PeerSet) ipset {
	s := ipset{Type: hashIP, Term: ps.Key, Members: []string{}}
	if ps.Net {
		s.Type = hashNet
	}
	for _, p := range ps.Members {
		switch {
		case !p.Addr().Is4(): // a set of family inet: IPv4 members only
			continue
		case s.Type == hashIP:
			s.Members = append(s.Members, p.Addr().String())
		case p.Bits() == 0:
			s.Members = append(s.Members, "0.0.0.0/1", "128.0.0.0/1")
		default:
			s.Members = append(s.Members, p.String())
		}
	}
	return s
}

// maxElem is a set's maxelem: ipset's default, or more for a big set.
func maxElem(n int) int { return max(65536, n) }

// setsScript returns an ipset restore script (run with -exist) that makes
// every set of want that have does not hold as want says: built in a
// temporary set and swapped in, created first when the kernel does not
// have it (exists). "" when nothing is to be written.
func setsScript(have, want map[string]ipset, exists func(string) bool) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(want)) {
		s := want[name]
		if old, ok := have[name]; ok && old.equal(s) {
			continue
		}
		tmp := tmpName(name)
		opts := fmt.Sprintf("%s family inet maxelem %d", s.Type, maxElem(len(s.Members)))
		fmt.Fprintf(&b, "create %s %s\nflush %s\n", tmp, opts, tmp)
		for _, m := range s.Members {
			fmt.Fprintf(&b, "add %s %s\n", tmp, m)
		}
		if !exists(name) {
			fmt.Fprintf(&b, "create %s %s\n", name, opts)
		}
		fmt.Fprintf(&b, "swap %s %s\ndestroy %s\n", tmp, name, tmp)
	}
	return b.String()
}

// writeSets sends setsScript to the host's kernel.
func writeSets(ctx context.Context, ns string, have, want map[string]ipset, exists func(string) bool) error {
	script := setsScript(have, want, exists)
	if script == "" {
		return nil
	}
	if _, err := netns.Run(ctx, ns, []byte(script), "ipset", "-exist", "restore"); err != nil {
		return fmt.Errorf("write ipsets: %w", err)
	}
	return nil
}

// listSets returns the names of cnlab's sets in a host's kernel.
func listSets(ctx context.Context, ns string) ([]string, error) {
	out, err := netns.Run(ctx, ns, nil, "ipset", "list", "-n")
	if err != nil {
		return nil, fmt.Errorf("list ipsets: %w", err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if name := strings.TrimSpace(line); strings.HasPrefix(name, setPrefix) {
			names = append(names, name)
		}
	}
	return names, nil
}

// destroySets destroys sets no rule names any more, in one ipset restore,
// or one at a time if that fails (ipset stops at a set still in use). It
// returns those the kernel kept: the caller records them, so the next
// apply tries again.
func destroySets(ctx context.Context, ns string, names []string) []string {
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "destroy %s\n", n)
	}
	if _, err := netns.Run(ctx, ns, []byte(b.String()), "ipset", "-exist", "restore"); err == nil {
		return nil
	}
	var kept []string
	for _, n := range names {
		if _, err := netns.Run(ctx, ns, []byte("destroy "+n+"\n"), "ipset", "-exist", "restore"); err != nil {
			kept = append(kept, n)
		}
	}
	return kept
}

// goneSets returns the sets of have that want does not name.
func goneSets(have, want map[string]ipset) []string {
	var out []string
	for name := range have {
		if _, ok := want[name]; !ok {
			out = append(out, name)
		}
	}
	return out
}

// setMatch is the iptables match of a term's peers: the set, as the
// source (ingress) or the destination (egress).
func setMatch(name string, dir policy.Dir) []string {
	side := "dst"
	if dir == policy.Ingress {
		side = "src"
	}
	return []string{"-m", "set", "--match-set", name, side}
}
