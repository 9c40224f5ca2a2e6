package results

import (
	"os"
	"path/filepath"
	"testing"
)

// Results are written by root into a directory the user names, perhaps
// under /tmp: a symlink planted at a predictable name there must not make
// cnlab overwrite the file it points at.
func TestResultsWriteDoesNotFollowLinks(t *testing.T) {
	for _, at := range []string{"results.json", "results.json.tmp", "results.csv", "results.csv.tmp"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			outside := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(outside, []byte("precious"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(dir, at)); err != nil {
				t.Fatal(err)
			}
			err := (&Results{}).Write(dir)
			if data, _ := os.ReadFile(outside); string(data) != "precious" {
				t.Errorf("the file outside was overwritten through %s (write: %v)", at, err)
			}
			if err == nil {
				for _, f := range []string{"results.json", "results.csv"} {
					if fi, err := os.Lstat(filepath.Join(dir, f)); err != nil || !fi.Mode().IsRegular() {
						t.Errorf("%s: %v", f, err)
					}
				}
			}
		})
	}
}
