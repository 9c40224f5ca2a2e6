// Package nftables is kube-proxy's nftables mode, rebuilt for cnlab's hosts:
// in each host a table ip cnlab-svc whose services chain (jumped from the
// nat prerouting and output hooks at priority dstnat) makes one verdict-map
// lookup, service-ips (address . protocol . port), per new connection,
// and for a local destination one in service-nodeports; each frontend's
// service chain picks an endpoint chain with numgen (after ClientIP
// affinity's per-endpoint sets), which DNATs to the backend. Frontends
// without backends are rejected (or dropped) from filter chains at
// priority filter - 10. Each apply is one nft -f transaction per host that
// sends only the difference: map elements added and deleted, changed
// chains flushed and rewritten, gone chains deleted; a host whose state is
// unknown is rebuilt (table deleted and recreated in the same
// transaction). A change from the table this process last applied
// (ApplyChange, change.go) sends only the changed frontends' difference, as
// one netlink batch per host, and logs it beside the state file. It writes
// nothing outside the lab's host namespaces.
package nftables

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// StateKind names the proxy's state files (change.StatePath), apart
// from the nftables policy datapath's.
const StateKind kind.Kind = "proxy-nftables"

type nftables struct{}

// New returns the nftables service proxy.
func New() proxy.Proxy { return nftables{} }

// Descriptor binds the nftables proxy kind to this implementation.
var Descriptor = proxy.Descriptor{Kind: kind.ProxyNFTables, New: New, StateKind: StateKind}

// Setup prepares every host (br_netfilter, the service CIDR's route: see
// proxy.PrepareHost) and creates the table, empty, where it is missing.
func (nftables) Setup(ctx context.Context, lab *topology.Spec) error {
	if len(lab.Hosts) == 0 {
		return change.ErrNoHosts
	}
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		if err := proxy.PrepareHost(lab, h); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		for _, nf := range labFamilies(lab) {
			if _, err := netns.Run(ctx, h.Netns, nil, "nft", append([]string{"list", "table"}, strings.Fields(nf.table)...)...); err == nil {
				continue
			}
			empty := renderFamily(nil, nf)
			if _, err := netns.Run(ctx, h.Netns, []byte(fullFamily(&empty, nf)), "nft", "-f", "-"); err != nil {
				return fmt.Errorf("host %s: %w", h.Name, err)
			}
		}
	}
	return nil
}

// labFamilies are the tables the proxy keeps: ip cnlab-svc always (as
// before dual-stack), ip6 cnlab-svc in a lab with IPv6.
func labFamilies(lab *topology.Spec) []nfam {
	if lab.HasFamily(6) {
		return []nfam{fam4, fam6}
	}
	return []nfam{fam4}
}

// Apply sends each host the difference between what it last applied and
// t, in one nft -f transaction; a host whose state cannot be trusted, or
// whose difference the kernel refuses (a hand edit), gets its table
// rebuilt in one transaction. UDP conntrack entries left pointing at a
// removed backend are deleted after the commit.
// A host's delta log (ApplyChange) is folded into its state file first.
func (nftables) Apply(ctx context.Context, lab *topology.Spec, t *service.Table) error {
	takeMemo(lab.Name)
	for _, h := range lab.Hosts {
		if err := foldLog(change.StatePath(lab.Name, StateKind, h.Name)); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
	}
	set := proxy.Digest(t)
	v6 := lab.HasFamily(6)
	var mu sync.Mutex
	wants := map[string]*hostState{}
	err := change.ApplyHosts(ctx, lab, StateKind, set,
		func(host string) hostState {
			st := Render(t, host)
			if v6 && st.V6 == nil {
				empty := renderFamily(nil, fam6)
				st.V6 = &empty
			}
			mu.Lock()
			wants[host] = &st
			mu.Unlock()
			return st
		},
		func(ctx context.Context, h *topology.Host, have, want *hostState) error {
			var haveUDP []proxy.UDPFrontend
			var err error
			if have == nil {
				err = change.Load(ctx, h, fullScript(want), "nft", "-f", "-")
			} else {
				haveUDP = have.UDP
				if script := diffScript(have, want); script != "" {
					if err = change.Load(ctx, h, script, "nft", "-f", "-"); err != nil {
						err = change.Load(ctx, h, fullScript(want), "nft", "-f", "-")
					}
				}
			}
			if err != nil {
				return err
			}
			// With what the host translated before unknown (haveUDP
			// nil), every UDP flow to a frontend of the table goes.
			if _, err := proxy.FlushUDP(h.Netns, proxy.StaleUDP(haveUDP, want.UDP)); err != nil {
				slog.Warn("stale UDP flows kept", "host", h.Name, "err", err)
			}
			return nil
		})
	if err == nil {
		keepAfterApply(lab, t, set, wants)
	}
	return err
}

// Describe returns `nft list table ip cnlab-svc` of each host (and `nft
// list table ip6 cnlab-svc` after it in a lab with IPv6).
func (nftables) Describe(ctx context.Context, lab *topology.Spec) (map[string]string, error) {
	out := map[string]string{}
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		var all []byte
		for _, nf := range labFamilies(lab) {
			text, err := netns.Run(ctx, h.Netns, nil, "nft", append([]string{"list", "table"}, strings.Fields(nf.table)...)...)
			if err != nil {
				return nil, fmt.Errorf("host %s: %w", h.Name, err)
			}
			all = append(all, text...)
		}
		out[h.Name] = string(all)
	}
	return out, nil
}
