package lab

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
)

// TestConcurrentApplies: several policy changes to one lab at once. Each
// either takes effect or is refused because the lab is busy; none is half
// applied. Afterwards what is stored is what the kernel enforces, which
// the probe checks against the model of the stored set.
func TestConcurrentApplies(t *testing.T) {
	for _, dp := range enforcingKinds() {
		t.Run(dp, func(t *testing.T) {
			spec := scenarioLab(t, "t-conc-"+shortName(dp), dp, "wire")
			ctx := context.Background()
			sets := make([][]*policy.Policy, 6)
			for i := range sets {
				// Set i denies ingress to every endpoint except on port
				// 80+i: each set gives a different matrix.
				yaml := fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: conc, namespace: x}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress: [{ports: [{port: %d, protocol: TCP}]}]
`, 80+i)
				ps, err := policy.Parse([]byte(yaml), fmt.Sprintf("set%d.yaml", i))
				if err != nil {
					t.Fatal(err)
				}
				sets[i] = ps
			}
			var wg sync.WaitGroup
			errs := make([]error, len(sets))
			start := make(chan struct{})
			for i := range sets {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = Replace(ctx, spec.Name, sets[i])
				}()
			}
			close(start)
			wg.Wait()
			took := 0
			for i, err := range errs {
				switch {
				case err == nil:
					took++
				case !strings.Contains(err.Error(), "is busy"):
					t.Errorf("set %d: %v", i, err)
				}
			}
			if took == 0 {
				t.Fatal("no apply took effect")
			}
			stored, err := Policies(spec.Name)
			if err != nil {
				t.Fatal(err)
			}
			m, err := policy.NewModel(spec, stored)
			if err != nil {
				t.Fatal(err)
			}
			var targets []probe.Target
			for i := range sets {
				targets = append(targets, probe.Target{Protocol: "tcp", Port: 80 + i})
			}
			cells, err := probe.Run(ctx, spec, targets, probe.Options{Timeout: 750 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if wrong := probe.Expect(spec, m, cells); len(wrong) > 0 {
				t.Errorf("%d of %d cells differ from the stored policies (%d applies took effect), e.g. %+v", len(wrong), len(cells), took, wrong[0])
			}
		})
	}
}
