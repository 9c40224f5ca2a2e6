package ebpf

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// ServiceStateKind names the eBPF service proxy's per-host state files
// (change.StatePath), apart from the eBPF policy datapath's.
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
	ID       uint32
	Half     uint8
	Drop     bool // no backend for this host's clients: dropped (else rejected)
	Affinity uint32
	Masq     bool // masqueraded (a node port, externalTrafficPolicy Cluster)
	Count    uint16
	Sum      uint64 // of the backends, in order
	// Backends to write (render fills it; not recorded).
	Backends []netip.AddrPort
}

func (e *svcEntry) same(o *svcEntry) bool {
	return e.Drop == o.Drop && e.Masq == o.Masq && e.Affinity == o.Affinity && e.Count == o.Count && e.Sum == o.Sum
}

// svcState is what the last apply wrote on a host. The frontends are
// recorded in a compact binary form (svcFrontends): at 10,000 Services a
// JSON object per frontend took ten times longer to read and write than
// the maps' whole update.
type svcState struct {
	Frontends svcFrontends        `json:"frontends"`
	UDP       []proxy.UDPFrontend `json:"udp,omitempty"`
	// The IPv6 frontends (cnlab_svc6), with their own numbers.
	Frontends6 svcFrontends6 `json:"frontends6,omitempty"`
}

// svcFrontends are a host's frontends by map key. In JSON they are one
// base64 string of fixed-size records.
type svcFrontends map[cnlabSvcKey]*svcEntry

const svcRecord = 4 + 2 + 1 + svcEntryBytes

func (fs svcFrontends) MarshalJSON() ([]byte, error) {
	// Records of 27 bytes are 36 characters of base64 each, without
	// padding: encoded one by one, they are the whole encoded.
	b := make([]byte, 0, 2+len(fs)*svcRecordB64)
	b = append(b, '"')
	for k, e := range fs {
		b = appendRecord(b, k, e)
	}
	return append(b, '"'), nil
}

func (fs *svcFrontends) UnmarshalJSON(data []byte) error {
	var b []byte
	if err := json.Unmarshal(data, &b); err != nil {
		return err
	}
	if len(b)%svcRecord != 0 {
		return fmt.Errorf("frontend records: %d bytes, not a multiple of %d", len(b), svcRecord)
	}
	m := make(svcFrontends, len(b)/svcRecord)
	es := make([]svcEntry, len(b)/svcRecord)
	for i := range es {
		r := b[i*svcRecord:]
		k := cnlabSvcKey{Vip: binary.LittleEndian.Uint32(r), Port: binary.LittleEndian.Uint16(r[4:]), Proto: r[6]}
		e := &es[i]
		readEntry(r[7:], e)
		m[k] = e
	}
	*fs = m
	return nil
}

func protoNumber(p string) uint8 {
	if p == "udp" {
		return 17
	}
	return 6
}

// svcKeyString names a frontend in messages: "VIP:port/proto".
func svcKeyString(k cnlabSvcKey) string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(addrOf(k.Vip), htons(k.Port)), protoName(k.Proto))
}

// nodeAddresses are the addresses of each host a node port answers on:
// its bridge's (service.NodeAddress), and its ends of every link (the
// wire's, and the overlay's for VXLAN).
func nodeAddresses(lab *topology.Spec) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for _, h := range lab.Hosts {
		out[h.Name] = append(out[h.Name], service.NodeAddress(&h))
		if a := service.NodeAddressOf(&h, 6); a.IsValid() && a != service.NodeAddress(&h) {
			out[h.Name] = append(out[h.Name], a) // a dual-stack lab's
		}
	}
	for _, l := range lab.Links {
		for _, e := range l.Ends {
			for _, a := range []netip.Addr{e.WireAddr, e.OverAddr, e.WireAddr6, e.OverAddr6} {
				if a.IsValid() && !slices.Contains(out[e.Host], a) {
					out[e.Host] = append(out[e.Host], a)
				}
			}
		}
	}
	return out
}

