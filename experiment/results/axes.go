package results

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
)

// Limits of the matrix's values.
const (
	MaxPolicies = 100000
	MaxFlows    = 64 // iperf3 pairs on ports 5201 to 5264
	MaxServices = 50000
	MaxBackends = 64
	MaxL7Rules  = 100000
)

// Where the measured Service sits among a point's Services: first or last
// in the order the proxies match them (by namespace and name; for
// kube-proxy's iptables layout, the first or the last rule of
// KUBE-SERVICES a new connection walks).
const (
	PositionFirst = "first"
	PositionLast  = "last"
)

// The kubernetes backend's matrix values.
const (
	PlacementSameNode  = "same-node"
	PlacementCrossNode = "cross-node"
	NetworkPod         = "pod"
	NetworkHost        = "host"
)

// Axis is one parameter of the experiment matrix, declared once in Axes:
// the matrix's merge and expansion, its checks of values, the backends
// that refuse it, its results.csv column and its words in Params.Text
// all follow from the declaration. Its Params field (a point's value,
// which the runner reads) is the one whose JSON key is Key; the matrix's
// list of values follows from that field's type (Matrix).
type Axis struct {
	Key string // the matrix key, Params' JSON key, results.csv's column
	// Values are the values a string axis takes (nil: any, or checked
	// by package experiment, which knows topologies and datapaths).
	Values []string
	// Min and Max bound an int axis (Max 0: checked by experiment).
	Min, Max int
	// Kube says why --backend kubernetes refuses the key ("": accepted).
	Kube string
	// Option is the datapath option the axis is (from kind.OptionAxes).
	Option *kind.OptionAxis
	// Label names a set value in Params.Text: "mtu" gives "mtu=9000"; a
	// bool's is shown alone when true ("stateful"); zero values are not
	// shown. Text, when the words depend on other axes, is the axis in
	// Params.Text instead ("": not shown for this point). TextFirst axes
	// lead it (the policies).
	Label     string
	Text      func(p Params) string
	TextFirst bool
	// CSV is where results.csv has the axis's column.
	CSV CSVPlace
	// FigureX ranks the axes a figure can have on its x axis (1 first,
	// 0 never); XLabel labels that axis.
	FigureX int
	XLabel  string
	// Show is a value in the name of a figure's line ("4 hops"; ""
	// leaves it out); nil: the axis does not name lines.
	Show func(v string) string

	params int          // Params' field
	list   reflect.Type // the matrix's list of values: []int, []string or []bool
}

// CSVPlace is where results.csv has an axis's column.
type CSVPlace int

// Places of a column.
const (
	CSVParam    CSVPlace = iota // among the parameters, in Axes' order
	CSVWorkload                 // none: the workload's column carries it (flows, size, zerocopy)
	CSVLast                     // after the repetition (the kubernetes backend's, added last)
	// CSVWhenSet: after the nodes, before the metrics, and only in a
	// results.csv where some point sets the axis, so that the files of
	// runs that do not use it keep their bytes (the cluster policies').
	CSVWhenSet
)

// csvAfter places a column added after others where it was put, so that
// results.csv's columns stay where they were.
var csvAfter = map[string]string{"socketLB": "servicePosition"}

// Axes are the matrix's axes in the order points are expanded (the last
// varies fastest).
var Axes = buildAxes()

// counted shows a number of things: "1 hop", "4 hops".
func counted(one, many string) func(string) string {
	return func(v string) string {
		if v == "1" {
			return "1 " + one
		}
		return v + " " + many
	}
}

// named shows a value after its name, "MTU default" when unset.
func named(prefix string) func(string) string {
	return func(v string) string {
		if v == "" || v == "0" {
			return prefix + " default"
		}
		return prefix + " " + v
	}
}

// either shows a bool as one of two words.
func either(yes, no string) func(string) string {
	return func(v string) string {
		if v == "true" {
			return yes
		}
		return no
	}
}

// prefixed shows a set value after a prefix ("" when unset).
func prefixed(prefix string) func(string) string {
	return func(v string) string {
		if v == "" {
			return ""
		}
		return prefix + v
	}
}

func itself(v string) string { return v }

