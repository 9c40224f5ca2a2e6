package service

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Model is the oracle of a lab's Services: for a client and a frontend,
// which backends a new connection may reach. Policy is judged on the
// chosen backend after translation, as in a cluster (the proxy translates
// before the policy datapath's forward hook sees the packet): a policy
// allowing port 80 does not allow a Service that maps 80 to 8080.
type Model struct {
	Lab      *topology.Spec
	Resolved *Resolved
	Policy   *policy.Model
}

// Choice is one backend of a frontend as a client sees it.
type Choice struct {
	Backend Backend `json:"backend"`
	// Reachable: the proxy may send the client's new connection there
	// and it gets through.
	Reachable bool   `json:"reachable"`
	Why       string `json:"why"`
	// Hairpin: the client is the backend; the proxy masquerades the
	// connection, so the backend sees its host's address.
	Hairpin bool            `json:"hairpin,omitempty"`
	Verdict *policy.Verdict `json:"verdict,omitempty"`
	// Source is the address the backend sees the connection come from,
	// when the model knows it (node ports).
	Source netip.Addr `json:"source,omitzero"`
	// Proxied: the backend's port has L7 rules for this client, so the
	// datapath hands the connection to its L7 proxy, which answers or
	// forwards each HTTP request (and only HTTP).
	Proxied bool `json:"proxied,omitempty"`
}

// Expectation is what a client's new connections to a frontend may do.
type Expectation struct {
	From     string   `json:"from"`
	Frontend string   `json:"frontend"`
	Choices  []Choice `json:"choices"` // every backend of the frontend
	// Expected lists the endpoints (namespace/name) of the reachable
	// backends: the set every connection's backend must be in.
	Expected []string `json:"expected"`
	// MayFail: some connections may fail, because the proxy may pick a
	// backend the client cannot reach (denied by policy, or an address
	// no lab endpoint has). With no reachable backend every one fails.
	MayFail bool `json:"mayFail"`
	// Refused: the frontend has no backend for this client, so the proxy
	// rejects (or, for internalTrafficPolicy Local with backends only on
	// other hosts, drops) every new connection.
	Refused bool   `json:"refused"`
	Note    string `json:"note,omitempty"`
	// Target is what the client connects to: the cluster IP and port,
	// or a host's node address and the node port.
	Target netip.AddrPort `json:"target"`
	// Masqueraded: a backend sees another source than the client's (a
	// node port under externalTrafficPolicy Cluster). On a cluster IP
	// only a hairpin is masqueraded.
	Masqueraded bool `json:"masqueraded,omitempty"`
	// HairpinLocal: with socket-level translation (the ebpf proxy with
	// ebpf.socketLB) a client that is a backend of the frontend connects
	// to itself over loopback: no packet reaches the datapath, so policy
	// does not judge it and the backend sees the client's own address.
	HairpinLocal bool `json:"hairpinLocal,omitempty"`
}

