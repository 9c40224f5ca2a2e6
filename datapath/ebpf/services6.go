package ebpf

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// The IPv6 half of the service proxy: IPv6 frontends live in maps of
// their own (cnlab_svc6_config, cnlab_svc6, cnlab_backends6, cnlab_nat6,
// cnlab_affinity6; bpf/cnlab.c, "IPv6 Services"), written as the IPv4
// ones are, by the whole apply (ApplyChange takes it on a lab with IPv6).

// svcFrontends6 are a host's IPv6 frontends by map key. In JSON, one
// base64 string of fixed-size records (as svcFrontends).
type svcFrontends6 map[cnlabSvc6Key]*svcEntry

const svcRecord6 = 16 + 2 + 1 + svcEntryBytes

func (fs svcFrontends6) MarshalJSON() ([]byte, error) {
	keys := make([]cnlabSvc6Key, 0, len(fs))
	for k := range fs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmpSvc6Key)
	b := make([]byte, 0, len(fs)*svcRecord6)
	for _, k := range keys {
		e := fs[k]
		a := addrOf6(k.Vip).As16()
		b = append(b, a[:]...)
		b = binary.LittleEndian.AppendUint16(b, k.Port)
		b = append(b, k.Proto)
		b = appendEntry(b, e)
	}
	return json.Marshal(b)
}

func (fs *svcFrontends6) UnmarshalJSON(data []byte) error {
	var b []byte
	if err := json.Unmarshal(data, &b); err != nil {
		return err
	}
	if len(b)%svcRecord6 != 0 {
		return fmt.Errorf("IPv6 frontend records: %d bytes, not a multiple of %d", len(b), svcRecord6)
	}
	m := make(svcFrontends6, len(b)/svcRecord6)
	for i := 0; i < len(b)/svcRecord6; i++ {
		r := b[i*svcRecord6:]
		a := netip.AddrFrom16([16]byte(r[:16]))
		k := cnlabSvc6Key{Vip: ip6(a), Port: binary.LittleEndian.Uint16(r[16:]), Proto: r[18]}
		e := &svcEntry{}
		readEntry(r[19:], e)
		m[k] = e
	}
	*fs = m
	return nil
}

func cmpSvc6Key(a, b cnlabSvc6Key) int {
	return cmp.Or(addrOf6(a.Vip).Compare(addrOf6(b.Vip)), cmp.Compare(htons(a.Port), htons(b.Port)), cmp.Compare(a.Proto, b.Proto))
}

// svc6KeyString names an IPv6 frontend in messages: "[VIP]:port/proto".
func svc6KeyString(k cnlabSvc6Key) string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(addrOf6(k.Vip), htons(k.Port)), protoName(k.Proto))
}

// svcConfig6 is a host's IPv6 service settings for want: its IPv6 bridge
// address (hairpins), service range, masquerade address (node ports).
func svcConfig6(lab *topology.Spec, h *topology.Host, want svcFrontends6) (cnlabSvc6Config, error) {
	var cfg cnlabSvc6Config
	if len(want) == 0 {
		return cfg, nil
	}
	gw, ok := h.GatewayOf(6)
	if !ok {
		return cfg, fmt.Errorf("host %s has no IPv6 pod CIDR for its IPv6 frontends", h.Name)
	}
	masq, err := service.MasqAddressOf(lab, h, 6)
	if err != nil {
		return cfg, err
	}
	cfg.Hairpin, cfg.Masq = ip6(gw), ip6(masq)
	cidr, hasCIDR := lab.Services.CIDROf(6)
	if hasCIDR {
		cfg.Net = ip6(cidr.Masked().Addr())
		var m [16]byte
		for i := range cidr.Bits() {
			m[i/8] |= 0x80 >> (i % 8)
		}
		cfg.Mask = ip6(netip.AddrFrom16(m))
	}
	cfg.Flags = uint32(cnlabSvcConfigFlagSVC_ON)
	if lab.EBPF.SocketLB {
		cfg.Flags |= uint32(cnlabSvcConfigFlagSVC_SOCKET)
	}
	for k := range want {
		if !hasCIDR || !cidr.Contains(addrOf6(k.Vip)) {
			cfg.Flags |= uint32(cnlabSvcConfigFlagSVC_NODEPORTS) // a node address
			break
		}
	}
	return cfg, nil
}

