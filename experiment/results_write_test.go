package experiment

import (
	"os"
	"path/filepath"
	"testing"
)

// The logs directory and each log file refuse a planted link.
func TestLogsDoNotFollowLinks(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(dir, "logs")); err != nil {
		t.Fatal(err)
	}
	if err := makeOut(dir); err == nil {
		t.Error("a link planted as logs/ was taken for the directory")
	}
	dir = t.TempDir()
	if err := makeOut(dir); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(elsewhere, "victim")
	if err := os.WriteFile(outside, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "logs", "p1-r0.log")); err != nil {
		t.Fatal(err)
	}
	if f, err := openLog(dir, filepath.Join("logs", "p1-r0.log")); err == nil {
		_, _ = f.WriteString("log")
		f.Close()
		t.Error("a link planted as a log file was opened")
	}
	if data, _ := os.ReadFile(outside); string(data) != "precious" {
		t.Error("the file outside was overwritten")
	}
}
