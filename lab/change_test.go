package lab

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/service"
)

// TestLockHolder: status learns that a change is running from /proc/locks,
// without taking the lock (which would make that change find the lab busy).
func TestLockHolder(t *testing.T) {
	testutil.RequireRoot(t)
	const name = "t-lockholder"
	if pid := lockHolder(name); pid != 0 {
		t.Fatalf("lab %s is locked by %d before the test", name, pid)
	}
	unlock, err := lockLab(name)
	if err != nil {
		t.Fatal(err)
	}
	if pid := lockHolder(name); pid != os.Getpid() {
		t.Errorf("locked by this process (%d): lockHolder says %d", os.Getpid(), pid)
	}
	// A second change is still refused as busy, status or not.
	if _, err := lockLab(name); err == nil {
		t.Error("a second lock of a locked lab succeeded")
	}
	unlock()
	if pid := lockHolder(name); pid != 0 {
		t.Errorf("unlocked: lockHolder says %d", pid)
	}
}

var (
	errKilled   = errors.New("simulated kill")
	errInjected = errors.New("injected failure")
)

// TestServiceChangeRepaired: a Service change "killed" (a panic from the
// fault hook, the lock released as by the kernel) after host flip's kernel
// took it leaves its record and its staged set, and status says so; the
// next change, failing on host flap, still brings flip (rebuilt, so it
// cannot be rolled back) back to the stored Services and removes what the
// killed change left; the one after succeeds. Each proxy is paired with
// the datapath of its name.
func TestServiceChangeRepaired(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nft", "nftables")
	ctx := context.Background()
	apply := func(name, doc string) error {
		svcs, sls, err := service.Parse([]byte(doc), "test")
		if err != nil {
			t.Fatal(err)
		}
		_, err = ApplyServices(ctx, name, svcs, sls)
		return err
	}
	web := svcDoc("web", "  selector: {app: web}\n  ports: [{port: 80, targetPort: http}]\n")
	both := web + svcDoc("web2", "  selector: {app: web}\n  ports: [{port: 81, targetPort: http}]\n")
	for _, p := range kind.Proxies() {
		if p == kind.ProxyNone {
			continue
		}
		t.Run(string(p), func(t *testing.T) {
			spec := upServiceLab(t, "t-svcrep-"+string(p)[:3], string(p), string(p), "wire")
			stored := func(what string, n int) *ServicesStatus {
				t.Helper()
				st := ServicesState(spec)
				if st == nil || st.Services != n {
					t.Fatalf("%s: status %+v, want %d Services stored", what, st, n)
				}
				return st
			}
			if err := apply(spec.Name, web); err != nil {
				t.Fatal(err)
			}
			func() {
				fault.SetHook(func(point, host string) error {
					if point == fault.Kernel && host == "flip" {
						panic(errKilled)
					}
					return nil
				})
				defer fault.SetHook(nil)
				defer func() {
					if r := recover(); r != errKilled {
						t.Fatalf("the change was not killed on flip: %v", r)
					}
				}()
				_ = apply(spec.Name, both)
			}()
			st := stored("killed", 1)
			if c := st.Change; c == nil || c.Killed != KilledStaged || c.Op != "apply" || st.Staged == nil || st.Staged.Services != 2 {
				t.Errorf("killed: status reports change %+v, staged %+v", c, st.Staged)
			}
			if h := st.Hosts[0]; !h.Dirty || !slices.Equal(h.Holds, []string{HoldsStored, HoldsStaged}) {
				t.Errorf("killed: status says flip %+v, want dirty on the stored or the staged set", h)
			}
			if h := st.Hosts[1]; h.Dirty || !h.InSync {
				t.Errorf("killed: status says flap %+v, want in sync", h)
			}

			// Once: the stored Services applied again after it succeed.
			var failed atomic.Bool
			fault.SetHook(func(point, host string) error {
				if point == fault.Dirty && host == "flap" && !failed.Swap(true) {
					return errInjected
				}
				return nil
			})
			err := apply(spec.Name, both)
			fault.SetHook(nil)
			if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "flip were given the stored Services again") {
				t.Errorf("failed change: %v", err)
			}
			if st := stored("failed", 1); st.Troubled() {
				t.Errorf("failed: status reports %+v, hosts %+v", st.Change, st.Hosts)
			}
			if _, err := os.Stat(serviceStore(spec.Name).Staged(0)); !os.IsNotExist(err) {
				t.Errorf("failed: the staged Services are left (%v)", err)
			}

			if err := apply(spec.Name, both); err != nil {
				t.Fatal(err)
			}
			if st := stored("applied", 2); st.Troubled() {
				t.Errorf("applied: status reports %+v, hosts %+v", st.Change, st.Hosts)
			}
		})
	}
}
