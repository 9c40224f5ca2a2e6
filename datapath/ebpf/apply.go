package ebpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// hostState is what the last apply left active on a host.
type hostState struct {
	Gen       uint32            `json:"gen"`
	IPCache   string            `json:"ipcache"`   // hash of the ipcache contents
	Endpoints map[string]string `json:"endpoints"` // endpoint -> hash of its policy maps
}

// staged is a host whose next generation is built but not yet active.
type staged struct {
	host  *topology.Host
	maps  *hostMaps
	cfg   cnlabConfig
	state hostState
	pins  map[string]*ebpf.Map // new active inner maps to pin, by pin name
}

// Apply implements datapath.Datapath. Every host gets its next generation
// of maps built beside the active one (unchanged maps are shared, changed
// ones rebuilt whole with a batch update), then each host switches with
// one word: a packet sees either the old or the new policy, never a mix.
// If building fails on any host, no host switches.
func (d *Datapath) Apply(ctx context.Context, lab *topology.Spec, c *policy.Compiled) error {
	if len(lab.Hosts) == 0 {
		return datapath.ErrNoHosts
	}
	plans, err := plan(lab, c)
	if err != nil {
		return err
	}
	var all []*staged
	defer func() {
		for _, s := range all {
			s.maps.Close()
			for _, m := range s.pins {
				m.Close()
			}
		}
	}()
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		s, err := stage(lab, h, plans[h.Name])
		if s != nil {
			all = append(all, s)
		}
		// The host's routing for the proxy, once: FLAG_L7 (sticky) says
		// it was set up. Routing only: nothing goes there before the
		// switch.
		if err == nil && plans[h.Name].L7 && s.cfg.Flags&uint32(cnlabConfigFlagFLAG_L7) == 0 {
			err = proxyRouting(h)
		}
		if err == nil {
			err = fault.At(fault.EBPFStaged, h.Name)
		}
		if err != nil {
			return fmt.Errorf("host %s: %w (no host changed)", h.Name, err)
		}
	}
	// From here the state files may stop describing the kernel: mark them
	// so that an apply interrupted before they are saved is followed by a
	// full rebuild (the generation read back from the kernel alone cannot
	// tell two interrupted switches from none).
	for _, s := range all {
		if err := datapath.MarkDirty(datapath.StatePath(lab.Name, kind.EBPF, s.host.Name), c.Set); err != nil {
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
				_ = p.maps.config.Put(uint32(0), p.cfg)
			}
			return fmt.Errorf("host %s: switch generation: %w", s.host.Name, err)
		}
	}
	// The new policy is in force on every host: what follows only helps
	// the next apply and bpftool users, and must not make this one look
	// failed (the lab would then store the old policy set).
	for _, s := range all {
		datapath.KernelChanged(s.host.Name)
		s.state.Gen = 1 - s.cfg.Gen
		path := datapath.StatePath(lab.Name, kind.EBPF, s.host.Name)
		err := datapath.SaveState(path, s.state)
		if err == nil {
			err = datapath.RecordSet(path, c.Set)
		}
		if err != nil {
			// Left marked: the next apply rebuilds every map.
			_ = os.Remove(path)
		} else {
			_ = fault.At(fault.Saved, s.host.Name)
			_ = datapath.ClearDirty(path)
		}
		_ = pinActive(s)
		_ = setIdentities(s.maps, plans[s.host.Name])
		datapath.HostDone(s.host.Name)
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
	for _, mp := range []*ebpf.Map{m.lxc, m.local, m.sockep} {
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
		it := mp.Iterate()
		if mp == m.sockep {
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

// stage builds a host's next generation.
func stage(lab *topology.Spec, h *topology.Host, hp *hostPlan) (*staged, error) {
	m, err := openHost(lab.Name, h.Name)
	if err != nil {
		return nil, err
	}
	s := &staged{host: h, maps: m, pins: map[string]*ebpf.Map{}}
	if s.cfg, err = m.readConfig(); err != nil {
		return s, err
	}
	var have hostState
	path := datapath.StatePath(lab.Name, kind.EBPF, h.Name)
	if err := datapath.LoadState(path, &have); err != nil || have.Gen != s.cfg.Gen || datapath.Dirty(path) {
		// Unreadable, of another generation than the kernel's, or left
		// by an interrupted apply: not ours to trust, rebuild everything.
		have = hostState{}
	}
	cur, next := s.cfg.Gen, 1-s.cfg.Gen
	maxEp := s.cfg.MaxEp
	s.state = hostState{IPCache: ipcacheHash(hp.IPCache), Endpoints: map[string]string{}}
	// ipcache
	ipc, err := reuseOrBuild(m.ipcache, cur, have.IPCache == s.state.IPCache, func() (*ebpf.Map, error) {
		return buildIPCache(hp.IPCache)
	})
	if err != nil {
		return s, fmt.Errorf("ipcache: %w", err)
	}
	var nextIPC uint32
	if m.ipcache.Lookup(next, &nextIPC) != nil || nextIPC != mapID(ipc) {
		if err := m.ipcache.Put(next, ipc); err != nil {
			ipc.Close()
			return s, fmt.Errorf("ipcache: %w", err)
		}
	}
	s.pins["ipcache"] = ipc
	// Inner maps go into the next generation's slots in one batch per
	// outer map: every syscall update of a map-of-maps waits for an RCU
	// grace period (milliseconds), once per batch rather than once per
	// endpoint. Slots that already hold the wanted map are left alone.
	parts := []*innerMaps{
		{outer: m.policy, typ: ebpf.LPMTrie, pin: "policy/"},
		{outer: m.exact, typ: ebpf.Hash, pin: "policy_exact/"},
	}
	for i := range hp.Endpoints {
		if i == len(hp.Endpoints)/2 {
			// Half of the next generation's entries are written.
			if err := fault.At(fault.EBPFMap, h.Name); err != nil {
				return s, err
			}
		}
		ep := &hp.Endpoints[i]
		hash := ep.hash()
		s.state.Endpoints[ep.ID] = hash
		slotCur, slotNext := cur*maxEp+ep.Slot, next*maxEp+ep.Slot
		if err := m.enforce.Put(slotNext, ep.Enforce); err != nil {
			return s, fmt.Errorf("endpoint %s: enforcement: %w", ep.ID, err)
		}
		exact, prefix := splitEntries(ep.Entries)
		for j, es := range [][]polEntry{prefix, exact} {
			p := parts[j]
			pm, err := p.stage(ep.ID, es, slotCur, slotNext, have.Endpoints[ep.ID] == hash, lab.EBPF.PolicyMapSize)
			if err != nil {
				return s, fmt.Errorf("endpoint %s: policy map: %w", ep.ID, err)
			}
			s.pins[p.pin+pinName(ep.ID)] = pm
		}
	}
	if len(hp.Endpoints) == 0 {
		if err := fault.At(fault.EBPFMap, h.Name); err != nil {
			return s, err
		}
	}
	for _, p := range parts {
		if err := batchPut(p.outer, p.putKeys, p.putFDs); err != nil {
			return s, fmt.Errorf("policy maps: %w", err)
		}
		if err := batchDelete(p.outer, p.delKeys); err != nil {
			return s, fmt.Errorf("policy maps: %w", err)
		}
	}
	return s, nil
}

// innerMaps stages the next generation of one map-of-maps of policy
// (cnlab_policy's LPM tries or cnlab_policy_exact's hash maps).
type innerMaps struct {
	outer                    *ebpf.Map
	typ                      ebpf.MapType
	pin                      string // directory of the active maps' pins
	putKeys, putFDs, delKeys []uint32
}

// stage readies an endpoint's map of entries es for slot next: the map
// active at slot cur when it is the same, else a new one; none (the slot
// emptied) when there are no entries. It returns the map to pin.
func (p *innerMaps) stage(ep string, es []polEntry, cur, next uint32, same bool, size int) (*ebpf.Map, error) {
	var nextID uint32
	hasNext := p.outer.Lookup(next, &nextID) == nil
	if len(es) == 0 {
		if hasNext {
			p.delKeys = append(p.delKeys, next)
		}
		return nil, nil
	}
	m, err := reuseOrBuild(p.outer, cur, same, func() (*ebpf.Map, error) {
		return buildPolicy(es, size, p.typ)
	})
	if err != nil {
		return nil, err
	}
	if !hasNext || mapID(m) != nextID {
		p.putKeys = append(p.putKeys, next)
		p.putFDs = append(p.putFDs, uint32(m.FD()))
	}
	return m, nil
}

// pinName is the name under which an endpoint's active policy maps are
// pinned, in policy/ (LPM) and policy_exact/ (hash): bpffs refuses dots
// in names; "_" cannot occur in namespace or endpoint names.
func pinName(ep string) string { return strings.ReplaceAll(ep, "/", "_") }

// pinActive pins the now active inner maps where bpftool users look for
// them: policy/NAMESPACE_NAME, policy_exact/NAMESPACE_NAME and ipcache. A pin is replaced atomically.
func pinActive(s *staged) error {
	var errs []error
	for name, m := range s.pins {
		path := filepath.Join(s.maps.dir, name)
		if m == nil {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		tmp := path + "_new"
		_ = os.Remove(tmp)
		if err := m.Pin(tmp); err != nil {
			errs = append(errs, fmt.Errorf("pin %s: %w", path, err))
			continue
		}
		if err := os.Rename(tmp, path); err != nil {
			errs = append(errs, fmt.Errorf("pin %s: %w", path, err))
		}
	}
	return errors.Join(errs...)
}
