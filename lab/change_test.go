package lab

import (
	"os"
	"testing"

	"github.com/cnlab/cnlab/internal/testutil"
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