// Expect decides a client's new connections to a frontend.
func (m *Model) Expect(client *topology.Endpoint, f *Frontend) Expectation {
	e := Expectation{From: client.ID(), Frontend: f.Key(), Expected: []string{}, Target: netip.AddrPortFrom(f.VIP, f.Port),
		HairpinLocal: m.Lab.Services.Proxy == kind.ProxyEBPF && m.Lab.EBPF.SocketLB}
	usable := f.For(client.Host)
	switch {
	case len(f.Backends) == 0:
		e.Refused, e.Note = true, "the Service has no ready or serving backend for this port: the proxy rejects new connections"
	case len(usable) == 0:
		e.Refused, e.Note = true, fmt.Sprintf("internalTrafficPolicy Local and no backend on host %s: the proxy drops new connections", client.Host)
	}
	for _, b := range f.Backends {
		c := Choice{Backend: b}
		local := !f.InternalLocal || b.Host == client.Host
		switch {
		case !local:
			c.Why = fmt.Sprintf("on host %s, not the client's (%s): internalTrafficPolicy Local", b.Host, client.Host)
		case b.Endpoint == "":
			c.Why = fmt.Sprintf("%s is no lab endpoint's address: a connection sent there gets no answer", b.IP)
			e.MayFail = true
		default:
			ep, err := m.Lab.Endpoint(b.Endpoint)
			if err != nil {
				c.Why = err.Error()
				e.MayFail = true
				break
			}
			c.Hairpin = ep.ID() == client.ID()
			v := m.Policy.VerdictOf(partyOf(client, f), partyOf(ep, f), f.Protocol, int(b.Port))
			c.Verdict = &v
			c.Reachable = v.Allowed || (c.Hairpin && e.HairpinLocal)
			if c.Hairpin && e.HairpinLocal {
				c.Why = "hairpin with socket-level translation: the client connects to itself over loopback, which policy does not judge"
				e.Expected = append(e.Expected, ep.ID())
			} else if v.Allowed {
				c.Why = fmt.Sprintf("policy allows %s -> %s %s/%d (after translation)", client.ID(), ep.ID(), strings.ToUpper(f.Protocol), b.Port)
				e.Expected = append(e.Expected, ep.ID())
			} else {
				c.Why = fmt.Sprintf("policy denies %s -> %s %s/%d (after translation): %s", client.ID(), ep.ID(), strings.ToUpper(f.Protocol), b.Port, denial(v))
				e.MayFail = true
			}
			if c.Hairpin && !e.HairpinLocal {
				c.Why += "; hairpin: the backend sees its host's address, not its own"
			}
			if c.Reachable && !(c.Hairpin && e.HairpinLocal) && f.Protocol == "tcp" {
				c.Proxied = HTTPVerdict(m.Policy, client, ep, f, int(b.Port), policy.Request{Method: "GET", Path: "/"}).Proxied
				if why := m.l7Unreachable(client, ep, c.Hairpin, c.Proxied, client.Host, false); why != "" {
					c.Reachable = false
					c.Why = why
					e.Expected = slices.DeleteFunc(e.Expected, func(id string) bool { return id == ep.ID() })
					e.MayFail = true
				} else if c.Proxied {
					c.Why += "; an L7 port: the datapath hands the connection to its L7 proxy"
				}
			}
		}
		e.Choices = append(e.Choices, c)
	}
	slices.Sort(e.Expected)
	if f.Affinity > 0 && !e.Refused {
		e.Note = fmt.Sprintf("ClientIP affinity: all of a client's connections within %ds of its last one go to one backend", f.Affinity)
	}
	return e
}

// l7Limit is where the limits of a connection through a Service to an
// L7 port are documented.
const l7Limit = "docs/limits.md, \"L7 HTTP rules\""

// l7Unreachable says why a connection through a Service cannot reach
// backend ep on an L7 port ("" when it can), as real connections find on
// each datapath (TestServiceProbeHTTP, docs/l7.md). node is the host a
// netfilter proxy translates on (the client's for a cluster IP, the node
// port's host for a node port); masqueraded: a node port under
// externalTrafficPolicy Cluster.
//   - a hairpin (the client is the backend): masqueraded to its host's
//     address, the handshake does not complete, on every datapath;
//   - iptables and nftables, a backend on the host that translates: the
//     redirect to the L7 proxy matches the endpoint's own address in
//     prerouting, before that host's Service DNAT, and the policy then
//     drops the translated connection, which comes around the proxy; a
//     backend on another host gets the connection already translated
//     and redirects it as a direct one;
//   - eBPF (which translates on the client's host), a backend on the
//     client's host with legacy host routing (the translated flow is not
//     handed to the proxy and the backend's program drops it), or
//     masqueraded there (a node port under Cluster).
func (m *Model) l7Unreachable(client, ep *topology.Endpoint, hairpin, proxied bool, node string, masqueraded bool) string {
	if !proxied {
		return ""
	}
	switch m.Lab.Datapath {
	case kind.IPTables, kind.NFTables:
		if hairpin {
			break
		}
		if ep.Host == node {
			return fmt.Sprintf("an L7 port through a Service translated on the backend's own host (%s): the %s datapath redirects to its L7 proxy on the endpoint's own address, before this host's Service DNAT, and then drops the translated connection: no connection (%s)", ep.Host, m.Lab.Datapath, l7Limit)
		}
		return ""
	case kind.EBPF:
		if hairpin || ep.Host != client.Host {
			break
		}
		if m.Lab.EBPF.HostRouting == kind.HostRoutingLegacy {
			return fmt.Sprintf("an L7 port through a Service from the backend's own host (%s) with legacy host routing: the translated connection is not handed to the L7 proxy and the backend's program drops it: no connection (%s)", ep.Host, l7Limit)
		}
		if masqueraded {
			return fmt.Sprintf("an L7 port through a node port masqueraded to a backend of the client's own host (%s): no connection (%s)", ep.Host, l7Limit)
		}
		return ""
	}
	if hairpin {
		return fmt.Sprintf("hairpin to an L7 port: the connection, masqueraded to its host's address, gets no connection (%s)", l7Limit)
	}
	return ""
}

