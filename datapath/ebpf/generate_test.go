package ebpf

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/testutil"
)

// TestGeneratedUpToDate rebuilds the programs with the go:generate line of
// gen.go into a scratch directory and checks that the committed object and
// bindings are byte for byte what the C source compiles to: an edit of
// bpf/cnlab.c without `go generate` fails here.
func TestGeneratedUpToDate(t *testing.T) {
	testutil.RequireTool(t, "clang", "clang")
	testutil.RequireTool(t, "llvm-strip", "llvm")
	src, err := os.ReadFile("gen.go")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, line := range strings.Split(string(src), "\n") {
		if rest, ok := strings.CutPrefix(line, "//go:generate go tool bpf2go "); ok {
			args = splitQuoted(rest)
		}
	}
	if args == nil {
		t.Fatal("no bpf2go line in gen.go")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", append([]string{"tool", "bpf2go", "-output-dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GOPACKAGE=ebpf", "GOFILE=gen.go")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bpf2go: %v\n%s", err, out)
	}
	for _, f := range []string{"cnlab_bpfel.go", "cnlab_bpfel.o"} {
		want, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, want) {
			t.Errorf("%s is stale: run `go generate ./datapath/ebpf` and commit the result", f)
		}
	}
}

// splitQuoted splits a go:generate argument list, keeping "quoted" words whole.
func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, any := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, any = !quoted, true
		case r == ' ' && !quoted:
			if any {
				out = append(out, cur.String())
				cur.Reset()
				any = false
			}
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if any {
		out = append(out, cur.String())
	}
	return out
}
