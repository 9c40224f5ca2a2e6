package kpshape

import (
	"fmt"
	"regexp"
	"strings"
)

// ParseNFT reduces `nft list table` of kube-proxy's table (ip kube-proxy)
// or cnlab's (ip cnlab-svc) to a Shape:
//
//   - "F dispatch", "F no endpoints", "F node port": the frontend's
//     elements of service-ips, no-endpoint-services, service-nodeports
//     (and no-endpoint-nodeports), verdicts labelled;
//   - "F service", "F local", "F external", "F firewall": its chains
//     (kube-proxy's local- and cnlab's service-local- are both "local");
//   - "F endpoint ADDR:PORT": its endpoint chains; "F affinity ADDR:PORT":
//     its affinity sets (declaration only);
//   - "chain NAME" (a base chain's hook first), "set NAME", "map NAME":
//     the rest, sets and maps by declaration and number of elements.
//
// Per-frontend chains and sets are named SVC, SVL, EXT, FW, SEP(ADDR:PORT)
// and AFF(ADDR:PORT) in rules.
func ParseNFT(text string) (Shape, error) {
	t, err := parseNFTTable(text)
	if err != nil {
		return nil, err
	}
	s := Shape{}
	tails := map[string]string{} // ns/name/proto/port -> frontend
	for _, e := range t.elems("service-ips") {
		f, err := nftFrontend(e.key)
		if err != nil {
			return nil, err
		}
		if m := objRE.FindStringSubmatch(strings.TrimPrefix(strings.TrimPrefix(e.value, "goto "), "jump ")); m != nil {
			tails[m[3]] = f
		}
	}
	for _, e := range t.elems("no-endpoint-services") {
		f, err := nftFrontend(e.key)
		if err != nil {
			return nil, err
		}
		s[f+" no endpoints"] = append(s[f+" no endpoints"], "no-endpoint-services: "+normNFT(e.value))
	}
	for _, e := range t.elems("service-ips") {
		f, _ := nftFrontend(e.key)
		s[f+" dispatch"] = append(s[f+" dispatch"], "service-ips: "+normNFT(e.value))
	}
	for _, m := range []string{"service-nodeports", "no-endpoint-nodeports"} {
		for _, e := range t.elems(m) {
			f := ""
			if o := objRE.FindStringSubmatch(strings.Fields(e.value + " x")[1]); o != nil {
				f = tails[frontTail(o[3])]
			}
			if f == "" {
				f = "nodeport " + e.key
			}
			s[f+" node port"] = append(s[f+" node port"], m+" "+e.key+": "+normNFT(e.value))
		}
	}
	for _, c := range t.chainOrder {
		ch := t.chains[c]
		rules := []string{}
		if ch.hook != "" {
			rules = append(rules, "hook: "+ch.hook)
		}
		for _, r := range ch.rules {
			rules = append(rules, normNFT(r))
		}
		if m := objRE.FindStringSubmatch(c); m != nil {
			f := tails[frontTail(m[3])]
			if f == "" {
				f = "? " + frontTail(m[3])
			}
			s[f+" "+objKey(m[1], m[3])] = rules
			continue
		}
		s["chain "+c] = rules
	}
	for _, n := range t.setOrder {
		st := t.sets[n]
		props := append([]string{}, st.props...)
		if m := objRE.FindStringSubmatch(n); m != nil {
			f := tails[frontTail(m[3])]
			if f == "" {
				f = "? " + frontTail(m[3])
			}
			s[f+" "+objKey(m[1], m[3])] = props
			continue
		}
		if len(st.elems) > 0 && !frontendMaps[n] {
			props = append(props, fmt.Sprintf("%d elements", len(st.elems)))
		}
		s[st.kind+" "+n] = props
	}
	return s, nil
}

// frontendMaps are the maps whose elements are per frontend.
var frontendMaps = map[string]bool{"service-ips": true, "no-endpoint-services": true, "service-nodeports": true, "no-endpoint-nodeports": true}

// objRE matches the name of a per-frontend chain or set, kube-proxy's or
// cnlab's: KIND-HASH-namespace/name/protocol/port[__ADDR/PORT].
var objRE = regexp.MustCompile(`^(service-local|service|external|endpoint|firewall|affinity|local)-([A-Z0-9]{8})-(\S+)$`)

// frontTail returns the ns/name/proto/port part of a name's tail.
func frontTail(tail string) string {
	f, _, _ := strings.Cut(tail, "__")
	return f
}

// epOf returns ADDR:PORT of an endpoint's tail (ns/name/proto/port__ADDR/PORT).
func epOf(tail string) string {
	_, ep, _ := strings.Cut(tail, "__")
	return strings.Replace(ep, "/", ":", 1)
}

