package topology

import (
	"context"
	"fmt"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/vishvananda/netlink"
)

// buildFunctions puts the chain's network functions in its namespaces:
// shapers in every hop, firewalls in every hop and in both ends (see
// Firewall). All of it lives inside the namespaces (iptables tables,
// qdiscs), so deleting them removes it.
func (b *builder) buildFunctions(ctx context.Context, handles func(string) (*netlink.Handle, error)) error {
	c := b.spec.Chain
	if len(c.Functions) == 0 {
		return nil
	}
	for i, n := range c.Nodes {
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, f := range c.Functions {
			var err error
			switch f.Kind {
			case FunctionFirewall:
				err = applyFirewall(ctx, n.Netns, f.Firewall, f.Firewall.HopRules[i], true)
			case FunctionShaper:
				var h *netlink.Handle
				if h, err = handles(n.Netns); err == nil {
					err = applyShaper(h, f.Shaper)
				}
			default:
				err = fmt.Errorf("unknown function kind %q", f.Kind)
			}
			if err != nil {
				return fmt.Errorf("hop %d: %s: %w", i+1, f.Kind, err)
			}
		}
	}
	last := c.Segments[len(c.Segments)-1]
	for _, f := range c.Functions {
		if f.Kind == FunctionShaper && f.Shaper.Direction == ShapeAll {
			// The ends' one interface each, as the seed shaped them.
			for _, end := range []struct{ name, netns, dev string }{{"client", c.Segments[0].LeftNetns, c.Segments[0].LeftDev}, {"server", last.RightNetns, last.RightDev}} {
				h, err := handles(end.netns)
				if err == nil {
					sh := *f.Shaper
					sh.Devs = []string{end.dev}
					err = applyShaper(h, &sh)
				}
				if err != nil {
					return fmt.Errorf("%s: shaper: %w", end.name, err)
				}
			}
		}
		if f.Kind != FunctionFirewall {
			continue
		}
		for _, end := range []struct {
			name, netns string
			rules       int
		}{{"client", c.Segments[0].LeftNetns, f.Firewall.ClientRules}, {"server", last.RightNetns, f.Firewall.ServerRules}} {
			if err := applyFirewall(ctx, end.netns, f.Firewall, end.rules, false); err != nil {
				return fmt.Errorf("%s: firewall: %w", end.name, err)
			}
		}
	}
	return nil
}

// applyFirewall loads a namespace's firewall in one iptables-restore commit.
func applyFirewall(ctx context.Context, ns string, fw *Firewall, rules int, forward bool) error {
	_, err := netns.Run(ctx, ns, []byte(FirewallScript(fw, rules, forward)), iptablesRestore(fw.Backend), "-w")
	return err
}

// applyShaper adds the HTB qdisc and its one class to each shaped device,
// like `tc qdisc add dev DEV root handle 1: htb default 1; tc class add
// dev DEV parent 1: classid 1:1 htb rate R ceil C burst B cburst B`.
func applyShaper(h *netlink.Handle, sh *Shaper) error {
	for _, dev := range sh.Devs {
		l, err := h.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("find %s: %w", dev, err)
		}
		idx := l.Attrs().Index
		qd := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: idx, Handle: htbQdiscHandle, Parent: netlink.HANDLE_ROOT})
		qd.Defcls = htbClassHandle & 0xffff
		if err := h.QdiscAdd(qd); err != nil {
			return fmt.Errorf("add htb qdisc on %s: %w", dev, err)
		}
		cl := netlink.NewHtbClass(
			netlink.ClassAttrs{LinkIndex: idx, Parent: htbQdiscHandle, Handle: htbClassHandle},
			netlink.HtbClassAttrs{Rate: sh.Rate, Ceil: sh.Ceil, Buffer: sh.Burst, Cbuffer: sh.Burst, Quantum: htbQuantum(sh.Rate)},
		)
		if err := h.ClassAdd(cl); err != nil {
			return fmt.Errorf("add htb class on %s: %w", dev, err)
		}
	}
	return nil
}

// htbQuantum is what the kernel would compute (a tenth of the rate in
// bytes, r2q 10) kept within its bounds, set explicitly so the kernel
// does not log a warning for fast or slow classes.
func htbQuantum(rate uint64) uint32 {
	q := rate / 8 / 10
	return uint32(min(max(q, minHTBQuantum), maxHTBQuantum))
}
