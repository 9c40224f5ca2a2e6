package policy

import (
	"net/netip"
	"testing"
)

// prefixFrom makes a prefix of family fam from fuzz bytes: an address
// from b (zero-padded) and a length bits modulo the family's.
func prefixFrom(fam int, b []byte, bits uint8) netip.Prefix {
	var a16 [16]byte
	copy(a16[:], b)
	if fam == 4 {
		a := netip.AddrFrom4([4]byte(a16[:4]))
		return netip.PrefixFrom(a, int(bits)%33).Masked()
	}
	return netip.PrefixFrom(netip.AddrFrom16(a16), int(bits)%129).Masked()
}

// lastOf is the last address of a prefix.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// FuzzSubtract checks Subtract on prefixes of both families: the result
// is disjoint prefixes inside p, sorted, and covers exactly p minus the
// excepted prefixes (on the edges of every prefix involved and on the
// fuzzer's own addresses); excepted prefixes of the other family change
// nothing.
func FuzzSubtract(f *testing.F) {
	f.Add(true, []byte{10, 0, 0, 0}, uint8(24), []byte{10, 0, 0, 0, 10, 0, 0, 200}, []byte{26, 32}, []byte{10, 0, 0, 201})
	f.Add(false, []byte{0xfd, 0, 0, 0, 0, 0x01, 0x91}, uint8(64), []byte{0xfd, 0, 0, 0, 0, 0x01, 0x91, 0, 0, 0, 0, 0, 0, 0, 0, 0x20}, []byte{127}, []byte{0xfd})
	f.Add(false, []byte{}, uint8(0), []byte{0x80}, []byte{1}, []byte{0xff, 0xff})
	f.Add(false, []byte{0xfd}, uint8(127), []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, []byte{128}, []byte{})
	f.Fuzz(func(t *testing.T, v4 bool, pb []byte, pbits uint8, xb []byte, xbits []byte, probe []byte) {
		fam := 6
		if v4 {
			fam = 4
		}
		p := prefixFrom(fam, pb, pbits)
		size := 16
		if fam == 4 {
			size = 4
		}
		var except []netip.Prefix
		for i := 0; i < len(xbits) && i < 6; i++ {
			var chunk []byte
			if len(xb) > i*size {
				chunk = xb[i*size : min(len(xb), (i+1)*size)]
			}
			except = append(except, prefixFrom(fam, chunk, xbits[i]))
		}
		other := netip.MustParsePrefix("::/0")
		if fam == 6 {
			other = netip.MustParsePrefix("0.0.0.0/0")
		}
		got := Subtract(p, append(except, other))
		for i, q := range got {
			if family(q) != fam || !p.Contains(q.Addr()) || q.Bits() < p.Bits() || q != q.Masked() {
				t.Fatalf("%s minus %v: %s is not a prefix inside it", p, except, q)
			}
			if i > 0 && !lastOf(got[i-1]).Less(q.Addr()) {
				t.Fatalf("%s minus %v: %s and %s overlap or are out of order", p, except, got[i-1], q)
			}
		}
		var probes []netip.Addr
		for _, q := range append(append([]netip.Prefix{p}, except...), got...) {
			for _, a := range []netip.Addr{q.Addr(), lastOf(q)} {
				probes = append(probes, a, a.Next(), a.Prev())
			}
		}
		probes = append(probes, prefixFrom(fam, probe, 128).Addr())
		for _, a := range probes {
			if !a.IsValid() || family(netip.PrefixFrom(a, 0)) != fam {
				continue
			}
			want := p.Contains(a)
			for _, x := range except {
				want = want && !x.Contains(a)
			}
			have := false
			for _, q := range got {
				have = have || q.Contains(a)
			}
			if have != want {
				t.Fatalf("%s minus %v = %v: %s covered %v, want %v", p, except, got, a, have, want)
			}
		}
	})
}