func objKey(kind, tail string) string {
	switch kind {
	case "service":
		return "service"
	case "service-local", "local":
		return "local"
	case "external":
		return "external"
	case "firewall":
		return "firewall"
	case "endpoint":
		return "endpoint " + epOf(tail)
	case "affinity":
		return "affinity " + epOf(tail)
	}
	return kind
}

func objLabel(name string) (string, bool) {
	m := objRE.FindStringSubmatch(name)
	if m == nil {
		return "", false
	}
	switch m[1] {
	case "service":
		return "SVC", true
	case "service-local", "local":
		return "SVL", true
	case "external":
		return "EXT", true
	case "firewall":
		return "FW", true
	case "endpoint":
		return "SEP(" + epOf(m[3]) + ")", true
	case "affinity":
		return "AFF(" + epOf(m[3]) + ")", true
	}
	return "", false
}

var commentRE = regexp.MustCompile(`\s*comment "(?:[^"\\]|\\.)*"`)

// normNFT prints a rule with comments dropped and per-frontend names
// labelled.
func normNFT(rule string) string {
	rule = commentRE.ReplaceAllString(rule, "")
	words := strings.Fields(rule)
	for i, w := range words {
		core := strings.TrimRight(w, ",}")
		trail := w[len(core):]
		at := strings.HasPrefix(core, "@")
		if l, ok := objLabel(strings.TrimPrefix(core, "@")); ok {
			if at {
				l = "@" + l
			}
			words[i] = l + trail
		}
	}
	return strings.Join(words, " ")
}

// nftFrontend turns a map key "ADDR . PROTO . PORT" into "ADDR:PORT/PROTO".
func nftFrontend(key string) (string, error) {
	p := strings.Split(key, " . ")
	if len(p) != 3 {
		return "", fmt.Errorf("nft: map key %q is not ADDR . PROTO . PORT", key)
	}
	return fmt.Sprintf("%s:%s/%s", p[0], p[2], p[1]), nil
}

type nftElem struct{ key, value string }

type nftSet struct {
	kind  string // set or map
	props []string
	elems []nftElem
}

type nftChain struct {
	hook  string
	rules []string
}

type nftTable struct {
	chains     map[string]*nftChain
	chainOrder []string
	sets       map[string]*nftSet
	setOrder   []string
	maps       map[string]*nftSet
}

// elems returns map name's elements (none when the table has no such
// map).
func (t *nftTable) elems(name string) []nftElem {
	if m := t.maps[name]; m != nil {
		return m.elems
	}
	return nil
}

// parseNFTTable reads the output of `nft list table`.
func parseNFTTable(text string) (*nftTable, error) {
	t := &nftTable{chains: map[string]*nftChain{}, sets: map[string]*nftSet{}, maps: map[string]*nftSet{}}
	lines := strings.Split(text, "\n")
	var ch *nftChain
	var st *nftSet
	sawTable := false
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		switch {
		case line == "":
		case strings.HasPrefix(line, "table "):
			sawTable = true
		case line == "}":
			ch, st = nil, nil
		case strings.HasPrefix(line, "chain ") && strings.HasSuffix(line, "{"):
			name := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "chain "), "{"))
			ch = &nftChain{}
			t.chains[name] = ch
			t.chainOrder = append(t.chainOrder, name)
		case (strings.HasPrefix(line, "set ") || strings.HasPrefix(line, "map ")) && strings.HasSuffix(line, "{"):
			kind, rest, _ := strings.Cut(line, " ")
			name := strings.TrimSpace(strings.TrimSuffix(rest, "{"))
			st = &nftSet{kind: kind}
			t.sets[name] = st
			t.setOrder = append(t.setOrder, name)
			if kind == "map" {
				t.maps[name] = st
			}
		case ch != nil:
			switch {
			case strings.HasPrefix(line, "type "):
				ch.hook = line
			case strings.HasPrefix(line, "comment "):
			default:
				ch.rules = append(ch.rules, line)
			}
		case st != nil:
			if strings.HasPrefix(line, "elements = {") {
				body := strings.TrimPrefix(line, "elements = {")
				for !strings.HasSuffix(strings.TrimSpace(body), "}") && i+1 < len(lines) {
					i++
					body += " " + strings.TrimSpace(lines[i])
				}
				body = strings.TrimSuffix(strings.TrimSpace(commentRE.ReplaceAllString(body, "")), "}")
				for _, e := range strings.Split(body, ",") {
					e = strings.TrimSpace(e)
					if e == "" {
						continue
					}
					k, v, _ := strings.Cut(e, " : ")
					st.elems = append(st.elems, nftElem{key: strings.TrimSpace(k), value: strings.TrimSpace(v)})
				}
				continue
			}
			if !strings.HasPrefix(line, "comment ") {
				st.props = append(st.props, line)
			}
		}
	}
	if !sawTable {
		return nil, fmt.Errorf("nft: no table in the listing")
	}
	return t, nil
}
