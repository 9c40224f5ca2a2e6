package experiment

import (
	"fmt"
	"os"
	"testing"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
)

// TestRemoveStaleReference: a reference pair left by a cnlab killed while
// it measured (its PID runs no more) is removed by the next measurement;
// one of a cnlab still running (this test's own PID) is left alone.
func TestRemoveStaleReference(t *testing.T) {
	testutil.RequireRoot(t)
	dead := 1 << 22 // above any PID this kernel hands out (pid_max ≤ 2^22)
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", dead)); err == nil {
		t.Skipf("PID %d runs", dead)
	}
	stale := fmt.Sprintf("cnlab-ref-%d-c", dead)
	live := fmt.Sprintf("cnlab-ref-%d-t", os.Getpid())
	for _, n := range []string{stale, live} {
		if err := netns.Create(n, nil); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, n := range []string{stale, live} {
			_ = netns.Delete(n)
		}
	}()
	removeStaleReference()
	if netns.Exists(stale) {
		t.Errorf("%s (its cnlab is gone) was left", stale)
	}
	if !netns.Exists(live) {
		t.Errorf("%s (its cnlab runs) was removed", live)
	}
}
