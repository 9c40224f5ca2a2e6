// Package iptables is kube-proxy's iptables mode, rebuilt for cnlab's hosts:
// in each host's nat table CNLAB-SERVICES (jumped from PREROUTING and
// OUTPUT) holds one rule per frontend, walked top-down by every new
// connection; each frontend jumps to a service chain that picks an
// endpoint chain (statistic random, after ClientIP affinity's recent
// checks), which DNATs to the backend. CNLAB-NODEPORTS, reached for
// local destination addresses, does the same for node ports. Frontends
// without backends are rejected (or dropped) by CNLABSVC-REJECT in the
// filter table. Changes go through iptables-restore --noflush, one atomic
// commit per host rewriting only the chains that changed (KEP-3453). It
// writes nothing outside the lab's host namespaces.
package iptables

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// StateKind names the proxy's state files (change.StatePath), apart
// from the iptables policy datapath's.
const StateKind kind.Kind = "proxy-iptables"

type iptables struct{}

// New returns the iptables service proxy.
func New() proxy.Proxy { return iptables{} }

// Descriptor binds the iptables proxy kind to this implementation.
var Descriptor = proxy.Descriptor{Kind: kind.ProxyIPTables, New: New, StateKind: StateKind}

// Setup turns br_netfilter on in every host (replies bridged between two
// endpoints of one host must meet conntrack to be un-DNATed), routes the
// service CIDR to the host's bridge (so that a connection to a frontend
// without backends reaches the filter table's REJECT instead of failing
// the route lookup), and creates the base chains and their jumps.
func (iptables) Setup(ctx context.Context, lab *topology.Spec) error {
	if len(lab.Hosts) == 0 {
		return change.ErrNoHosts
	}
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		if err := proxy.PrepareHost(lab, h); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		for _, fam := range labFamilies(lab) {
			if err := ensureBase(ctx, lab, h, fam); err != nil {
				return fmt.Errorf("host %s: %w", h.Name, err)
			}
		}
	}
	return nil
}

// labFamilies are the families the proxy writes rules for: IPv4 always
// (as before dual-stack: its chains exist on every lab), IPv6 in a lab
// with IPv6.
func labFamilies(lab *topology.Spec) []int {
	if lab.HasFamily(6) {
		return []int{4, 6}
	}
	return []int{4}
}

// tools returns iptables-restore and iptables-save of the lab's backend
// for family fam (ip6tables-restore, ip6tables-save for 6).
func tools(lab *topology.Spec, fam int) (restore, save string) {
	restore, save, _ = lab.IPTables.Tools()
	if fam == 6 {
		restore = strings.Replace(restore, "iptables", "ip6tables", 1)
		save = strings.Replace(save, "iptables", "ip6tables", 1)
	}
	return restore, save
}

// listings returns iptables-save (ip6tables-save) of the nat and filter
// tables of a host.
func listings(ctx context.Context, lab *topology.Spec, h *topology.Host, fam int) (map[string]string, error) {
	_, save := tools(lab, fam)
	out := map[string]string{}
	for _, table := range []string{natTable, filterTable} {
		text, err := netns.Run(ctx, h.Netns, nil, save, "-t", table)
		if err != nil {
			return nil, err
		}
		out[table] = string(text)
	}
	return out, nil
}

