package files

import (
	"os"
	"path/filepath"
	"testing"
)

// plant makes link a symlink to a file outside dir holding "precious" and
// returns that file's path.
func plant(t *testing.T, link string) string {
	t.Helper()
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	return outside
}

func unchanged(t *testing.T, outside string) {
	t.Helper()
	if data, err := os.ReadFile(outside); err != nil || string(data) != "precious" {
		t.Errorf("the file outside was changed through a planted link: %q %v", data, err)
	}
}

// A symlink planted at the predictable temporary name or at the target is
// never followed: the target ends up a regular file with the data.
func TestWriteAtomicDoesNotFollowLinks(t *testing.T) {
	for _, at := range []string{"results.json.tmp", "results.json"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			outside := plant(t, filepath.Join(dir, at))
			path := filepath.Join(dir, "results.json")
			if err := WriteJSON(path, map[string]int{"a": 1}, false); err != nil {
				t.Fatal(err)
			}
			unchanged(t, outside)
			fi, err := os.Lstat(path)
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
				t.Fatalf("%s: %v %v", path, fi.Mode(), err)
			}
			if data, _ := os.ReadFile(path); string(data) != `{"a":1}` {
				t.Errorf("wrote %q", data)
			}
		})
	}
}

// Create refuses a planted link rather than truncating what it points at.
func TestCreateDoesNotFollowLinks(t *testing.T) {
	dir := t.TempDir()
	outside := plant(t, filepath.Join(dir, "p1-r0.log"))
	f, err := Create(filepath.Join(dir, "p1-r0.log"))
	if err == nil {
		_, _ = f.WriteString("log")
		f.Close()
		t.Error("a planted link was opened")
	}
	unchanged(t, outside)
}

// Mkdir refuses a planted link in place of the directory: files written
// into it would land wherever it points.
func TestMkdirDoesNotFollowLinks(t *testing.T) {
	dir := t.TempDir()
	target := t.TempDir()
	if err := os.Symlink(target, filepath.Join(dir, "logs")); err != nil {
		t.Fatal(err)
	}
	if err := Mkdir(filepath.Join(dir, "logs")); err == nil {
		t.Error("a planted link was taken for the directory")
	}
	if err := Mkdir(filepath.Join(dir, "figures")); err != nil {
		t.Fatal(err)
	}
	if err := Mkdir(filepath.Join(dir, "figures")); err != nil {
		t.Errorf("an existing directory: %v", err)
	}
}
