package topology

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cnlab/cnlab/internal/input"
)

// FuzzTopologyParse checks that any topology file is resolved or refused
// with an error, without a panic; the seeds are the shipped examples and
// alias bombs (which must be refused, not expanded).
func FuzzTopologyParse(f *testing.F) {
	examples, _ := filepath.Glob("../examples/*.yaml")
	for _, e := range examples {
		if data, err := os.ReadFile(e); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(aliasBomb))
	f.Add([]byte("name: t\nhosts: &h [{name: a}]\nendpoints: *h\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := Parse(data, "t.yaml", Overrides{})
		if err == nil && spec == nil {
			t.Fatal("no spec and no error")
		}
		if err != nil && !input.Is(err) {
			t.Fatalf("%T is not an input error: %v", err, err)
		}
	})
}

// aliasBomb is the "billion laughs": nine levels of ten aliases each.
const aliasBomb = `name: bomb
a0: &a0 [[], [], [], [], [], [], [], [], [], []]
a1: &a1 [*a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0]
a2: &a2 [*a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1]
a3: &a3 [*a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2]
a4: &a4 [*a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3]
a5: &a5 [*a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4]
a6: &a6 [*a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5]
a7: &a7 [*a6, *a6, *a6, *a6, *a6, *a6, *a6, *a6, *a6, *a6]
a8: &a8 [*a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7]
hosts: [*a8, *a8, *a8, *a8, *a8, *a8, *a8, *a8, *a8, *a8]
`
