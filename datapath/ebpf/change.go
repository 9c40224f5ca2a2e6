package ebpf

import (
	"cmp"
	"maps"
	"slices"

	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// planChange is plan for a change from the compiled policies from, which
// every host's active generation holds (cur: each host's record of it),
// to those of to: each identity's entries are the record's, patched where
// the rules differ, so that a change of a few rules costs a few entries
// and not the whole flattening (plan recomputes and sorts every entry).
// An identity whose changed rules include a deny is flattened again (a
// deny turns the allows nested in it into denies). ok is false when the
// change cannot be patched: the caller then plans from scratch. It can
// not be when L7 rules are in either set (proxyEntries depends on every
// entry of the identity), when the peer classes differ (the ipcache), or
// when a record does not describe the host's endpoints.
func planChange(lab *topology.Spec, from, to *policy.Compiled, cur map[string]*genContent) (plans map[string]*hostPlan, ok bool, err error) {
	if from == nil || to == nil || len(from.HTTP) > 0 || len(to.HTTP) > 0 || !maps.Equal(from.CIDRIdentities, to.CIDRIdentities) {
		return nil, false, nil
	}
	for _, ep := range lab.Endpoints {
		if from.IdentityOfIP(ep.IP) != to.IdentityOfIP(ep.IP) {
			return nil, false, nil
		}
	}
	p := newPlanner(lab, to)
	bySubject := map[uint32][]polEntry{}
	for _, h := range lab.Hosts {
		rec := cur[h.Name]
		if rec == nil || !slices.Equal(rec.IPCache, p.ipc) {
			return nil, false, nil
		}
		for slot, ep := range change.LocalEndpoints(lab, h.Name) {
			id := to.IdentityOfIP(ep.IP)
			if slot >= len(rec.Slots) || rec.Slots[slot].ID != ep.ID() || rec.Slots[slot].Identity != id {
				return nil, false, nil
			}
			if _, seen := bySubject[id]; !seen {
				bySubject[id] = rec.Slots[slot].Entries
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(bySubject)) {
		es, full := bySubject[id], false
		for _, dir := range []policy.Dir{policy.Ingress, policy.Egress} {
			if es, full = p.patch(es, from.RulesFor(id, dir), to.RulesFor(id, dir)); full {
				break
			}
		}
		if full {
			var raw []polEntry
			for _, dir := range []policy.Dir{policy.Ingress, policy.Egress} {
				for _, r := range to.RulesFor(id, dir) {
					raw = p.raw(raw, r, RuleRef(r.Origin))
				}
			}
			es = flatten(raw)
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

// patch brings the entries es of one identity (sorted, as flatten
// returns them) from the rules of one direction have to want (RulesFor:
// denies first, otherwise in the order compiled). Only the rules between
// the longest common head and tail count as changed. full: the change
// touches a deny, or most of the rules: flatten again.
func (p *planner) patch(es []polEntry, have, want []policy.Entry) (out []polEntry, full bool) {
	head := 0
	for head < len(have) && head < len(want) && have[head] == want[head] {
		head++
	}
	tail := 0
	for tail < len(have)-head && tail < len(want)-head && have[len(have)-1-tail] == want[len(want)-1-tail] {
		tail++
	}
	removed, added := have[head:len(have)-tail], want[head:len(want)-tail]
	if len(removed) == 0 && len(added) == 0 {
		return es, false
	}
	if (len(have) > 0 && have[0].Deny) || (len(want) > 0 && want[0].Deny) || 4*(len(removed)+len(added)) > len(want)+len(have) {
		return es, true
	}
	// The entries the changed rules make, and the lowest rule of each
	// among the added ones.
	type touch struct {
		rule     uint32
		added    bool
		removed  []uint32 // rules removed that made the entry
		resolved bool
	}
	touched := map[entryAt]*touch{}
	at := func(e polEntry) *touch {
		t := touched[entryAtOf(e)]
		if t == nil {
			t = &touch{}
			touched[entryAtOf(e)] = t
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
	find := func(k entryAt) (int, bool) { return slices.BinarySearchFunc(es, k, entryAtCmp) }
	// Where the entry's rule was removed, the unchanged rules may still
	// make it: look for the lowest among them.
	var lost []entryAt
	for k, t := range touched {
		i, found := find(k)
		switch {
		case !found:
			t.resolved = t.added // no unchanged rule makes it
		case !slices.Contains(t.removed, es[i].Rule):
			if !t.added || es[i].Rule < t.rule {
				t.rule = es[i].Rule
			}
			t.resolved = true
		default:
			t.resolved = t.added
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
					if t := touched[entryAtOf(e)]; t != nil && slices.Contains(lost, entryAtOf(e)) && (!t.resolved || ref < t.rule) {
						t.rule, t.resolved = ref, true
					}
				}
			}
		}
	}
	// The touched entries as they are now, sorted, merged into es.
	keys := slices.SortedFunc(maps.Keys(touched), entryAt.cmp)
	out = make([]polEntry, 0, len(es)+len(keys))
	i := 0
	for _, k := range keys {
		j, _ := slices.BinarySearchFunc(es[i:], k, entryAtCmp)
		out = append(out, es[i:i+j]...)
		i += j
		if i < len(es) && entryAtOf(es[i]).cmp(k) == 0 {
			i++
		}
		if t := touched[k]; t.resolved {
			out = append(out, polEntry{Peer: uint32(k.key >> 32), Dir: uint8(k.key >> 24), Proto: uint8(k.key >> 16),
				Port: uint16(k.key), Plen: k.plen, Rule: t.rule})
		}
	}
	return append(out, es[i:]...), false
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
