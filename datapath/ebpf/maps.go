package ebpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// noIPv4 is the IPv4 address of an endpoint that has none (an IPv6-only
// lab): 255.255.255.255, never a packet's source.
const noIPv4 = 0xffffffff

// ip4 is an IPv4 address as the programs hold it (network order); 0 for
// an address that is not IPv4 (the IPv4 maps have no place for one).
func ip4(a netip.Addr) uint32 {
	if a = a.Unmap(); !a.Is4() {
		return 0
	}
	b := a.As4()
	return binary.LittleEndian.Uint32(b[:])
}

// ip6 is an IPv6 address as the programs hold it (four words in network
// order); the zero address for an invalid one.
func ip6(a netip.Addr) [4]uint32 {
	var out [4]uint32
	if !a.IsValid() {
		return out
	}
	b := a.As16()
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

func addrOf6(x [4]uint32) netip.Addr {
	var b [16]byte
	for i, w := range x {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return netip.AddrFrom16(b)
}

// byFamily parts ipcache entries into IPv4 and IPv6 ones (order kept).
func byFamily(es []ipEntry) (v4, v6 []ipEntry) {
	for _, e := range es {
		if e.Prefix.Addr().Is4() {
			v4 = append(v4, e)
		} else {
			v6 = append(v6, e)
		}
	}
	return v4, v6
}

func ipcacheKey6(p netip.Prefix) cnlabIpcache6Key {
	return cnlabIpcache6Key{Prefixlen: uint32(p.Bits()), Ip: ip6(p.Addr())}
}

// buildIPCache6 is buildIPCache for the IPv6 entries (cnlab_ipcache6).
func buildIPCache6(es []ipEntry) (*ebpf.Map, error) {
	if len(es) > ipcacheSize {
		return nil, fmt.Errorf("%d IPv6 addresses and CIDR prefixes, the ipcache holds %d", len(es), ipcacheSize)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "cnlab_ipc6", Type: ebpf.LPMTrie,
		KeySize: uint32(unsafe.Sizeof(cnlabIpcache6Key{})), ValueSize: uint32(unsafe.Sizeof(cnlabPeer{})),
		MaxEntries: ipcacheSize, Flags: unix.BPF_F_NO_PREALLOC})
	if err != nil {
		return nil, err
	}
	keys := make([]cnlabIpcache6Key, len(es))
	vals := make([]cnlabPeer, len(es))
	for i, e := range es {
		keys[i] = ipcacheKey6(e.Prefix)
		vals[i] = cnlabPeer{Key: e.Key, Identity: e.Identity}
	}
	if err := batchPut(m, keys, vals); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func addrOf(x uint32) netip.Addr {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], x)
	return netip.AddrFrom4(b)
}

func htons(p uint16) uint16 { return p<<8 | p>>8 }

// mapID is a map's kernel ID (0 if unknown): BPF_OBJ_GET_INFO_BY_FD for
// the first two fields of bpf_map_info only (m.Info also parses fdinfo).
func mapID(m *ebpf.Map) uint32 {
	var info struct{ Type, ID uint32 }
	attr := struct {
		FD, Len uint32
		Info    uint64
	}{uint32(m.FD()), uint32(unsafe.Sizeof(info)), uint64(uintptr(unsafe.Pointer(&info)))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_OBJ_GET_INFO_BY_FD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(m)
	if errno != 0 {
		return 0
	}
	return info.ID
}

// batchDelete deletes keys with one syscall where supported.
func batchDelete[K any](m *ebpf.Map, keys []K) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := m.BatchDelete(keys, nil)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

func buildIPCache(es []ipEntry) (*ebpf.Map, error) {
	if len(es) > ipcacheSize {
		return nil, fmt.Errorf("%d addresses and CIDR prefixes, the ipcache holds %d", len(es), ipcacheSize)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "cnlab_ipc", Type: ebpf.LPMTrie,
		KeySize: uint32(unsafe.Sizeof(cnlabIpcacheKey{})), ValueSize: uint32(unsafe.Sizeof(cnlabPeer{})),
		MaxEntries: ipcacheSize, Flags: unix.BPF_F_NO_PREALLOC})
	if err != nil {
		return nil, err
	}
	keys := make([]cnlabIpcacheKey, len(es))
	vals := make([]cnlabPeer, len(es))
	for i, e := range es {
		keys[i] = cnlabIpcacheKey{Prefixlen: uint32(e.Prefix.Bits()), Ip: ip4(e.Prefix.Addr())}
		vals[i] = cnlabPeer{Key: e.Key, Identity: e.Identity}
	}
	if err := batchPut(m, keys, vals); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// splitEntries parts an endpoint's entries into its exact ones (a
// protocol and a single port), for the hash stage (cnlab_policy_exact),
// and the rest (ranges, any port, any protocol), for the LPM trie
// (cnlab_policy). Order is kept.
func splitEntries(es []polEntry) (exact, prefix []polEntry) {
	for _, e := range es {
		if e.Plen == keyBitsAll {
			exact = append(exact, e)
		} else {
			prefix = append(prefix, e)
		}
	}
	return exact, prefix
}

// buildPolicy builds an inner policy map of size entries: an LPM trie for
// prefix entries, a hash map for exact ones (the same key, prefixlen 64).
// A hash map's size is not part of the template the programs were checked
// against (an LPM trie's is), so it may be sized to its entries.
func buildPolicy(es []polEntry, size int, typ ebpf.MapType) (*ebpf.Map, error) {
	name := "cnlab_pol"
	if typ == ebpf.Hash {
		name = "cnlab_pol_exact"
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: typ,
		KeySize: uint32(unsafe.Sizeof(cnlabPolicyKey{})), ValueSize: uint32(unsafe.Sizeof(cnlabPolicyVal{})),
		MaxEntries: uint32(size), Flags: unix.BPF_F_NO_PREALLOC})
	if err != nil {
		return nil, err
	}
	keys := make([]cnlabPolicyKey, len(es))
	vals := make([]cnlabPolicyVal, len(es))
	for i, e := range es {
		keys[i], vals[i] = policyKV(e)
	}
	if err := batchPut(m, keys, vals); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func policyKV(e polEntry) (cnlabPolicyKey, cnlabPolicyVal) {
	k := cnlabPolicyKey{Prefixlen: uint32(e.Plen), Peer: e.Peer, Dir: e.Dir, Proto: e.Proto, Port: htons(e.Port)}
	f := e.first()
	v := cnlabPolicyVal{Prec: f.global(), Rule: f.rule, Act: f.act(), BelowPrec: precNone, BelowRule: noRule}
	if b, ok := e.below(); ok {
		v.BelowPrec, v.BelowRule, v.BelowAct = b.global(), b.rule, b.act()
	}
	return k, v
}

// batchPut inserts all entries with one batch syscall where the kernel
// supports it for the map type, else one by one.
func batchPut[K, V any](m *ebpf.Map, keys []K, vals []V) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := m.BatchUpdate(keys, vals, nil)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for i := range keys {
		if err := m.Put(keys[i], vals[i]); err != nil {
			return err
		}
	}
	return nil
}
