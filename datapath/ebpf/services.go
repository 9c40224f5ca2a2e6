package ebpf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// ServiceStateKind names the eBPF service proxy's per-host state files
// (datapath.StatePath), apart from the eBPF policy datapath's.
const ServiceStateKind kind.Kind = "proxy-ebpf"

// Map bounds of the service proxy (bpf/cnlab.c): frontends per host, and
// backend slots (two halves per frontend).
const (
	maxFrontends   = 65536
	maxBackendSlot = 1 << 20
)

// ServiceProxy is the eBPF datapath's service proxy: the same programs
// that enforce policy translate connections to a Service's address, per
// packet, from the maps it writes (cnlab_svc, cnlab_backends). See
// docs/ebpf.md, "Services".
type ServiceProxy struct{}

// svcEntry is one frontend as a host's maps hold it.
type svcEntry struct {
	ID       uint32           `json:"id"`
	Half     uint8            `json:"half"`
	Drop     bool             `json:"drop,omitempty"` // no backend for this host's clients: dropped (else rejected)
	Affinity uint32           `json:"affinity,omitempty"`
	Backends []netip.AddrPort `json:"backends"`
}

func (e *svcEntry) same(o *svcEntry) bool {
	return e.Drop == o.Drop && e.Affinity == o.Affinity && slices.Equal(e.Backends, o.Backends)
}

// svcState is what the last apply wrote on a host, by frontend
// ("VIP:port/proto").
type svcState struct {
	Frontends map[string]*svcEntry `json:"frontends"`
	UDP       []proxy.UDPFrontend  `json:"udp,omitempty"`
}

func frontendKey(vip netip.Addr, port uint16, proto string) string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(vip, port), proto)
}

// renderServices computes what host's maps hold for t: pure.
func renderServices(t *service.Table, host string) svcState {
	st := svcState{Frontends: map[string]*svcEntry{}}
	plan := proxy.Plan(t, host)
	for i := range plan {
		f := &plan[i]
		e := &svcEntry{Affinity: uint32(f.Affinity), Drop: len(f.Backends) > 0 && len(f.Cluster) == 0}
		for _, b := range f.Cluster {
			e.Backends = append(e.Backends, b.AddrPort())
		}
		st.Frontends[frontendKey(f.VIP, f.Port, f.Protocol)] = e
	}
	st.UDP = proxy.UDPFrontends(plan)
	return st
}

// svcMaps are the service proxy's maps of a host.
type svcMaps struct {
	config, svc, backends, nat, affinity *ebpf.Map
}

func (m *svcMaps) Close() {
	for _, x := range []*ebpf.Map{m.config, m.svc, m.backends, m.nat, m.affinity} {
		if x != nil {
			x.Close()
		}
	}
}

func openSvcMaps(lab, host string) (*svcMaps, error) {
	m := &svcMaps{}
	dir := HostDir(lab, host)
	for name, dst := range map[string]**ebpf.Map{"cnlab_svc_config": &m.config, "cnlab_svc": &m.svc,
		"cnlab_backends": &m.backends, "cnlab_nat": &m.nat, "cnlab_affinity": &m.affinity} {
		x, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			m.Close()
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("host %s: the eBPF datapath is not set up with service maps (no %s under %s): take the lab down and up again", host, name, dir)
			}
			return nil, fmt.Errorf("host %s: open map %s: %w", host, name, err)
		}
		*dst = x
	}
	return m, nil
}