// renderServices computes what host's maps hold for t: pure. It reads the
// table directly (not proxy.Plan, which names chains) and allocates
// little: it runs on every change, over every frontend. A node port is
// translated on the client's host too: it becomes a frontend for every
// address of every host (nodes), balancing over every backend,
// masqueraded (externalTrafficPolicy Cluster), or over that host's own,
// keeping the client's address (Local).
func renderServices(t *service.Table, host string, nodes map[string][]netip.Addr) svcState {
	st := svcState{Frontends: make(svcFrontends, len(t.Frontends))}
	var udp []proxy.UDPFrontend
	add := func(vip netip.Addr, port uint16, proto string, bs []service.Backend, e *svcEntry) {
		e.Count = uint16(len(bs))
		e.Backends = make([]netip.AddrPort, len(bs))
		sum := uint64(14695981039346656037) // FNV-1a over address and port
		for j, b := range bs {
			e.Backends[j] = b.AddrPort()
			if b.IP.Is6() {
				for _, c := range b.IP.As16() {
					sum ^= uint64(c)
					sum *= 1099511628211
				}
			}
			x := uint64(ip4(b.IP))<<16 | uint64(b.Port)
			for k := 0; k < 6; k++ {
				sum ^= x & 0xff
				sum *= 1099511628211
				x >>= 8
			}
		}
		if e.Masq {
			sum = ^sum
		}
		e.Sum = sum
		if vip.Is6() {
			if st.Frontends6 == nil {
				st.Frontends6 = svcFrontends6{}
			}
			st.Frontends6[cnlabSvc6Key{Vip: ip6(vip), Port: htons(port), Proto: protoNumber(proto)}] = e
		} else {
			st.Frontends[cnlabSvcKey{Vip: ip4(vip), Port: htons(port), Proto: protoNumber(proto)}] = e
		}
		if proto == "udp" {
			u := proxy.UDPFrontend{VIP: vip, Port: port}
			for _, b := range e.Backends {
				if !slices.Contains(u.Backends, b) {
					u.Backends = append(u.Backends, b)
				}
			}
			udp = append(udp, u)
		}
	}
	hosts := slices.Sorted(maps.Keys(nodes))
	for i := range t.Frontends {
		f := &t.Frontends[i]
		bs := f.For(host)
		add(f.VIP, f.Port, f.Protocol, bs, &svcEntry{Affinity: uint32(f.Affinity), Drop: len(f.Backends) > 0 && len(bs) == 0})
		if f.NodePort == 0 {
			continue
		}
		for _, h := range hosts {
			ext := f.Backends
			if f.ExternalLocal {
				ext = nil
				for _, b := range f.Backends {
					if b.Host == h {
						ext = append(ext, b)
					}
				}
			}
			for _, a := range nodes[h] {
				if a.Is6() != f.VIP.Is6() {
					continue // the frontend's family's node addresses
				}
				add(a, f.NodePort, f.Protocol, ext, &svcEntry{Affinity: uint32(f.Affinity), Masq: !f.ExternalLocal,
					Drop: f.ExternalLocal && len(ext) == 0})
			}
		}
	}
	st.UDP = udp
	return st
}

// svcMaps are the service proxy's maps of a host.
type svcMaps struct {
	config, svc, backends, nat, affinity, sockFwd, sockRev *ebpf.Map
	config6, svc6, backends6, nat6, sock6Fwd, sock6Rev     *ebpf.Map
}

func (m *svcMaps) Close() {
	for _, x := range []*ebpf.Map{m.config, m.svc, m.backends, m.nat, m.affinity, m.sockFwd, m.sockRev,
		m.config6, m.svc6, m.backends6, m.nat6, m.sock6Fwd, m.sock6Rev} {
		if x != nil {
			x.Close()
		}
	}
}

