// Package deploy runs a lab's L7 proxies (package l7proxy): it builds
// each host's configuration from the policy IR, starts the proxy of a
// host that needs one, and pushes configurations to the proxies.
package deploy

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/l7"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Build returns the configuration of the proxy of one host: nil when none
// of its endpoints has an L7 port.
func Build(lab *topology.Spec, host string, c *policy.Compiled) *l7proxy.Config {
	cfg := empty(lab, host, c)
	ips := map[uint32][]netip.Addr{} // each identity's addresses, of every family
	for _, ep := range lab.Endpoints {
		id := c.IdentityOfIP(ep.IP)
		ips[id] = append(ips[id], ep.Addrs()...)
	}
	for _, ep := range lab.Endpoints {
		if ep.Host != host {
			continue
		}
		subject := c.IdentityOfIP(ep.IP)
		for _, port := range c.L7Ports(subject) {
			// One port per address of the endpoint (IPv4 and IPv6 in a
			// dual-stack lab): the proxy serves both families.
			for _, addr := range ep.Addrs() {
				pc := l7proxy.PortConfig{Endpoint: ep.ID(), Addr: addr, Port: port}
				for _, id := range c.Identities {
					pc.Peers = append(pc.Peers, identityPeers(c, subject, port, id.ID, ips[id.ID])...)
				}
				pc.Peers = append(pc.Peers, cidrPeers(c, subject, port, lab.Families())...)
				cfg.Ports = append(cfg.Ports, pc)
			}
		}
	}
	if len(cfg.Ports) == 0 {
		return nil
	}
	return cfg
}

// identityPeers returns the rules an identity's endpoints get on a port:
// one peer for the identity, and one per endpoint whose rules differ from
// the first endpoint's (a CIDR rule covering some of them only).
func identityPeers(c *policy.Compiled, subject uint32, port uint16, id uint32, addrs []netip.Addr) []l7proxy.PeerConfig {
	var out []l7proxy.PeerConfig
	var first []l7.Rule
	for i, ip := range addrs {
		rules := c.HTTPRulesFor(subject, port, ip)
		switch {
		case i == 0:
			first = rules
			if len(rules) > 0 {
				out = append(out, l7proxy.PeerConfig{Identity: id, Rules: rules})
			}
		case !reflect.DeepEqual(rules, first):
			out = append(out, l7proxy.PeerConfig{Identity: id, Addr: ip, Rules: rules})
		}
	}
	return out
}

// empty is the configuration of a host's proxy with no L7 port: what
// judges the connections it still holds.
func empty(lab *topology.Spec, host string, c *policy.Compiled) *l7proxy.Config {
	return &l7proxy.Config{Lab: lab.Name, Host: host, Set: c.Set, Identities: identities(lab, c), L4: l4(lab, host, c),
		Limits: l7proxy.Limits(lab.L7Proxy)}
}

// l4 is the L3/L4 policy of TCP connections to the host's endpoints: the
// proxy judges by it a connection it holds to a port that stopped being
// an L7 port.
func l4(lab *topology.Spec, host string, c *policy.Compiled) *l7proxy.L4Policy {
	out := &l7proxy.L4Policy{Enforced: map[uint32]l7proxy.L4Enforced{}}
	local := map[uint32]bool{}
	for _, ep := range lab.Endpoints {
		if ep.Host == host {
			local[c.IdentityOfIP(ep.IP)] = true
		}
	}
	for id, enf := range c.Enforced {
		if enf.Egress || (enf.Ingress && local[id]) {
			out.Enforced[id] = l7proxy.L4Enforced{Ingress: enf.Ingress, Egress: enf.Egress}
		}
	}
	for _, r := range c.Rules { // in walking order per subject and direction
		if (r.Proto != policy.ProtoAny && r.Proto != policy.ProtoTCP) || (r.Dir == policy.Ingress && !local[r.Subject]) {
			continue
		}
		out.Rules = append(out.Rules, l7proxy.L4Entry{Subject: r.Subject, Egress: r.Dir == policy.Egress, Deny: r.Deny,
			PeerID: r.PeerID, PeerCIDR: r.PeerCIDR, AnyProto: r.Proto == policy.ProtoAny, PortLo: r.PortLo, PortHi: r.PortHi,
			Tier: uint8(r.Tier), Pass: r.Pass})
	}
	return out
}

// identities is the address -> identity table of every endpoint.
func identities(lab *topology.Spec, c *policy.Compiled) map[netip.Addr]uint32 {
	out := map[netip.Addr]uint32{}
	for _, ep := range lab.Endpoints {
		for _, a := range ep.Addrs() {
			out[a] = c.IdentityOfIP(ep.IP)
		}
	}
	return out
}

