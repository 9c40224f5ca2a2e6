package ebpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
	"os"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/policy"
)

// genContent is what one generation of a host's maps holds: its ipcache,
// and per endpoint slot its isolation bits, policy entries and inner
// maps. Apply edits the inactive generation in place from this record
// (see docs/ebpf.md, "Updates in place"). The record of a generation is
// a file that exists only while it describes the kernel: it is removed
// before the generation is edited and written once the generation is
// active and no program can still be running on the one before it.
type genContent struct {
	outerIDs
	IPCache []ipEntry
	Slots   []slotContent // by slot
}

// outerIDs are the outer maps a record's inner maps are in, by map ID: a
// lab whose maps were made again since is not described by it.
type outerIDs struct {
	PolicyID, ExactID, IPCacheID, IPCache6ID uint32
}

type slotContent struct {
	ID       string // endpoint, for the pins' names
	Identity uint32
	Enforce  cnlabIsolation
	Entries  []polEntry // sorted (sortEntries)
	ExactCap uint32     // max_entries of the slot's hash map, 0: none
	LPM      bool       // the slot has an LPM trie
}

func (g *genContent) slot(i uint32) *slotContent {
	if int(i) < len(g.Slots) {
		return &g.Slots[i]
	}
	return &slotContent{}
}

// contentPath is the record of generation gen of a host, beside its
// state file.
func contentPath(lab, host string, gen uint32) string {
	return strings.TrimSuffix(change.StatePath(lab, kind.EBPF, host), ".json") + fmt.Sprintf(".gen%d", gen)
}

const contentMagic = "cnlab-ebpf-gen 3\n"

// Bytes of a policy entry in a record: entrySize, and tierSize more for
// one with a cluster tier's decision (flag entryTiers).
const (
	entrySize = 14
	tierSize  = 15
)

// Flags of a policy entry in a record.
const (
	entryDeny  = 1
	entryProxy = 2
	entryPass  = 4
	entryTiers = 8 // tier, rank and the decision below follow
	belowSet   = 1
	belowDeny  = 2
	belowProxy = 4
)

