package ebpf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// hostState is what the last apply left active on a host.
type hostState struct {
	Gen uint32 `json:"gen"`
}

// staged is a host whose next generation is written but not yet active.
type staged struct {
	host *topology.Host
	maps *hostMaps
	cfg  cnlabConfig
	ids  outerIDs         // of the host's outer maps
	next *genContent      // what the next generation now holds
	sets *change.HostSets // what the host's files said, when read (active)
}

// Apply implements datapath.Datapath. Every host gets its next generation
// of maps written beside the active one — in place, from the record of
// what that generation held, so a change of a few entries is a few map
// updates — then each host switches with one word: a packet sees either
// the old or the new policy, never a mix. If writing fails on any host,
// no host switches. After the switch, Apply waits until no program can
// still be running on the generation left (an RCU grace period): the next
// apply may then edit it. See docs/ebpf.md, "Updates in place".
func (d *Datapath) Apply(ctx context.Context, lab *topology.Spec, c *policy.Compiled) error {
	return d.apply(ctx, lab, nil, c)
}

// ApplyChange is Apply for a change from the compiled policies from,
// which the caller last applied, to c: where every host's files say it
// enforces from's set and the record of its active generation is there,
// the plan is that record patched where the rules differ (planChange),
// not computed again from every rule; otherwise it is Apply. Everything
// after the plan (the edits, the switch, the records) is Apply's.
func (d *Datapath) ApplyChange(ctx context.Context, lab *topology.Spec, from, c *policy.Compiled) error {
	return d.apply(ctx, lab, from, c)
}

