package ebpf

import (
	"errors"
	"regexp"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/topology"
)

// verifierLimit is the kernel's budget of instructions the verifier may
// process for one program (BPF_COMPLEXITY_LIMIT_INSNS).
const verifierLimit = 1_000_000

var processedRE = regexp.MustCompile(`processed (\d+) insns`)

// TestVerifierBudget loads every program with the verifier's statistics
// and reports how much of its budget each one uses: a program that grows
// near the limit fails here, with the figures, before it fails to load
// for a user. The margin leaves room for a kernel whose verifier explores
// a little more.
func TestVerifierBudget(t *testing.T) {
	testutil.RequireRoot(t)
	// The host routing is a load-time constant: the verifier sees one
	// program per mode, so each is loaded.
	for _, routing := range []string{kind.HostRoutingBPF, kind.HostRoutingLegacy} {
		for name, n := range verifiedInsns(t, routing) {
			t.Logf("%s (%s host routing): %d of %d instructions (%.0f%%)", name, routing, n, verifierLimit, 100*float64(n)/verifierLimit)
			if n > verifierLimit*8/10 {
				t.Errorf("%s (%s host routing): the verifier processed %d instructions, over 80%% of its budget of %d: split the program (tail calls, global functions) before adding to it", name, routing, n, verifierLimit)
			}
		}
	}
}

// verifiedInsns loads every program with the verifier's statistics and
// returns the instructions the verifier processed for each.
func verifiedInsns(t *testing.T, routing string) map[string]int {
	t.Helper()
	lab := &topology.Spec{Name: "progtest", Options: kind.Options{EBPF: kind.EBPFOptions{HostRouting: routing,
		PolicyMapSize: 1024, CTMapSize: kind.DefaultCTMapSize, MaxEndpoints: testMaxEp}}}
	cs, err := collectionSpec(lab)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cs.Maps {
		m.Pinning = ebpf.PinNone
	}
	coll, err := ebpf.NewCollectionWithOptions(cs, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("load programs: %+v", ve)
		}
		t.Fatal(err)
	}
	defer coll.Close()
	out := map[string]int{}
	for name, p := range coll.Programs {
		m := processedRE.FindStringSubmatch(p.VerifierLog)
		if m == nil {
			t.Errorf("%s: no statistics in the verifier's log: %q", name, p.VerifierLog)
			continue
		}
		out[name], _ = strconv.Atoi(m[1])
	}
	return out
}
