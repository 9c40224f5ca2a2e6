package main

import (
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

// probeView is the JSON shape of `cnlab probe -o json` (contract).
type probeView struct {
	Lab      string       `json:"lab"`
	Port     int          `json:"port"`
	Protocol string       `json:"protocol"`
	Results  []probe.Cell `json:"results"`
	// Explain, with --explain: the flows observed for each cell that
	// differs from the model.
	Explain []cellFlows `json:"explain,omitempty"`
}

// spoofView is the JSON shape of `cnlab probe --spoof -o json`.
type spoofView struct {
	Lab   string              `json:"lab"`
	Spoof []probe.SpoofResult `json:"spoof"`
}

func newProbeCmd(e *env) *cobra.Command {
	var port int
	var proto, output string
	var expect, spoof, explain bool
	var timeout time.Duration
	var svcRef string
	var connections int
	var alpha float64
	var from []string
	var nodePort string
	var httpReq string
	var headers []string
	var family string
	cmd := &cobra.Command{
		Use:   "probe LAB [--port P] [--protocol tcp|udp|sctp] [--family 4|6|both] [--expect] [--spoof] [-o json]\n  cnlab probe LAB --port P --http \"METHOD PATH\" [--header \"Name: value\"]... [--family 4|6|both] [--expect] [-o json]\n  cnlab probe LAB --service NS/NAME[:PORTNAME] [--family 4|6|both] [--connections K] [--from NS/NAME]... [--http \"METHOD PATH\" [--header \"Name: value\"]...] [--expect] [-o json]",
		Short: "Test connectivity between every ordered pair of endpoints with real packets",
		Long: `Start listeners on every endpoint, then connect (TCP) or send a request and
wait for the reply (UDP) from every endpoint to every other one, in
parallel. The text matrix has a row per sender (from) and a column per
receiver (to). With --expect, compare every cell with the policy model and exit
1 listing the cells that differ.

In a dual-stack lab every pair is probed over each family (--family 4, 6
or both; default: every family the lab has): the source's address of the
family connects to the destination's, the model judges those addresses,
the text output prints one matrix per family, and each JSON result says
its "family".

With --spoof, send hand-built frames instead from every endpoint to another
one of its host: its own IPv4 and ARP, then IPv4 from a forged source (an
unused address, another endpoint's IP, with its MAC too), a foreign MAC,
ARP with a forged sender IP or MAC, link-local IPv6, ethertype 0x88b5 and
a VLAN-tagged frame; in a lab with IPv6 also its own IPv6 UDP, neighbour
solicitation and advertisement, then IPv6 from another endpoint's address
or one outside the lab, from a foreign MAC, and a neighbour advertisement
for another endpoint's address; print one line per endpoint and check,
and exit 1 when a forged frame arrived.

With --http, every endpoint's listener speaks HTTP/1.1 and each cell is one
request on a fresh connection: the matrix shows the status received (200,
403 from an L7 proxy's "Access denied", - for no connection), over each
family as above. With
--expect, a cell differs when its status is not the one the model expects
(0 when L3/L4 denies the connection, 403 when the L7 rules deny the
request, 200 otherwise), or when the server received a request it should
not have, or missed one it should have (each request carries a nonce the
servers record).

With --service, probe a Service port instead: every backend listens on its
target port and answers with its name and the source address it saw;
every endpoint (or each --from) opens K fresh connections (TCP) or
sockets (UDP) to the Service's address. The table gives, per client, how
many each backend answered and how many failed. With --expect, exit 1
when a connection reached a backend the model does not allow, an allowed
backend never answered (K defaults to ⌈N·ln(N/10⁻⁶)⌉ for N backends, so
a miss is improbable), the spread is uneven (χ² at --alpha, default
10⁻³: a fair proxy fails one client's check in a thousand), affinity
did not hold, a connection failed although every backend is allowed, a
backend saw another source than the client's, or a UDP reply came from
another address than the Service's. A dual-stack Service is probed over
each of its families (one table each; -o json: the primary family's, as
before dual-stack), or over --family 4 or 6, or both (-o json: an array);
each JSON view says its "family".

With --service and --http (and --header), each connection sends that
request instead: the backends' listeners speak HTTP/1.1 and answer with
their name; the table adds the statuses received, and --expect judges each
backend's answers against the model, L7 rules included (a 403 of the L7
proxy names no backend: it counts in the statuses only). A Service whose
backends' port has L7 rules gets HTTP without --http (GET /), since an L7
proxy waits for a request; the probe says so.`,
		Example: `  cnlab probe policy-lab --port 80
  cnlab probe policy-lab --port 81 --protocol udp --expect
  cnlab probe policy-lab -o json | jq '.results[] | select(.allowed != .expected)'
  cnlab probe policy-lab --spoof
  cnlab probe dual-stack --port 80 --family 6 --expect
  cnlab probe policy-lab --port 80 --explain   # the flows behind each cell that differs from the model
  cnlab probe policy-lab --port 80 --http "GET /public" --expect
  cnlab probe policy-lab --port 80 --http "POST /api" --header "X-Token: 1" -o json
  cnlab probe svc-lab --service default/web:http --expect
  cnlab probe dual-stack --service x/web --family 6 --expect -o json
  cnlab probe policy-lab --service x/web --http "GET /public" --expect -o json
  cnlab probe svc-lab --service default/web-udp --from default/client-1 --connections 200 -o json
  cnlab probe svc-lab --service default/web-np --node-port flap --expect`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if explain && (svcRef != "" || spoof || httpReq != "") {
				return usagef("--explain applies to the probe of every pair (--port, --protocol): see cnlab observe for Services, L7 and forged frames")
			}
			fam, err := parseFamily(family)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("family") && spoof {
				return usagef("--family applies to the probe of every pair (--port, --protocol, --http) and --service")
			}
			if svcRef != "" {
				if spoof || cmd.Flags().Changed("port") || cmd.Flags().Changed("protocol") {
					return usagef("--service probes the Service's own port and protocol: drop --port, --protocol and --spoof")
				}
				if connections < 0 || connections > 100000 {
					return usagef("--connections %d is out of range (1 to 100000; 0 for the default)", connections)
				}
				if timeout <= 0 {
					return usagef("--timeout must be positive (e.g. 500ms)")
				}
				if !(alpha > 0 && alpha < 0.5) {
					return usagef("--alpha %g is out of range (above 0, below 0.5; e.g. 1e-6 for a script making many checks)", alpha)
				}
				o := probe.ServiceOptions{Connections: connections, Timeout: timeout, From: from, NodeHost: nodePort}
				if httpReq == "" && len(headers) > 0 {
					return usagef("--header needs --http")
				}
				if httpReq != "" {
					req, err := probe.ParseHTTPRequest(httpReq, headers)
					if err != nil {
						return usagef("%v", err)
					}
					o.HTTP = &req
				}
				if err := needRoot(); err != nil {
					return err
				}
				converge(cmd.Context(), e, args[0])
				return runServiceProbe(cmd, e, args[0], svcRef, family, o, alpha, expect, output)
			}
			if httpReq == "" && len(headers) > 0 {
				return usagef("--header needs --http")
			}
			if connections != 0 || len(from) > 0 || nodePort != "" || cmd.Flags().Changed("alpha") {
				return usagef("--connections, --from, --node-port and --alpha apply to --service")
			}
			if port < 1 || port > 65535 {
				return usagef("--port %d is not a port number (1-65535)", port)
			}
			if timeout <= 0 {
				return usagef("--timeout must be positive (e.g. 500ms)")
			}
			proto = strings.ToLower(proto)
			if proto != "tcp" && proto != "udp" && proto != "sctp" {
				return usagef("--protocol %q: tcp, udp or sctp", proto)
			}
			if err := needRoot(); err != nil {
				return err
			}
			converge(cmd.Context(), e, args[0])
			spec, m, err := lab.Model(args[0], true)
			if err != nil {
				return err
			}
			if spoof {
				return runSpoof(cmd, e, spec, output)
			}
			if httpReq != "" {
				if proto != "tcp" {
					return usagef("--http speaks HTTP over TCP: drop --protocol %s", proto)
				}
				req, err := probe.ParseHTTPRequest(httpReq, headers)
				if err != nil {
					return usagef("%v", err)
				}
				return runHTTPProbe(cmd, e, spec, m, port, req, fam, timeout, expect, output)
			}
			var x *explainer
			if explain {
				if x, err = startExplain(cmd.Context(), e, spec.Name); err != nil {
					return err
				}
				defer x.restore()
				expect = true
			}
			var st probe.Stats
			if _, err := probe.Families(spec, fam); err != nil {
				return usagef("--family %s: %v", family, err)
			}
			cells, err := probe.Run(cmd.Context(), spec, []probe.Target{{Protocol: proto, Port: port}}, probe.Options{Timeout: timeout, Stats: &st, Family: fam})
			if err != nil {
				return err
			}
			twoFamilies := len(spec.Families()) > 1
			if st.Reprobed > 0 {
				fmt.Fprintf(e.stderr, "cnlab: note: the slowest answer took %v, more than a quarter of --timeout %v: %d denied cells were probed again with a %v timeout, and %d of them were answered then (slow, not denied)\n",
					st.Slowest.Round(time.Millisecond), timeout, st.Reprobed, st.RetryTimeout, st.Changed)
			}
			wrong := probe.Expect(spec, m, cells)
			var explained []cellFlows
			if x != nil {
				explained = x.explain(wrong)
			}
			if output == "json" {
				if err := writeJSON(e.stdout, probeView{Lab: spec.Name, Port: port, Protocol: proto, Results: cells, Explain: explained}); err != nil {
					return err
				}
			} else {
				printMatrix(e.stdout, spec, cells, proto, port)
			}
			if expect && len(wrong) > 0 {
				fmt.Fprintf(e.stderr, "cnlab: %d of %s differ from the policy model:\n", len(wrong), plural.N(len(cells), "cell"))
				for _, c := range wrong {
					fmt.Fprintf(e.stderr, "  %s -> %s %s/%d%s: probed %s, expected %s\n", c.From, c.To, c.Protocol, c.Port, familyNote(c, twoFamilies), probedWord(c), word(*c.Expected))
				}
				if x != nil && output != "json" {
					fmt.Fprintf(e.stderr, "flows observed for them (datapath %s, observe: %s):\n", spec.Datapath, x.level)
					printExplain(e.stderr, spec.Name, explained)
				}
				return exitStatus(exitFail)
			}
			if expect {
				fmt.Fprintf(e.stderr, "cnlab: all %d cells match the policy model\n", len(cells))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&port, "port", 80, "destination port")
	f.StringVar(&proto, "protocol", "tcp", "tcp, udp or sctp")
	f.StringVar(&family, "family", "", "address family to probe: 4, 6 or both (default: every family the lab has; with --service -o json, the primary one)")
	f.BoolVar(&expect, "expect", false, "compare with the policy model; exit 1 on any difference")
	f.BoolVar(&explain, "explain", false, "with --expect: for each cell that differs from the model, the flows observed for it (which hook and rule dropped or forwarded it; a lab that records nothing records all for the probe)")
	f.BoolVar(&spoof, "spoof", false, "send forged frames (and frames of other protocols) from every endpoint; exit 1 if one arrives")
	f.StringVarP(&output, "output", "o", "", "output format: text or json")
	f.DurationVar(&timeout, "timeout", time.Second, "time after which an unanswered attempt counts as denied")
	f.StringVar(&svcRef, "service", "", "probe a Service port (NS/NAME[:PORTNAME]) instead of every pair")
	f.IntVar(&connections, "connections", 0, "with --service: fresh connections per client (default: enough to reach every backend)")
	f.Float64Var(&alpha, "alpha", probe.DefaultAlpha, "with --service --expect: significance level of the χ² test of an even spread")
	f.StringArrayVar(&from, "from", nil, "with --service: the client endpoint (repeatable; default every endpoint)")
	f.StringVar(&httpReq, "http", "", `send one HTTP request per cell, or per connection with --service ("METHOD PATH", e.g. "GET /public")`)
	f.StringArrayVar(&headers, "header", nil, `with --http: a request header "Name: value" (repeatable; "Host: h" sets the Host)`)
	f.StringVar(&nodePort, "node-port", "", "with --service: connect to the Service's node port on this host (its bridge address) instead of the cluster IP")
	return cmd
}

// runSpoof is `probe --spoof`.
func runSpoof(cmd *cobra.Command, e *env, spec *topology.Spec, output string) error {
	if len(spec.Hosts) == 0 {
		return usagef("--spoof needs a lab with hosts (endpoints on bridges); %s is a chain", spec.Name)
	}
	res, err := probe.SpoofAll(cmd.Context(), spec, probe.SpoofOptions{})
	if err != nil {
		return err
	}
	leaked := 0
	for _, r := range res {
		if r.Forged && r.Arrived {
			leaked++
		}
	}
	if output == "json" {
		if err := writeJSON(e.stdout, spoofView{Lab: spec.Name, Spoof: res}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FROM\tTO\tCHECK\tRESULT")
		for _, r := range res {
			mark := "blocked"
			if r.Arrived {
				mark = "arrived"
			}
			if r.Forged && r.Arrived {
				mark += " *"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.From, r.To, r.Check, mark)
		}
		tw.Flush()
		fmt.Fprintln(e.stdout, "* a forged frame (or one of another protocol) reached the target")
	}
	if leaked > 0 {
		fmt.Fprintf(e.stderr, "cnlab: %d of %s: forged frames (or of another protocol) reached their target\n", leaked, plural.N(len(res), "check"))
		return exitStatus(exitFail)
	}
	return nil
}

// probedWord is what the probe saw of a cell: allowed, denied, or the
// error that made it neither.
func probedWord(c probe.Cell) string {
	if c.Error != "" && !c.Allowed {
		return "an error (" + c.Error + ")"
	}
	return word(c.Allowed)
}

func word(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// printMatrix prints rows (from: the sender) by columns (to: the
// receiver): ✓ allowed, ✗ denied, and a * after a cell that differs from
// the model. The header's first cell and the legend say which is which.
// A lab with two families gets one matrix per family probed, titled
// with it.
func printMatrix(w io.Writer, spec *topology.Spec, cells []probe.Cell, proto string, port int) {
	printPerFamily(w, spec, cells, fmt.Sprintf("%s/%d", proto, port), true, func(c probe.Cell) string {
		mark := "✗"
		if c.Allowed {
			mark = "✓"
		}
		if !c.Matches() {
			mark += "*"
		}
		return mark
	})
	fmt.Fprintln(w, "rows: from (sender), columns: to (receiver); ✓ allowed  ✗ denied  * differs from the policy model")
}

// printPerFamily prints one grid of cells per family they hold (in the
// order first seen), titled with the family on a lab that has two;
// always prints one (empty) grid when there are no cells.
func printPerFamily(w io.Writer, spec *topology.Spec, cells []probe.Cell, title string, always bool, mark func(probe.Cell) string) {
	var fams []int
	for _, c := range cells {
		if !slices.Contains(fams, c.Family) {
			fams = append(fams, c.Family)
		}
	}
	if len(fams) == 0 && always {
		fams = []int{0}
	}
	for i, fam := range fams {
		t := title
		if len(spec.Families()) > 1 {
			t = fmt.Sprintf("IPv%d %s", fam, title)
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		var of []probe.Cell
		for _, c := range cells {
			if c.Family == fam {
				of = append(of, c)
			}
		}
		printGrid(w, spec, of, t, mark)
	}
}

// parseFamily reads --family: "" or "both" is 0 (every family of the
// lab), else 4 or 6.
func parseFamily(s string) (int, error) {
	switch strings.ToLower(s) {
	case "", "both", "all":
		return 0, nil
	case "4", "ipv4", "v4":
		return 4, nil
	case "6", "ipv6", "v6":
		return 6, nil
	}
	return 0, usagef("--family %q: 4, 6 or both", s)
}

// familyNote is " (IPv6)" for a cell of a lab with two families.
func familyNote(c probe.Cell, two bool) string {
	if !two || c.Family == 0 {
		return ""
	}
	return fmt.Sprintf(" (IPv%d)", c.Family)
}

// printGrid prints a row per sender and a column per receiver, each cell
// as mark says ("." on the diagonal).
func printGrid(w io.Writer, spec *topology.Spec, cells []probe.Cell, title string, mark func(probe.Cell) string) {
	at := map[[2]string]probe.Cell{}
	for _, c := range cells {
		at[[2]string{c.From, c.To}] = c
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "%s from\\to", title)
	for _, to := range spec.Endpoints {
		fmt.Fprintf(tw, "\t%s", to.ID())
	}
	fmt.Fprintln(tw)
	for _, from := range spec.Endpoints {
		fmt.Fprint(tw, from.ID())
		for _, to := range spec.Endpoints {
			m := "."
			if c, ok := at[[2]string{from.ID(), to.ID()}]; ok {
				m = mark(c)
			}
			fmt.Fprintf(tw, "\t%s", m)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// serviceProbeView is the JSON shape of `cnlab probe --service -o json`
// (contract).
type serviceProbeView struct {
	Lab      string `json:"lab"`
	Service  string `json:"service"`
	VIP      string `json:"vip"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	Family   int    `json:"family"` // 4 or 6: the frontend's (VIP's) family
	// With --node-port: the host, and the address and port connected to.
	Node     string `json:"node,omitempty"`
	NodePort int    `json:"nodePort,omitempty"`
	Target   string `json:"target,omitempty"`
	// HTTP is the request every connection sent ("METHOD PATH"; absent
	// when the backends spoke first); HTTPDefault: the probe chose it
	// because a backend's port has L7 rules.
	HTTP        string                `json:"http,omitempty"`
	HTTPDefault bool                  `json:"httpDefault,omitempty"`
	Results     []probe.ServiceResult `json:"results"`
}

// runServiceProbe is `probe --service`: each frontend of the Service
// port that family names (serviceFrontends) in turn.
func runServiceProbe(cmd *cobra.Command, e *env, labName, ref, family string, o probe.ServiceOptions, alpha float64, expect bool, output string) error {
	m, err := lab.ServiceModel(labName)
	if err != nil {
		return err
	}
	fs, array, err := serviceFrontends(m.Resolved, ref, family, output == "json")
	if err != nil {
		return err
	}
	if family == "" && output == "json" && len(m.Resolved.FamiliesOf(fs[0])) > 1 {
		fmt.Fprintf(e.stderr, "cnlab: note: -o json probes %s's primary family (IPv%d) alone, as before dual-stack; --family both probes both (a JSON array)\n", fs[0].Service, fs[0].Family())
	}
	if o.NodeHost != "" && m.Lab.Host(o.NodeHost) == nil {
		var names []string
		for _, h := range m.Lab.Hosts {
			names = append(names, h.Name)
		}
		return usagef("--node-port %q: lab %s has no such host (hosts: %s)", o.NodeHost, labName, strings.Join(names, ", "))
	}
	var views []serviceProbeView
	var failed error
	for i, f := range fs {
		if i > 0 && output != "json" {
			fmt.Fprintln(e.stdout)
		}
		v, err := probeFrontend(cmd, e, m, f, o, alpha, expect, output, len(fs) > 1)
		if err != nil {
			if _, ok := err.(exitStatus); !ok {
				return err
			}
			failed = err // another family's result is still worth having
		}
		v.Lab = labName
		views = append(views, v)
	}
	if output == "json" {
		var err error
		if array {
			err = writeJSON(e.stdout, views)
		} else {
			err = writeJSON(e.stdout, views[0])
		}
		if err != nil {
			return err
		}
	}
	return failed
}

// probeFrontend probes one frontend: its JSON view, or its table printed.
// With two families each line on stderr names the frontend's.
func probeFrontend(cmd *cobra.Command, e *env, m *service.Model, f *service.Frontend, o probe.ServiceOptions, alpha float64, expect bool, output string, two bool) (serviceProbeView, error) {
	v := serviceProbeView{Service: f.Service, VIP: f.VIP.String(), Port: int(f.Port), Protocol: f.Protocol, Family: f.Family()}
	if o.HTTP != nil && f.Protocol != "tcp" {
		return v, usagef("--http speaks HTTP over TCP: %s is %s", f.Key(), f.Protocol)
	}
	auto := o.HTTP == nil && probe.NeedsHTTP(m, f, o.From)
	if auto {
		req := probe.DefaultServiceRequest
		o.HTTP = &req
	}
	res, err := probe.ProbeService(cmd.Context(), m, f, o)
	if err != nil {
		return v, err
	}
	bad := probe.CheckService(f, res, o.Connections, alpha)
	var expiry, expiryNote string
	if expect && f.Affinity > 0 && bad == 0 {
		if f.Affinity <= probe.MaxAffinityWait && output != "json" {
			fmt.Fprintf(e.stderr, "cnlab: %swaiting out the %d s ClientIP affinity to check that it expires\n", familyOf(f, two), f.Affinity)
		}
		if expiry, expiryNote, err = probe.CheckAffinityExpiry(cmd.Context(), m, f, o, res); err != nil {
			return v, err
		}
	}
	var node netip.Addr
	if o.NodeHost != "" {
		node = service.NodeAddressOf(m.Lab.Host(o.NodeHost), f.Family())
	}
	if output == "json" {
		v.Results, v.HTTPDefault = res, auto
		if o.HTTP != nil {
			v.HTTP = o.HTTP.Method + " " + o.HTTP.Path
		}
		if o.NodeHost != "" {
			v.Node, v.NodePort = o.NodeHost, int(f.NodePort)
			v.Target = netip.AddrPortFrom(node, f.NodePort).String()
		}
	} else {
		if o.NodeHost != "" {
			fmt.Fprintf(e.stdout, "%s node port %d on host %s (%s/%s)\n", f.Key(), f.NodePort, o.NodeHost, netip.AddrPortFrom(node, f.NodePort), f.Protocol)
		} else {
			fmt.Fprintf(e.stdout, "%s (%s/%s)\n", f.Key(), netip.AddrPortFrom(f.VIP, f.Port), f.Protocol)
		}
		if auto {
			fmt.Fprintf(e.stdout, "each connection sends GET / (HTTP/1.1): a backend's port has L7 rules, and the L7 proxy waits for a request (--http sets another)\n")
		} else if o.HTTP != nil {
			fmt.Fprintf(e.stdout, "each connection sends %s %s (HTTP/1.1)\n", o.HTTP.Method, o.HTTP.Path)
		}
		if o.HTTP != nil {
			printServiceHTTP(e.stdout, res)
		} else {
			printService(e.stdout, res)
		}
	}
	return v, judgeService(e, res, expect, expiry, expiryNote, bad, familyOf(f, two))
}

// serviceFrontends returns the frontends of a Service port (ref) that
// `probe --service` and `service trace` act on: every family of the
// Service in text, its primary one in JSON (as before dual-stack), or
// the family --family names (as parseFamily reads it: 4, 6, or both);
// array is true when --family asked for both (-o json: an array).
func serviceFrontends(r *service.Resolved, ref, family string, json bool) (fs []*service.Frontend, array bool, err error) {
	fam, err := parseFamily(family)
	if err != nil {
		return nil, false, err
	}
	if fam != 0 {
		g, err := r.FrontendOf(ref, fam)
		if err != nil {
			return nil, false, usagef("%v", err)
		}
		return []*service.Frontend{g}, false, nil
	}
	f, err := r.Frontend(ref)
	if err != nil {
		return nil, false, usagef("%v", err) // a bad name: exit 2
	}
	fs = r.FamiliesOf(f)
	if family == "" && json {
		fs = fs[:1]
	}
	return fs, family != "", nil
}

// printService prints the table of a service probe: per client, the
// answers of each backend, the failures, the backends the model expects.
func printService(w io.Writer, res []probe.ServiceResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tBACKENDS (answers)\tFAILED\tEXPECTED\tMATCHES MODEL")
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.From, counts(r.Backends), r.Failed, expectedSet(r.Expected), matchWord(r))
	}
	tw.Flush()
}

// printServiceHTTP is printService with the statuses of an HTTP probe:
// the statuses received, and per expected backend the model's status.
func printServiceHTTP(w io.Writer, res []probe.ServiceResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tBACKENDS (200 answers)\tSTATUSES\tFAILED\tEXPECTED (status)\tMATCHES MODEL")
	for _, r := range res {
		var exp []string
		for _, id := range r.Expected {
			exp = append(exp, fmt.Sprintf("%s %d", id, r.ExpectedStatuses[id]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.From, counts(r.Backends), counts(r.Statuses), r.Failed, expectedSet(exp), matchWord(r))
	}
	tw.Flush()
	fmt.Fprintln(w, "a 403 of the L7 proxy names no backend: it counts in STATUSES only")
}

// counts is "a 3, b 2", sorted by key.
func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func expectedSet(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

func matchWord(r probe.ServiceResult) string {
	if len(r.Mismatches) > 0 {
		return "NO"
	}
	return "yes"
}

// familyOf is "IPv6: " for a frontend of a probe of two families, to
// begin its lines on stderr with.
func familyOf(f *service.Frontend, two bool) string {
	if !two {
		return ""
	}
	return fmt.Sprintf("IPv%d: ", f.Family())
}

// judgeService prints a service probe's notes and, with --expect, what
// differs from the model (exit 1) or that nothing does.
func judgeService(e *env, res []probe.ServiceResult, expect bool, expiry, expiryNote string, bad int, fam string) error {
	for _, r := range res {
		for _, n := range r.Notes {
			fmt.Fprintf(e.stderr, "cnlab: note: %s%s: %s\n", fam, r.From, n)
		}
	}
	if expiryNote != "" {
		fmt.Fprintf(e.stderr, "cnlab: note: %s%s\n", fam, expiryNote)
	}
	if expiry != "" {
		fmt.Fprintf(e.stderr, "cnlab: %s%s\n", fam, expiry)
		return exitStatus(exitFail)
	}
	if expect && bad > 0 {
		fmt.Fprintf(e.stderr, "cnlab: %s%d of %s differ from the service model:\n", fam, bad, plural.N(len(res), "client"))
		for _, r := range res {
			for _, m := range r.Mismatches {
				fmt.Fprintf(e.stderr, "  %s: %s\n", r.From, m)
			}
		}
		return exitStatus(exitFail)
	}
	if expect {
		fmt.Fprintf(e.stderr, "cnlab: %sall %s match the service model\n", fam, plural.N(len(res), "client"))
	}
	return nil
}

// runHTTPProbe is `probe --http`.
func runHTTPProbe(cmd *cobra.Command, e *env, spec *topology.Spec, m *policy.Model, port int, req probe.HTTPRequest, fam int, timeout time.Duration, expect bool, output string) error {
	cells, err := probe.RunHTTP(cmd.Context(), spec, port, req, probe.Options{Timeout: timeout, Family: fam})
	if err != nil {
		return err
	}
	wrong := probe.ExpectHTTP(spec, m, cells, req)
	if output == "json" {
		if err := writeJSON(e.stdout, probeView{Lab: spec.Name, Port: port, Protocol: "tcp", Results: cells}); err != nil {
			return err
		}
	} else {
		printHTTPMatrix(e.stdout, spec, cells, req, port)
	}
	if expect && len(wrong) > 0 {
		fmt.Fprintf(e.stderr, "cnlab: %d of %s differ from the policy model:\n", len(wrong), plural.N(len(cells), "cell"))
		for _, c := range wrong {
			fmt.Fprintf(e.stderr, "  %s -> %s %s %s%s: status %d, expected %d%s\n", c.From, c.To, c.Method, c.Path, familyNote(c, len(spec.Families()) > 1), *c.Status, *c.ExpectedStatus, httpNote(c))
		}
		return exitStatus(exitFail)
	}
	if expect {
		fmt.Fprintf(e.stderr, "cnlab: all %d cells match the policy model\n", len(cells))
	}
	return nil
}

// httpNote says what else is wrong with an HTTP cell.
func httpNote(c probe.Cell) string {
	var notes []string
	if c.Reached && !*c.Expected {
		notes = append(notes, "the server received the request")
	}
	if !c.Reached && *c.Expected {
		notes = append(notes, "the server never received it")
	}
	if c.Error != "" {
		notes = append(notes, c.Error)
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, "; ") + ")"
}

// printHTTPMatrix prints the status of each cell (- for no connection),
// with a * after a cell that differs from the model.
// A lab with two families gets one matrix per family probed, as
// printMatrix.
func printHTTPMatrix(w io.Writer, spec *topology.Spec, cells []probe.Cell, req probe.HTTPRequest, port int) {
	printPerFamily(w, spec, cells, fmt.Sprintf("%s %s :%d", req.Method, req.Path, port), false, func(c probe.Cell) string {
		mark := "-"
		if *c.Status != 0 {
			mark = fmt.Sprint(*c.Status)
		}
		if c.ExpectedStatus != nil && (*c.ExpectedStatus != *c.Status || c.Reached != *c.Expected) {
			mark += "*"
		}
		return mark
	})
	fmt.Fprintln(w, "rows: from (sender), columns: to (receiver); status received, - no connection, * differs from the policy model")
}