func openSvcMaps(lab, host string) (*svcMaps, error) {
	m := &svcMaps{}
	dir := HostDir(lab, host)
	for name, dst := range map[string]**ebpf.Map{"cnlab_svc_config": &m.config, "cnlab_svc": &m.svc,
		"cnlab_backends": &m.backends, "cnlab_nat": &m.nat, "cnlab_affinity": &m.affinity,
		"cnlab_sock_fwd": &m.sockFwd, "cnlab_sock_rev": &m.sockRev,
		"cnlab_svc6_config": &m.config6, "cnlab_svc6": &m.svc6, "cnlab_backends6": &m.backends6, "cnlab_nat6": &m.nat6,
		"cnlab_sock6_fwd": &m.sock6Fwd, "cnlab_sock6_rev": &m.sock6Rev} {
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
	nodes := nodeAddresses(lab)
	if err := checkTable(t, nodes); err != nil {
		return err
	}
	_ = takeMemo(lab.Name)
	set := proxy.Digest(t)
	wants := map[string]*svcState{}
	err := change.ApplyHosts(ctx, lab, ServiceStateKind, set,
		func(host string) svcState { return renderServices(t, host, nodes) },
		func(ctx context.Context, h *topology.Host, have, want *svcState) error {
			wants[h.Name] = want
			m, err := openSvcMaps(lab.Name, h.Name)
			if err != nil {
				return err
			}
			defer m.Close()
			// Just before the first map write, as change.Load marks
			// the netfilter proxies' transaction.
			if err := fault.At(fault.AtomicLoad, h.Name); err != nil {
				return err
			}
			if err := writeServices(lab, h, m, have, want); err != nil {
				// Some frontends may have switched: the next apply
				// rebuilds this host rather than trust its state.
				_ = os.Remove(change.StatePath(lab.Name, ServiceStateKind, h.Name))
				return err
			}
			return nil
		})
	if err == nil {
		// The start of the next change (ApplyChange).
		memoAfterApply(lab, t, set, nodes, wants)
	}
	return err
}

// checkTable refuses, before any host changes, a table the maps cannot
// hold (a node port is a frontend per node address).
func checkTable(t *service.Table, nodes map[string][]netip.Addr) error {
	// Per family: IPv6 frontends have maps of their own.
	for _, six := range []bool{false, true} {
		addrs := 0
		for _, as := range nodes {
			for _, a := range as {
				if a.Is6() == six {
					addrs++
				}
			}
		}
		fronts, slots := 0, 0
		for _, f := range t.Frontends {
			if f.VIP.Is6() != six {
				continue
			}
			n := 1
			if f.NodePort != 0 {
				n += addrs
			}
			fronts += n
			slots += 2 * n * len(f.Backends)
		}
		if fronts > maxFrontends {
			return fmt.Errorf("%d frontends (Service ports, and node ports on each node address), the eBPF service map holds %d", fronts, maxFrontends)
		}
		if slots > maxBackendSlot {
			return fmt.Errorf("%d backends over all frontends, the eBPF backend map holds %d (two slots each)", slots/2, maxBackendSlot/2)
		}
	}
	return nil
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
	v := cnlabSvcVal{Id: e.ID, Count: e.Count, Half: e.Half, Affinity: e.Affinity}
	if e.Drop {
		v.Flags |= uint8(cnlabSvcFlagSVC_DROP)
	}
	if e.Masq {
		v.Flags |= uint8(cnlabSvcFlagSVC_MASQ)
	}
	return v
}

// writeServices brings a host's maps from have (nil: unknown, rebuild) to
// want, assigning want's frontend numbers and halves.
func writeServices(lab *topology.Spec, h *topology.Host, m *svcMaps, have, want *svcState) error {
	for key, w := range want.Frontends {
		if int(w.Count) != len(w.Backends) {
			// A state read back (a rollback) records how many backends
			// a frontend had, not which: the host is rebuilt from the
			// lab's stored Services instead.
			return fmt.Errorf("frontend %s: its backends are not known (a recorded state cannot be written back)", svcKeyString(key))
		}
	}
	cfg, err := svcConfig4(lab, h)
	if err != nil {
		return err
	}
	if cidr, ok := lab.Services.CIDROf(4); ok {
		cfg.Net = ip4(cidr.Masked().Addr())
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], ^uint32(0)<<(32-cidr.Bits()))
		cfg.Mask = ip4(netip.AddrFrom4(b))
	}
	if len(want.Frontends) > 0 {
		cfg.Flags = uint32(cnlabSvcConfigFlagSVC_ON)
		if lab.EBPF.SocketLB {
			cfg.Flags |= uint32(cnlabSvcConfigFlagSVC_SOCKET)
		}
		for k := range want.Frontends {
			if cidr, ok := lab.Services.CIDROf(4); !ok || !cidr.Contains(addrOf(k.Vip)) {
				cfg.Flags |= uint32(cnlabSvcConfigFlagSVC_NODEPORTS) // a node address
				break
			}
		}
	}
	if have == nil {
		// Rebuild: forget every frontend and backend slot the maps hold.
		if err := clearMap[cnlabSvcKey, cnlabSvcVal](m.svc); err != nil {
			return fmt.Errorf("clear frontends: %w", err)
		}
		if err := clearMap[cnlabBackendKey, cnlabBackend](m.backends); err != nil {
			return fmt.Errorf("clear backends: %w", err)
		}
		have = &svcState{Frontends: svcFrontends{}}
	}
	if cfg.Flags != 0 {
		if err := m.config.Put(uint32(0), cfg); err != nil {
			return fmt.Errorf("service config: %w", err)
		}
	}
	used := make(map[uint32]bool, len(have.Frontends))
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
	// New frontends get their numbers in a stable order.
	var added []cnlabSvcKey
	for key, w := range want.Frontends {
		old := have.Frontends[key]
		switch {
		case old == nil:
			added = append(added, key)
			continue
		case old.same(w):
			w.ID, w.Half = old.ID, old.Half
			continue
		}
		if err := switchFrontend(m, key, w, old); err != nil {
			return err
		}
	}
	slices.SortFunc(added, func(a, b cnlabSvcKey) int {
		return cmp.Or(addrOf(a.Vip).Compare(addrOf(b.Vip)), cmp.Compare(htons(a.Port), htons(b.Port)), cmp.Compare(a.Proto, b.Proto))
	})
	for _, key := range added {
		w := want.Frontends[key]
		w.ID, w.Half = newID(), 0
		if err := switchFrontend(m, key, w, nil); err != nil {
			return err
		}
	}
	for key, old := range have.Frontends {
		if _, ok := want.Frontends[key]; ok {
			continue
		}
		if err := m.svc.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("frontend %s: %w", svcKeyString(key), err)
		}
		if err := deleteBackends(m, old.ID, old.Half, int(old.Count)); err != nil {
			return fmt.Errorf("frontend %s: backends: %w", svcKeyString(key), err)
		}
	}
	if cfg.Flags == 0 {
		if err := m.config.Put(uint32(0), cfg); err != nil {
			return fmt.Errorf("service config: %w", err)
		}
	}
	stale := proxy.StaleUDP(have.UDP, want.UDP)
	if err := forgetUDP(m, flowsOf(stale, false)); err != nil {
		return fmt.Errorf("stale UDP flows: %w", err)
	}
	if err := writeServices6(lab, h, m, have, want); err != nil {
		return err
	}
	if err := forgetUDP6(m, flowsOf(stale, true)); err != nil {
		return fmt.Errorf("stale IPv6 UDP flows: %w", err)
	}
	return nil
}