// cidrPeers returns the rules of sources that are no endpoint: those of
// L7 entries whose peer is a CIDR or any peer, and every request for the
// CIDRs (or any peer) an L3/L4 allow admits on the port. Any peer is the
// /0 of each of the lab's families (fams).
func cidrPeers(c *policy.Compiled, subject uint32, port uint16, fams []int) []l7proxy.PeerConfig {
	var all []netip.Prefix
	for _, fam := range fams {
		if fam == 6 {
			all = append(all, netip.MustParsePrefix("::/0"))
		} else {
			all = append(all, netip.MustParsePrefix("0.0.0.0/0"))
		}
	}
	var out []l7proxy.PeerConfig
	for _, h := range c.HTTP {
		if h.Subject != subject || h.Port != port || h.PeerID != 0 {
			continue
		}
		for _, p := range prefixesOr(h.PeerCIDR, all) {
			out = append(out, l7proxy.PeerConfig{CIDR: p, Rules: h.Rules})
		}
	}
	for _, r := range c.RulesFor(subject, policy.Ingress) {
		if r.Deny || r.L7 || r.PeerID != 0 || (r.Proto != policy.ProtoAny && r.Proto != policy.ProtoTCP) ||
			(r.PortLo != 0 && (port < r.PortLo || port > max(r.PortLo, r.PortHi))) {
			continue
		}
		for _, p := range prefixesOr(r.PeerCIDR, all) {
			out = append(out, l7proxy.PeerConfig{CIDR: p, Rules: []l7.Rule{{}}})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CIDR.String() < out[j].CIDR.String() })
	return out
}

// prefixesOr is p alone, or all when p is not valid (any peer).
func prefixesOr(p netip.Prefix, all []netip.Prefix) []netip.Prefix {
	if p.IsValid() {
		return []netip.Prefix{p}
	}
	return all
}

// Push gives each host's proxy its part of c, starting the proxy of a
// host that needs one and has none, and waits until each has acknowledged
// the new rules. With keep, a proxy also keeps judging the ports that c no
// longer makes L7 ports by their old rules: what a change pushes before
// the datapath switches (connections the datapath still sends to the
// proxy are judged by the old or the new rules, never by none), before it
// pushes c alone once the datapath has switched. A host whose endpoints
// have no L7 port any more keeps its proxy, with no rules, so connections
// it holds finish. It returns the pids of the proxies started.
func Push(ctx context.Context, lab *topology.Spec, c *policy.Compiled, keep bool) (map[string]int, error) {
	started := map[string]int{}
	for _, h := range lab.Hosts {
		cfg := Build(lab, h.Name, c)
		dir := l7proxy.Dir(lab.Name, h.Name)
		running := l7proxy.Alive(dir)
		if cfg == nil && !running {
			continue
		}
		if cfg == nil {
			cfg = empty(lab, h.Name, c)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return started, fmt.Errorf("l7 proxy of host %s: %w", h.Name, err)
		}
		if err := files.WriteJSON(filepath.Join(dir, l7proxy.ConfigFile), cfg, false); err != nil {
			return started, fmt.Errorf("l7 proxy of host %s: write config: %w", h.Name, err)
		}
		if !running {
			pid, err := start(lab, h.Name, dir)
			if err != nil {
				return started, err
			}
			started[h.Name] = pid
		}
		cmd := "reload"
		if keep {
			cmd = "reload keep"
		}
		reply, err := l7proxy.Command(ctx, dir, cmd)
		if err != nil {
			return started, fmt.Errorf("l7 proxy of host %s: %w", h.Name, err)
		}
		if want := "ok " + c.Set; reply != want {
			return started, fmt.Errorf("l7 proxy of host %s answered %q to reload (want %q)", h.Name, reply, want)
		}
	}
	return started, nil
}

// start runs a proxy in the host's namespace, detached from this process
// (it outlives the command that applied the policy; `cnlab down` kills it
// with every process of the lab's namespaces), and waits until it answers.
func start(lab *topology.Spec, host, dir string) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("l7 proxy of host %s: %w", host, err)
	}
	out, err := os.OpenFile(filepath.Join(dir, l7proxy.LogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("l7 proxy of host %s: %w", host, err)
	}
	defer out.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), l7proxy.EnvDir+"="+dir)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// A daemon keeps no descriptor it did not open: one inherited by
	// this command (a caller's lock held for the command's length, the
	// write end of a pipe someone reads to its end) would otherwise be
	// held for the lab's life. Go marks its own close-on-exec.
	_ = unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	h := lab.Host(host)
	if err := netns.Start(h.Netns, cmd); err != nil {
		return 0, fmt.Errorf("l7 proxy of host %s: start: %w", host, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps it if it dies while we run
	pid := cmd.Process.Pid
	if err := os.WriteFile(filepath.Join(dir, l7proxy.PidFile), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("l7 proxy of host %s: %w", host, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		reply, err := l7proxy.Command(ctx, dir, "ping")
		cancel()
		if err == nil && reply == "pong" {
			return pid, nil
		}
		select {
		case err := <-exited:
			logText, _ := os.ReadFile(filepath.Join(dir, l7proxy.LogFile))
			return 0, fmt.Errorf("l7 proxy of host %s exited at start (%v): %s", host, err, strings.TrimSpace(string(logText)))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return 0, fmt.Errorf("l7 proxy of host %s did not answer within 10s", host)
		}
	}
}