func (d *Datapath) apply(ctx context.Context, lab *topology.Spec, from, c *policy.Compiled) error {
	if len(lab.Hosts) == 0 {
		return datapath.ErrNoHosts
	}
	var all []*staged
	defer func() {
		for _, s := range all {
			s.maps.Close()
		}
	}()
	var plans map[string]*hostPlan
	if from != nil {
		// The hosts are opened first: their active generations' records
		// are the plan's start. Meanwhile the rules are compared (that
		// needs no record).
		prepared := make(chan *ruleChanges, 1)
		go func() { prepared <- prepareChange(lab, from, c) }()
		cur := map[string]*genContent{}
		for i := range lab.Hosts {
			h := &lab.Hosts[i]
			s, err := openStaged(lab, h)
			if s != nil {
				all = append(all, s)
			}
			if err != nil {
				return fmt.Errorf("host %s: %w (no host changed)", h.Name, err)
			}
			cur[h.Name] = s.active(lab.Name, from.Set)
		}
		if rc := <-prepared; rc != nil {
			p, ok, err := rc.finish(cur)
			if err != nil {
				return err
			}
			if ok {
				plans = p
			}
		}
	}
	if plans == nil {
		var err error
		if plans, err = plan(lab, c); err != nil {
			return err
		}
	}
	// One grace period, if any host needs one before its edits, covers
	// every host.
	waited := false
	graceOnce := func(m *hostMaps) error {
		if waited {
			return nil
		}
		waited = true
		return graceWait(m)
	}
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		var s *staged
		var err error
		if i < len(all) {
			s = all[i]
		} else if s, err = openStaged(lab, h); s != nil {
			all = append(all, s)
		}
		if err == nil {
			err = stage(lab, s, plans[h.Name], graceOnce)
		}
		// The host's routing for the proxy, on every apply with L7 ports
		// (it is idempotent: a few netlink calls), so that a host set up
		// by an older cnlab gains what it lacks, as IPv6's rule and
		// route. Routing only: nothing goes there before the switch.
		if err == nil && plans[h.Name].L7 {
			err = proxyRouting(lab, h)
		}
		if err == nil {
			err = fault.At(fault.EBPFStaged, h.Name)
		}
		if err != nil {
			return fmt.Errorf("host %s: %w (no host changed)", h.Name, err)
		}
	}
	// From here the state files may stop describing the kernel: mark them
	// so that an apply interrupted before they are saved is not trusted
	// (the generation read back from the kernel alone cannot tell two
	// interrupted switches from none).
	for _, s := range all {
		path := change.StatePath(lab.Name, kind.EBPF, s.host.Name)
		var err error
		if s.sets != nil {
			err = change.MarkDirtyFrom(path, *s.sets, c.Set)
		} else {
			err = change.MarkDirty(path, c.Set)
		}
		if err != nil {
			return fmt.Errorf("host %s: mark datapath state: %w (no host changed)", s.host.Name, err)
		}
		_ = fault.At(fault.Dirty, s.host.Name)
	}
	for i, s := range all {
		next := s.cfg
		next.Gen = 1 - s.cfg.Gen
		// The L7 flag switches on with the generation that first gives
		// the host an L7 port, and stays: the connections already handed
		// to the proxy must still find their way there (their conntrack
		// entries say so) after their port stops being an L7 port.
		if plans[s.host.Name].L7 {
			next.Flags |= uint32(cnlabConfigFlagFLAG_L7)
		}
		err := fault.At(fault.EBPFSwitch, s.host.Name)
		if err == nil {
			err = s.maps.config.Put(uint32(0), next)
		}
		if err != nil {
			for _, p := range all[:i] {
				// Programs may have started on the generation switched
				// back from, which the next apply edits again: without
				// the record of the generation switched back to, that
				// apply waits for a grace period first.
				_ = os.Remove(contentPath(lab.Name, p.host.Name, p.cfg.Gen))
				_ = p.maps.config.Put(uint32(0), p.cfg)
			}
			return fmt.Errorf("host %s: switch generation: %w", s.host.Name, err)
		}
	}
	// The new policy is in force on every host: what follows only helps
	// the next apply and bpftool users, and must not make this one look
	// failed (the lab would then store the old policy set).
	// The grace period runs while the state files are written.
	grace := make(chan error, 1)
	go func() { grace <- graceWait(all[0].maps) }()
	graced, quiet := false, false
	for _, s := range all {
		change.KernelChanged(s.host.Name)
		gen := 1 - s.cfg.Gen
		path := change.StatePath(lab.Name, kind.EBPF, s.host.Name)
		err := change.SaveState(path, hostState{Gen: gen})
		if err == nil {
			err = change.RecordSet(path, c.Set)
		}
		if err != nil {
			// Left marked.
			_ = os.Remove(path)
		} else {
			_ = fault.At(fault.Saved, s.host.Name)
			_ = change.ClearDirty(path)
		}
		// One grace period covers every host, before the first record:
		// programs run to completion without sleeping, inside an RCU
		// read-side section. Without it (an error, or a crash before),
		// the records of the new generations are not written, and the
		// next apply waits, then rebuilds the generations left.
		if !graced {
			graced, quiet = true, <-grace == nil
		}
		if quiet {
			_ = writeRecord(contentPath(lab.Name, s.host.Name, gen), s.next)
		}
		_ = linkActive(s.maps.dir, gen)
		_ = s.maps.open(s.host.Name, mapLXC, mapLocal, mapLocal6, mapSockEP) // a map that does not open is skipped
		_ = setIdentities(s.maps, plans[s.host.Name])
		change.HostDone(s.host.Name)
	}
	_ = saveRuleNames(lab.Name, c) // for RuleCounters: the programs count by reference
	return nil
}

// graceWait returns once every BPF program that was running when it was
// called has finished (an RCU grace period). The kernel waits for one in
// every update of a map-of-maps from user space (synchronize_rcu, so that
// the caller knows no program still uses the inner map it replaced):
// writing an ipcache slot with the inner map it already holds changes
// nothing for the programs and returns after that wait. With no ipcache
// map in either slot no generation was ever written, so no program can
// be running on one: nothing to wait for.
func graceWait(m *hostMaps) error {
	for gen := uint32(0); gen < 2; gen++ {
		inner, err := openInner(m.ipcache, gen)
		if err != nil {
			continue
		}
		err = m.ipcache.Put(gen, inner)
		inner.Close()
		if err != nil {
			return fmt.Errorf("wait for an RCU grace period: %w", err)
		}
		return nil
	}
	return nil
}