func buildAxes() []Axis {
	const chainHops, nf, ovs = "chains are namespaces in series on one machine", "network functions go in chain hops", "Open vSwitch bridges go in chains"
	const l7 = "not yet: L7 policies need the cluster's proxy"
	axes := []Axis{
		{Key: "topology", Show: itself},
		{Key: "link", Kube: "the cluster's nodes are joined by their own network", Show: itself, Label: "link"},
		{Key: "chainLength", Min: 0, Max: 64, Kube: chainHops, FigureX: 2, XLabel: "chain length (hops; 0 = direct veth pair)", Show: func(v string) string {
			if v == "0" {
				return "direct pair"
			}
			return counted("hop", "hops")(v)
		}, Text: func(p Params) string {
			if IsChain(p.Topology) {
				return fmt.Sprintf("length=%d", p.ChainLength)
			}
			return ""
		}},
		{Key: "datapath", Kube: "the cluster's CNI is the datapath (recorded in environment.json)"},
	}
	for i := range kind.OptionAxes {
		o := &kind.OptionAxes[i]
		a := Axis{Key: o.Key, Values: o.Values, Kube: o.Kube, Option: o, Label: o.Text}
		axes = append(axes, a)
	}
	return bind(append(axes, []Axis{
		// Its values are checked by package experiment (topology's
		// levels); its column is added only where a run sets it.
		{Key: "observe", CSV: CSVWhenSet, Label: "observe", Show: prefixed("observe "),
			Kube: "flow visibility on a cluster is its CNI's (Hubble for Cilium), not a lab's observe level"},
		{Key: "policies", Min: 0, Max: MaxPolicies, TextFirst: true, FigureX: 1, XLabel: "number of policies", Show: func(v string) string { return v + " policies" }, Text: func(p Params) string {
			if p.L7Mode == "" && p.ClusterPolicyMatch == "" || p.Policies > 0 {
				return fmt.Sprintf("policies=%d", p.Policies)
			}
			return ""
		}},
		{Key: "policyMode", Values: PolicyModes, TextFirst: true, Text: func(p Params) string {
			if p.PolicyMode != ModeNoMatch && p.PolicyMode != "" {
				return "mode=" + p.PolicyMode
			}
			return ""
		}},
		{Key: "flows", Min: 1, Max: MaxFlows, CSV: CSVWorkload, FigureX: 7, XLabel: "parallel flows", Show: counted("flow", "flows")},
		{Key: "size", Min: 1, Max: 1 << 20, CSV: CSVWorkload, FigureX: 8, XLabel: "message size (bytes)", Show: func(v string) string { return v + " B" }},
		{Key: "mtu", Min: 576, Max: 65000, FigureX: 9, XLabel: "MTU (bytes)", Show: named("MTU"), Kube: "the pod MTU is the CNI's", Label: "mtu"},
		{Key: "offloads", Show: named("offloads"), Kube: "the nodes' offloads are not cnlab's to change", Label: "offloads"},
		{Key: "zerocopy", CSV: CSVWorkload, Show: either("zerocopy", "copy")},
		{Key: "firewallRules", Min: 0, Max: 100000, FigureX: 4, XLabel: "firewall rules", Show: func(v string) string { return v + " rules" }, Kube: nf + ", which a cluster does not have", Label: "firewall"},
		{Key: "firewallStateful", Kube: nf, Show: either("stateful", "stateless"), Label: "stateful"},
		{Key: "firewallSpread", Kube: nf, Show: either("spread over the hops", "in one hop"), Label: "spread"},
		{Key: "shaperRate", Kube: nf, Show: func(v string) string {
			if v == "" {
				return "no shaper"
			}
			return "shaper " + v
		}, Label: "shaper"},
		{Key: "shaperDirection", Kube: nf, Show: func(v string) string {
			if v == "all" {
				return "every interface"
			}
			return prefixed("towards ")(v)
		}, Label: "shape"},
		{Key: "switches", Kube: ovs, FigureX: 3, XLabel: "Open vSwitch bridges in series", Show: func(v string) string { return v + " switches" }, Label: "switches"},
		{Key: "switchLink", Kube: ovs, Show: prefixed("switches joined by "), Label: "switchLink"},
		{Key: "services", Min: 0, Max: MaxServices, FigureX: 5, XLabel: "number of services", Show: counted("service", "services"), Label: "services"},
		{Key: "serviceProxy", Kube: "kube-proxy (or its replacement) is the cluster's", Label: "proxy"},
		{Key: "serviceBackends", Min: 1, Max: MaxBackends, Show: func(v string) string {
			if v == "0" {
				return ""
			}
			return counted("backend a Service", "backends a Service")(v)
		}, Text: func(p Params) string {
			if p.Services > 0 && p.ServiceBackends > 1 {
				return fmt.Sprintf("backends=%d", p.ServiceBackends)
			}
			return ""
		}},
		{Key: "servicePosition", Values: []string{PositionFirst, PositionLast}, Show: prefixed("measured Service "), Text: func(p Params) string {
			if p.Services > 0 && p.ServicePosition != "" {
				return "position=" + p.ServicePosition
			}
			return ""
		}},
		{Key: "l7Mode", Values: L7Modes, Kube: l7 + " (Cilium's Envoy), which cnlab does not drive", Label: "l7"},
		{Key: "l7Rules", Min: 0, Max: MaxL7Rules, Kube: l7, FigureX: 6, XLabel: "HTTP rules in the L7 policy", Show: counted("L7 rule", "L7 rules"), Text: func(p Params) string {
			if p.L7Mode == L7Rules {
				return fmt.Sprintf("rules=%d match=%s", p.L7Rules, p.L7Match)
			}
			return ""
		}},
		{Key: "l7Match", Values: L7Matches, Kube: l7},
		// cnlab is kept as "" (the points of runs without the axis keep
		// their bytes); its column is added only where a run sets it.
		{Key: "l7Proxy", Values: L7Proxies, Kube: l7, CSV: CSVWhenSet, Label: "l7proxy", Show: func(v string) string {
			if v == L7ProxyHAProxy {
				return HAProxyLabel
			}
			return ""
		}},
		{Key: "clusterPolicies", Min: 0, Max: MaxClusterPolicies, CSV: CSVWhenSet, TextFirst: true, FigureX: 10, XLabel: "Admin-tier cluster policies in front of the flow", Show: counted("cluster policy", "cluster policies"), Text: func(p Params) string {
			if p.ClusterPolicies > 0 || p.ClusterPolicyMatch != "" {
				return fmt.Sprintf("cluster-policies=%d", p.ClusterPolicies)
			}
			return ""
		}},
		{Key: "clusterPolicyMatch", Values: ClusterMatches, CSV: CSVWhenSet, TextFirst: true, Show: func(v string) string {
			switch v {
			case ClusterMatchNone:
				return "no cluster policy matches"
			case ClusterMatchLast:
				return "the last cluster policy accepts"
			}
			return ""
		}, Text: func(p Params) string {
			if p.ClusterPolicyMatch == ClusterMatchLast {
				return "cluster-match=last"
			}
			return ""
		}},
		{Key: "placement", Values: []string{PlacementSameNode, PlacementCrossNode}, CSV: CSVLast, Text: func(p Params) string { return p.Placement }},
		{Key: "network", Values: []string{NetworkPod, NetworkHost}, CSV: CSVLast, Label: "network"},
		// Its column is added only where a run sets it.
		{Key: "ipFamily", Min: 4, Max: 6, CSV: CSVWhenSet, Label: "ipFamily", Show: func(v string) string {
			if v == "0" || v == "" {
				return ""
			}
			return "IPv" + v
		}, Kube: "not yet: the kubernetes backend connects to the pods' primary address"},
	}...))
}

