// Package fault names the points of a policy change (and of a Service
// change: locked, staged, the per-host points of change.ApplyHosts,
// applied, committed) where cnlab's state could be caught half-way, so
// that the fault-injection tests can stop it there: kill the process (a
// real SIGKILL, in the CLI tests) or make the step fail. In a normal run no hook is set and every point is a no-op.
//
// The points, in the order a policy apply or delete passes them on the
// iptables and nftables datapaths:
//
//	locked      the lab's lock is held, nothing written yet
//	staged      the change is recorded and the new policy set is written
//	            beside the stored one; no host touched
//	dirty       (per host) the host's state is marked dirty, its kernel untouched
//	ipsets-written (per host, iptables with peers: ipsets) the sets the new rules
//	            name are in the kernel, the rules are the old ones
//	atomic-load (per host) the host's script is rendered and iptables-restore
//	            or nft -f is about to load it (one atomic transaction)
//	kernel      (per host) the host's kernel holds the new policy, its state file the old
//	saved       (per host) the state file records the new policy, still marked dirty
//	host-done   (per host) the host is finished; the next host is untouched
//	applied     every host enforces the new set; the store still holds the old one
//	committed   the store holds the new set; the change's record is not yet
//	            removed (the cleanup)
//
// The eBPF datapath builds every host's next generation of maps before
// switching any: after staged, each host passes ebpf-map (half of its next
// generation's map entries written, in slots no packet reads) and
// ebpf-staged (its next generation built, not active); then every host is
// marked dirty (dirty); then each host passes ebpf-switch (about to switch
// to its next generation, the hosts before it switched); then kernel,
// saved and host-done in turn; then applied and committed.
package fault

import "sync"

// The points, as passed to At.
const (
	Locked        = "locked"
	Staged        = "staged"
	EBPFMap       = "ebpf-map"
	EBPFStaged    = "ebpf-staged"
	Dirty         = "dirty"
	IPSetsWritten = "ipsets-written"
	AtomicLoad    = "atomic-load"
	EBPFSwitch    = "ebpf-switch"
	Kernel        = "kernel"
	Saved         = "saved"
	HostDone      = "host-done"
	Applied       = "applied"
	Committed     = "committed"
)

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