// setIdentities writes the endpoints' identities into the endpoint maps,
// for events (the programs decide by peer key, never by these).
func setIdentities(m *hostMaps, hp *hostPlan) error {
	ident := map[uint32]uint32{}
	for _, ep := range hp.Endpoints {
		ident[ep.Slot] = ep.Identity
	}
	var errs []error
	for _, mp := range []*ebpf.Map{m.lxc, m.local, m.sockep, m.local6} {
		if mp == nil {
			continue
		}
		type kv struct {
			k any
			v cnlabEndpoint
		}
		var upd []kv
		var e cnlabEndpoint
		var k32 uint32
		var k64 uint64
		var k6 cnlabIpcache6Key
		it := mp.Iterate()
		if mp == m.local6 {
			for it.Next(&k6, &e) {
				if id, ok := ident[e.Index]; ok && e.Identity != id {
					e.Identity = id
					upd = append(upd, kv{k6, e})
				}
			}
		} else if mp == m.sockep {
			for it.Next(&k64, &e) {
				if id, ok := ident[e.Index]; ok && e.Identity != id {
					e.Identity = id
					upd = append(upd, kv{k64, e})
				}
			}
		} else {
			for it.Next(&k32, &e) {
				if id, ok := ident[e.Index]; ok && e.Identity != id {
					e.Identity = id
					upd = append(upd, kv{k32, e})
				}
			}
		}
		errs = append(errs, it.Err())
		for _, u := range upd { // after the walk: a hash walk may skip keys updated during it
			errs = append(errs, mp.Put(u.k, u.v))
		}
	}
	return errors.Join(errs...)
}

// openStaged opens the host's maps an apply needs up to the switch and
// reads which generation is active.
func openStaged(lab *topology.Spec, h *topology.Host) (*staged, error) {
	m := &hostMaps{dir: HostDir(lab.Name, h.Name)}
	if err := m.open(h.Name, stageMaps...); err != nil {
		m.Close()
		return nil, err
	}
	s := &staged{host: h, maps: m}
	var err error
	if s.cfg, err = m.readConfig(); err != nil {
		return s, err
	}
	s.ids = outerIDs{PolicyID: mapID(m.policy), ExactID: mapID(m.exact), IPCacheID: mapID(m.ipcache), IPCache6ID: mapID(m.ipcache6)}
	return s, nil
}

// active returns the record of the host's active generation if the
// host's files say it enforces set (clean, not marked), else nil.
func (s *staged) active(lab, set string) *genContent {
	hp := change.ReadHost(change.StatePath(lab, kind.EBPF, s.host.Name))
	s.sets = &hp
	if hp.Dirty || len(hp.Sets) != 1 || hp.Sets[0] != set || set == "" {
		return nil
	}
	g := readRecord(contentPath(lab, s.host.Name, s.cfg.Gen))
	if g == nil || g.outerIDs != s.ids {
		return nil
	}
	return g
}

