package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/labels"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

// statusView is the JSON shape of `cnlab status -o json` (one object per
// lab; an array under "labs" when no lab is named).
type statusView struct {
	Name             string                        `json:"name"`
	Phase            string                        `json:"phase"`
	Datapath         kind.Kind                     `json:"datapath,omitempty"`
	kind.OptionsView                               // options of the lab's datapath
	Services         *servicesView                 `json:"services,omitempty"`
	Source           string                        `json:"source,omitempty"`
	Created          *time.Time                    `json:"created,omitempty"`
	MTU              int                           `json:"mtu,omitempty"`
	Netns            []string                      `json:"netns"`
	Missing          []string                      `json:"missingNetns,omitempty"`
	Hosts            []hostView                    `json:"hosts,omitempty"`
	Links            []topology.Link               `json:"links,omitempty"`
	Chain            *chainView                    `json:"chain,omitempty"`
	Namespaces       map[string]topology.Namespace `json:"namespaces,omitempty"`
	Endpoints        []endpointView                `json:"endpoints"`
	Policy           *lab.PolicyStatus             `json:"policy,omitempty"`
	Observe          *observeView                  `json:"observe,omitempty"`
}

// observeView is what status says of a lab's flow recording.
type observeView struct {
	Level    string `json:"level"`           // off, drops or all
	Recorder bool   `json:"recorderRunning"` // its recorder runs
}

// servicesView is the lab's service settings and, with a proxy, what its
// files say of the Services it serves.
type servicesView struct {
	*topology.Services
	*lab.ServicesStatus
}

type hostView struct {
	Name    string `json:"name"`
	PodCIDR string `json:"podCIDR"` // the primary family's
	Gateway string `json:"gateway"`
	Netns   string `json:"netns"`
	// Every family's, the primary first (a dual-stack lab).
	PodCIDRs []netip.Prefix `json:"podCIDRs,omitempty"`
	Gateways []netip.Addr   `json:"gateways,omitempty"`
}

type chainView struct {
	Length int    `json:"length"`
	Link   string `json:"link"`
	CIDR   string `json:"cidr"`
}

type endpointView struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Host      string            `json:"host,omitempty"`
	IP        string            `json:"ip"`            // the primary family's
	IPs       []netip.Addr      `json:"ips,omitempty"` // every family's, the primary first (a dual-stack lab)
	Netns     string            `json:"netns"`
	HostVeth  string            `json:"hostVeth,omitempty"`
	Labels    map[string]string `json:"labels"`
	Ports     []topology.Port   `json:"ports,omitempty"`
}

func toView(s *lab.LabStatus) statusView {
	v := statusView{Name: s.Name, Phase: s.Health, Created: s.Created, Netns: s.NetnsKernel, Missing: s.Missing,
		Endpoints: []endpointView{}, Policy: lab.PolicyState(s.Spec)}
	if v.Netns == nil {
		v.Netns = []string{}
	}
	sp := s.Spec
	if sp == nil {
		return v
	}
	v.Datapath, v.Source, v.MTU, v.Links, v.Namespaces = sp.Datapath, sp.Source, sp.MTU, sp.Links, sp.Namespaces
	v.OptionsView = sp.Datapath.View(&sp.Options)
	if sp.Chain == nil {
		v.Observe = &observeView{Level: sp.ObserveLevel(), Recorder: lab.RecorderRunning(sp.Name)}
	}
	if sp.Services.CIDR.IsValid() {
		v.Services = &servicesView{&sp.Services, lab.ServicesState(sp)}
	}
	for _, h := range sp.Hosts {
		hv := hostView{Name: h.Name, PodCIDR: h.PodCIDR.String(), Gateway: h.Gateway.String(), Netns: h.Netns}
		if len(h.PodCIDRs) > 1 {
			hv.PodCIDRs, hv.Gateways = h.PodCIDRs, h.Gateways
		}
		v.Hosts = append(v.Hosts, hv)
	}
	if c := sp.Chain; c != nil {
		v.Chain = &chainView{c.Length, c.Link, c.CIDR.String()}
	}
	for _, ep := range sp.Endpoints {
		var ips []netip.Addr
		if len(ep.IPs) > 1 {
			ips = ep.IPs
		}
		v.Endpoints = append(v.Endpoints, endpointView{ep.ID(), ep.Name, ep.Namespace, ep.Host, ep.IP.String(), ips,
			ep.Netns, ep.HostVeth, ep.Labels, ep.Ports})
	}
	return v
}