// NodeAddress is the address of a host that cnlab probes node ports on:
// its bridge's (the first of its pod CIDR), which every endpoint of the
// lab can route to; a node port answers on every address of the host.
func NodeAddress(h *topology.Host) netip.Addr { return h.Gateway }

// NodeAddressOf is NodeAddress of family fam (4 or 6): the host's bridge
// address of that family (invalid when the lab has none).
func NodeAddressOf(h *topology.Host, fam int) netip.Addr {
	a, _ := h.GatewayOf(fam)
	return a
}

// partyOf is an endpoint as the policy model judges it on a connection
// through frontend f: by its address of f's family (a connection is
// within one family, and CIDR rules match their own family's addresses
// only), its primary address if it has none.
func partyOf(ep *topology.Endpoint, f *Frontend) policy.Party {
	if p, ok := policy.EndpointPartyOf(ep, f.Family()); ok {
		return p
	}
	return policy.EndpointParty(ep)
}

// HTTPVerdict is the policy model's verdict on an HTTP request from
// client to backend ep through frontend f: over their addresses of f's
// family.
func HTTPVerdict(pm *policy.Model, client, ep *topology.Endpoint, f *Frontend, port int, req policy.Request) policy.HTTPVerdict {
	if v, ok := pm.HTTPVerdictFamily(client, ep, f.Family(), port, req); ok {
		return v
	}
	return pm.HTTPVerdict(client, ep, port, req)
}

func denial(v policy.Verdict) string {
	if !v.Egress.Allowed {
		return v.Egress.Reason
	}
	return v.Ingress.Reason
}

// Trace explains a client's connections to a frontend in a few lines, as
// `cnlab service trace` prints them.
func (m *Model) Trace(client *topology.Endpoint, f *Frontend) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s -> %s (%s/%s", client.ID(), f.Key(), netip.AddrPortFrom(f.VIP, f.Port), f.Protocol)
	if f.NodePort != 0 {
		fmt.Fprintf(&b, ", node port %d", f.NodePort)
	}
	b.WriteString(")\n")
	traceChoices(&b, m.Expect(client, f))
	return b.String()
}

