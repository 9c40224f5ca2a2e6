// Package fault names the points of a policy change where cnlab's state
// could be caught half-way, so that the fault-injection tests can stop it
// there: kill the process (a real SIGKILL, in the CLI tests) or make the
// step fail. In a normal run no hook is set and every point is a no-op.
//
// The points, in the order a policy apply or delete passes them:
//
//	locked      the lab's lock is held, nothing written yet
//	staged      the new policy set is written beside the current one
//	dirty       (per host) the host's state is marked dirty, its kernel untouched
//	ebpf-staged (per host, eBPF) the next generation of maps is built, not active
//	ipsets-written (per host, iptables with peers: ipsets) the sets the new rules
//	            name are in the kernel, the rules are the old ones
//	kernel      (per host) the host's kernel holds the new policy, its state file the old
//	saved       (per host) the state file records the new policy, still marked dirty
//	host-done   (per host) the host is finished; the next host is untouched
//	applied     every host enforces the new set; the store still holds the old one
//
// The eBPF datapath switches every host's generation after building them
// all, so its hosts pass dirty, then kernel, saved and host-done in turn.
package fault

import "sync"

var (
	mu   sync.RWMutex
	hook func(point, host string) error
)

// SetHook installs f, called at every point with the host it concerns
// ("" for a lab-wide point); an error it returns fails the step there.
// nil removes it. For tests only.
func SetHook(f func(point, host string) error) {
	mu.Lock()
	hook = f
	mu.Unlock()
}

// At marks a point. It returns the error the hook injects, or nil.
func At(point, host string) error {
	mu.RLock()
	f := hook
	mu.RUnlock()
	if f == nil {
		return nil
	}
	return f(point, host)
}
