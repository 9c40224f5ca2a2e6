package main

import (
	"bytes"
	"testing"

	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

// The matrix says that rows are senders and columns receivers: a denied
// a->b and an allowed b->a must land in the right cells.
func TestPrintMatrixSaysRowsAreSenders(t *testing.T) {
	spec := &topology.Spec{Endpoints: []topology.Endpoint{{Namespace: "x", Name: "a"}, {Namespace: "x", Name: "b"}}}
	no := false
	cells := []probe.Cell{
		{From: "x/a", To: "x/b", Allowed: false, Expected: &no},
		{From: "x/b", To: "x/a", Allowed: true, Expected: &no},
	}
	var b bytes.Buffer
	printMatrix(&b, spec, cells, "tcp", 80)
	want := `tcp/80 from\to x/a x/b
x/a            .   ✗
x/b            ✓*  .
rows: from (sender), columns: to (receiver); ✓ allowed  ✗ denied  * differs from the policy model
`
	if b.String() != want {
		t.Errorf("matrix:\n%s\nwant:\n%s", b.String(), want)
	}
}
