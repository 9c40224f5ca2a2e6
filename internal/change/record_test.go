package change

import (
	"os"
	"path/filepath"
	"testing"
)

func read(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A store of two files (Services and their allocations) through a change
// killed at each step: before its commit it reads as the old set, after
// its first rename as the new one (Path), and the next change finishes a
// commit cut half-way (Repair) instead of taking it for a staged set.
func TestStoreKilledAtEachStep(t *testing.T) {
	dir := t.TempDir()
	s := Store{What: "services", Record: filepath.Join(dir, "change.json"),
		Files: []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}}
	fresh := func() {
		t.Helper()
		for _, p := range []string{s.Record, s.Staged(0), s.Staged(1)} {
			os.Remove(p)
		}
		write(t, s.Files[0], "a1")
		write(t, s.Files[1], "b1")
	}
	reads := func(what, a, b string) {
		t.Helper()
		if got := read(t, s.Path(0)) + read(t, s.Path(1)); got != a+b {
			t.Errorf("%s: reads %q, want %q", what, got, a+b)
		}
	}
	rec := &Record{Op: "apply", To: "new"}

	fresh()
	if err := s.Begin(rec, []byte("a2"), []byte("b2")); err != nil {
		t.Fatal(err)
	}
	reads("staged", "a1", "b1")
	if k := s.Killed(s.ReadRecord(), "old"); k != KilledStaged {
		t.Errorf("staged: killed %q", k)
	}
	if err := s.Repair(); err != nil {
		t.Fatal(err)
	}
	reads("staged, repaired", "a1", "b1")

	// The commit cut between its renames.
	if err := os.Rename(s.Staged(0), s.Files[0]); err != nil {
		t.Fatal(err)
	}
	reads("half committed", "a2", "b2")
	if k := s.Killed(s.ReadRecord(), ""); k != KilledCommitted {
		t.Errorf("half committed: killed %q", k)
	}
	if err := s.Repair(); err != nil {
		t.Fatal(err)
	}
	reads("half committed, repaired", "a2", "b2")
	if _, err := os.Stat(s.Staged(1)); !os.IsNotExist(err) {
		t.Errorf("repaired: %s left", s.Staged(1))
	}
	if k := s.Killed(s.ReadRecord(), "new"); k != KilledCommitted {
		t.Errorf("committed: killed %q", k)
	}

	// A cleanup cut half-way (the last file unstaged, not the first) is
	// a staged set, not a commit.
	fresh()
	if err := s.Begin(rec, []byte("a2"), []byte("b2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.Staged(1)); err != nil {
		t.Fatal(err)
	}
	reads("half cleaned", "a1", "b1")
	if err := s.Repair(); err != nil {
		t.Fatal(err)
	}
	reads("half cleaned, repaired", "a1", "b1")

	// Recorded, nothing staged; then a whole change.
	fresh()
	if err := s.Begin(rec); err != nil {
		t.Fatal(err)
	}
	if k := s.Killed(s.ReadRecord(), "old"); k != KilledBeforeStaged {
		t.Errorf("recorded: killed %q", k)
	}
	if err := s.Begin(rec, []byte("a3"), []byte("b3")); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	reads("done", "a3", "b3")
	if s.ReadRecord() != nil {
		t.Error("the record is left after End")
	}
}
