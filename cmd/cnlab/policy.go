package main

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/k8sdoc"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/labels"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

func newPolicyCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Apply, delete, show and trace traffic policies of a lab",
		Long: `Policies are Kubernetes NetworkPolicy (networking.k8s.io/v1) and the L3/L4
part of CiliumNetworkPolicy (cilium.io/v2), in multi-document YAML files.
The lab's datapath enforces them; changes are incremental and atomic.`,
	}
	cmd.AddCommand(newPolicyApplyCmd(e), newPolicyDeleteCmd(e), newPolicyShowCmd(e), newPolicyTraceCmd(e))
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return usagef("unknown policy command %q (apply, delete, show, trace)", args[0])
	}
	return cmd
}

func newPolicyApplyCmd(e *env) *cobra.Command {
	var files []string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "apply LAB -f FILE|DIR... [--dry-run]",
		Short: "Add or replace policies (matched by kind, namespace and name)",
		Long: `Add or replace policies (matched by kind, namespace and name) and make the
lab's datapath enforce the new set, in one atomic change per host.

-f takes a file, - (standard input) or a directory: as kubectl apply -f DIR,
its *.yaml, *.yml and *.json files in name order (not its subdirectories).
An error names the file and the document it is in; nothing is applied then.

--dry-run parses, checks and compiles the new set against the lab and
prints what would change — the policies created, updated or unchanged, the
compiled rules added and removed, and per host the datapath's chains, sets
or map entries that would change — and changes nothing: not the kernel,
not the lab's stored policies.`,
		Example: `  cnlab up -f examples/policy-lab.yaml
  cnlab policy apply policy-lab -f examples/policies/web-from-front.yaml
  cnlab policy apply policy-lab -f my-policies/ --dry-run   # its *.yaml, *.yml, *.json: what would change
  cat policies.yaml | cnlab policy apply policy-lab -f -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(files) == 0 {
				return usagef("give at least one -f FILE")
			}
			if err := needRoot(); err != nil {
				return err
			}
			paths, err := expandFiles(files)
			if err != nil {
				return err
			}
			var sets [][]*policy.Policy
			for _, f := range paths {
				var ps []*policy.Policy
				var err error
				if f == "-" {
					data, rerr := readStdin(cmd)
					if rerr != nil {
						return rerr
					}
					ps, err = policy.Parse(data, "<stdin>")
				} else {
					ps, err = policy.ParseFile(f)
				}
				if err != nil {
					return err
				}
				sets = append(sets, ps)
			}
			pols, err := policy.Merge(sets...)
			if err != nil {
				return err
			}
			var ch *lab.Change
			if dryRun {
				pl, err := lab.PlanApply(args[0], pols)
				if err != nil {
					return err
				}
				if err := printApplyPlan(e.stdout, pl); err != nil {
					return err
				}
				ch = pl.Change
			} else {
				if ch, err = lab.Apply(cmd.Context(), args[0], pols); err != nil {
					return err
				}
				printChange(e.stdout, ch)
			}
			if ch.Compiled != nil {
				for _, w := range ch.Compiled.Warnings {
					fmt.Fprintf(e.stderr, "cnlab: warning: %s\n", w)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "file", "f", nil, "policy file (multi-document YAML), or a directory of them (its *.yaml, *.yml, *.json); - reads standard input; repeatable")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check and compile, print what would change, and change nothing")
	return cmd
}

// expandFiles replaces each directory among the -f arguments by its
// *.yaml, *.yml and *.json files in name order, as kubectl apply -f DIR
// reads a directory (without -R: not its subdirectories). A directory
// without such a file is an error, as kubectl's is.
func expandFiles(args []string) ([]string, error) {
	var out []string
	for _, f := range args {
		if f == "-" {
			out = append(out, f)
			continue
		}
		st, err := os.Stat(f)
		if err != nil || !st.IsDir() {
			out = append(out, f) // the parser says what is wrong with it
			continue
		}
		ents, err := os.ReadDir(f) // sorted by name
		if err != nil {
			return nil, err
		}
		n := len(out)
		for _, de := range ents {
			switch filepath.Ext(de.Name()) {
			case ".yaml", ".yml", ".json":
				if !de.IsDir() {
					out = append(out, filepath.Join(f, de.Name()))
				}
			}
		}
		if len(out) == n {
			return nil, usagef("%s: a directory without *.yaml, *.yml or *.json files (subdirectories are not read)", f)
		}
	}
	return out, nil
}

func printChange(w io.Writer, ch *lab.Change) {
	for _, s := range []struct {
		what  string
		names []string
	}{{"created", ch.Created}, {"updated", ch.Updated}, {"unchanged", ch.Unchanged}, {"deleted", ch.Deleted}} {
		for _, n := range s.names {
			fmt.Fprintf(w, "%s %s\n", n, s.what)
		}
	}
	if ch.Compiled != nil {
		fmt.Fprintf(w, "%s over %s now enforced\n", plural.N(len(ch.Compiled.Rules), "rule"), plural.N(len(ch.Compiled.Identities), "identity"))
	}
}

func newPolicyDeleteCmd(e *env) *cobra.Command {
	var all bool
	var kind string
	cmd := &cobra.Command{
		Use:   "delete LAB (NAMESPACE/NAME... | NAME... | --all)",
		Short: "Delete policies by name, or all of them",
		Example: `  cnlab policy delete policy-lab y/web-from-front
  cnlab policy delete policy-lab --kind CiliumNetworkPolicy x/protect-a
  cnlab policy delete policy-lab protect-back      # a cluster-scoped policy: its bare name
  cnlab policy delete policy-lab --all`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all && len(args) > 1 {
				return usagef("give policy names or --all, not both")
			}
			if !all && len(args) == 1 {
				return usagef("give policy names (namespace/name) or --all")
			}
			if _, ok := k8sdoc.Policies.Lookup(kind); kind != "" && !ok {
				return usagef("--kind %q: one of %s", kind, strings.Join(k8sdoc.Policies.Names(), ", "))
			}
			if err := needRoot(); err != nil {
				return err
			}
			ch, err := lab.Delete(cmd.Context(), args[0], args[1:], all, kind)
			if err != nil {
				return err
			}
			if len(ch.Deleted) == 0 {
				fmt.Fprintln(e.stdout, "no policy to delete")
			}
			printChange(e.stdout, ch)
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "delete every policy of the lab")
	cmd.Flags().StringVar(&kind, "kind", "", "only policies of this kind (NetworkPolicy, CiliumNetworkPolicy, ClusterNetworkPolicy, AdminNetworkPolicy, BaselineAdminNetworkPolicy); by default a namespace/name held by two kinds deletes both")
	return cmd
}

// showView is the JSON shape of `cnlab policy show -o json`.
type showView struct {
	Lab        string                        `json:"lab"`
	Datapath   kind.Kind                     `json:"datapath"`
	Policies   []string                      `json:"policies"`
	Identities []*policy.Identity            `json:"identities"`
	Enforced   map[uint32]policy.Enforcement `json:"enforced"`
	Rules      []policy.Entry                `json:"rules"`
	// HTTP are the L7 rules of the entries marked l7 (policy.HTTPEntry).
	HTTP   []policy.HTTPEntry `json:"http,omitempty"`
	Kernel map[string]string  `json:"kernel,omitempty"` // per host
	// Counters, with --counters: per rule summed over hosts and
	// endpoints, and as the datapath counted them.
	Counters     []lab.RuleTotal        `json:"counters,omitempty"`
	HostCounters []datapath.RuleCounter `json:"hostCounters,omitempty"`
	// tierRefs are Policies as the text names them (with tier and
	// priority), tiers whether any is a cluster policy.
	tierRefs []string
	tiers    bool
}

func newPolicyShowCmd(e *env) *cobra.Command {
	var output string
	var kernel, counters bool
	cmd := &cobra.Command{
		Use:   "show LAB [-o json] [--kernel] [--counters]",
		Short: "Show the identities and the compiled rules of a lab",
		Example: `  cnlab policy show policy-lab
  cnlab policy show policy-lab --kernel     # also the datapath's own state (iptables-save, nft list)
  cnlab policy show policy-lab --counters   # packets and bytes per rule`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if err := needRoot(); err != nil {
				return err
			}
			spec, m, err := lab.Model(args[0], false)
			if err != nil {
				return err
			}
			c, err := m.Compile()
			if err != nil {
				return err
			}
			v := showView{Lab: spec.Name, Datapath: spec.Datapath, Identities: c.Identities, Enforced: c.Enforced, Rules: c.Rules, HTTP: c.HTTP, Policies: []string{}}
			admin, baseline := m.ClusterPolicies()
			for _, p := range admin {
				v.Policies = append(v.Policies, p.Ref())
				v.tierRefs = append(v.tierRefs, p.TierRef())
			}
			for _, p := range m.Policies {
				if !p.Cluster() {
					v.Policies = append(v.Policies, p.Ref())
					v.tierRefs = append(v.tierRefs, p.Ref())
				}
			}
			for _, p := range baseline {
				v.Policies = append(v.Policies, p.Ref())
				v.tierRefs = append(v.tierRefs, p.TierRef())
			}
			v.tiers = len(admin)+len(baseline) > 0
			if kernel {
				if v.Kernel, err = lab.Describe(cmd.Context(), spec.Name); err != nil {
					return err
				}
			}
			if counters {
				if v.HostCounters, err = lab.RuleCounters(cmd.Context(), spec.Name); err != nil {
					return err
				}
				v.Counters = lab.SumRules(v.HostCounters)
			}
			if output == "json" {
				return writeJSON(e.stdout, v)
			}
			printShow(e.stdout, v, c)
			if counters {
				printCounters(e.stdout, v.Counters)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: text or json")
	cmd.Flags().BoolVar(&kernel, "kernel", false, "also print the datapath's kernel state")
	cmd.Flags().BoolVar(&counters, "counters", false, "also print the packets and bytes each rule decided, as the datapath counted them (like iptables -v)")
	return cmd
}

