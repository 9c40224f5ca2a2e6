package ebpf

import (
	"cmp"
	"maps"
	"slices"
	"unsafe"

	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// planChange is plan for a change from the compiled policies from, which
// every host's active generation holds (cur: each host's record of it),
// to those of to: each identity's entries are the record's, patched where
// the rules differ, so that a change of a few rules costs a few entries
// and not the whole flattening (plan recomputes and sorts every entry).
// An identity whose rules include a deny or a cluster tier's entry is
// flattened again where they change (a deny turns the allows nested in it
// into denies; a tier's entries decide by precedence). ok is false when the
// change cannot be patched: the caller then plans from scratch. It can
// not be when L7 rules are in either set (proxyEntries depends on every
// entry of the identity), when the peer classes differ (the ipcache), or
// when a record does not describe the host's endpoints.
func planChange(lab *topology.Spec, from, to *policy.Compiled, cur map[string]*genContent) (plans map[string]*hostPlan, ok bool, err error) {
	pc := prepareChange(lab, from, to)
	if pc == nil {
		return nil, false, nil
	}
	return pc.finish(cur)
}

// ruleChanges is the part of planChange that needs no record: the
// changes of the rules of each identity the lab's endpoints have. It
// reads only the lab and the compiled sets, so it runs while the hosts'
// maps are opened and their records read.
type ruleChanges struct {
	lab   *topology.Spec
	to    *policy.Compiled
	p     *planner
	by    map[uint32]*identityChange
	after []uint32 // identities, sorted
}

// identityChange is how one identity's entries change: the entries of
// its two directions' changed rules (nil: none changed), or flatten
// again (full).
type identityChange struct {
	dirs [2]*rulePatch
	full bool
}

// prepareChange returns the rule changes from from to to, or nil when
// the change cannot be patched (see planChange).
func prepareChange(lab *topology.Spec, from, to *policy.Compiled) *ruleChanges {
	if from == nil || to == nil || len(from.HTTP) > 0 || len(to.HTTP) > 0 || !maps.Equal(from.CIDRIdentities, to.CIDRIdentities) {
		return nil
	}
	rc := &ruleChanges{lab: lab, to: to, p: newPlanner(lab, to), by: map[uint32]*identityChange{}}
	for _, ep := range lab.Endpoints {
		id := to.IdentityOfIP(ep.IP)
		if from.IdentityOfIP(ep.IP) != id {
			return nil
		}
		if rc.by[id] != nil {
			continue
		}
		ic := &identityChange{}
		for i, dir := range []policy.Dir{policy.Ingress, policy.Egress} {
			if ic.dirs[i], ic.full = rc.p.diffRules(from.RulesFor(id, dir), to.RulesFor(id, dir)); ic.full {
				break
			}
		}
		rc.by[id] = ic
	}
	return rc
}

// finish is planChange from the hosts' records of their active
// generations.
func (rc *ruleChanges) finish(cur map[string]*genContent) (plans map[string]*hostPlan, ok bool, err error) {
	lab, to, p := rc.lab, rc.to, rc.p
	bySubject := map[uint32][]polEntry{}
	for _, h := range lab.Hosts {
		rec := cur[h.Name]
		if rec == nil || !slices.Equal(rec.IPCache, p.ipc) {
			return nil, false, nil
		}
		for slot, ep := range change.LocalEndpoints(lab, h.Name) {
			id := to.IdentityOfIP(ep.IP)
			if slot >= len(rec.Slots) || rec.Slots[slot].ID != ep.ID() || rec.Slots[slot].Identity != id || rc.by[id] == nil {
				return nil, false, nil
			}
			if _, seen := bySubject[id]; !seen {
				bySubject[id] = rec.Slots[slot].Entries
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(bySubject)) {
		ic, es := rc.by[id], bySubject[id]
		if ic.full {
			var raw []polEntry
			for _, dir := range []policy.Dir{policy.Ingress, policy.Egress} {
				for _, r := range to.RulesFor(id, dir) {
					raw = p.raw(raw, r, RuleRef(r.Origin))
				}
			}
			es = flatten(raw)
		} else {
			for _, rp := range ic.dirs {
				es = rp.apply(es)
			}
		}
		bySubject[id] = es
	}
	plans, err = p.hosts(bySubject)
	return plans, err == nil, err
}

// entryAt names one entry of an identity's map: its key and prefix length.
type entryAt struct {
	key  uint64 // entryKey
	plen uint8
}

func entryAtOf(e polEntry) entryAt { return entryAt{entryKey(e), e.Plen} }

func (a entryAt) cmp(b entryAt) int {
	return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.plen, b.plen))
}

// rulePatch is what the change of the rules of one direction of an
// identity does to its entries: the entries the changed rules make, each
// with the lowest rule that now makes it among the added ones and, for an
// entry a removed rule made, among the unchanged ones.
type rulePatch struct {
	touched map[entryAt]*touch
	keys    []entryAt // of touched, sorted
}

type touch struct {
	rule      uint32 // lowest added rule making it (added)
	added     bool
	removed   []uint32 // rules removed that made the entry
	unchanged uint32   // lowest unchanged rule making it (kept), if removed
	kept      bool
}

// diffRules compares the rules of one direction of an identity, have
// and want (RulesFor: denies first, otherwise in the order compiled).
// Only the rules between the longest common head and tail count as
// changed. nil: nothing changed. full: the rules hold a deny or a
// cluster tier's entry, or most of them changed: flatten again.
func (p *planner) diffRules(have, want []policy.Entry) (rp *rulePatch, full bool) {
	var eq ruleEq
	head := 0
	for head < len(have) && head < len(want) && eq.equal(&have[head], &want[head]) {
		head++
	}
	tail := 0
	for tail < len(have)-head && tail < len(want)-head && eq.equal(&have[len(have)-1-tail], &want[len(want)-1-tail]) {
		tail++
	}
	removed, added := have[head:len(have)-tail], want[head:len(want)-tail]
	if len(removed) == 0 && len(added) == 0 {
		return nil, false
	}
	if mixed(have) || mixed(want) || 4*(len(removed)+len(added)) > len(want)+len(have) {
		return nil, true
	}
	rp = &rulePatch{touched: map[entryAt]*touch{}}
	at := func(e polEntry) *touch {
		t := rp.touched[entryAtOf(e)]
		if t == nil {
			t = &touch{}
			rp.touched[entryAtOf(e)] = t
		}
		return t
	}
	for _, r := range removed {
		ref := RuleRef(r.Origin)
		for _, e := range p.raw(nil, r, ref) {
			t := at(e)
			t.removed = append(t.removed, ref)
		}
	}
	for _, r := range added {
		ref := RuleRef(r.Origin)
		for _, e := range p.raw(nil, r, ref) {
			if t := at(e); !t.added || ref < t.rule {
				t.rule, t.added = ref, true
			}
		}
	}
	rp.keys = slices.SortedFunc(maps.Keys(rp.touched), entryAt.cmp)
	// Where a removed rule made the entry, the unchanged rules may still
	// make it: the lowest among them, in case the removed one was the
	// entry's rule.
	var lost []entryAt
	for _, k := range rp.keys {
		if len(rp.touched[k].removed) > 0 {
			lost = append(lost, k)
		}
	}
	if len(lost) > 0 {
		f := newLostFilter(lost)
		for _, rs := range [][]policy.Entry{want[:head], want[len(want)-tail:]} {
			for i := range rs {
				if !f.mayMake(&rs[i]) || !p.mayMake(rs[i], lost) {
					continue
				}
				r := rs[i]
				ref := RuleRef(r.Origin)
				for _, e := range p.raw(nil, r, ref) {
					if t := rp.touched[entryAtOf(e)]; t != nil && len(t.removed) > 0 && (!t.kept || ref < t.unchanged) {
						t.unchanged, t.kept = ref, true
					}
				}
			}
		}
	}
	return rp, false
}

// mixed reports whether the rules of one direction of an identity (in
// walking order: the Admin tier, the NetworkPolicy tier's denies, its
// allows, the Baseline tier) hold anything but NetworkPolicy-tier allows:
// a patch adds and removes allows only.
func mixed(rs []policy.Entry) bool {
	return len(rs) > 0 && (rs[0].Deny || rs[0].Tier != 0 || rs[len(rs)-1].Tier != 0)
}

// ruleEq compares rules of two compiled sets (==), remembering the last
// two origins found equal: the rules one policy rule compiles into (one
// per peer and protocol) share their origin string, so most origins are
// compared once, not once per rule. The two sets were compiled apart, so
// equal origins are different strings whose bytes must be read.
type ruleEq struct {
	a, b *byte // the origins last found equal
	n    int   // their length
}

func (q *ruleEq) equal(a, b *policy.Entry) bool {
	if a.Subject != b.Subject || a.Dir != b.Dir || a.Deny != b.Deny || a.PeerID != b.PeerID || a.PeerCIDR != b.PeerCIDR ||
		a.Proto != b.Proto || a.PortLo != b.PortLo || a.PortHi != b.PortHi || a.L7 != b.L7 || a.Tier != b.Tier || a.Pass != b.Pass ||
		a.Prec != b.Prec || len(a.Origin) != len(b.Origin) {
		return false
	}
	pa, pb := unsafe.StringData(a.Origin), unsafe.StringData(b.Origin)
	if pa == pb || (pa == q.a && pb == q.b && len(a.Origin) == q.n) {
		return true
	}
	if a.Origin != b.Origin {
		return false
	}
	q.a, q.b, q.n = pa, pb, len(a.Origin)
	return true
}

// apply brings the entries es of the identity (sorted, as flatten returns
// them) through the change; nil changes nothing.
func (rp *rulePatch) apply(es []polEntry) []polEntry {
	if rp == nil {
		return es
	}
	out := make([]polEntry, 0, len(es)+len(rp.keys))
	i := 0
	for _, k := range rp.keys {
		j, _ := slices.BinarySearchFunc(es[i:], k, entryAtCmp)
		out = append(out, es[i:i+j]...)
		i += j
		t := rp.touched[k]
		rule, ok := t.rule, t.added
		var have *polEntry
		if i < len(es) && entryAtOf(es[i]).cmp(k) == 0 {
			have = &es[i]
			i++
		}
		switch {
		case have == nil:
			// No unchanged rule makes it.
		case !slices.Contains(t.removed, have.Rule):
			// Its rule is unchanged.
			if !ok || have.Rule < rule {
				rule = have.Rule
			}
			ok = true
		case t.kept && (!ok || t.unchanged < rule):
			// Its rule was removed; an unchanged one makes it.
			rule, ok = t.unchanged, true
		}
		if ok {
			out = append(out, polEntry{Peer: uint32(k.key >> 32), Dir: uint8(k.key >> 24), Proto: uint8(k.key >> 16),
				Port: uint16(k.key), Plen: k.plen, Rule: rule})
		}
	}
	return append(out, es[i:]...)
}

// entryAtCmp orders an entry against the place k (for binary searches).
func entryAtCmp(e polEntry, k entryAt) int { return entryAtOf(e).cmp(k) }

// lostFilter rejects, cheaper than mayMake, most rules that cannot make
// any of the entries ks: those of another protocol, or whose ports are
// all outside the range of the ports of ks (thousands of unchanged rules
// are tested per change).
type lostFilter struct {
	anyProto       bool      // an entry of ks is for any protocol (keyBitsExact)
	protos         [4]uint64 // the protocols of ks, a bit set
	loPort, hiPort uint16    // the ports of ks (keys longer than keyBitsProto)
	protoOnly      bool      // an entry of ks is for every port of its protocol
}

func newLostFilter(ks []entryAt) lostFilter {
	f := lostFilter{loPort: 0xffff}
	for _, k := range ks {
		proto, port := uint8(k.key>>16), uint16(k.key)
		switch {
		case k.plen == keyBitsExact:
			f.anyProto = true
			continue
		case k.plen == keyBitsProto:
			f.protoOnly = true
		default:
			f.loPort, f.hiPort = min(f.loPort, port), max(f.hiPort, port)
		}
		f.protos[proto/64] |= 1 << (proto % 64)
	}
	return f
}

// mayMake is false when rule r cannot make any of the filter's entries
// (true does not say it can: see planner.mayMake).
func (f *lostFilter) mayMake(r *policy.Entry) bool {
	switch {
	case r.Proto == policy.ProtoAny:
		return f.anyProto
	case f.protos[r.Proto/64]&(1<<(r.Proto%64)) == 0:
		return false
	case r.PortLo == 0:
		return f.protoOnly
	}
	return max(r.PortHi, r.PortLo) >= f.loPort && r.PortLo <= f.hiPort
}

// mayMake is a quick test of whether rule r can make one of the entries
// ks (same protocol, a port range around the port): a rule that passes is
// expanded to see.
func (p *planner) mayMake(r policy.Entry, ks []entryAt) bool {
	for _, k := range ks {
		proto, port := uint8(k.key>>16), uint16(k.key)
		switch {
		case k.plen == keyBitsExact:
			if r.Proto == policy.ProtoAny {
				return true
			}
		case r.Proto != proto:
		case k.plen == keyBitsProto:
			if r.PortLo == 0 {
				return true
			}
		case r.PortLo != 0 && port >= r.PortLo && port <= max(r.PortHi, r.PortLo):
			return true
		}
	}
	return false
}
