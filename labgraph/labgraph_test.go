package labgraph

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/topology"
)

// labs are the topologies the tests draw: the shipped examples, the
// presets and a hand-made one of three hosts.
func labs(t *testing.T) map[string]*topology.Spec {
	t.Helper()
	out := map[string]*topology.Spec{}
	for _, f := range []string{"two-hosts-vxlan", "three-hosts", "probe-scale", "chain-firewall", "chain-bridge", "chain-ovs", "policy-lab"} {
		sp, err := topology.Load(filepath.Join("..", "examples", f+".yaml"), topology.Overrides{})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[f] = sp
	}
	for _, p := range []string{"single-host", "multi-host", "direct"} {
		sp, err := topology.Preset(p, topology.PresetOptions{}, topology.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		out[p] = sp
	}
	sp, err := topology.Preset("chain", topology.PresetOptions{Length: 24, Link: "bridge"}, topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	out["chain-24"] = sp
	return out
}

// TestWritePreview writes every lab's SVG, PNG and DOT to
// $LABGRAPH_PREVIEW, for a look.
func TestWritePreview(t *testing.T) {
	dir := os.Getenv("LABGRAPH_PREVIEW")
	if dir == "" {
		t.Skip("LABGRAPH_PREVIEW not set")
	}
	for name, sp := range labs(t) {
		g := Build(sp, Options{L7Proxies: []string{"flip"}})
		pngData, err := g.PNG()
		if err != nil {
			t.Fatal(err)
		}
		for ext, data := range map[string][]byte{"svg": g.SVG(), "dot": g.DOT(), "png": pngData} {
			if err := os.WriteFile(filepath.Join(dir, name+"."+ext), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

var _ = fmt.Sprint
var _ = io.EOF
var _ = bytes.NewReader
var _ = xml.NewDecoder
var _ = png.Decode
var _ = strings.Contains