// ensureBase creates the base chains and jumps a host lacks, in one
// commit.
func ensureBase(ctx context.Context, lab *topology.Spec, h *topology.Host, fam int) error {
	ls, err := listings(ctx, lab, h, fam)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, table := range []string{filterTable, natTable} {
		var lines []string
		for _, c := range baseChains[table] {
			if !strings.Contains(ls[table], ":"+c+" ") {
				lines = append(lines, ":"+c+" - [0:0]")
			}
		}
		for _, j := range baseJumpsOf(fam)[table] {
			if !strings.Contains(ls[table], "-A "+j[0]+" "+j[1]+"\n") {
				lines = append(lines, "-I "+j[0]+" 1 "+j[1])
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(&b, "*%s\n%s\nCOMMIT\n", table, strings.Join(lines, "\n"))
		}
	}
	if b.Len() == 0 {
		return nil
	}
	restore, _ := tools(lab, fam)
	_, err = netns.Run(ctx, h.Netns, []byte(b.String()), restore, "-w", "--noflush")
	return err
}

// Apply writes each host's chains, rewriting only those that changed and
// deleting those no longer needed, in one iptables-restore commit per
// host (and one ip6tables-restore commit in a lab with IPv6, after it). A
// host whose recorded state cannot be trusted is rebuilt from what
// iptables-save shows: every wanted chain rewritten, every other chain of
// the proxy deleted, missing jumps inserted, in one commit too. UDP
// conntrack entries left pointing at a removed backend are deleted after
// the commit.
func (iptables) Apply(ctx context.Context, lab *topology.Spec, t *service.Table) error {
	v6 := lab.HasFamily(6)
	return change.ApplyHosts(ctx, lab, StateKind, proxy.Digest(t),
		func(host string) hostState {
			st := Render(t, host)
			if v6 && st.Tables6 == nil {
				st.Tables6 = renderFamily(nil, 6)
			}
			return st
		},
		func(ctx context.Context, h *topology.Host, have, want *hostState) error {
			var haveUDP []proxy.UDPFrontend
			if have != nil {
				haveUDP = have.UDP
			}
			for _, fam := range labFamilies(lab) {
				var haveT, wantT map[string]map[string][]string
				if have != nil {
					haveT = have.Tables
					if fam == 6 {
						haveT = have.Tables6
					}
				}
				wantT = want.Tables
				if fam == 6 {
					wantT = want.Tables6
				}
				if err := applyFamily(ctx, lab, h, fam, haveT, wantT); err != nil {
					return err
				}
			}
			// With what the host translated before unknown (haveUDP
			// nil), every UDP flow to a frontend of the table goes.
			if _, err := proxy.FlushUDP(h.Netns, proxy.StaleUDP(haveUDP, want.UDP)); err != nil {
				slog.Warn("stale UDP flows kept", "host", h.Name, "err", err)
			}
			return nil
		})
}

// applyFamily turns a host's chains of one family from have (nil:
// unknown) into want, in one commit.
func applyFamily(ctx context.Context, lab *topology.Spec, h *topology.Host, fam int, have, want map[string]map[string][]string) error {
	restore, _ := tools(lab, fam)
	rebuild := func() error {
		ls, err := listings(ctx, lab, h, fam)
		if err != nil {
			return err
		}
		return change.Load(ctx, h, rebuildFamily(ls, want, fam), restore, "-w", "--noflush")
	}
	if have == nil {
		return rebuild()
	}
	script := diffScript(have, want)
	if script == "" {
		return nil
	}
	if err := change.Load(ctx, h, script, restore, "-w", "--noflush"); err != nil {
		// The kernel may not hold what the state says (a hand edit):
		// rebuild from what it holds.
		return rebuild()
	}
	return nil
}

// Describe returns, per host, iptables-save of the proxy's chains in the
// nat and filter tables (and the built-in chains' jumps to them).
func (iptables) Describe(ctx context.Context, lab *topology.Spec) (map[string]string, error) {
	out := map[string]string{}
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		var b strings.Builder
		for _, fam := range labFamilies(lab) {
			ls, err := listings(ctx, lab, h, fam)
			if err != nil {
				return nil, err
			}
			if fam == 6 {
				b.WriteString("# ip6tables\n")
			}
			for _, table := range []string{natTable, filterTable} {
				fmt.Fprintf(&b, "*%s\n", table)
				for _, line := range strings.Split(ls[table], "\n") {
					if mine(table, line) {
						b.WriteString(line + "\n")
					}
				}
			}
		}
		out[h.Name] = b.String()
	}
	return out, nil
}

// mine reports whether an iptables-save line of a table declares, fills
// or jumps to a chain of the proxy.
func mine(table, line string) bool {
	if table == natTable {
		for _, f := range strings.Fields(line) {
			if ownNATChain(strings.TrimPrefix(f, ":")) {
				return true
			}
		}
		return false
	}
	return strings.Contains(line, rejectChain)
}
