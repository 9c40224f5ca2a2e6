package experiment

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/topology"
)

// kubeRefused are the matrix keys that cannot apply on a cluster, with
// why (results.Axes' Kube; docs/kubernetes.md).
var kubeRefused = func() (out []struct {
	key, why string
	set      func(m results.Matrix) bool
}) {
	for i := range results.Axes {
		a := &results.Axes[i]
		if a.Kube != "" {
			out = append(out, struct {
				key, why string
				set      func(m results.Matrix) bool
			}{a.Key, a.Kube, func(m results.Matrix) bool { return a.Len(m) > 0 }})
		}
	}
	return out
}()

// axisChecks check the values of the axes whose values results cannot
// know (topologies, datapaths, rates); the others are checked against
// their Axis.
var axisChecks = map[string]func(v string) error{
	"topology": func(v string) error {
		if v == "" {
			return fmt.Errorf("empty topology: a preset (%s) or a topology file", strings.Join(topology.Presets(), ", "))
		}
		return nil
	},
	"datapath": func(v string) error {
		if _, err := kind.Parse(v); err != nil {
			return fmt.Errorf("%q is not a datapath (%s)", v, kind.Names())
		}
		return nil
	},
	"offloads": func(v string) error { _, err := parseOffloads(v); return err },
	"observe":  topology.CheckObserve,
	"shaperRate": func(v string) error {
		_, err := topology.ParseRate(v)
		return err
	},
	"serviceProxy": func(v string) error { _, err := kind.ParseProxy(v); return err },
	"ipFamily": func(v string) error {
		if v != "4" && v != "6" {
			return fmt.Errorf("%s: 4 or 6", v)
		}
		return nil
	},
	"switchLink": func(v string) error {
		if v != topology.SwitchPatch && v != topology.SwitchVeth {
			return fmt.Errorf("%q: patch or veth", v)
		}
		return nil
	},
	"shaperDirection": func(v string) error {
		dirs := []string{topology.ShapeToServer, topology.ShapeToClient, topology.ShapeBoth, topology.ShapeAll}
		if !slices.Contains(dirs, v) {
			return fmt.Errorf("%q: one of %s", v, strings.Join(dirs, ", "))
		}
		return nil
	},
	"switches": func(v string) error {
		if n, _ := strconv.Atoi(v); n < 1 || n > topology.MaxSwitches {
			return fmt.Errorf("%d: between %d and %d", n, 1, topology.MaxSwitches)
		}
		return nil
	},
}

// checkMatrix validates the values of each key on its own.
func checkMatrix(m results.Matrix, s *Spec, path string) error {
	if n := m.Combinations(MaxPoints); n > MaxPoints {
		return s.errf(path, "expands to more than %d points", MaxPoints)
	}
	for i := range results.Axes {
		a := &results.Axes[i]
		for k, v := range a.Strings(m) {
			err := a.CheckValue(v)
			if c := axisChecks[a.Key]; err == nil && c != nil {
				err = c(v)
			}
			if err != nil {
				return s.errf(fmt.Sprintf("%s.%s[%d]", path, a.Key, k), "%v", err)
			}
		}
	}
	return nil
}

// optionAxes are the datapath options among the axes.
var optionAxes = func() (out []*results.Axis) {
	for i := range results.Axes {
		if results.Axes[i].Option != nil {
			out = append(out, &results.Axes[i])
		}
	}
	return out
}()

// checkOptions refuses a datapath option at a point without its datapath
// (a chain has none).
func checkOptions(p *results.Params, chain bool, bad func(key, format string, args ...any) error) error {
	for _, a := range optionAxes {
		v := a.Value(*p)
		if v == "" || v == "false" {
			continue
		}
		switch o := a.Option; {
		case chain:
			return bad(a.Key, "applies to the %s datapath, not to chains", o.Of)
		case p.Datapath != o.Datapath:
			return bad(a.Key, "applies to the %s datapath only (datapath %s)", o.Of, p.Datapath)
		}
	}
	return nil
}

// optionSeries are a point's datapath options in its series name: those
// joined to the datapath's name ("+ipsets") and those after the policy
// mode (" legacy-routing").
func optionSeries(p results.Params) (joined, after string) {
	for _, a := range optionAxes {
		sfx := a.Option.Series[a.Value(p)]
		if strings.HasPrefix(sfx, "+") {
			joined += sfx
		} else {
			after += sfx
		}
	}
	return joined, after
}
