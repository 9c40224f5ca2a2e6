package observe

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Filter selects flows as hubble observe's flags do: values of one field
// are alternatives (any matches), fields must all match.
type Filter struct {
	From, To   []string // endpoint ("ns/name"), namespace ("ns/"), address or CIDR
	Namespaces []string // source or destination endpoint in one of them
	// Labeled are the endpoints a --label selector chose (set by the
	// caller, who knows the lab's labels); nil: no label filter.
	Labeled   map[string]bool
	Ports     []uint16 // source or destination port
	Protocols []string
	Verdicts  []string
	Types     []string
	Since     time.Time // flows at or after it (zero: any)
}

// Check validates the filter's values, naming the flag of a bad one.
func (f *Filter) Check() error {
	for _, v := range f.Verdicts {
		if !slices.Contains([]string{Forwarded, Dropped, Redirected, Translated}, v) {
			return fmt.Errorf("--verdict %q: give forwarded, dropped, redirected or translated", v)
		}
	}
	for _, t := range f.Types {
		if !slices.Contains([]string{TypeDrop, TypeTrace, TypeL7, TypeService}, t) {
			return fmt.Errorf("--type %q: give drop, trace, l7 or service", t)
		}
	}
	for _, p := range f.Protocols {
		if !slices.Contains([]string{"tcp", "udp", "icmp", "sctp"}, p) {
			if _, err := strconv.ParseUint(p, 10, 8); err != nil {
				return fmt.Errorf("--protocol %q: give tcp, udp, icmp or an IP protocol number", p)
			}
		}
	}
	for _, flag := range []struct {
		name string
		vals []string
	}{{"--from", f.From}, {"--to", f.To}} {
		for _, v := range flag.vals {
			if err := checkPeer(v); err != nil {
				return fmt.Errorf("%s %q: %v", flag.name, v, err)
			}
		}
	}
	return nil
}

// checkPeer accepts an endpoint ID, a namespace ("ns/"), an address or a
// CIDR.
func checkPeer(v string) error {
	if v == "" {
		return fmt.Errorf("empty")
	}
	if _, err := netip.ParseAddr(v); err == nil {
		return nil
	}
	if strings.Contains(v, "/") {
		if _, err := netip.ParsePrefix(v); err == nil {
			return nil
		}
		ns, _, _ := strings.Cut(v, "/")
		if ns != "" {
			return nil
		}
	}
	return fmt.Errorf("give an endpoint (NAMESPACE/NAME), a namespace (NAMESPACE/), an address or a CIDR")
}

// peerMatches reports whether one end of a flow (its endpoint ID and
// address) is one of vals.
func peerMatches(vals []string, id, ip string) bool {
	if len(vals) == 0 {
		return true
	}
	addr, _ := netip.ParseAddr(ip)
	for _, v := range vals {
		switch {
		case v == id, v == ip:
			return true
		case strings.HasSuffix(v, "/") && id != "" && strings.HasPrefix(id, v):
			return true
		}
		if p, err := netip.ParsePrefix(v); err == nil && addr.IsValid() && p.Contains(addr) {
			return true
		}
	}
	return false
}

// Match reports whether a flow passes the filter.
func (f *Filter) Match(fl *Flow) bool {
	if !f.Since.IsZero() && fl.Time.Before(f.Since) {
		return false
	}
	if !peerMatches(f.From, fl.From, fl.SrcIP) || !peerMatches(f.To, fl.To, fl.DstIP) {
		return false
	}
	if len(f.Namespaces) > 0 {
		ns := func(id string) string { n, _, _ := strings.Cut(id, "/"); return n }
		if !slices.Contains(f.Namespaces, ns(fl.From)) && !slices.Contains(f.Namespaces, ns(fl.To)) {
			return false
		}
	}
	if f.Labeled != nil && !f.Labeled[fl.From] && !f.Labeled[fl.To] {
		return false
	}
	if len(f.Ports) > 0 && !slices.Contains(f.Ports, fl.SrcPort) && !slices.Contains(f.Ports, fl.DstPort) {
		return false
	}
	if len(f.Protocols) > 0 && !slices.Contains(f.Protocols, fl.Protocol) {
		return false
	}
	if len(f.Verdicts) > 0 && !slices.Contains(f.Verdicts, fl.Verdict) {
		return false
	}
	if len(f.Types) > 0 && !slices.Contains(f.Types, fl.Type) {
		return false
	}
	return true
}
