package kpshape

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseIPTables reduces the proxy's chains of `iptables-save -t nat` and
// `iptables-save -t filter` (kube-proxy's KUBE- chains, or cnlab's CNLAB-
// chains of nat and CNLABSVC- chains of filter) to a Shape:
//
//   - "F dispatch": the rule of the nat SERVICES chain that sends a
//     frontend's connections to its service chain;
//   - "F service", "F local", "F external", "F firewall": the frontend's
//     SVC-, SVL-, EXT-, FW- chains;
//   - "F endpoint ADDR:PORT": its endpoint (SEP-) chains, named by their
//     DNAT destination;
//   - "F node port": the NODEPORTS rule of its node port;
//   - "F no endpoints": filter rules that match its cluster IP and port;
//   - "chain TABLE ROLE": every other chain of the proxy (its name without
//     KUBE-, CNLAB- or CNLABSVC-), and "hook TABLE CHAIN": the rules of a
//     built-in chain that jump to the proxy's.
func ParseIPTables(nat, filter string) (Shape, error) {
	s := Shape{}
	tables := map[string]*iptTable{}
	for name, text := range map[string]string{"nat": nat, "filter": filter} {
		t, err := parseSave(name, text)
		if err != nil {
			return nil, err
		}
		tables[name] = t
	}
	n := tables["nat"]
	owner := map[string]string{} // chain -> frontend
	// walk sorts the rules of the nat chain of role: a rule whose
	// frontend gives one goes to that frontend's part (and its target
	// chain becomes the frontend's), the others to the chain's frame.
	walk := func(role, part string, frontend func(r iptRule, target string) string) {
		var frame []string
		for _, r := range n.chains[n.role(role)] {
			target := r.opt("-j")
			f := frontend(r, target)
			if f == "" {
				frame = append(frame, r.norm(n.label))
				continue
			}
			s[f+" "+part] = append(s[f+" "+part], r.norm(n.label))
			n.claim(target, f, owner)
		}
		if _, ok := n.chains[n.role(role)]; ok {
			s["chain nat "+role] = frame
		}
	}
	// Frontends: the nat SERVICES chain's rules with a destination and a
	// port.
	walk("SERVICES", "dispatch", func(r iptRule, target string) string {
		if !n.proxy(target) {
			return ""
		}
		return frontendOf(r)
	})
	// Node ports: the NODEPORTS rules, owned by the frontend their chain
	// leads to.
	walk("NODEPORTS", "node port", func(_ iptRule, target string) string { return n.reaches(target, owner) })
	for name, rules := range n.chains {
		if name == n.role("SERVICES") || name == n.role("NODEPORTS") {
			continue
		}
		f, ok := owner[name]
		if !ok {
			s["chain nat "+n.label(name)] = normAll(rules, n.label)
			continue
		}
		var key string
		switch kind := chainKind(name); kind {
		case "SVC":
			key = f + " service"
		case "SVL":
			key = f + " local"
		case "EXT":
			key = f + " external"
		case "FW":
			key = f + " firewall"
		case "SEP":
			key = f + " endpoint " + sepDest(rules)
		default:
			key = f + " chain " + kind
		}
		s[key] = normAll(rules, n.label)
	}
	// filter: a rule naming a frontend's cluster IP and port is the
	// frontend's; the rest is frame.
	fl := tables["filter"]
	for name, rules := range fl.chains {
		var frame []string
		for _, r := range rules {
			if f := frontendOf(r); f != "" {
				s[f+" no endpoints"] = append(s[f+" no endpoints"], fl.label(name)+": "+r.norm(fl.label))
				continue
			}
			frame = append(frame, r.norm(fl.label))
		}
		s["chain filter "+fl.label(name)] = frame
	}
	for _, t := range []*iptTable{n, fl} {
		for _, c := range t.builtins {
			var jumps []string
			for _, r := range t.hooks[c] {
				if t.proxy(r.opt("-j")) {
					jumps = append(jumps, r.norm(t.label))
				}
			}
			if len(jumps) > 0 {
				s["hook "+t.name+" "+c] = jumps
			}
		}
	}
	return s, nil
}

// iptTable is one table of an iptables-save listing: the proxy's chains
// and the built-in ones.
type iptTable struct {
	name     string
	chains   map[string][]iptRule
	builtins []string
	hooks    map[string][]iptRule
	dests    map[string]string // SEP chain -> its DNAT destination
}

type iptRule []string

// opt returns the token after flag ("" if absent).
func (r iptRule) opt(flag string) string {
	for i := 0; i+1 < len(r); i++ {
		if r[i] == flag {
			return r[i+1]
		}
	}
	return ""
}

func (r iptRule) negated(flag string) bool {
	for i := 1; i < len(r); i++ {
		if r[i] == flag && r[i-1] == "!" {
			return true
		}
	}
	return false
}

// frontendOf returns "VIP:PORT/PROTO" for a rule matching one address
// and destination port, else "".
func frontendOf(r iptRule) string {
	d, p, port := r.opt("-d"), r.opt("-p"), r.opt("--dport")
	if d == "" || p == "" || port == "" || r.negated("-d") || !strings.HasSuffix(d, "/32") {
		return ""
	}
	return fmt.Sprintf("%s:%s/%s", strings.TrimSuffix(d, "/32"), port, p)
}

var proxyPrefixes = []string{"KUBE-", "CNLABSVC-", "CNLAB-"}

// proxy reports whether chain is the proxy's in this table (in filter,
// cnlab's CNLAB- chains are the policy datapath's).
func (t *iptTable) proxy(chain string) bool {
	if strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNLABSVC-") {
		return true
	}
	return t.name == "nat" && strings.HasPrefix(chain, "CNLAB-")
}