// printCounters prints the per-rule counters.
func printCounters(w io.Writer, rows []lab.RuleTotal) {
	fmt.Fprintf(w, "\ncounters (packets each rule decided: new flows allowed, packets dropped; established traffic passes before any rule):\n")
	if len(rows) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	fmt.Fprintf(w, "  %12s %14s  %-12s %s\n", "packets", "bytes", "verdict", "rule")
	for _, r := range rows {
		fmt.Fprintf(w, "  %12d %14d  %-12s %s\n", r.Packets, r.Bytes, r.Verdict, r.Rule)
	}
}

func printShow(w io.Writer, v showView, c *policy.Compiled) {
	if len(v.Policies) == 0 {
		fmt.Fprintf(w, "lab %s, datapath %s, no policies\n\n", v.Lab, v.Datapath)
	} else {
		order := ""
		if v.tiers {
			order = " (in the order evaluated: Admin tier, NetworkPolicy tier, Baseline tier)"
		}
		fmt.Fprintf(w, "lab %s, datapath %s, %s%s: %s\n\n", v.Lab, v.Datapath, plural.N(len(v.Policies), "policy"), order, strings.Join(v.tierRefs, ", "))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IDENTITY\tNAMESPACE\tLABELS\tENDPOINTS\tISOLATED")
	for _, id := range v.Identities {
		enf := v.Enforced[id.ID]
		var iso []string
		if enf.Ingress {
			iso = append(iso, "ingress")
		}
		if enf.Egress {
			iso = append(iso, "egress")
		}
		if len(iso) == 0 {
			iso = []string{"-"}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", id.ID, id.Namespace, labels.String(id.Labels), strings.Join(id.Endpoints, ","), strings.Join(iso, ","))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if v.tiers {
		fmt.Fprintln(tw, "SUBJECT\tDIR\tTIER\tVERDICT\tPEER\tPORTS\tFROM")
	} else {
		fmt.Fprintln(tw, "SUBJECT\tDIR\tVERDICT\tPEER\tPORTS\tFROM")
	}
	for _, r := range v.Rules {
		verdict := r.Action()
		if v.tiers {
			verdict = r.Tier.String() + "\t" + verdict
		}
		peer := peerString(c, r)
		ports := r.PortString()
		if r.L7 {
			ports += " L7" // judged request by request by the host's L7 proxy
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.Subject, r.Dir, verdict, peer, ports, r.Origin)
	}
	tw.Flush()
	if n := len(v.HTTP); n > 0 {
		rules := 0
		for _, h := range v.HTTP {
			rules += len(h.Rules)
		}
		fmt.Fprintf(w, "(L7: the ports marked L7 go through the host's L7 proxy: %s from %s; -o json lists them under http)\n", plural.N(rules, "http rule"), plural.N(n, "entry"))
	}
	if len(v.Rules) == 0 {
		fmt.Fprintln(w, "(no rules: every endpoint that no policy isolates allows everything)")
	}
	for _, h := range labels.SortedKeys(v.Kernel) {
		fmt.Fprintf(w, "\n# host %s\n%s", h, v.Kernel[h])
	}
}

func newPolicyTraceCmd(e *env) *cobra.Command {
	var from, to, proto, output, portArg, httpReq, family string
	var headers []string
	cmd := &cobra.Command{
		Use:   "trace LAB --from A --to B --port P [--protocol tcp|udp|sctp] [--family 4|6] [--http \"METHOD PATH\" [--header \"K: v\"]...] [-o json]",
		Short: "Explain whether a connection (or an HTTP request) is allowed, and by which rule",
		Long: `Explain the policy model's verdict on a new connection from A to B: the
source's egress and the destination's ingress, and the rule that decided
each. With --http, the verdict on one HTTP request on that connection:
no connection (denied at L3/L4), 403 (the destination's L7 rules do not
allow it: its host's proxy answers "Access denied") or 200 (passed to the
server), and the L7 rules it was judged by.

--port takes a number or a port name: a name is looked up in the
destination endpoint's ports: (the topology's container ports), as
Kubernetes resolves a NetworkPolicy's named port on the destination pod,
and gives the port and its protocol.

--family 4 or 6 judges the connection between the endpoints' addresses
of that family (a dual-stack lab's endpoints have one of each; the
default is the lab's primary family): selectors match every address of
a pod, a CIDR (ipBlock, toCIDR, networks) only those of its family.
--from and --to also take an endpoint's address, of either family,
which sets the family.`,
		Example: `  cnlab policy trace policy-lab --from y/a --to x/a --port 80
  cnlab policy trace policy-lab --from x/b --to x/a --port 81 --protocol udp -o json
  cnlab policy trace policy-lab --from y/a --to x/a --port serve-80-tcp   # a named port of x/a
  cnlab policy trace policy-lab --from x/c --to x/a --port 80 --http "GET /private"
  cnlab policy trace dual-stack --from y/a --to x/a --port 80 --family 6
  cnlab policy trace dual-stack --from fd00:0:191::20 --to x/a --port 80`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if from == "" || to == "" || portArg == "" {
				return usagef("--from, --to and --port are required")
			}
			port, perr := strconv.Atoi(portArg)
			badNumber := perr == nil && (port < 1 || port > 65535)
			if badNumber || perr != nil && labels.CheckPortName(portArg) != nil {
				return usagef("--port %q is not a port number (1-65535) nor a port name (lower case letters, digits and '-', at most 15)", portArg)
			}
			p := strings.ToUpper(proto)
			if p != policy.TCP && p != policy.UDP && p != policy.SCTP {
				return usagef("--protocol %q: tcp, udp or sctp", proto)
			}
			if family != "" && family != "4" && family != "6" {
				return usagef("--family %q: 4 or 6", family)
			}
			if err := needRoot(); err != nil {
				return err
			}
			spec, m, err := lab.Model(args[0], false)
			if err != nil {
				return err
			}
			src, srcFam, err := traceEndpoint(spec, from)
			if err != nil {
				return err
			}
			dst, dstFam, err := traceEndpoint(spec, to)
			if err != nil {
				return err
			}
			famGiven := family != ""
			for _, f := range []int{srcFam, dstFam} {
				switch {
				case f == 0:
				case family == "":
					family = strconv.Itoa(f)
				case family != strconv.Itoa(f) && famGiven:
					return usagef("--from %s and --to %s against --family %s: a connection is within one family (give addresses of IPv%s, or endpoint names)", from, to, family, family)
				case family != strconv.Itoa(f):
					return usagef("--from %s is IPv%s, --to %s is IPv%d: a connection is within one family (give addresses of one, or endpoint names)", from, family, to, f)
				}
			}
			portName := ""
			if perr != nil {
				portName = portArg
				if port, p, err = namedPort(dst, portArg, p, cmd.Flags().Changed("protocol")); err != nil {
					return err
				}
			}
			fams := spec.Families()
			fam := fams[0]
			if family != "" {
				fam, _ = strconv.Atoi(family)
			}
			if _, ok := dst.Addr(fam); !ok {
				return usagef("--family %d: lab %s has no IPv%d addresses (its families: %s)", fam, spec.Name, fam, joinInts(fams))
			}
			v, _ := m.VerdictFamily(src, dst, fam, p, port)
			if family == "" && len(fams) == 1 {
				v.Family = 0 // as before labs had IPv6: the one family
			}
			var hv *policy.HTTPVerdict
			if httpReq != "" {
				if p != policy.TCP && portName != "" {
					return usagef("--http speaks HTTP over TCP: %s's port %s is %s", dst.ID(), portName, strings.ToLower(p))
				}
				if p != policy.TCP {
					return usagef("--http speaks HTTP over TCP: drop --protocol %s", proto)
				}
				req, err := probe.ParseHTTPRequest(httpReq, headers)
				if err != nil {
					return usagef("%v", err)
				}
				da, _ := dst.Addr(fam)
				x, _ := m.HTTPVerdictFamily(src, dst, fam, port, req.Model(netip.AddrPortFrom(da, uint16(port)).String()))
				x.Family = v.Family
				hv, v = &x, x.Verdict
			} else if len(headers) > 0 {
				return usagef("--header needs --http")
			}
			v.Protocol = strings.ToLower(v.Protocol) // as probe -o json writes it
			v.PortName = portName
			portText := strconv.Itoa(port)
			if portName != "" {
				portText += " (" + portName + ")"
			}
			if len(fams) > 1 || family != "" {
				portText += fmt.Sprintf(" over IPv%d", fam)
			}
			if output == "json" {
				if hv != nil {
					hv.Verdict = v
					return writeJSON(e.stdout, hv)
				}
				return writeJSON(e.stdout, v)
			}
			verdict := "ALLOWED"
			if !v.Allowed {
				verdict = "DENIED"
			}
			if hv != nil {
				switch hv.Status {
				case 0:
					verdict = "NO CONNECTION"
				case 403:
					verdict = "403 Access denied"
				default:
					verdict = "200 passed to the server"
				}
				fmt.Fprintf(e.stdout, "%s -> %s tcp/%s %s: %s\n", v.From, v.To, portText, httpReq, verdict)
				fmt.Fprintf(e.stdout, "  L7: %s\n", hv.L7)
			} else {
				fmt.Fprintf(e.stdout, "%s -> %s %s/%s: %s\n", v.From, v.To, strings.ToLower(p), portText, verdict)
			}
			for _, side := range []struct {
				dir, ep string
				s       policy.Side
			}{{"egress", v.From, v.Egress}, {"ingress", v.To, v.Ingress}} {
				fmt.Fprintf(e.stdout, "  %s of %s (identity %d): %s\n", side.dir, side.ep, m.IdentityOf(side.ep).ID, side.s.Reason)
				for _, n := range side.s.Notes {
					fmt.Fprintf(e.stdout, "    %s\n", n)
				}
			}
			// A dual-stack lab traced over its primary family by
			// default: say when the other family's verdict differs (an
			// ipBlock of one family, the classic hole).
			if !famGiven && srcFam == 0 && dstFam == 0 && len(fams) > 1 {
				other := fams[1]
				differs := false
				if hv != nil {
					da, _ := dst.Addr(other)
					req, _ := probe.ParseHTTPRequest(httpReq, headers)
					x, _ := m.HTTPVerdictFamily(src, dst, other, port, req.Model(netip.AddrPortFrom(da, uint16(port)).String()))
					differs = x.Status != hv.Status
				} else {
					x, _ := m.VerdictFamily(src, dst, other, p, port)
					differs = x.Allowed != v.Allowed
				}
				if differs {
					fmt.Fprintf(e.stdout, "  note: over IPv%d the verdict differs (cnlab policy trace ... --family %d)\n", other, other)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "source endpoint (ns/name, a unique name, or one of its addresses)")
	f.StringVar(&to, "to", "", "destination endpoint")
	f.StringVar(&portArg, "port", "", "destination port: a number, or a name of the destination's ports: (resolved as Kubernetes resolves a named port; its protocol unless --protocol is given)")
	f.StringVar(&proto, "protocol", "tcp", "tcp, udp or sctp")
	f.StringVar(&family, "family", "", "address family, 4 or 6 (default: the lab's primary family)")
	f.StringVar(&httpReq, "http", "", `explain one HTTP request ("METHOD PATH") on the connection`)
	f.StringArrayVar(&headers, "header", nil, `with --http: a request header "Name: value" (repeatable; "Host: h" sets the Host)`)
	f.StringVarP(&output, "output", "o", "", "output format: text or json")
	return cmd
}

// namedPort resolves a port name on the destination endpoint as
// Kubernetes resolves a named port: among its declared container ports
// (ports: in the topology). The port's protocol is the declared one;
// protoGiven (--protocol) must agree with it.
func namedPort(dst *topology.Endpoint, name, proto string, protoGiven bool) (int, string, error) {
	var have []string
	for _, cp := range dst.Ports {
		if cp.Name == name {
			if protoGiven && cp.Protocol != proto {
				return 0, "", usagef("--port %s: %s's port %q is %d/%s, not %s: drop --protocol or give --protocol %s",
					name, dst.ID(), name, cp.Port, strings.ToLower(cp.Protocol), strings.ToLower(proto), strings.ToLower(cp.Protocol))
			}
			return cp.Port, cp.Protocol, nil
		}
		if cp.Name != "" {
			have = append(have, fmt.Sprintf("%s (%d/%s)", cp.Name, cp.Port, strings.ToLower(cp.Protocol)))
		}
	}
	if len(have) == 0 {
		return 0, "", usagef("--port %s: %s has no port of that name: it declares no named ports (ports: in the topology); give a number", name, dst.ID())
	}
	return 0, "", usagef("--port %s: %s has no port of that name (its named ports: %s)", name, dst.ID(), strings.Join(have, ", "))
}

// joinInts writes numbers as "4, 6".
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// traceEndpoint finds an endpoint of policy trace's --from or --to: by
// name, or by one of its addresses (of either family), which gives the
// family (0 for a name).
func traceEndpoint(spec *topology.Spec, ref string) (*topology.Endpoint, int, error) {
	a, err := netip.ParseAddr(ref)
	if err != nil {
		ep, err := spec.Endpoint(ref)
		return ep, 0, err
	}
	a = a.Unmap()
	for i := range spec.Endpoints {
		if slices.Contains(spec.Endpoints[i].Addrs(), a) {
			return &spec.Endpoints[i], topology.Family(a), nil
		}
	}
	return nil, 0, usagef("%s is no endpoint's address in lab %s", a, spec.Name)
}
