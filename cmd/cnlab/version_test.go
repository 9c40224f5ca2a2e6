package main

import (
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	out, stderr, code := runCLI(t, "version")
	if code != 0 || stderr != "" {
		t.Fatalf("version: exit %d, stderr %q", code, stderr)
	}
	if !strings.HasPrefix(out, "cnlab ") || !strings.Contains(out, ", commit ") || !strings.HasSuffix(out, runtime.Version()+"\n") {
		t.Errorf("version printed %q, want cnlab VERSION, commit REV, %s", out, runtime.Version())
	}
	flag, _, code := runCLI(t, "--version")
	if code != 0 || flag != out {
		t.Errorf("--version: exit %d, %q; want the same line as version, %q", code, flag, out)
	}
	if _, _, code := runCLI(t, "version", "extra"); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}
