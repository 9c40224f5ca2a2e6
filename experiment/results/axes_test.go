package results

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
)

// Every key of the matrix is an axis (a Matrix field without one would be
// decoded and then ignored), each once.
func TestEveryMatrixKeyIsAnAxis(t *testing.T) {
	var keys []string
	for i := range Axes {
		keys = append(keys, Axes[i].Key)
	}
	mt := reflect.TypeFor[Matrix]()
	var fields []string
	for i := range mt.NumField() {
		name, _, _ := strings.Cut(mt.Field(i).Tag.Get("json"), ",")
		fields = append(fields, name)
	}
	if !slices.Equal(keys, fields) {
		t.Errorf("axes %v, Matrix's keys %v: the same, in the same order", keys, fields)
	}
	for _, o := range kind.OptionAxes {
		if !slices.Contains(keys, o.Key) {
			t.Errorf("datapath option %s is not an axis", o.Key)
		}
	}
}

// Merging, expanding and labelling go through the table.
func TestAxesDriveTheMatrix(t *testing.T) {
	m := Matrix{Policies: []int{0, 10}, HostRouting: []string{"legacy"}, SocketLB: []bool{true}}
	m.OverrideSet(Matrix{Policies: []int{5}, MTU: []int{1400}})
	if !slices.Equal(m.Policies, []int{5}) || m.MTU != nil {
		t.Errorf("OverrideSet: %+v", m)
	}
	m.Override(Matrix{MTU: []int{1400, 9000}})
	if n := m.Combinations(100); n != 2 {
		t.Errorf("%d combinations, want 2", n)
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