// stage writes a host's next generation: in place where the record of
// what it holds is there and names the host's outer maps, else into new
// maps (genWriter with an empty record).
func stage(lab *topology.Spec, s *staged, hp *hostPlan, grace func(*hostMaps) error) error {
	h, m, ids := s.host, s.maps, s.ids
	cur, next := s.cfg.Gen, 1-s.cfg.Gen
	have := readRecord(contentPath(lab.Name, h.Name, next))
	if have != nil && have.outerIDs != ids {
		have = nil
	}
	if _, err := os.Stat(contentPath(lab.Name, h.Name, cur)); err != nil {
		// The apply that switched to the current generation did not
		// see its grace period through (or there was none yet): a
		// program may still be running on the next one.
		if err := grace(m); err != nil {
			return err
		}
	}
	// The record stops describing the generation before it is edited.
	if err := os.Remove(contentPath(lab.Name, h.Name, next)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if have == nil {
		have = &genContent{}
	}
	w := &genWriter{m: m, gen: next, maxEp: s.cfg.MaxEp, size: lab.EBPF.PolicyMapSize, have: have}
	s.next = &genContent{outerIDs: ids, IPCache: hp.IPCache}
	if err := w.ipcache(hp.IPCache); err != nil {
		return fmt.Errorf("ipcache: %w", err)
	}
	for i := range hp.Endpoints {
		if i == len(hp.Endpoints)/2 {
			// Half of the next generation's entries are written.
			if err := fault.At(fault.EBPFMap, h.Name); err != nil {
				return err
			}
		}
		ep := &hp.Endpoints[i]
		sc, err := w.endpoint(ep)
		if err != nil {
			return fmt.Errorf("endpoint %s: %w", ep.ID, err)
		}
		s.next.Slots = append(s.next.Slots, sc) // plan numbers slots 0, 1, ... in order
	}
	if len(hp.Endpoints) == 0 {
		if err := fault.At(fault.EBPFMap, h.Name); err != nil {
			return err
		}
	}
	// Slots no endpoint has now keep their maps, emptied.
	for slot := uint32(len(s.next.Slots)); slot < uint32(len(have.Slots)); slot++ {
		sc, err := w.empty(slot)
		if err != nil {
			return fmt.Errorf("slot %d: %w", slot, err)
		}
		s.next.Slots = append(s.next.Slots, sc)
	}
	if err := w.flush(); err != nil {
		return fmt.Errorf("policy maps: %w", err)
	}
	return nil
}

// genWriter writes one generation of a host's maps.
type genWriter struct {
	m     *hostMaps
	gen   uint32
	maxEp uint32
	size  int         // policyMapSize
	have  *genContent // what the generation holds; empty: unknown (fresh)
	// Changes to the outer maps, applied at flush in one batch per map:
	// every syscall update of a map-of-maps waits for an RCU grace
	// period (milliseconds).
	outer map[*ebpf.Map]*outerBatch
}

type outerBatch struct {
	putKeys, putFDs, delKeys []uint32
	maps                     []*ebpf.Map // the new inner maps, open until flush
}

// put queues new inner map m for slot key.
func (b *outerBatch) put(key uint32, m *ebpf.Map) {
	b.putKeys, b.putFDs, b.maps = append(b.putKeys, key), append(b.putFDs, uint32(m.FD())), append(b.maps, m)
}

func (w *genWriter) fresh() bool { return w.have.outerIDs == outerIDs{} }

func (w *genWriter) batch(outer *ebpf.Map) *outerBatch {
	if w.outer == nil {
		w.outer = map[*ebpf.Map]*outerBatch{}
	}
	b := w.outer[outer]
	if b == nil {
		b = &outerBatch{}
		w.outer[outer] = b
	}
	return b
}

// flush puts the new inner maps into their slots and deletes the slots
// that lost theirs.
func (w *genWriter) flush() error {
	var errs []error
	for outer, b := range w.outer {
		if err := batchPut(outer, b.putKeys, b.putFDs); err != nil {
			errs = append(errs, err)
		} else if err := batchDelete(outer, b.delKeys); err != nil {
			errs = append(errs, err)
		}
		for _, m := range b.maps {
			m.Close()
		}
	}
	w.outer = nil
	return errors.Join(errs...)
}

// pinPath is where the generation's map of an endpoint is pinned:
// genN/policy/NS_NAME, genN/policy_exact/NS_NAME ("" for no endpoint).
// The ipcache's is genN/ipcache. The links policy, policy_exact and
// ipcache point into the active generation's (linkActive).
func (w *genWriter) pinPath(dir, ep string) string {
	if ep == "" {
		return ""
	}
	return filepath.Join(w.m.dir, genDir(w.gen), dir, pinName(ep))
}

func genDir(gen uint32) string { return fmt.Sprintf("gen%d", gen) }

// pinName is an endpoint's pin name: bpffs refuses dots in names; "_"
// cannot occur in namespace or endpoint names.
func pinName(ep string) string { return strings.ReplaceAll(ep, "/", "_") }

// pin pins m at path, replacing what was there.
func pin(m *ebpf.Map, path string) error {
	if path == "" {
		return nil
	}
	tmp := path + "_new"
	_ = os.Remove(tmp)
	if err := m.Pin(tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func unpin(path string) {
	if path != "" {
		_ = os.Remove(path)
	}
}

// ipcache writes the generation's ipcaches: the IPv4 entries into
// cnlab_ipcache, the IPv6 ones into cnlab_ipcache6.
func (w *genWriter) ipcache(want []ipEntry) error {
	if !w.fresh() && slices.Equal(w.have.IPCache, want) {
		return nil // the record describes the generation's ipcaches
	}
	have4, have6 := byFamily(w.have.IPCache)
	want4, want6 := byFamily(want)
	if err := w.ipcache4(have4, want4); err != nil {
		return err
	}
	return w.ipcache6(have6, want6)
}

// ipcacheFamily is one family's ipcache: its outer map, how its keys are
// made, how a new one is built, and its pin's name.
type ipcacheFamily struct {
	outer *ebpf.Map
	key   func(netip.Prefix) any
	build func([]ipEntry) (*ebpf.Map, error)
	name  string
}

func (w *genWriter) ipcache4(have, want []ipEntry) error {
	return w.ipcacheOf(ipcacheFamily{w.m.ipcache, func(p netip.Prefix) any {
		return cnlabIpcacheKey{Prefixlen: uint32(p.Bits()), Ip: ip4(p.Addr())}
	}, buildIPCache, "ipcache"}, have, want)
}

func (w *genWriter) ipcache6(have, want []ipEntry) error {
	return w.ipcacheOf(ipcacheFamily{w.m.ipcache6, func(p netip.Prefix) any { return ipcacheKey6(p) }, buildIPCache6, "ipcache6"}, have, want)
}

// ipcacheOf brings the generation's ipcache of one family from have to
// want: edited in place, or built new when the generation is.
func (w *genWriter) ipcacheOf(f ipcacheFamily, have, want []ipEntry) error {
	key := w.gen
	if !w.fresh() && slices.Equal(have, want) {
		return nil
	}
	if !w.fresh() {
		inner, err := openInner(f.outer, key)
		if err == nil {
			defer inner.Close()
			return editIPCache(inner, f.key, have, want)
		}
	}
	m, err := f.build(want)
	if err != nil {
		return err
	}
	w.batch(f.outer).put(key, m)
	return pin(m, filepath.Join(w.m.dir, genDir(w.gen), f.name))
}

// editIPCache brings an ipcache map from have to want.
func editIPCache(m *ebpf.Map, keyOf func(netip.Prefix) any, have, want []ipEntry) error {
	old := make(map[netip.Prefix]ipEntry, len(have))
	for _, e := range have {
		old[e.Prefix] = e
	}
	var puts []ipEntry
	for _, e := range want {
		if o, ok := old[e.Prefix]; !ok || o != e {
			puts = append(puts, e)
		}
		delete(old, e.Prefix)
	}
	for p := range old {
		if err := m.Delete(keyOf(p)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	for _, e := range puts {
		if err := m.Put(keyOf(e.Prefix), cnlabPeer{Key: e.Key, Identity: e.Identity}); err != nil {
			return err
		}
	}
	return nil
}

// openInner opens the inner map at key of a map-of-maps.
func openInner(outer *ebpf.Map, key uint32) (*ebpf.Map, error) {
	var id uint32
	if err := outer.Lookup(key, &id); err != nil {
		return nil, err
	}
	return ebpf.NewMapFromID(ebpf.MapID(id))
}

// endpoint writes an endpoint's slot: its isolation bits and its two
// policy maps (exact entries in a hash map, the others in an LPM trie).
func (w *genWriter) endpoint(ep *epPlan) (slotContent, error) {
	old := w.have.slot(ep.Slot)
	sc := slotContent{ID: ep.ID, Identity: ep.Identity, Enforce: ep.Enforce, Entries: ep.Entries}
	key := w.gen*w.maxEp + ep.Slot
	if w.fresh() || old.Enforce != ep.Enforce {
		if err := w.m.enforce.Put(key, ep.Enforce); err != nil {
			return sc, fmt.Errorf("enforcement: %w", err)
		}
	}
	// One pass over the old and new entries, whatever their number; a
	// change touches only what differs.
	dels, puts := diffEntries(old.Entries, ep.Entries)
	delExact, delPrefix := splitEntries(dels)
	putExact, putPrefix := splitEntries(puts)
	nExact := 0
	for _, e := range ep.Entries {
		if e.Plen == keyBitsAll {
			nExact++
		}
	}
	exact := part{outer: w.m.exact, typ: ebpf.Hash, dir: "policy_exact", capHave: old.ExactCap,
		n: nExact, dels: delExact, puts: putExact, all: func() []polEntry { e, _ := splitEntries(ep.Entries); return e }}
	lpm := part{outer: w.m.policy, typ: ebpf.LPMTrie, dir: "policy", n: len(ep.Entries) - nExact,
		dels: delPrefix, puts: putPrefix, all: func() []polEntry { _, p := splitEntries(ep.Entries); return p }}
	if old.LPM {
		lpm.capHave = uint32(w.size)
	}
	var err error
	if sc.ExactCap, err = w.part(key, ep.ID, old.ID, exact); err != nil {
		return sc, fmt.Errorf("policy map: %w", err)
	}
	lpmCap, err := w.part(key, ep.ID, old.ID, lpm)
	if err != nil {
		return sc, fmt.Errorf("policy map: %w", err)
	}
	sc.LPM = lpmCap > 0
	return sc, nil
}

// part is one of a slot's two policy maps and what an apply changes in it.
type part struct {
	outer      *ebpf.Map
	typ        ebpf.MapType
	dir        string // of its pins
	capHave    uint32 // the slot's map's max_entries, 0: no map
	n          int    // entries wanted
	dels, puts []polEntry
	all        func() []polEntry // the entries wanted, for a new map
}

// empty clears a slot no endpoint has any more, keeping its maps.
func (w *genWriter) empty(slot uint32) (slotContent, error) {
	sc, err := w.endpoint(&epPlan{ID: w.have.slot(slot).ID, Slot: slot})
	for _, dir := range []string{"policy", "policy_exact"} {
		unpin(w.pinPath(dir, sc.ID))
	}
	sc.ID = ""
	return sc, err
}

// part brings one policy map of a slot to what is wanted and returns its
// capacity (0: the slot has no such map): in place when the slot has the
// map and it can hold what is wanted, else in a new map (none when
// nothing is wanted and the slot has no map).
func (w *genWriter) part(key uint32, ep, oldEp string, p part) (uint32, error) {
	outer, dir, capHave := p.outer, p.dir, p.capHave
	if capHave > 0 && p.n <= int(capHave) {
		dels, puts := p.dels, p.puts
		if len(dels) == 0 && len(puts) == 0 && ep == oldEp {
			return capHave, nil
		}
		inner, err := openInner(outer, key)
		if err != nil {
			return 0, err
		}
		defer inner.Close()
		if err := editPolicy(inner, dels, puts); err != nil {
			return 0, err
		}
		if ep != oldEp {
			unpin(w.pinPath(dir, oldEp))
			return capHave, pin(inner, w.pinPath(dir, ep))
		}
		return capHave, nil
	}
	if oldEp != ep {
		unpin(w.pinPath(dir, oldEp))
	}
	if p.n == 0 {
		// No map wanted: a slot written before the generation's record
		// was lost may still have one.
		var id uint32
		if capHave > 0 || (w.fresh() && outer.Lookup(key, &id) == nil) {
			b := w.batch(outer)
			b.delKeys = append(b.delKeys, key)
			unpin(w.pinPath(dir, ep))
		}
		return 0, nil
	}
	size := uint32(w.size)
	if p.typ == ebpf.Hash {
		// Room to grow in place; a hash map allocates its buckets up
		// front, so not the whole policyMapSize.
		size = min(size, max(64, 2*uint32(p.n)))
	}
	m, err := buildPolicy(p.all(), int(size), p.typ)
	if err != nil {
		return 0, err
	}
	w.batch(outer).put(key, m)
	return size, pin(m, w.pinPath(dir, ep))
}

// diffEntries compares two sorted entry lists: the keys to delete and the
// entries to write to turn have into want.
func diffEntries(have, want []polEntry) (dels, puts []polEntry) {
	i, j := 0, 0
	for i < len(have) || j < len(want) {
		// Runs of equal entries (most of them) without entryCmp.
		for i < len(have) && j < len(want) && have[i] == want[j] {
			i++
			j++
		}
		if i == len(have) && j == len(want) {
			break
		}
		switch {
		case j == len(want) || (i < len(have) && entryCmp(have[i], want[j]) < 0):
			dels = append(dels, have[i])
			i++
		case i == len(have) || entryCmp(want[j], have[i]) < 0:
			puts = append(puts, want[j])
			j++
		default:
			if have[i] != want[j] {
				puts = append(puts, want[j])
			}
			i++
			j++
		}
	}
	return dels, puts
}

// editPolicy deletes and writes entries of a policy map. The map is of a
// generation no program runs on: the order does not matter.
func editPolicy(m *ebpf.Map, dels, puts []polEntry) error {
	delKeys := make([]cnlabPolicyKey, len(dels))
	for i, e := range dels {
		delKeys[i], _ = policyKV(e)
	}
	if err := batchDelete(m, delKeys); err != nil {
		return err
	}
	keys := make([]cnlabPolicyKey, len(puts))
	vals := make([]cnlabPolicyVal, len(puts))
	for i, e := range puts {
		keys[i], vals[i] = policyKV(e)
	}
	return batchPut(m, keys, vals)
}

// linkActive points the links policy, policy_exact and ipcache at the
// pins of generation gen (a link is replaced atomically).
func linkActive(dir string, gen uint32) error {
	var errs []error
	for _, name := range []string{"policy", "policy_exact", "ipcache", "ipcache6"} {
		path := filepath.Join(dir, name)
		tmp := path + "_new"
		_ = os.Remove(tmp)
		err := os.Symlink(filepath.Join(genDir(gen), name), tmp)
		if err == nil {
			err = os.Rename(tmp, path)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// recordCache keeps, by path, the generation records this process last read
// or wrote, with the stamp of the file they came from. A record is never
// edited in place: it is written under a new name and renamed, or
// removed. So a file with the same stamp holds the same record, and an
// apply that follows one by the same process decodes neither record
// (10,000 entries each) again.
var recordCache struct {
	sync.Mutex
	by map[string]cachedRecord
}

type cachedRecord struct {
	stamp fileStamp
	g     *genContent // never modified once cached
}

// fileStamp tells a file from any that replaced it: device and inode,
// size, and the modification and change times in nanoseconds.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

func stampOf(path string) (fileStamp, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileStamp{}, false
	}
	return fileStamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true
}

func cacheRecord(path string, stamp fileStamp, g *genContent) {
	recordCache.Lock()
	defer recordCache.Unlock()
	if recordCache.by == nil {
		recordCache.by = map[string]cachedRecord{}
	}
	recordCache.by[path] = cachedRecord{stamp, g}
}

// readRecord is loadContent, from memory when the file is the one this
// process last read or wrote.
func readRecord(path string) *genContent {
	stamp, ok := stampOf(path)
	recordCache.Lock()
	c, hit := recordCache.by[path]
	if !ok {
		delete(recordCache.by, path)
	}
	recordCache.Unlock()
	if !ok {
		return nil
	}
	if hit && c.stamp == stamp {
		return c.g
	}
	g := loadContent(path)
	if after, ok := stampOf(path); g != nil && ok && after == stamp {
		cacheRecord(path, stamp, g)
	}
	return g
}

// writeRecord is saveContent, keeping g in memory for readRecord. g must
// not be modified afterwards.
func writeRecord(path string, g *genContent) error {
	if err := saveContent(path, g); err != nil {
		return err
	}
	if stamp, ok := stampOf(path); ok {
		cacheRecord(path, stamp, g)
	}
	return nil
}