// writeServices6 is writeServices for the IPv6 frontends (have nil:
// rebuild).
func writeServices6(lab *topology.Spec, h *topology.Host, m *svcMaps, have, want *svcState) error {
	for key, w := range want.Frontends6 {
		if int(w.Count) != len(w.Backends) {
			return fmt.Errorf("frontend %s: its backends are not known (a recorded state cannot be written back)", svc6KeyString(key))
		}
	}
	cfg, err := svcConfig6(lab, h, want.Frontends6)
	if err != nil {
		return err
	}
	var old svcFrontends6
	if have != nil && have.Frontends6 != nil {
		old = have.Frontends6
	} else {
		// Rebuild (or a state of before IPv6 frontends): forget every
		// IPv6 frontend and backend slot the maps hold.
		if err := clearMap[cnlabSvc6Key, cnlabSvcVal](m.svc6); err != nil {
			return fmt.Errorf("clear IPv6 frontends: %w", err)
		}
		if err := clearMap[cnlabBackendKey, cnlabBackend6](m.backends6); err != nil {
			return fmt.Errorf("clear IPv6 backends: %w", err)
		}
		old = svcFrontends6{}
	}
	if cfg.Flags != 0 {
		if err := m.config6.Put(uint32(0), cfg); err != nil {
			return fmt.Errorf("IPv6 service config: %w", err)
		}
	}
	used := make(map[uint32]bool, len(old))
	for _, e := range old {
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
	var added []cnlabSvc6Key
	for key, w := range want.Frontends6 {
		o := old[key]
		switch {
		case o == nil:
			added = append(added, key)
			continue
		case o.same(w):
			w.ID, w.Half = o.ID, o.Half
			continue
		}
		if err := switchFrontend6(m, key, w, o); err != nil {
			return err
		}
	}
	slices.SortFunc(added, cmpSvc6Key)
	for _, key := range added {
		w := want.Frontends6[key]
		w.ID, w.Half = newID(), 0
		if err := switchFrontend6(m, key, w, nil); err != nil {
			return err
		}
	}
	for key, o := range old {
		if _, ok := want.Frontends6[key]; ok {
			continue
		}
		if err := m.svc6.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("frontend %s: %w", svc6KeyString(key), err)
		}
		if err := deleteBackends6(m, o.ID, o.Half, int(o.Count)); err != nil {
			return fmt.Errorf("frontend %s: backends: %w", svc6KeyString(key), err)
		}
	}
	if cfg.Flags == 0 {
		if err := m.config6.Put(uint32(0), cfg); err != nil {
			return fmt.Errorf("IPv6 service config: %w", err)
		}
	}
	return nil
}

func switchFrontend6(m *svcMaps, key cnlabSvc6Key, w, old *svcEntry) error {
	if old != nil {
		w.ID, w.Half = old.ID, 1-old.Half
		var cur cnlabSvcVal
		if m.svc6.Lookup(key, &cur) == nil && cur.Id == w.ID {
			w.Half = 1 - cur.Half
		}
	}
	if len(w.Backends) > 0 {
		keys := make([]cnlabBackendKey, len(w.Backends))
		vals := make([]cnlabBackend6, len(w.Backends))
		for i, b := range w.Backends {
			keys[i] = cnlabBackendKey{Id: w.ID, Slot: uint16(i), Half: w.Half}
			vals[i] = cnlabBackend6{Ip: ip6(b.Addr()), Port: htons(b.Port())}
		}
		if err := batchPut(m.backends6, keys, vals); err != nil {
			return fmt.Errorf("frontend %s: backends: %w", svc6KeyString(key), err)
		}
	}
	if err := m.svc6.Put(key, svcValue(w)); err != nil {
		return fmt.Errorf("frontend %s: %w", svc6KeyString(key), err)
	}
	if old != nil {
		if err := deleteBackends6(m, old.ID, 1-w.Half, int(old.Count)); err != nil {
			return fmt.Errorf("frontend %s: old backends: %w", svc6KeyString(key), err)
		}
	}
	return nil
}

