package experiment

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cnlab/cnlab/internal/input"
)

// FuzzExperimentParse checks that any experiment file is parsed or refused
// with an input error, without a panic; the seeds are the shipped
// experiments and alias bombs (which must be refused, not expanded).
func FuzzExperimentParse(f *testing.F) {
	shipped, _ := filepath.Glob("../experiments/*.yaml")
	for _, e := range append(shipped, "default.yaml") {
		if data, err := os.ReadFile(e); err == nil {
			f.Add(data, false)
		}
	}
	f.Add([]byte("workloads: [{kind: &k tcp-stream}, {kind: *k}]\n"), true)
	bomb := "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i < 9; i++ {
		bomb += "a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " ["
		for j := 0; j < 10; j++ {
			bomb += "*a" + string(rune('0'+i-1)) + ", "
		}
		bomb += "]\n"
	}
	f.Add([]byte(bomb+"workloads: [*a8]\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, quick bool) {
		spec, err := Parse(data, filepath.Join("..", "experiments", "fuzz.yaml"), quick)
		if err == nil && spec == nil {
			t.Fatal("no spec and no error")
		}
		if err != nil && !input.Is(err) {
			t.Fatalf("%T is not an input error: %v", err, err)
		}
	})
}
