package results

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"gopkg.in/yaml.v3"
)

// matrixOfLists is a matrix literal: key, list, key, list...
func matrixOfLists(kv ...any) Matrix {
	var m Matrix
	for i := 0; i+1 < len(kv); i += 2 {
		m.Set(kv[i].(string), kv[i+1])
	}
	return m
}

// Every Params field is an axis and every axis a Params field, each once
// (a field without a row would never be swept; a row without a field
// panics at init); the matrix's keys are the axes', in Axes' order.
func TestEveryMatrixKeyIsAnAxis(t *testing.T) {
	var keys []string
	for i := range Axes {
		keys = append(keys, Axes[i].Key)
	}
	var fields, params []string
	for i := range matrixType.NumField() {
		name, _, _ := strings.Cut(matrixType.Field(i).Tag.Get("json"), ",")
		fields = append(fields, name)
	}
	pt := reflect.TypeFor[Params]()
	for i := range pt.NumField() {
		name, _, _ := strings.Cut(pt.Field(i).Tag.Get("json"), ",")
		params = append(params, name)
	}
	if !slices.Equal(keys, fields) {
		t.Errorf("axes %v, Matrix's keys %v: the same, in the same order", keys, fields)
	}
	if slices.Sort(params); !slices.Equal(params, slices.Sorted(slices.Values(keys))) || len(slices.Compact(params)) != len(keys) {
		t.Errorf("axes %v, Params' keys %v: the same, each once", keys, params)
	}
	for _, o := range kind.OptionAxes {
		if !slices.Contains(keys, o.Key) {
			t.Errorf("datapath option %s is not an axis", o.Key)
		}
	}
}

// Merging, expanding and labelling go through the table.
func TestAxesDriveTheMatrix(t *testing.T) {
	m := matrixOfLists("policies", []int{0, 10}, "hostRouting", []string{"legacy"}, "socketLB", []bool{true})
	m.OverrideSet(matrixOfLists("policies", []int{5}, "mtu", []int{1400}))
	if p, mtu := AxisOf("policies").Strings(m), AxisOf("mtu"); !slices.Equal(p, []string{"5"}) || mtu.Len(m) != 0 {
		t.Errorf("OverrideSet: %+v", m)
	}
	c := m
	m.Override(matrixOfLists("mtu", []int{1400, 9000}))
	if n := m.Combinations(100); n != 2 {
		t.Errorf("%d combinations, want 2", n)
	}
	if n := c.Combinations(100); n != 1 {
		t.Errorf("Override changed a copy of the matrix: %d combinations, want 1", n)
	}
	var p Params
	for _, d := range m.Dims() {
		d.Set(&p, d.N-1)
	}
	if p.Policies != 5 || p.HostRouting != "legacy" || !p.SocketLB || p.MTU != 9000 {
		t.Errorf("expanded %+v", p)
	}
	if got := p.Text(); got != "policies=5 routing=legacy socket-lb mtu=9000" {
		t.Errorf("Text %q", got)
	}
}

// A row of Axes (with its Params field) is all an axis needs: for every
// axis, a matrix file that sets it decodes, is written back to JSON as
// it was, expands to points that carry the value, and results.csv and
// Params.Text show it where the row says. A new row is checked here
// without editing the test.
func TestAnAxisIsOneDeclaration(t *testing.T) {
	r := &Results{}
	for i := range Axes {
		a := &Axes[i]
		v := sample(a)
		var m Matrix
		if err := yaml.Unmarshal([]byte(a.Key+": ["+v+"]\n"), &m); err != nil {
			t.Fatalf("%s: %v", a.Key, err)
		}
		if got := a.Strings(m); !slices.Equal(got, []string{v}) {
			t.Errorf("%s: decoded %q, want [%s]", a.Key, got, v)
		}
		js, err := json.Marshal(m)
		var back Matrix
		if err == nil {
			err = json.Unmarshal(js, &back)
		}
		if err != nil || !reflect.DeepEqual(back, m) {
			t.Errorf("%s: JSON %s read back as %+v (%v), want %+v", a.Key, js, back, err, m)
		}
		var p Params
		for _, d := range m.Dims() {
			d.Set(&p, 0)
		}
		if a.Value(p) != v {
			t.Errorf("%s: point %+v, want %s", a.Key, p, v)
		}
		r.Points = append(r.Points, PointResult{Point: Point{ID: a.Key, Params: p}, Samples: []Sample{{Metrics: map[string]float64{}}}})
		if a.Text != nil || a.Label != "" {
			p.Topology, p.Services, p.L7Mode = PresetChain, 1, L7Rules // what some texts need
			if a.text(p) == "" || !strings.Contains(p.Text(), a.text(p)) {
				t.Errorf("%s=%s: not in Params.Text %q", a.Key, v, p.Text())
			}
		}
	}
	// results.csv: a column per axis but those the workload's carry, and
	// the point that sets it has the value there.
	path := filepath.Join(t.TempDir(), "results.csv")
	if err := r.writeCSV(path); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	for i, row := range rows[1:] {
		a := &Axes[i]
		col := slices.Index(rows[0], a.Key)
		switch {
		case a.CSV == CSVWorkload:
		case col < 0:
			t.Errorf("%s: no column in results.csv %v", a.Key, rows[0])
		case row[col] != sample(a):
			t.Errorf("%s: results.csv has %q, want %s", a.Key, row[col], sample(a))
		}
	}
}

// sample is a value the axis takes, not its zero.
func sample(a *Axis) string {
	switch {
	case a.Values != nil:
		return a.Values[len(a.Values)-1]
	case a.IsInt():
		return "1000"
	case a.list.Elem().Kind() == reflect.Bool:
		return "true"
	}
	return "x"
}