func deleteBackends6(m *svcMaps, id uint32, half uint8, n int) error {
	var errs []error
	for i := range n {
		k := cnlabBackendKey{Id: id, Slot: uint16(i), Half: half}
		if err := m.backends6.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// flowsOf are the flows of one family (six: IPv6) among flows.
func flowsOf(flows []proxy.StaleFlow, six bool) []proxy.StaleFlow {
	var out []proxy.StaleFlow
	for _, f := range flows {
		if f.Dst.Is6() == six {
			out = append(out, f)
		}
	}
	return out
}

// forgetUDP6 is forgetUDP for IPv6 flows.
func forgetUDP6(m *svcMaps, flows []proxy.StaleFlow) error {
	if len(flows) == 0 {
		return nil
	}
	selects := func(vip [4]uint32, port uint16, backend [4]uint32) bool {
		for _, f := range flows {
			if ip6(f.Dst) == vip && htons(f.DstPort) == port && (!f.Backend.IsValid() || ip6(f.Backend) == backend) {
				return true
			}
		}
		return false
	}
	var sdel []cnlabSock6Key
	var sk cnlabSock6Key
	var sb cnlabBackend6
	sit := m.sock6Fwd.Iterate()
	for sit.Next(&sk, &sb) {
		if sk.Proto == 17 && selects(sk.Addr, sk.Port, sb.Ip) {
			sdel = append(sdel, sk, cnlabSock6Key{Cookie: sk.Cookie, Addr: sb.Ip, Port: sb.Port, Proto: 17})
		}
	}
	if err := sit.Err(); err != nil {
		return err
	}
	if err := deleteKeys(sdel, m.sock6Fwd, m.sock6Rev); err != nil {
		return err
	}
	var del []cnlabNat6Key
	var k cnlabNat6Key
	var v cnlabNat6Val
	it := m.nat6.Iterate()
	for it.Next(&k, &v) {
		if k.Dir != uint8(cnlabNatDirNAT_FWD) || k.Proto != 17 {
			continue
		}
		if selects(k.Daddr, k.Dport, v.Daddr) {
			del = append(del, k, cnlabNat6Key{Saddr: v.Daddr, Daddr: v.Saddr, Sport: v.Dport, Dport: v.Sport,
				Proto: 17, Dir: uint8(cnlabNatDirNAT_REV)})
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	return deleteKeys(del, m.nat6)
}

// describeServices6 lists a host's IPv6 frontends as describeServices
// does the IPv4 ones ("" when it has none).
func describeServices6(m *svcMaps) (string, error) {
	var cfg cnlabSvc6Config
	if err := m.config6.Lookup(uint32(0), &cfg); err != nil {
		return "", err
	}
	if cfg.Flags&uint32(cnlabSvcConfigFlagSVC_ON) == 0 {
		return "", nil
	}
	var lines []string
	var k cnlabSvc6Key
	var v cnlabSvcVal
	it := m.svc6.Iterate()
	for it.Next(&k, &v) {
		lines = append(lines, frontendLine(svc6KeyString(k), v, func(key cnlabBackendKey) (netip.AddrPort, error) {
			var b cnlabBackend6
			err := m.backends6.Lookup(key, &b)
			return netip.AddrPortFrom(addrOf6(b.Ip), htons(b.Port)), err
		}))
	}
	if err := it.Err(); err != nil {
		return "", err
	}
	sort.Strings(lines)
	head := fmt.Sprintf("IPv6 services on, hairpin source %s", addrOf6(cfg.Hairpin))
	if cfg.Flags&uint32(cnlabSvcConfigFlagSVC_NODEPORTS) != 0 {
		head += fmt.Sprintf(", node ports masqueraded to %s", addrOf6(cfg.Masq))
	}
	return head + "\n" + strings.Join(lines, "\n") + "\n", nil
}