// svcConfig4 is a host's IPv4 service settings but the service range:
// its bridge address (hairpins) and masquerade address, none on a lab
// without IPv4.
func svcConfig4(lab *topology.Spec, h *topology.Host) (cnlabSvcConfig, error) {
	if _, ok := h.CIDR(4); !ok {
		return cnlabSvcConfig{}, nil
	}
	masq, err := service.MasqAddressOf(lab, h, 4)
	if err != nil {
		return cnlabSvcConfig{}, err
	}
	gw, _ := h.GatewayOf(4)
	return cnlabSvcConfig{Hairpin: ip4(gw), Masq: ip4(masq)}, nil
}

// switchFrontend writes w's backends into its half, then its value (the
// switch), then deletes old's slots in the other half (old nil: a new
// frontend, whose id and half the caller set).
func switchFrontend(m *svcMaps, key cnlabSvcKey, w, old *svcEntry) error {
	if old != nil {
		// A changed frontend keeps old's id and takes the other half:
		// the one the kernel does not use, whatever the state says.
		w.ID, w.Half = old.ID, 1-old.Half
		var cur cnlabSvcVal
		if m.svc.Lookup(key, &cur) == nil && cur.Id == w.ID {
			w.Half = 1 - cur.Half
		}
	}
	if err := writeBackends(m, w); err != nil {
		return fmt.Errorf("frontend %s: backends: %w", svcKeyString(key), err)
	}
	if err := m.svc.Put(key, svcValue(w)); err != nil {
		return fmt.Errorf("frontend %s: %w", svcKeyString(key), err)
	}
	if old != nil {
		if err := deleteBackends(m, old.ID, 1-w.Half, int(old.Count)); err != nil {
			return fmt.Errorf("frontend %s: old backends: %w", svcKeyString(key), err)
		}
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
// frontend (translated to Backend, when valid) and its reverse entry, per
// packet and per socket. The client's next datagram picks a backend
// again (a UDP socket connected to a frontend with socket-level
// translation stays connected to its backend: docs/limits.md).
func forgetUDP(m *svcMaps, flows []proxy.StaleFlow) error {
	if len(flows) == 0 {
		return nil
	}
	selects := func(vip uint32, port uint16, backend uint32) bool {
		for _, f := range flows {
			if f.Dst.IsValid() && ip4(f.Dst) == vip && htons(f.DstPort) == port &&
				(!f.Backend.IsValid() || ip4(f.Backend) == backend) {
				return true
			}
		}
		return false
	}
	var sdel []cnlabSockKey
	var sk cnlabSockKey
	var sb cnlabBackend
	sit := m.sockFwd.Iterate()
	for sit.Next(&sk, &sb) {
		if sk.Proto == 17 && selects(sk.Addr, sk.Port, sb.Ip) {
			sdel = append(sdel, sk, cnlabSockKey{Cookie: sk.Cookie, Addr: sb.Ip, Port: sb.Port, Proto: 17})
		}
	}
	if err := sit.Err(); err != nil {
		return err
	}
	if err := deleteKeys(sdel, m.sockFwd, m.sockRev); err != nil {
		return err
	}
	nat := m.nat
	var del []cnlabNatKey
	var k cnlabNatKey
	var v cnlabNatVal
	it := nat.Iterate()
	for it.Next(&k, &v) {
		if k.Dir != uint8(cnlabNatDirNAT_FWD) || k.Proto != 17 {
			continue
		}
		if selects(k.Daddr, k.Dport, v.Daddr) {
			del = append(del, k, cnlabNatKey{Saddr: v.Daddr, Daddr: v.Saddr, Sport: v.Dport, Dport: v.Sport,
				Proto: 17, Dir: uint8(cnlabNatDirNAT_REV)})
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	return deleteKeys(del, nat)
}

// deleteKeys deletes keys from maps in turn (keys[0] from maps[0],
// keys[1] from maps[1 % len(maps)], ...: a forward entry and its reverse
// one), a key already gone being no error.
func deleteKeys[K any](keys []K, maps ...*ebpf.Map) error {
	for i, k := range keys {
		if err := maps[i%len(maps)].Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
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
		if err == nil {
			var text6 string
			text6, err = describeServices6(m)
			text += text6
		}
		m.Close()
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", h.Name, err)
		}
		out[h.Name] = text
	}
	return out, nil
}

// frontendLine describes a frontend (key, as svcKeyString or
// svc6KeyString write it) and its backends, read by backend, for
// describeServices and describeServices6.
func frontendLine(key string, v cnlabSvcVal, backend func(cnlabBackendKey) (netip.AddrPort, error)) string {
	line := fmt.Sprintf("%s id %d half %d", key, v.Id, v.Half)
	if v.Affinity != 0 {
		line += fmt.Sprintf(" affinity %ds", v.Affinity)
	}
	if v.Flags&uint8(cnlabSvcFlagSVC_MASQ) != 0 {
		line += " masquerade"
	}
	var bs []string
	for s := range v.Count {
		b, err := backend(cnlabBackendKey{Id: v.Id, Slot: s, Half: v.Half})
		if err != nil {
			bs = append(bs, fmt.Sprintf("slot %d missing", s))
			continue
		}
		bs = append(bs, b.String())
	}
	switch {
	case len(bs) > 0:
		line += " -> " + strings.Join(bs, " ")
	case v.Flags&uint8(cnlabSvcFlagSVC_DROP) != 0:
		line += " -> drop (no backend on this host)"
	default:
		line += " -> reject (no backend)"
	}
	return line
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
		lines = append(lines, frontendLine(svcKeyString(k), v, func(key cnlabBackendKey) (netip.AddrPort, error) {
			var b cnlabBackend
			err := m.backends.Lookup(key, &b)
			return netip.AddrPortFrom(addrOf(b.Ip), htons(b.Port)), err
		}))
	}
	if err := it.Err(); err != nil {
		return "", err
	}
	sort.Strings(lines)
	head := "services off"
	if cfg.Flags&uint32(cnlabSvcConfigFlagSVC_ON) != 0 {
		head = fmt.Sprintf("services on, hairpin source %s", addrOf(cfg.Hairpin))
		if cfg.Flags&uint32(cnlabSvcConfigFlagSVC_NODEPORTS) != 0 {
			head += fmt.Sprintf(", node ports masqueraded to %s", addrOf(cfg.Masq))
		}
		if cfg.Flags&uint32(cnlabSvcConfigFlagSVC_SOCKET) != 0 {
			head += ", socket-level translation"
		}
	}
	return head + "\n" + strings.Join(lines, "\n") + "\n", nil
}
