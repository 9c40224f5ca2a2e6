package policy

import (
	"fmt"
	"strings"

	"github.com/cnlab/cnlab/l7"
	"gopkg.in/yaml.v3"
)

// l7Rules reads toPorts[].rules (node, at path) of the rule at rulePath.
// It returns the HTTP rules and whether the port is an L7 port (rules
// given with http:, even [{}]). What Cilium refuses, or cnlab does not
// implement, is refused naming its YAML path.
func (p *parser) l7Rules(node *yaml.Node, path, rulePath string) ([]l7.Rule, bool, error) {
	if isEmpty(node) {
		return nil, false, nil
	}
	// Cilium: PortDenyRule has no rules; cnlab: the proxy sits on the
	// destination's ingress only.
	switch {
	case strings.Contains(rulePath, "Deny["):
		return nil, false, p.errf(path, "L7 rules are not allowed in a deny rule (Cilium's deny rules have no rules:, only ports)")
	case strings.Contains(rulePath, "egress["):
		return nil, false, p.errf(path, "egress L7 rules are not supported yet: cnlab redirects to its proxy on the destination's ingress only (write the rule as an ingress rule of the server)")
	}
	var r rawL7
	if err := p.Decode(node, &r, path); err != nil {
		return nil, false, err
	}
	if err := unsupported(path, map[string]*yaml.Node{"kafka": &r.Kafka, "dns": &r.DNS, "l7proto": &r.L7Proto, "l7": &r.L7}); err != nil {
		return nil, false, p.errf(err.Error(), "is not supported (cnlab's proxy enforces http rules only)")
	}
	if r.HTTP == nil {
		return nil, false, p.errf(path, "has no http: (write http: [{}] to send every request through the proxy and allow it)")
	}
	if len(*r.HTTP) == 0 {
		return nil, false, p.errf(path+".http", "is empty (write http: [{}] to send every request through the proxy and allow it)")
	}
	var out []l7.Rule
	for i, h := range *r.HTTP {
		hp := fmt.Sprintf("%s.http[%d]", path, i)
		rule := l7.Rule{Method: h.Method, Path: h.Path, Host: h.Host}
		for j, s := range h.Headers {
			hm, err := l7.ParseHeader(s)
			if err != nil {
				return nil, false, p.errf(fmt.Sprintf("%s.headers[%d]", hp, j), "%v", err)
			}
			rule.Headers = append(rule.Headers, hm)
		}
		for j, m := range h.HeaderMatches {
			mp := fmt.Sprintf("%s.headerMatches[%d]", hp, j)
			if !isEmpty(&m.Secret) {
				return nil, false, p.errf(mp+".secret", "is not supported (cnlab has no secrets)")
			}
			if m.Mismatch != "" {
				return nil, false, p.errf(mp+".mismatch", "%q is not supported: cnlab's proxy neither logs nor rewrites headers on a mismatch (leave mismatch out: a mismatch then denies the request)", m.Mismatch)
			}
			if m.Name == "" {
				return nil, false, p.errf(mp+".name", "is required")
			}
			rule.Headers = append(rule.Headers, l7.HeaderMatch{Name: m.Name, Value: m.Value})
		}
		if field, err := rule.Check(); err != nil {
			return nil, false, p.errf(hp+"."+field, "%v", err)
		}
		out = append(out, rule)
	}
	return out, true, nil
}

// l7Port checks that a port of a toPorts entry with L7 rules can carry
// them: TCP (Cilium refuses L7 rules on any other protocol, ANY included),
// and a single port, by number or name.
func (p *parser) l7Port(port Port, path string) error {
	switch {
	case port.Protocol != TCP:
		return p.errf(path+".protocol", "L7 rules apply to TCP only (Cilium refuses %s with http rules): write protocol: TCP", port.Protocol)
	case port.Port == 0 && port.Name == "":
		return p.errf(path+".port", "port 0 (any port) cannot carry L7 rules (as in Cilium): give the port number")
	case port.EndPort > port.Port:
		return p.errf(path+".endPort", "port ranges with L7 rules are not supported yet: one port per entry")
	}
	return nil
}