// role returns the name of the proxy's chain with role r in this table.
func (t *iptTable) role(r string) string {
	for _, p := range proxyPrefixes {
		if _, ok := t.chains[p+r]; ok {
			return p + r
		}
	}
	return ""
}

func stripPrefix(chain string) string {
	for _, p := range proxyPrefixes {
		if s, ok := strings.CutPrefix(chain, p); ok {
			return s
		}
	}
	return chain
}

// chainKind is a per-frontend chain's kind (SVC, SVL, EXT, FW, SEP), or
// its role.
func chainKind(chain string) string {
	s := stripPrefix(chain)
	for _, k := range []string{"SVC", "SVL", "EXT", "FW", "SEP"} {
		if strings.HasPrefix(s, k+"-") {
			return k
		}
	}
	return s
}

// label names a chain in a normalized rule: per-frontend chains by kind
// (an endpoint chain by its destination), the others by role; a target
// that is no chain of the proxy stays as it is.
func (t *iptTable) label(chain string) string {
	if !t.proxy(chain) {
		return chain
	}
	switch k := chainKind(chain); k {
	case "SEP":
		return "SEP(" + t.dests[chain] + ")"
	case "SVC", "SVL", "EXT", "FW":
		return k
	default:
		return k
	}
}

// claim makes chain and every chain it reaches that is no frame chain
// frontend f's.
func (t *iptTable) claim(chain, f string, owner map[string]string) {
	if !t.proxy(chain) || owner[chain] != "" {
		return
	}
	switch chainKind(chain) {
	case "SVC", "SVL", "EXT", "FW", "SEP":
	default:
		return
	}
	owner[chain] = f
	for _, r := range t.chains[chain] {
		t.claim(r.opt("-j"), f, owner)
	}
}

// reaches returns the frontend owning a chain chain reaches (through
// EXT, SVL, FW chains), else "".
func (t *iptTable) reaches(chain string, owner map[string]string) string {
	seen := map[string]bool{}
	var walk func(string) string
	walk = func(c string) string {
		if f := owner[c]; f != "" {
			return f
		}
		if seen[c] || !t.proxy(c) {
			return ""
		}
		seen[c] = true
		for _, r := range t.chains[c] {
			if f := walk(r.opt("-j")); f != "" {
				return f
			}
		}
		return ""
	}
	return walk(chain)
}

func sepDest(rules []iptRule) string {
	for _, r := range rules {
		if d := r.opt("--to-destination"); d != "" {
			return d
		}
	}
	return "?"
}

func normAll(rules []iptRule, label func(string) string) []string {
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		out = append(out, r.norm(label))
	}
	return out
}

// norm prints a rule without what does not compare: comments, the
// protocol match modules (-m tcp, -m udp) and chain names (labelled);
// probabilities to four decimals.
func (r iptRule) norm(label func(string) string) string {
	var out []string
	for i := 0; i < len(r); i++ {
		tok := r[i]
		switch {
		case tok == "-m" && i+1 < len(r) && r[i+1] == "comment":
			i += 3 // -m comment --comment TEXT
		case tok == "-m" && i+1 < len(r) && (r[i+1] == "tcp" || r[i+1] == "udp"):
			i++
		case (tok == "-j" || tok == "--name") && i+1 < len(r):
			out = append(out, tok, label(r[i+1]))
			i++
		case tok == "--probability" && i+1 < len(r):
			p, err := strconv.ParseFloat(r[i+1], 64)
			if err == nil {
				out = append(out, tok, strconv.FormatFloat(p, 'f', 4, 64))
			} else {
				out = append(out, tok, r[i+1])
			}
			i++
		case tok == "--nfacct-name" && i+1 < len(r):
			out = append(out, tok, r[i+1])
			i++
		default:
			if strings.ContainsAny(tok, " \t") {
				tok = strconv.Quote(tok)
			}
			out = append(out, tok)
		}
	}
	return strings.Join(out, " ")
}

// parseSave reads one table of an iptables-save listing.
func parseSave(name, text string) (*iptTable, error) {
	t := &iptTable{name: name, chains: map[string][]iptRule{}, hooks: map[string][]iptRule{}, dests: map[string]string{}}
	in := false
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "*"+name:
			in = true
		case line == "COMMIT":
			in = false
		case !in || line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, ":"):
			f := strings.Fields(line[1:])
			if len(f) < 2 {
				return nil, fmt.Errorf("iptables-save %s: bad chain line %q", name, line)
			}
			if f[1] != "-" {
				t.builtins = append(t.builtins, f[0])
			} else if t.proxy(f[0]) {
				t.chains[f[0]] = []iptRule{}
			}
		case strings.HasPrefix(line, "-A "):
			toks, err := tokenize(line)
			if err != nil {
				return nil, fmt.Errorf("iptables-save %s: %v: %q", name, err, line)
			}
			chain, rule := toks[1], iptRule(toks[2:])
			if _, ok := t.chains[chain]; ok {
				t.chains[chain] = append(t.chains[chain], rule)
				if d := rule.opt("--to-destination"); d != "" && chainKind(chain) == "SEP" {
					t.dests[chain] = d
				}
			} else {
				t.hooks[chain] = append(t.hooks[chain], rule)
			}
		}
	}
	return t, nil
}

// tokenize splits an iptables-save line into words, as a shell would:
// double-quoted words may hold spaces and backslash escapes.
func tokenize(line string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case quoted && c == '"':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '"':
			quoted, inWord = true, true
		case c == ' ' || c == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote")
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}