func newStatusCmd(e *env) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status [LAB] [-o json]",
		Short: "Show the labs on this machine, or one lab in detail",
		Example: `  cnlab status
  cnlab status multi-host
  cnlab status multi-host -o json | jq -r '.endpoints[] | .id + " " + .ip'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if len(args) == 1 {
				s, err := lab.Status(args[0])
				if err != nil {
					return err
				}
				if output == "json" {
					return writeJSON(e.stdout, toView(s))
				}
				printLab(e.stdout, s)
				return nil
			}
			all, err := lab.StatusAll()
			if err != nil {
				return err
			}
			if output == "json" {
				views := []statusView{}
				for _, s := range all {
					views = append(views, toView(s))
				}
				return writeJSON(e.stdout, map[string]any{"labs": views})
			}
			if len(all) == 0 {
				fmt.Fprintln(e.stdout, "no lab is up (start one with: cnlab up --preset single-host)")
				return nil
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "LAB\tPHASE\tDATAPATH\tHOSTS\tENDPOINTS\tNETNS\tAGE")
			for _, s := range all {
				dp, hosts, eps, age := "-", "-", "-", "-"
				if s.Spec != nil {
					dp = s.Spec.Datapath.String()
					hosts = fmt.Sprint(len(s.Spec.Hosts))
					eps = fmt.Sprint(len(s.Spec.Endpoints))
				}
				if s.Created != nil {
					age = time.Since(*s.Created).Round(time.Second).String()
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.Name, s.Health, dp, hosts, eps, len(s.NetnsKernel), age)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, s := range all {
				if ps := lab.PolicyState(s.Spec); ps != nil && ps.Troubled() {
					fmt.Fprintf(e.stdout, "%s: %s (cnlab status %s)\n", s.Name, policyTrouble(ps), s.Name)
				}
				if ss := lab.ServicesState(s.Spec); ss != nil && (ss.Change != nil || ss.Staged != nil) {
					fmt.Fprintf(e.stdout, "%s: %s (cnlab status %s)\n", s.Name, serviceTrouble(ss), s.Name)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: text or json")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printLab(w io.Writer, s *lab.LabStatus) {
	fmt.Fprintf(w, "lab %s: %s\n", s.Name, s.Health)
	if len(s.Missing) > 0 {
		fmt.Fprintf(w, "%s missing: %s\n", plural.N(len(s.Missing), "namespace"), abbreviate(s.Missing, 5))
	}
	sp := s.Spec
	if sp == nil {
		fmt.Fprintf(w, "%s in the kernel and no ledger: %s\n", plural.N(len(s.NetnsKernel), "namespace"), abbreviate(s.NetnsKernel, 5))
		return
	}
	fmt.Fprintf(w, "source %s, datapath %s%s, mtu %d\n", sp.Source, sp.Datapath, datapathOptions(sp), sp.MTU)
	if lvl := sp.ObserveLevel(); lvl != topology.ObserveOff {
		state := "recorder running"
		if !lab.RecorderRunning(sp.Name) {
			state = "recorder NOT running: cnlab up --name " + sp.Name + " ... --observe " + lvl + " starts it again"
		}
		fmt.Fprintf(w, "observe: %s (%s; see cnlab observe %s)\n", lvl, state, sp.Name)
	}
	if px := sp.Services.Proxy; px != "" && px != kind.ProxyNone {
		fmt.Fprintf(w, "services: proxy %s, cluster IPs from %s", px, joinPrefixes(sp.Services.All()))
		printServicesStatus(w, s.Name, lab.ServicesState(sp))
	}
	var proxies []string
	for _, h := range sp.Hosts {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if st, err := l7proxy.ReadStats(ctx, s.Name, h.Name); err == nil {
			proxies = append(proxies, fmt.Sprintf("%s (pid %d, %s: %d allowed, %d denied, %d upstream errors)", h.Name, st.Pid,
				plural.N(int(st.Requests), "request"), st.Allowed, st.Denied, st.Upstream))
		}
		cancel()
	}
	if len(proxies) > 0 {
		fmt.Fprintf(w, "L7 proxies: %s (cnlab monitor %s --l7)\n", strings.Join(proxies, ", "), s.Name)
	}
	ps := lab.PolicyState(sp)
	switch {
	case ps != nil && ps.Troubled():
		printPolicyStatus(w, s.Name, ps)
	case sp.Chain == nil:
		if pols, err := lab.Policies(s.Name); err == nil {
			fmt.Fprintf(w, "%s applied (cnlab policy show %s)\n", plural.N(len(pols), "policy"), s.Name)
		}
	}
	if len(sp.Hosts) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if ps != nil {
			fmt.Fprintln(tw, "HOST\tPOD CIDR\tBRIDGE\tNETNS\tPOLICY")
		} else {
			fmt.Fprintln(tw, "HOST\tPOD CIDR\tBRIDGE\tNETNS")
		}
		for i, h := range sp.Hosts {
			cidrs, gws := h.PodCIDR.String(), h.Gateway.String()
			if len(h.PodCIDRs) > 1 { // dual-stack: every family's, the primary first
				cidrs, gws = joinComma(h.PodCIDRs), joinComma(h.Gateways)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s", h.Name, cidrs, h.Bridge, gws, h.Netns)
			if ps != nil && i < len(ps.Hosts) {
				fmt.Fprintf(tw, "\t%s", hostSetText(ps.Hosts[i]))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	if len(sp.Links) > 0 {
		fmt.Fprintln(w)
		for _, l := range sp.Links {
			fmt.Fprintf(w, "link %d: %s %s(%s) <-> %s(%s)", l.Index, l.Kind, l.Ends[0].Host, l.Ends[0].WireAddr, l.Ends[1].Host, l.Ends[1].WireAddr)
			if l.Kind == topology.LinkVXLAN {
				fmt.Fprintf(w, ", vni %d overlay %s <-> %s", l.VNI, l.Ends[0].OverAddr, l.Ends[1].OverAddr)
			}
			fmt.Fprintln(w)
		}
	}
	if c := sp.Chain; c != nil {
		fmt.Fprintf(w, "\nchain: %s, %s links, segments in %s\n", plural.N(c.Length, "forwarding namespace"), c.Link, c.CIDR)
	}
	fmt.Fprintln(w)
	printEndpoints(w, sp)
}

func printEndpoints(w io.Writer, sp *topology.Spec) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENDPOINT\tHOST\tIP\tLABELS")
	for _, ep := range sp.Endpoints { // in file order
		host := ep.Host
		if host == "" {
			host = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ep.ID(), host, joinComma(ep.Addrs()), labels.String(ep.Labels))
	}
	tw.Flush()
}

// joinComma is "a,b": a dual-stack lab's addresses or prefixes, the
// primary family's first.
func joinComma[T fmt.Stringer](xs []T) string {
	var out []string
	for _, x := range xs {
		out = append(out, x.String())
	}
	return strings.Join(out, ",")
}

// abbreviate lists the first n items and says how many more there are.
func abbreviate(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// datapathOptions describes the options of a lab's datapath, for status.
func datapathOptions(sp *topology.Spec) string {
	if d := sp.Datapath.Describe(&sp.Options); d != "" {
		return " (" + d + ")"
	}
	return ""
}

// hostSetText says which set a host enforces, for the hosts table:
// "stored set", "dirty: stored or staged set".
func hostSetText(h lab.HostSet) string {
	t := strings.Join(h.Holds, " or ") + " set"
	if h.Dirty {
		return "dirty: " + t
	}
	return t
}

// holdsText says which sets a host's kernel may hold, in a sentence.
func holdsText(h lab.HostSet) string {
	words := map[string]string{lab.HoldsStored: "the stored set", lab.HoldsStaged: "the staged set",
		lab.HoldsOther: "a set neither stored nor staged", lab.HoldsUnknown: "a set not recorded"}
	var ws []string
	for _, x := range h.Holds {
		ws = append(ws, words[x])
	}
	return "holds " + strings.Join(ws, " or ")
}

// changeText names a change of policies (noun "policy") or Services
// ("service"): "`cnlab policy apply` (pid 42, started 12:00:01 UTC:
// creates NetworkPolicy default/b)".
func changeText(c *lab.ChangeStatus, noun string) string {
	cmd := "`cnlab " + noun + " " + c.Op + "`"
	if c.Op == "replace" {
		cmd = "a replace of the " + noun + " set (cnlab run)"
	}
	var what []string
	for _, x := range []struct {
		verb  string
		names []string
	}{{"creates", c.Created}, {"updates", c.Updated}, {"deletes", c.Deleted}} {
		if len(x.names) > 0 {
			what = append(what, x.verb+" "+abbreviate(x.names, 3))
		}
	}
	detail := fmt.Sprintf("pid %d, started %s", c.Pid, c.Started.UTC().Format("2006-01-02 15:04:05 UTC"))
	if len(what) > 0 {
		detail += ": " + strings.Join(what, ", ")
	}
	return cmd + " (" + detail + ")"
}

// changeTrouble says in a few words what a change of noun ("policy",
// "Service") left: c its record, staged whether its set is staged.
func changeTrouble(noun string, c *lab.ChangeStatus, staged bool) string {
	switch {
	case c == nil && staged:
		return "an uncommitted staged " + noun + " set is left"
	case c == nil:
		return ""
	case c.Running:
		return "a " + noun + " change is running"
	}
	return map[string]string{
		lab.KilledBeforeStaged: "a " + noun + " change was killed before it staged its set",
		lab.KilledStaged:       "a " + noun + " change was killed between staged and committed",
		lab.KilledCommitted:    "a " + noun + " change was killed between committed and cleanup",
	}[c.Killed]
}

// dirtyAndOff names the hosts marked dirty and, of the others, those off
// the stored set; state says each host's name and which it is.
func dirtyAndOff[H any](hosts []H, state func(H) (name string, dirty, off bool)) (dirtyHosts, offHosts []string) {
	for _, h := range hosts {
		switch name, dirty, off := state(h); {
		case dirty:
			dirtyHosts = append(dirtyHosts, name)
		case off:
			offHosts = append(offHosts, name)
		}
	}
	return dirtyHosts, offHosts
}

// troubleLine joins what is unfinished into one line.
func troubleLine(change string, dirty, off []string, dirtyWord, offWord string) []string {
	var parts []string
	if change != "" {
		parts = append(parts, change)
	}
	if len(dirty) > 0 {
		parts = append(parts, dirtyWord+strings.Join(dirty, ", "))
	}
	if len(off) > 0 {
		parts = append(parts, offWord+strings.Join(off, ", "))
	}
	return parts
}

// policyTrouble says in one line what is unfinished about a lab's
// policies.
func policyTrouble(ps *lab.PolicyStatus) string {
	dirty, off := dirtyAndOff(ps.Hosts, func(h lab.HostSet) (string, bool, bool) { return h.Name, h.Dirty, h.OffStored() })
	parts := troubleLine(changeTrouble("policy", ps.Change, ps.Staged != nil), dirty, off, "dirty hosts: ", "hosts off the stored set: ")
	if ps.Error != "" {
		parts = append(parts, "stored policies unreadable")
	}
	return strings.Join(parts, "; ")
}

// serviceTrouble says in one line what a Service change left unfinished.
func serviceTrouble(ss *lab.ServicesStatus) string {
	dirty, off := dirtyAndOff(ss.Hosts, func(h lab.ProxyHostStatus) (string, bool, bool) { return h.Name, h.Dirty, !h.InSync })
	return strings.Join(troubleLine(changeTrouble("Service", ss.Change, ss.Staged != nil), dirty, off,
		"dirty proxy hosts: ", "proxy hosts off the stored Services: "), "; ")
}

// printPolicyStatus tells what a lab's files say of its policies when a
// change is unfinished or a host may not enforce the stored set.
func printPolicyStatus(w io.Writer, labName string, ps *lab.PolicyStatus) {
	if ps.Error != "" {
		fmt.Fprintf(w, "the stored policies cannot be read: %s\n", ps.Error)
	} else {
		fmt.Fprintf(w, "%s stored (cnlab policy show %s)\n", plural.N(ps.Stored, "policy"), labName)
	}
	staged := "its new set"
	if ps.Staged != nil {
		staged = fmt.Sprintf("its new set (%s)", plural.N(ps.Staged.Policies, "policy"))
	}
	c := ps.Change
	switch {
	case c != nil && c.Running:
		fmt.Fprintf(w, "a policy change is running: %s\n", changeText(c, "policy"))
	case c != nil && c.Killed == lab.KilledBeforeStaged:
		fmt.Fprintf(w, "policy change killed before it staged its set: %s died; nothing was changed\n", changeText(c, "policy"))
	case c != nil && c.Killed == lab.KilledStaged:
		fmt.Fprintf(w, "policy change killed between staged and committed: %s died; the stored set is the one from before it, %s was staged and not stored\n", changeText(c, "policy"), staged)
	case c != nil && c.Killed == lab.KilledCommitted:
		fmt.Fprintf(w, "policy change killed between committed and cleanup: %s died after storing its new set\n", changeText(c, "policy"))
	case ps.Staged != nil:
		fmt.Fprintf(w, "a staged policy set (%s) of a change that did not finish is left beside the stored one; it was not stored\n", plural.N(ps.Staged.Policies, "policy"))
	}
	var dirty, off []string
	for _, h := range ps.Hosts {
		switch {
		case h.Dirty:
			dirty = append(dirty, h.Name+" ("+holdsText(h)+")")
		case h.OffStored():
			off = append(off, h.Name+" ("+holdsText(h)+")")
		}
	}
	if len(dirty) > 0 {
		fmt.Fprintf(w, "dirty hosts: %s\n", strings.Join(dirty, ", "))
	}
	if len(off) > 0 {
		fmt.Fprintf(w, "hosts off the stored set: %s\n", strings.Join(off, ", "))
	}
	if len(dirty)+len(off) == 0 {
		fmt.Fprintln(w, "every host enforces the stored set")
	}
	if c == nil || !c.Running {
		fmt.Fprintf(w, "the next `cnlab policy apply` or `cnlab policy delete` of %s rebuilds dirty hosts, brings every host to the set it then stores and clears this\n", labName)
	}
}

// printServicesStatus ends the services line: what is stored and, where
// a host does not serve it, what to do.
func printServicesStatus(w io.Writer, name string, ss *lab.ServicesStatus) {
	if ss == nil {
		fmt.Fprintln(w)
		return
	}
	if ss.Error != "" {
		fmt.Fprintf(w, "; stored Services unreadable: %s\n", ss.Error)
		return
	}
	fmt.Fprintf(w, "; %s, %s stored\n", plural.N(ss.Services, "Service"), plural.N(ss.Slices, "EndpointSlice"))
	switch c := ss.Change; {
	case c != nil && c.Running:
		fmt.Fprintf(w, "a Service change is running: %s\n", changeText(c, "service"))
	case c != nil && c.Killed == lab.KilledBeforeStaged:
		fmt.Fprintf(w, "Service change killed before it staged its set: %s died; nothing was changed\n", changeText(c, "service"))
	case c != nil && c.Killed == lab.KilledStaged:
		fmt.Fprintf(w, "Service change killed between staged and committed: %s died; the stored Services are those from before it, its new set was staged and not stored\n", changeText(c, "service"))
	case c != nil && c.Killed == lab.KilledCommitted:
		fmt.Fprintf(w, "Service change killed between committed and cleanup: %s died after storing its new set\n", changeText(c, "service"))
	case ss.Staged != nil:
		fmt.Fprintln(w, "a staged Service set of a change that did not finish is left beside the stored one; it was not stored")
	}
	var dirty, off []string
	for _, h := range ss.Hosts {
		switch {
		case h.Dirty:
			dirty = append(dirty, h.Name)
		case !h.InSync:
			off = append(off, h.Name)
		}
	}
	if len(dirty) > 0 {
		fmt.Fprintf(w, "service proxy: a change was interrupted on %s: the next `cnlab service apply %s` or `service delete` rebuilds it\n",
			strings.Join(dirty, ", "), name)
	}
	if len(off) > 0 {
		fmt.Fprintf(w, "service proxy: %s not serving the stored Services (a change was killed after the kernel took it): the next `cnlab service apply %s` or `service delete` brings every host to what it stores\n",
			strings.Join(off, ", "), name)
	}
}

// converge settles a lab that a killed or failed change left off its
// stored sets (lab.Converge) before a command uses its traffic, and says
// what it did on stderr.
func converge(ctx context.Context, e *env, name string) {
	did, err := lab.Converge(ctx, name)
	for _, d := range did {
		fmt.Fprintf(e.stderr, "cnlab: note: lab %s: %s\n", name, d)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "cnlab: warning: %v\n", err)
	}
}

// joinPrefixes writes prefixes as "10.96.0.0/16 and fd00:96::/108".
func joinPrefixes(ps []netip.Prefix) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return strings.Join(out, " and ")
}