// Setup checks that every host runs the eBPF datapath with the service
// maps, and turns ICMP redirects off in the hosts: with legacy host
// routing a connection translated to a backend on the client's bridge is
// routed back out of the bridge it came in by.
func (ServiceProxy) Setup(ctx context.Context, lab *topology.Spec) error {
	if len(lab.Hosts) == 0 {
		return datapath.ErrNoHosts
	}
	if lab.Datapath != kind.EBPF {
		return fmt.Errorf("%s", kind.ProxyEBPF.Pairs(lab.Datapath))
	}
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		m, err := openSvcMaps(lab.Name, h.Name)
		if err != nil {
			return err
		}
		m.Close()
		err = netns.Do(h.Netns, func() error {
			for _, dev := range []string{"all", h.Bridge} {
				if err := netns.SetSysctl("net/ipv4/conf/"+dev+"/send_redirects", "0"); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
	}
	return nil
}

// Apply writes each host's frontends. A changed frontend gets its new
// backends in the half of its slots not in use, then its map value (count
// and half) in one update: a new connection sees the old backends or the
// new ones, never a mix, and established connections keep the backend
// their cnlab_nat entries name. Each frontend switches atomically; a
// change of several frontends is not one transaction (a new connection
// may see one frontend changed and another not yet). UDP flows translated
// to a backend a frontend no longer has are forgotten, as kube-proxy
// clears their conntrack entries.
func (ServiceProxy) Apply(ctx context.Context, lab *topology.Spec, t *service.Table) error {
	if err := checkTable(t); err != nil {
		return err
	}
	return datapath.ApplyHosts(ctx, lab, ServiceStateKind, proxy.Digest(t),
		func(host string) svcState { return renderServices(t, host) },
		func(ctx context.Context, h *topology.Host, have, want *svcState) error {
			m, err := openSvcMaps(lab.Name, h.Name)
			if err != nil {
				return err
			}
			defer m.Close()
			if err := writeServices(lab, h, m, have, want); err != nil {
				// Some frontends may have switched: the next apply
				// rebuilds this host rather than trust its state.
				_ = os.Remove(datapath.StatePath(lab.Name, ServiceStateKind, h.Name))
				return err
			}
			return nil
		})
}

// checkTable refuses, before any host changes, a table the maps cannot
// hold, and node ports, which this proxy does not serve yet.
func checkTable(t *service.Table) error {
	slots := 0
	for _, f := range t.Frontends {
		slots += 2 * len(f.Backends)
		if f.NodePort != 0 {
			return &input.Error{File: "Service " + f.Service, Path: "spec.type",
				Msg: fmt.Sprintf("NodePort (port %s, node port %d): the ebpf service proxy serves cluster IPs only, not node ports yet; use type ClusterIP, or the iptables or nftables proxy on a netfilter datapath", f.Key(), f.NodePort)}
		}
	}
	if len(t.Frontends) > maxFrontends {
		return fmt.Errorf("%d frontends (Service ports), the eBPF service map holds %d", len(t.Frontends), maxFrontends)
	}
	if slots > maxBackendSlot {
		return fmt.Errorf("%d backends over all frontends, the eBPF backend map holds %d (two slots each)", slots/2, maxBackendSlot/2)
	}
	return nil
}

func svcKeyOf(key string) (cnlabSvcKey, error) {
	ap, proto, ok := strings.Cut(key, "/")
	if !ok {
		return cnlabSvcKey{}, fmt.Errorf("bad frontend key %q", key)
	}
	a, err := netip.ParseAddrPort(ap)
	if err != nil {
		return cnlabSvcKey{}, err
	}
	k := cnlabSvcKey{Vip: ip4(a.Addr()), Port: htons(a.Port()), Proto: 6}
	if proto == "udp" {
		k.Proto = 17
	}
	return k, nil
}

func writeBackends(m *svcMaps, e *svcEntry) error {
	if len(e.Backends) == 0 {
		return nil
	}
	keys := make([]cnlabBackendKey, len(e.Backends))
	vals := make([]cnlabBackend, len(e.Backends))
	for i, b := range e.Backends {
		keys[i] = cnlabBackendKey{Id: e.ID, Slot: uint16(i), Half: e.Half}
		vals[i] = cnlabBackend{Ip: ip4(b.Addr()), Port: htons(b.Port())}
	}
	return batchPut(m.backends, keys, vals)
}

func deleteBackends(m *svcMaps, id uint32, half uint8, n int) error {
	var errs []error
	for i := range n {
		k := cnlabBackendKey{Id: id, Slot: uint16(i), Half: half}
		if err := m.backends.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func svcValue(e *svcEntry) cnlabSvcVal {
	v := cnlabSvcVal{Id: e.ID, Count: uint16(len(e.Backends)), Half: e.Half, Affinity: e.Affinity}
	if e.Drop {
		v.Flags = uint8(cnlabSvcFlagSVC_DROP)
	}
	return v
}

// writeServices brings a host's maps from have (nil: unknown, rebuild) to
// want, assigning want's frontend numbers and halves.
func writeServices(lab *topology.Spec, h *topology.Host, m *svcMaps, have, want *svcState) error {
	cfg := cnlabSvcConfig{Hairpin: ip4(h.Gateway)}
	if cidr := lab.Services.CIDR; cidr.IsValid() {
		cfg.Net = ip4(cidr.Masked().Addr())
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], ^uint32(0)<<(32-cidr.Bits()))
		cfg.Mask = ip4(netip.AddrFrom4(b))
	}
	if len(want.Frontends) > 0 {
		cfg.Flags = uint32(cnlabSvcConfigFlagSVC_ON)
	}
	if have == nil {
		// Rebuild: forget every frontend and backend slot the maps hold.
		if err := clearMap[cnlabSvcKey, cnlabSvcVal](m.svc); err != nil {
			return fmt.Errorf("clear frontends: %w", err)
		}
		if err := clearMap[cnlabBackendKey, cnlabBackend](m.backends); err != nil {
			return fmt.Errorf("clear backends: %w", err)
		}
		have = &svcState{Frontends: map[string]*svcEntry{}}
	}
	if cfg.Flags != 0 {
		if err := m.config.Put(uint32(0), cfg); err != nil {
			return fmt.Errorf("service config: %w", err)
		}
	}
	used := map[uint32]bool{}
	for _, e := range have.Frontends {
		used[e.ID] = true
	}
	next := uint32(1)
	newID := func() uint32 {
		for used[next] {
			next++
		}
		used[next] = true
		return next
	}
	keys := make([]string, 0, len(want.Frontends))
	for k := range want.Frontends {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		w := want.Frontends[key]
		sk, err := svcKeyOf(key)
		if err != nil {
			return err
		}
		old := have.Frontends[key]
		switch {
		case old != nil && old.same(w):
			w.ID, w.Half = old.ID, old.Half
			continue
		case old != nil:
			w.ID, w.Half = old.ID, 1-old.Half
			// The half in use is the kernel's, whatever the state says.
			var cur cnlabSvcVal
			if m.svc.Lookup(sk, &cur) == nil && cur.Id == w.ID {
				w.Half = 1 - cur.Half
			}
		default:
			w.ID, w.Half = newID(), 0
		}
		if err := writeBackends(m, w); err != nil {
			return fmt.Errorf("frontend %s: backends: %w", key, err)
		}
		if err := m.svc.Put(sk, svcValue(w)); err != nil {
			return fmt.Errorf("frontend %s: %w", key, err)
		}
		if old != nil {
			if err := deleteBackends(m, old.ID, 1-w.Half, len(old.Backends)); err != nil {
				return fmt.Errorf("frontend %s: old backends: %w", key, err)
			}
		}
	}
	for key, old := range have.Frontends {
		if _, ok := want.Frontends[key]; ok {
			continue
		}
		sk, err := svcKeyOf(key)
		if err != nil {
			return err
		}
		if err := m.svc.Delete(sk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("frontend %s: %w", key, err)
		}
		if err := deleteBackends(m, old.ID, old.Half, len(old.Backends)); err != nil {
			return fmt.Errorf("frontend %s: backends: %w", key, err)
		}
	}
	if cfg.Flags == 0 {
		if err := m.config.Put(uint32(0), cfg); err != nil {
			return fmt.Errorf("service config: %w", err)
		}
	}
	if err := forgetUDP(m.nat, proxy.StaleUDP(have.UDP, want.UDP)); err != nil {
		return fmt.Errorf("stale UDP flows: %w", err)
	}
	return nil
}

// clearMap deletes every entry of a hash map.
func clearMap[K comparable, V any](mp *ebpf.Map) error {
	var keys []K
	var k K
	var v V
	it := mp.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return err
	}
	var errs []error
	for _, k := range keys {
		if err := mp.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// forgetUDP deletes the translated UDP flows that flows select (as
// proxy.FlushUDP does for netfilter's conntrack): a forward entry to the
// frontend (translated to Backend, when valid) and its reverse entry. The
// client's next datagram picks a backend again.
func forgetUDP(nat *ebpf.Map, flows []proxy.StaleFlow) error {
	if len(flows) == 0 {
		return nil
	}
	var del []cnlabNatKey
	var k cnlabNatKey
	var v cnlabNatVal
	it := nat.Iterate()
	for it.Next(&k, &v) {
		if k.Dir != uint8(cnlabNatDirNAT_FWD) || k.Proto != 17 {
			continue
		}
		for _, f := range flows {
			if !f.Dst.IsValid() || ip4(f.Dst) != k.Daddr || htons(f.DstPort) != k.Dport {
				continue // node ports are not served by this proxy
			}
			if f.Backend.IsValid() && ip4(f.Backend) != v.Daddr {
				continue
			}
			del = append(del, k, cnlabNatKey{Saddr: v.Daddr, Daddr: v.Saddr, Sport: v.Dport, Dport: v.Sport,
				Proto: 17, Dir: uint8(cnlabNatDirNAT_REV)})
			break
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, k := range del {
		if err := nat.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// Describe lists each host's frontends and backends as its maps hold
// them, one frontend per line, sorted.
func (ServiceProxy) Describe(ctx context.Context, lab *topology.Spec) (map[string]string, error) {
	out := map[string]string{}
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		m, err := openSvcMaps(lab.Name, h.Name)
		if err != nil {
			return nil, err
		}
		text, err := describeServices(m)
		m.Close()
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", h.Name, err)
		}
		out[h.Name] = text
	}
	return out, nil
}

func describeServices(m *svcMaps) (string, error) {
	var cfg cnlabSvcConfig
	if err := m.config.Lookup(uint32(0), &cfg); err != nil {
		return "", err
	}
	var lines []string
	var k cnlabSvcKey
	var v cnlabSvcVal
	it := m.svc.Iterate()
	for it.Next(&k, &v) {
		proto := "tcp"
		if k.Proto == 17 {
			proto = "udp"
		}
		line := fmt.Sprintf("%s id %d half %d", frontendKey(addrOf(k.Vip), htons(k.Port), proto), v.Id, v.Half)
		if v.Affinity != 0 {
			line += fmt.Sprintf(" affinity %ds", v.Affinity)
		}
		var bs []string
		for s := range v.Count {
			var b cnlabBackend
			if err := m.backends.Lookup(cnlabBackendKey{Id: v.Id, Slot: s, Half: v.Half}, &b); err != nil {
				bs = append(bs, fmt.Sprintf("slot %d missing", s))
				continue
			}
			bs = append(bs, netip.AddrPortFrom(addrOf(b.Ip), htons(b.Port)).String())
		}
		switch {
		case len(bs) > 0:
			line += " -> " + strings.Join(bs, " ")
		case v.Flags&uint8(cnlabSvcFlagSVC_DROP) != 0:
			line += " -> drop (no backend on this host)"
		default:
			line += " -> reject (no backend)"
		}
		lines = append(lines, line)
	}
	if err := it.Err(); err != nil {
		return "", err
	}
	sort.Strings(lines)
	head := "services off"
	if cfg.Flags&uint32(cnlabSvcConfigFlagSVC_ON) != 0 {
		head = fmt.Sprintf("services on, hairpin source %s", addrOf(cfg.Hairpin))
	}
	return head + "\n" + strings.Join(lines, "\n") + "\n", nil
}