// marshal encodes the record (binary: a record of 10,000 entries must
// read and write in well under a millisecond), with a CRC at the end.
func (g *genContent) marshal() []byte {
	n := 0
	for _, s := range g.Slots {
		n += len(s.Entries)
	}
	b := make([]byte, 0, len(contentMagic)+64+len(g.IPCache)*13+len(g.Slots)*32+n*entrySize)
	b = append(b, contentMagic...)
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	u32(g.PolicyID)
	u32(g.ExactID)
	u32(g.IPCacheID)
	u32(g.IPCache6ID)
	u32(uint32(len(g.IPCache)))
	for _, e := range g.IPCache {
		// An address's length first: 4 or 16 bytes.
		a := e.Prefix.Addr().AsSlice()
		b = append(b, byte(len(a)))
		b = append(b, a...)
		b = append(b, byte(e.Prefix.Bits()))
		u32(e.Key)
		u32(e.Identity)
	}
	u32(uint32(len(g.Slots)))
	for _, s := range g.Slots {
		u32(uint32(len(s.ID)))
		b = append(b, s.ID...)
		u32(s.Identity)
		u32(uint32(s.Enforce))
		u32(s.ExactCap)
		lpm := byte(0)
		if s.LPM {
			lpm = 1
		}
		b = append(b, lpm)
		u32(uint32(len(s.Entries)))
		for _, e := range s.Entries {
			u32(e.Peer)
			b = append(b, e.Dir, e.Proto)
			b = binary.LittleEndian.AppendUint16(b, e.Port)
			var f byte
			if e.Deny {
				f |= entryDeny
			}
			if e.Proxy {
				f |= entryProxy
			}
			if e.Pass {
				f |= entryPass
			}
			tiers := e.Tier != 0 || e.Prec != 0 || e.Below != polBelow{}
			if tiers {
				f |= entryTiers
			}
			b = append(b, e.Plen, f)
			u32(e.Rule)
			if tiers {
				var bf byte
				if e.Below.Set {
					bf |= belowSet
				}
				if e.Below.Deny {
					bf |= belowDeny
				}
				if e.Below.Proxy {
					bf |= belowProxy
				}
				b = append(b, byte(e.Tier))
				u32(e.Prec)
				b = append(b, bf, byte(e.Below.Tier))
				u32(e.Below.Prec)
				u32(e.Below.Rule)
			}
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

var errContent = errors.New("not a generation record")

func unmarshalContent(b []byte) (*genContent, error) {
	if len(b) < len(contentMagic)+4 || string(b[:len(contentMagic)]) != contentMagic {
		return nil, errContent
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, errContent
	}
	r := reader{b: body[len(contentMagic):]}
	g := &genContent{outerIDs: outerIDs{PolicyID: r.u32(), ExactID: r.u32(), IPCacheID: r.u32(), IPCache6ID: r.u32()}}
	n := r.count(14)
	g.IPCache = make([]ipEntry, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		al := int(r.byte())
		if al != 4 && al != 16 {
			r.err = errContent
			break
		}
		a := r.bytes(al)
		bits := r.byte()
		e := ipEntry{Key: r.u32(), Identity: r.u32()}
		if r.err == nil {
			addr, _ := netip.AddrFromSlice(a)
			e.Prefix = netip.PrefixFrom(addr, int(bits))
		}
		g.IPCache = append(g.IPCache, e)
	}
	ns := r.count(21)
	g.Slots = make([]slotContent, 0, ns)
	for i := 0; i < ns && r.err == nil; i++ {
		var s slotContent
		s.ID = string(r.bytes(r.count(1)))
		s.Identity = r.u32()
		s.Enforce = cnlabIsolation(r.u32())
		s.ExactCap = r.u32()
		s.LPM = r.byte() == 1
		ne := r.count(entrySize)
		s.Entries = make([]polEntry, ne)
		for j := 0; j < ne && r.err == nil; j++ {
			b := r.bytes(entrySize)
			f := b[9]
			e := polEntry{Peer: binary.LittleEndian.Uint32(b), Dir: b[4], Proto: b[5],
				Port: binary.LittleEndian.Uint16(b[6:]), Plen: b[8], Deny: f&entryDeny != 0, Proxy: f&entryProxy != 0,
				Pass: f&entryPass != 0, Rule: binary.LittleEndian.Uint32(b[10:])}
			if f&entryTiers != 0 {
				t := r.bytes(tierSize)
				bf := t[5]
				e.Tier, e.Prec = policy.Tier(t[0]), binary.LittleEndian.Uint32(t[1:])
				e.Below = polBelow{Set: bf&belowSet != 0, Deny: bf&belowDeny != 0, Proxy: bf&belowProxy != 0,
					Tier: policy.Tier(t[6]), Prec: binary.LittleEndian.Uint32(t[7:]), Rule: binary.LittleEndian.Uint32(t[11:])}
			}
			s.Entries[j] = e
		}
		g.Slots = append(g.Slots, s)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errContent
	}
	if r.err != nil {
		return nil, r.err
	}
	return g, nil
}

// reader decodes the record; the first short read sticks as its error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = errContent
		return make([]byte, n)
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) byte() byte  { return r.bytes(1)[0] }
func (r *reader) u16() uint16 { return binary.LittleEndian.Uint16(r.bytes(2)) }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.bytes(4)) }

// count reads a length whose items take at least size bytes each: a
// corrupt length cannot make the decoder allocate more than the file.
func (r *reader) count(size int) int {
	n := int(r.u32())
	if n*size > len(r.b) {
		r.err = errContent
		return 0
	}
	return n
}

// loadContent reads a generation's record; nil if there is none (or it
// is damaged: the generation is then rebuilt).
func loadContent(path string) *genContent {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	g, err := unmarshalContent(b)
	if err != nil {
		return nil
	}
	return g
}

func saveContent(path string, g *genContent) error {
	return files.WriteAtomic(path, g.marshal())
}