// TraceNodePort explains a client's connections to a frontend's node port
// on a host, as `cnlab service trace --node-port HOST` prints them: per
// backend, what policy judges on each side and the source it sees.
func (m *Model) TraceNodePort(client *topology.Endpoint, f *Frontend, host string) (string, error) {
	e, err := m.ExpectNodePort(client, f, host)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s -> %s node port %d on host %s (%s/%s", client.ID(), f.Key(), f.NodePort, host, e.Target, f.Protocol)
	if e.Masqueraded {
		b.WriteString(", externalTrafficPolicy Cluster: masqueraded")
	} else {
		b.WriteString(", externalTrafficPolicy Local: the client's address kept")
	}
	fmt.Fprintf(&b, "; %s)\n", m.nodePortJudge(client, host))
	traceChoices(&b, e)
	return b.String(), nil
}

// nodePortJudge says in a few words where the lab's proxy translates a
// node port, for a trace.
func (m *Model) nodePortJudge(client *topology.Endpoint, host string) string {
	if m.Lab.Services.Proxy == kind.ProxyEBPF {
		return "the eBPF proxy translates it on the client's host " + client.Host
	}
	return fmt.Sprintf("the %s proxy translates it on host %s", m.Lab.Services.Proxy, host)
}

// traceChoices writes what an expectation says: the outcome, then one
// line per backend.
func traceChoices(b *strings.Builder, e Expectation) {
	switch {
	case e.Refused:
		fmt.Fprintf(b, "refused: %s\n", e.Note)
	case len(e.Expected) == 0:
		b.WriteString("every connection fails: no backend is reachable\n")
	case e.MayFail:
		fmt.Fprintf(b, "a new connection reaches one of %s; some fail (the proxy picks backends the client cannot reach)\n", strings.Join(e.Expected, ", "))
	default:
		fmt.Fprintf(b, "a new connection reaches one of %s, picked at random\n", strings.Join(e.Expected, ", "))
	}
	for _, c := range e.Choices {
		name := c.Backend.AddrPort().String()
		if c.Backend.Endpoint != "" {
			name = c.Backend.Endpoint + " " + name
		}
		mark := "✗"
		if c.Reachable {
			mark = "✓"
		}
		fmt.Fprintf(b, "  %s %s: %s\n", mark, name, c.Why)
	}
	if e.Note != "" && !e.Refused {
		fmt.Fprintf(b, "%s\n", e.Note)
	}
}

// FrontendOf returns the frontend of a Service port of family fam (4 or
// 6): Frontend's, or its counterpart of the other family of a dual-stack
// Service; an error names the families the Service has.
func (r *Resolved) FrontendOf(ref string, fam int) (*Frontend, error) {
	f, err := r.Frontend(ref)
	if err != nil || f.Family() == fam {
		return f, err
	}
	for _, g := range r.FamiliesOf(f) {
		if g.Family() == fam {
			return g, nil
		}
	}
	return nil, fmt.Errorf("Service %s has no IPv%d cluster IP (its families: %s; on a dual-stack lab, spec.ipFamilyPolicy: PreferDualStack gives it both)", f.Service, fam, famNames(r.Families[f.Service]))
}

// FamiliesOf returns the frontends of f's Service port, one per family
// of the Service (the primary first).
func (r *Resolved) FamiliesOf(f *Frontend) []*Frontend {
	var out []*Frontend
	for i := range r.Table.Frontends {
		g := &r.Table.Frontends[i]
		if g.Service == f.Service && g.PortName == f.PortName && g.Protocol == f.Protocol {
			out = append(out, g)
		}
	}
	return out
}

// Frontend returns the frontend of a Service port: ref is
// "namespace/name" (or "name" in namespace default) with an optional
// ":portname"; a Service with several ports needs the port name.
func (r *Resolved) Frontend(ref string) (*Frontend, error) {
	svc, port, _ := strings.Cut(ref, ":")
	if !strings.Contains(svc, "/") {
		svc = topology.DefaultNamespace + "/" + svc
	}
	var matched []*Frontend
	for i := range r.Table.Frontends {
		f := &r.Table.Frontends[i]
		if f.Service == svc && (port == "" || f.PortName == port) {
			if len(matched) > 0 && matched[len(matched)-1].PortName == f.PortName {
				continue // a dual-stack Service's second family: the primary's comes first
			}
			matched = append(matched, f)
		}
	}
	switch {
	case len(matched) == 1:
		return matched[0], nil
	case len(matched) > 1:
		var names []string
		for _, f := range matched {
			names = append(names, f.Key())
		}
		return nil, fmt.Errorf("Service %s has several ports: name one (%s)", svc, strings.Join(names, ", "))
	}
	for _, s := range r.Services {
		if s.Key() == svc {
			if s.ClusterIP == Headless {
				return nil, fmt.Errorf("Service %s is headless (clusterIP: None): no proxy serves it", svc)
			}
			return nil, fmt.Errorf("Service %s has no port named %q", svc, port)
		}
	}
	var have []string
	for _, s := range r.Services {
		have = append(have, s.Key())
	}
	if len(have) == 0 {
		return nil, fmt.Errorf("no Service %s: the lab has no Services", svc)
	}
	return nil, fmt.Errorf("no Service %s (Services: %s)", svc, strings.Join(have, ", "))
}
