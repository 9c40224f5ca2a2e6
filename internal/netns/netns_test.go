package netns_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	vns "github.com/vishvananda/netns"
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
	// Do leaves the calling thread's namespace as it was.
	self, _ := vns.Get()
	defer self.Close()
	root, _ := vns.GetFromPath("/proc/self/ns/net") // the main thread
	defer root.Close()
	if !self.Equal(root) {
		t.Error("the test goroutine's thread is not in the root namespace after Do")
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

func TestKillAll(t *testing.T) {
	testutil.RequireRoot(t)
	const name = "cnlab.t-netns.kill"
	if err := Create(name, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Delete(name) })
	cmd := exec.Command("sleep", "300")
	if err := Start(name, cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	if err := KillAll([]string{name}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("process survived KillAll")
	}
}
