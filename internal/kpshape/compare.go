package kpshape

import (
	"fmt"
	"slices"
)

// Listings are one side's rules in one mode: iptables-save of nat and
// filter (iptables), or nft list table (nftables).
type Listings struct{ NAT, Filter, NFT string }

// Result is a comparison of kube-proxy's rules with cnlab's.
type Result struct {
	Stale   []string // known differences that found nothing to rewrite
	Left    []string // differences no known one accounts for
	Missing []string // frontends a side does not show
	Before  []string // every difference, before the known ones are taken out
}

// OK reports whether the two sides differ exactly by the known
// differences.
func (r *Result) OK() bool { return len(r.Stale)+len(r.Left)+len(r.Missing) == 0 }

// Compare parses both sides' listings of mode (iptables or nftables),
// keeps kube-proxy's frontends among frontends (a cluster has its
// kubernetes Service too), and reconciles the shapes with the mode's
// known differences.
func Compare(mode string, real, mine Listings, frontends []string) (*Result, error) {
	parse := func(l Listings) (Shape, error) { return ParseIPTables(l.NAT, l.Filter) }
	known := IPTablesKnown
	switch mode {
	case "iptables":
	case "nftables":
		parse = func(l Listings) (Shape, error) { return ParseNFT(l.NFT) }
		known = NFTKnown
	default:
		return nil, fmt.Errorf("mode %q: iptables or nftables", mode)
	}
	r, err := parse(real)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy's rules: %w", err)
	}
	m, err := parse(mine)
	if err != nil {
		return nil, fmt.Errorf("cnlab's rules: %w", err)
	}
	r = r.Only(frontends)
	res := &Result{Before: Diff(r, m)}
	for _, side := range []struct {
		name string
		s    Shape
	}{{"kube-proxy", r}, {"cnlab", m}} {
		if got := side.s.Frontends(); !slices.Equal(got, frontends) {
			res.Missing = append(res.Missing, fmt.Sprintf("%s: frontends %v, want %v", side.name, got, frontends))
		}
	}
	res.Stale, res.Left = Reconcile(r, m, known)
	return res, nil
}
