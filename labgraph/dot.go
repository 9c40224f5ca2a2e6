package labgraph

import (
	"bytes"
	"fmt"
	"strings"
)

// DOT renders the graph in Graphviz's language (`dot -Tsvg`): a cluster
// per host with its bridge and endpoints, the links between the hosts'
// bridges, a chain as a left-to-right row.
func (g *Graph) DOT() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "graph %s {\n", q(g.Name))
	fmt.Fprintf(&b, "  graph [label=%s, labelloc=t, labeljust=l, fontname=monospace, rankdir=LR];\n",
		q(strings.Join(append([]string{"lab " + g.Name}, g.Header...), "\n")))
	b.WriteString("  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=monospace, fontsize=10];\n")
	b.WriteString("  edge [fontname=monospace, fontsize=9];\n")
	for i, h := range g.Hosts {
		fmt.Fprintf(&b, "  subgraph %s {\n", q(fmt.Sprintf("cluster_%d", i)))
		fmt.Fprintf(&b, "    label=%s; style=filled; fillcolor=%s; color=%s;\n", q("host "+h.Name), q(colHost), q(colHostLn))
		bridge := "host:" + h.Name
		fmt.Fprintf(&b, "    %s [label=%s, fillcolor=%s];\n", q(bridge), q(strings.Join(h.Lines, "\n")), q(colHost))
		for _, e := range h.Endpoints {
			fmt.Fprintf(&b, "    %s [label=%s, tooltip=%s];\n", q(e.ID), q(e.ID+"\n"+strings.Join(epLines(e), "\n")), q(epTip(e)))
			fmt.Fprintf(&b, "    %s -- %s;\n", q(e.ID), q(bridge))
		}
		if len(h.Hidden) > 0 {
			more := fmt.Sprintf("more:%s", h.Name)
			fmt.Fprintf(&b, "    %s [label=%s, style=\"rounded,dashed\", tooltip=%s];\n", q(more), q(fmt.Sprintf("… %d more", len(h.Hidden))), q(hiddenText(h.Hidden)))
			fmt.Fprintf(&b, "    %s -- %s [style=dashed];\n", q(more), q(bridge))
		}
		b.WriteString("  }\n")
	}
	for _, l := range g.Links {
		style := "solid"
		if l.Kind == "vxlan" {
			style = "dashed"
		}
		fmt.Fprintf(&b, "  %s -- %s [label=%s, taillabel=%s, headlabel=%s, style=%s, penwidth=2];\n",
			q("host:"+g.Hosts[l.A].Name), q("host:"+g.Hosts[l.B].Name), q(l.Label), q(l.Ends[0]), q(l.Ends[1]), style)
	}
	if ch := g.Chain; ch != nil {
		for i, n := range ch.Boxes {
			style := "rounded,filled"
			if n.Summary {
				style = "rounded,dashed"
			}
			fmt.Fprintf(&b, "  %s [label=%s, style=%s, fillcolor=%s];\n", q(fmt.Sprintf("chain:%d", i)),
				q(n.Title+"\n"+strings.Join(n.Lines, "\n")), q(style), q(colHop))
		}
		for i, s := range ch.Segments {
			fmt.Fprintf(&b, "  %s -- %s [label=%s];\n", q(fmt.Sprintf("chain:%d", i)), q(fmt.Sprintf("chain:%d", i+1)),
				q(strings.TrimSpace(s.Prefix+"\n"+s.Via)))
		}
	}
	for _, e := range g.Loose {
		fmt.Fprintf(&b, "  %s [label=%s];\n", q(e.ID), q(e.ID+"\n"+strings.Join(epLines(e), "\n")))
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// q quotes a DOT ID: backslash and quote escaped, newlines as \n.
func q(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	s = strings.ReplaceAll(s, "\n", `\n`)
	return `"` + s + `"`
}