// bind finds each axis's Params field by JSON key (an axis without one
// is a programming error) and, from its type, the axis's matrix list.
func bind(axes []Axis) []Axis {
	pt := reflect.TypeFor[Params]()
	for i := range axes {
		a := &axes[i]
		a.params = -1
		for j := range pt.NumField() {
			if name, _, _ := strings.Cut(pt.Field(j).Tag.Get("json"), ","); name == a.Key {
				a.params = j
			}
		}
		if a.params < 0 {
			panic(fmt.Sprintf("results: axis %s has no Params field", a.Key))
		}
		a.list = listType(pt.Field(a.params).Type)
	}
	return axes
}

// Len is the number of values the matrix gives the axis.
func (a *Axis) Len(m Matrix) int {
	if l := m.list(a); l.IsValid() {
		return l.Len()
	}
	return 0
}

// Strings are the values of the axis in a matrix, as text ("100", "true").
func (a *Axis) Strings(m Matrix) []string {
	out := make([]string, a.Len(m))
	for i := range out {
		out[i] = text(m.list(a).Index(i))
	}
	return out
}

// Value is a point's value of the axis as text ("" for an unset string).
func (a *Axis) Value(p Params) string { return text(reflect.ValueOf(p).Field(a.params)) }

// isSet reports whether a point gives the axis a value other than its
// zero value.
func (a *Axis) isSet(p Params) bool { return !reflect.ValueOf(p).Field(a.params).IsZero() }

// IsInt reports whether the axis takes integers.
func (a *Axis) IsInt() bool { return a.list.Elem().Kind() == reflect.Int }

func text(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Int:
		return strconv.Itoa(int(v.Int()))
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	}
	return v.String()
}

