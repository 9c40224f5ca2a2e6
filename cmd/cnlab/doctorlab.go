package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/datapath/registry"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
)

// labCheck is one thing doctor --lab checked of a lab.
type labCheck struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// checkLab checks a lab against its ledger, as status knows it: its
// phase and namespaces, the devices its hosts, links and endpoints need
// (present and up), its datapath's kernel objects, its flow recorder, its
// policy and Service changes, and its L7 proxies.
func checkLab(ctx context.Context, name string) ([]labCheck, error) {
	s, err := lab.Status(name)
	if err != nil {
		return nil, err
	}
	var out []labCheck
	add := func(check string, problems []string, okText string) {
		if len(problems) == 0 {
			out = append(out, labCheck{check, true, okText})
			return
		}
		out = append(out, labCheck{check, false, strings.Join(problems, "; ")})
	}
	sp := s.Spec
	if sp == nil {
		add("ledger", []string{fmt.Sprintf("no ledger, %s in the kernel (orphaned: cnlab down %s removes it)", plural.N(len(s.NetnsKernel), "namespace"), name)}, "")
		return out, nil
	}
	var phase []string
	if s.Health != lab.HealthUp {
		phase = []string{fmt.Sprintf("phase %s (cnlab down %s, then up again)", s.Health, name)}
	}
	add("phase", phase, s.Health)
	var missing []string
	if len(s.Missing) > 0 {
		missing = []string{plural.N(len(s.Missing), "namespace") + " missing: " + abbreviate(s.Missing, 5)}
	}
	add("namespaces", missing, fmt.Sprintf("%s present", plural.N(len(sp.Netns()), "namespace")))
	add("devices", deviceProblems(sp, s.Missing), "every host's bridges, link ends and endpoint veths present and up")
	if sp.Datapath != kind.None {
		var dp []string
		if d, err := registry.New(sp.Datapath); err != nil {
			dp = append(dp, err.Error())
		} else if desc, err := d.Describe(ctx, sp); err != nil {
			dp = append(dp, fmt.Sprintf("datapath %s: %v", sp.Datapath, err))
		} else {
			for _, h := range sp.Hosts {
				if strings.TrimSpace(desc[h.Name]) == "" {
					dp = append(dp, fmt.Sprintf("datapath %s: nothing of it on host %s", sp.Datapath, h.Name))
				}
			}
		}
		add("datapath", dp, fmt.Sprintf("%s objects on every host", sp.Datapath))
	}
	if lvl := sp.ObserveLevel(); lvl != topology.ObserveOff {
		var rec []string
		if !lab.RecorderRunning(name) {
			rec = []string{fmt.Sprintf("the flow recorder (observe %s) is not running: cnlab up --name %s ... --observe %s starts it again", lvl, name, lvl)}
		}
		add("recorder", rec, "running")
	}
	if ps := lab.PolicyState(sp); ps != nil {
		var pol []string
		if ps.Troubled() {
			pol = []string{policyTrouble(ps)}
		}
		add("policy", pol, "every host holds the stored policy set")
	}
	if ss := lab.ServicesState(sp); ss != nil {
		var svc []string
		if ss.Troubled() {
			svc = []string{serviceTrouble(ss)}
		}
		add("services", svc, "every host's service proxy in sync")
	}
	var proxies []string
	started := 0
	for _, h := range sp.Hosts {
		dir := l7proxy.Dir(name, h.Name)
		if _, err := os.Stat(filepath.Join(dir, l7proxy.ConfigFile)); err != nil {
			continue // no L7 rule ever reached this host
		}
		started++
		if !l7proxy.Alive(dir) {
			proxies = append(proxies, fmt.Sprintf("the L7 proxy of host %s is not running (its L7 rules are not enforced): cnlab policy apply starts it again", h.Name))
		}
	}
	if started > 0 {
		add("l7 proxies", proxies, plural.N(started, "L7 proxy")+" running")
	}
	return out, nil
}

// deviceProblems lists the devices of the lab's hosts and endpoints that
// are missing or down, in namespaces that exist (missing ones are said
// already).
func deviceProblems(sp *topology.Spec, missingNetns []string) []string {
	gone := map[string]bool{}
	for _, n := range missingNetns {
		gone[n] = true
	}
	want := map[string][]string{} // host netns -> devices
	for _, h := range sp.Hosts {
		if h.Bridge != "" {
			want[h.Netns] = append(want[h.Netns], h.Bridge)
		}
		want[h.Netns] = append(want[h.Netns], h.Leaves...)
	}
	for _, l := range sp.Links {
		for _, e := range l.Ends {
			ns := topology.HostNetns(sp.Name, e.Host)
			want[ns] = append(want[ns], e.WireDev)
			if e.OverDev != "" {
				want[ns] = append(want[ns], e.OverDev)
			}
		}
	}
	for _, ep := range sp.Endpoints {
		if h := sp.Host(ep.Host); h != nil && ep.HostVeth != "" {
			want[h.Netns] = append(want[h.Netns], ep.HostVeth)
		}
	}
	var out []string
	for _, h := range sp.Hosts {
		ns := h.Netns
		if gone[ns] || len(want[ns]) == 0 {
			continue
		}
		hd, err := netns.Handle(ns)
		if err != nil {
			out = append(out, fmt.Sprintf("host %s: %v", h.Name, err))
			continue
		}
		var absent, down []string
		for _, dev := range want[ns] {
			l, err := hd.LinkByName(dev)
			switch {
			case err != nil:
				absent = append(absent, dev)
			case l.Attrs().Flags&net.FlagUp == 0:
				down = append(down, dev)
			}
		}
		hd.Close()
		if len(absent) > 0 {
			out = append(out, fmt.Sprintf("host %s: %s missing: %s", h.Name, plural.N(len(absent), "device"), abbreviate(absent, 5)))
		}
		if len(down) > 0 {
			out = append(out, fmt.Sprintf("host %s: %s down: %s", h.Name, plural.N(len(down), "device"), abbreviate(down, 5)))
		}
	}
	return out
}

// printLabChecks prints the checks, one a line, and returns how many
// failed.
func printLabChecks(w io.Writer, name string, checks []labCheck) int {
	bad := 0
	for _, c := range checks {
		mark := "ok"
		if !c.OK {
			mark, bad = "PROBLEM", bad+1
		}
		fmt.Fprintf(w, "%-8s %-11s %s\n", mark, c.Check, c.Detail)
	}
	if bad == 0 {
		fmt.Fprintf(w, "lab %s: nothing wrong found\n", name)
	} else {
		fmt.Fprintf(w, "lab %s: %s\n", name, plural.N(bad, "problem"))
	}
	return bad
}
