package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGraphFormat(t *testing.T) {
	for _, c := range []struct{ format, out, want, err string }{
		{"", "", "svg", ""},
		{"", "x.PNG", "png", ""},
		{"", "x.gv", "dot", ""},
		{"dot", "x.svg", "dot", ""},
		{"", "x.pdf", "", "cannot tell the format of x.pdf"},
		{"jpeg", "", "", `unknown --format "jpeg" (svg, png, dot)`},
	} {
		got, err := graphFormat(c.format, c.out)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("graphFormat(%q, %q) = %q, %v; want %q, %q", c.format, c.out, got, err, c.want, c.err)
		}
	}
	if got := captureFile("lab", "x/a"); got != "lab-x-a.pcap" {
		t.Errorf("captureFile = %s", got)
	}
}

// TestGraphOfAFile draws topologies that are not up (no root needed):
// the file's SVG in a file, a preset's DOT on stdout, the bad inputs.
func TestGraphOfAFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "vx.svg")
	_, stderr, code := runCLI(t, "graph", "-f", "../../examples/two-hosts-vxlan.yaml", "-o", out)
	if code != 0 || !strings.Contains(stderr, "wrote "+out) {
		t.Fatalf("graph -f: exit %d: %s", code, stderr)
	}
	svg, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(svg), `data-id="x/a"`) || !strings.Contains(string(svg), "vxlan vni") {
		t.Errorf("graph -f wrote %d bytes without x/a or the vxlan link (%v)", len(svg), err)
	}
	stdout, stderr, code := runCLI(t, "graph", "--preset", "chain", "--format", "dot")
	if code != 0 || !strings.HasPrefix(stdout, `graph "chain" {`) || !strings.Contains(stdout, "hop 3") {
		t.Errorf("graph --preset chain --format dot: exit %d %q %s", code, stdout, stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"graph"}, "give exactly one of LAB, -f FILE or --preset"},
		{[]string{"graph", "lab", "--preset", "chain"}, "give exactly one of LAB, -f FILE or --preset"},
		{[]string{"graph", "--preset", "chain", "-o", "x.jpg"}, "cannot tell the format of x.jpg"},
		{[]string{"graph", "--preset", "chain", "--max-endpoints", "-1"}, "--max-endpoints must be 0 (all) or more"},
		{[]string{"graph", "--preset", "star"}, `unknown preset "star"`},
		{[]string{"capture", "lab"}, "usage: cnlab capture LAB ENDPOINT [FILTER...]"},
		{[]string{"capture", "lab", "x/a", "-c", "-2"}, "-c must be a count of packets"},
	} {
		_, stderr, code := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("cnlab %s: exit %d %q, want 2 and %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}