// set gives a point the axis's i-th value in m.
func (a *Axis) set(p *Params, m Matrix, i int) {
	f := reflect.ValueOf(p).Elem().Field(a.params)
	f.Set(m.list(a).Index(i).Convert(f.Type()))
}

// CheckValue checks a value of the axis (as Strings gives it) against Values or
// Min and Max; the message names the value, not the key.
func (a *Axis) CheckValue(v string) error {
	switch {
	case a.Values != nil && !slices.Contains(a.Values, v) && len(a.Values) == 2:
		return fmt.Errorf("%q: %s or %s", v, a.Values[0], a.Values[1])
	case a.Values != nil && !slices.Contains(a.Values, v):
		return fmt.Errorf("%q: one of %s", v, strings.Join(a.Values, ", "))
	case a.Max > 0:
		if n, _ := strconv.Atoi(v); n < a.Min || n > a.Max {
			return fmt.Errorf("%d: between %d and %d", n, a.Min, a.Max)
		}
	}
	return nil
}

// Override replaces every key o sets.
func (m *Matrix) Override(o Matrix) { m.merge(o, false) }

// OverrideSet replaces only the keys both m and o set.
func (m *Matrix) OverrideSet(o Matrix) { m.merge(o, true) }

func (m *Matrix) merge(o Matrix, onlySet bool) {
	for i := range Axes {
		a := &Axes[i]
		if have, give := a.Len(*m), a.Len(o); give > 0 && (!onlySet || have > 0) {
			m.Set(a.Key, o.lists[a.Key])
		}
	}
}

// Dim is one axis of the matrix with values: how many, and how the i-th
// is set on a point.
type Dim struct {
	N   int
	Set func(p *Params, i int)
}

// Dims are the matrix's axes that have values, in Axes' order.
func (m Matrix) Dims() []Dim {
	var ds []Dim
	for i := range Axes {
		a := &Axes[i]
		if n := a.Len(m); n > 0 {
			ds = append(ds, Dim{n, func(p *Params, i int) { a.set(p, m, i) }})
		}
	}
	return ds
}

// Combinations is the number of parameter combinations, or a number above
// limit as soon as it exceeds it.
func (m Matrix) Combinations(limit int) int {
	n := 1
	for _, d := range m.Dims() {
		n *= d.N
		if n > limit {
			return n
		}
	}
	return n
}

// Text is the point's parameters in a few words, for tables
// ("policies=100 mode=top-of-chain").
func (p Params) Text() string {
	var first, rest []string
	for i := range Axes {
		a := &Axes[i]
		if t := a.text(p); t != "" && a.TextFirst {
			first = append(first, t)
		} else if t != "" {
			rest = append(rest, t)
		}
	}
	return strings.Join(append(first, rest...), " ")
}

// text is the axis in Params.Text.
func (a *Axis) text(p Params) string {
	switch f := reflect.ValueOf(p).Field(a.params); {
	case a.Text != nil:
		return a.Text(p)
	case a.Label == "" || f.IsZero():
		return ""
	case f.Kind() == reflect.Bool:
		return a.Label
	default:
		return a.Label + "=" + text(f)
	}
}

// csvAxes are the axes with a column among the parameters, after the
// repetition, and (when set) after the nodes, in results.csv's order.
var csvAxes, csvLastAxes, csvWhenSetAxes = func() (params, last, whenSet []*Axis) {
	for i := range Axes {
		a := &Axes[i]
		switch {
		case csvAfter[a.Key] != "":
		case a.CSV == CSVParam:
			params = append(params, a)
		case a.CSV == CSVLast:
			last = append(last, a)
		case a.CSV == CSVWhenSet:
			whenSet = append(whenSet, a)
		}
		for j := range Axes {
			if csvAfter[Axes[j].Key] == a.Key {
				params = append(params, &Axes[j])
			}
		}
	}
	return params, last, whenSet
}()

// AxisOf returns the axis of a matrix key (nil: none).
func AxisOf(key string) *Axis {
	for i := range Axes {
		if Axes[i].Key == key {
			return &Axes[i]
		}
	}
	return nil
}

// FigureX are the axes a figure can have on its x axis, in the order the
// report picks one by default (the first that varies).
var FigureX = func() []string {
	var xs []*Axis
	for i := range Axes {
		if Axes[i].FigureX > 0 {
			xs = append(xs, &Axes[i])
		}
	}
	slices.SortFunc(xs, func(a, b *Axis) int { return a.FigureX - b.FigureX })
	out := make([]string, len(xs))
	for i, a := range xs {
		out[i] = a.Key
	}
	return out
}()
