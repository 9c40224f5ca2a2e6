package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/ebpf"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
)

// startMonitor starts `cnlab monitor args...` and waits for its banner.
// stderr returns all it wrote, once it has exited.
func startMonitor(t *testing.T, args ...string) (cmd *exec.Cmd, stderr func() string) {
	t.Helper()
	cmd = cnlab(append([]string{"monitor"}, args...)...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var buf strings.Builder
	banner, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for seen := false; sc.Scan(); {
			if !seen && strings.HasPrefix(sc.Text(), "monitoring lab") {
				seen = true
				close(banner)
			}
			buf.WriteString(sc.Text() + "\n")
		}
	}()
	select {
	case <-banner:
	case <-done:
		t.Fatalf("monitor %v: %s", args, buf.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("monitor %v: no banner in 10 s", args)
	}
	return cmd, func() string { <-done; return buf.String() }
}

// waitExit waits at most 5 s for cmd and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(5 * time.Second):
		t.Fatalf("%v still running after 5 s", cmd.Args)
		return -1
	}
}

// TestMonitorExits: Ctrl-C is a normal end, even with --count; too few
// events when --duration is up is a failure; a lab taken down and up again,
// or a host's pins gone (not only the first host's), ends the monitor.
func TestMonitorExits(t *testing.T) {
	testutil.RequireRoot(t)
	name := "trf-mon"
	up := func() {
		t.Helper()
		if _, stderr, code := runCLI(t, "up", "--preset", "multi-host", "--name", name, "--datapath", "ebpf"); code != 0 {
			t.Fatalf("up: %s", stderr)
		}
	}
	up()
	t.Cleanup(func() { runCLI(t, "down", name) })

	mon, _ := startMonitor(t, name, "--count", "5")
	if err := mon.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, mon); code != 0 {
		t.Errorf("Ctrl-C with --count: exit %d, want 0", code)
	}

	_, stderr, code := runCLI(t, "monitor", name, "--count", "5", "--duration", "500ms")
	if code != 1 || !strings.Contains(stderr, "0 of 5 events within 500ms") {
		t.Errorf("--duration up with too few events: exit %d: %s", code, stderr)
	}

	mon, out := startMonitor(t, name)
	if _, stderr, code := runCLI(t, "down", name); code != 0 {
		t.Fatalf("down: %s", stderr)
	}
	up() // within the monitor's check interval, mostly
	if code := waitExit(t, mon); code != 1 || !strings.Contains(out(), ebpf.ErrLabGone.Error()) {
		t.Errorf("lab down and up again: exit %d: %s", code, out())
	}

	// The pins of a host other than the first go (as if the lab were
	// half taken down): the monitor watches dead maps no more.
	spec, _, err := lab.Model(name, false)
	if err != nil {
		t.Fatal(err)
	}
	mon, out = startMonitor(t, name)
	if err := os.RemoveAll(ebpf.HostDir(name, spec.Hosts[len(spec.Hosts)-1].Name)); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, mon); code != 1 || !strings.Contains(out(), ebpf.ErrLabGone.Error()) {
		t.Errorf("last host's pins gone: exit %d: %s", code, out())
	}
}
