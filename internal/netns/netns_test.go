package netns_test

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestCreateDoDelete(t *testing.T) {
	testutil.RequireRoot(t)
	const name = "cnlab.t-netns.x"
	if err := Create(name, func() error { return SetSysctl("net/ipv4/ip_forward", "1") }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Delete(name) })
	if !Exists(name) {
		t.Fatal("Exists = false after Create")
	}
	if err := Create(name, nil); !errors.Is(err, os.ErrExist) {
		t.Errorf("second Create: %v, want ErrExist", err)
	}
	// Inside, the sysctl set at creation is visible; outside it is not
	// changed by us.
	var inside string
	if err := Do(name, func() error {
		b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
		inside = strings.TrimSpace(string(b))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if inside != "1" {
		t.Errorf("ip_forward inside = %q", inside)
	}
	// Do, including a failing one, leaves no thread of the process in the
	// lab namespace: every task's namespace is the main thread's.
	for i := 0; i < 50; i++ {
		_ = Do(name, func() error { return nil })
		_ = Do(name, func() error { return errors.New("fail") })
		_ = Do("cnlab.t-netns.missing", func() error { return nil })
	}
	main, _ := os.Readlink("/proc/self/ns/net")
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		if l, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net"); err == nil && l != main {
			t.Errorf("thread %s is in %s, not the main thread's %s", task.Name(), l, main)
		}
	}
	if names, _ := List("cnlab.t-netns."); len(names) != 1 || names[0] != name {
		t.Errorf("List = %v", names)
	}
	if err := Delete(name); err != nil {
		t.Fatal(err)
	}
	if Exists(name) {
		t.Error("Exists after Delete")
	}
	if err := Delete(name); err != nil {
		t.Errorf("Delete of a missing namespace: %v", err)
	}
}

// testNetns creates a namespace for one test (which needs root) and
// deletes it when the test ends.
func testNetns(t *testing.T, name string) string {
	t.Helper()
	testutil.RequireRoot(t)
	if err := Create(name, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Delete(name) })
	return name
}

func TestKillAll(t *testing.T) {
	name := testNetns(t, "cnlab.t-netns.kill")
	cmd := exec.Command("sleep", "300")
	if err := Start(name, cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	if err := KillAll(Inodes([]string{name}), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("process survived KillAll")
	}
}

func TestRun(t *testing.T) {
	name := testNetns(t, "cnlab.t-netns.run")
	ctx := context.Background()

	// stdin reaches the program, stdout comes back.
	out, err := Run(ctx, name, []byte("in\n"), "cat")
	if err != nil || string(out) != "in\n" {
		t.Errorf("cat: %q, %v", out, err)
	}
	// The program runs inside the namespace.
	ino, err := Inode(name)
	if err != nil {
		t.Fatal(err)
	}
	out, err = Run(ctx, name, nil, "readlink", "/proc/self/ns/net")
	if want := fmt.Sprintf("net:[%d]", ino); err != nil || strings.TrimSpace(string(out)) != want {
		t.Errorf("readlink: %q, %v; want %s", out, err, want)
	}
	// A failure names the command line and the namespace, wraps the exit
	// error, carries the trimmed stderr and returns the output so far.
	out, err = Run(ctx, name, nil, "sh", "-c", "echo partial; echo '  oops  ' >&2; exit 3")
	var exitErr *exec.ExitError
	if want := "sh -c echo partial; echo '  oops  ' >&2; exit 3 in " + name + ": exit status 3: oops"; err == nil || err.Error() != want {
		t.Errorf("failing sh: %v\nwant %s", err, want)
	}
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
		t.Errorf("failing sh: %v does not wrap an exit status 3", err)
	}
	if string(out) != "partial\n" {
		t.Errorf("failing sh: output %q, want %q", out, "partial\n")
	}
	// The program is killed when ctx ends.
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Run(cctx, name, nil, "sleep", "30"); err == nil || time.Since(start) > 10*time.Second {
		t.Errorf("sleep under a cancelled context: %v after %v", err, time.Since(start))
	}
}

func TestRunMissing(t *testing.T) {
	// Needs no root: the namespace is not found before anything starts.
	const name = "cnlab.t-netns.missing"
	out, err := Run(context.Background(), name, nil, "true", "-x")
	if err == nil || out != nil || !strings.HasPrefix(err.Error(), "true -x in "+name+": ") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Run in a missing namespace: %q, %v", out, err)
	}
}

// TestKillAllFindsOpenedByPath: a process outside the namespace that only
// holds it through a file opened by its path (/run/netns/NAME, as Open
// does; /proc/PID/fd shows the path, not net:[inode]) is found and killed.
func TestKillAllFindsOpenedByPath(t *testing.T) {
	name := testNetns(t, "cnlab.t-netns.byp")
	cmd := exec.Command("bash", "-c", "exec 9<"+Path(name)+"; exec sleep 300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	inodes := Inodes([]string{name})
	// bash opens the file, then becomes sleep: wait until it holds it.
	for deadline := time.Now().Add(5 * time.Second); ; {
		pids, err := Pids(inodes)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(pids, cmd.Process.Pid) {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("pid %d holds %s by path, Pids found %v", cmd.Process.Pid, Path(name), pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := KillAll(inodes, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("process survived KillAll")
	}
}

// TestHasTCPSockets: a namespace with no TCP socket says so; one with a
// listener in it says so too, also after the process that opened it
// closed nothing but left (the socket is held by this test's descriptor).
func TestHasTCPSockets(t *testing.T) {
	name := testNetns(t, "cnlab.t-netns.tcp")
	h, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if has, err := HasTCPSockets(h); err != nil || has {
		t.Fatalf("empty namespace: %v, %v", has, err)
	}
	var fd int
	if err := Do(name, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: 0}); err != nil {
			return err
		}
		return unix.Listen(fd, 1)
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if has, err := HasTCPSockets(h); err != nil || !has {
		t.Fatalf("namespace with a listener: %v, %v", has, err)
	}
}
