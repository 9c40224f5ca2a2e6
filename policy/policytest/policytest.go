// Package policytest compiles the policies of the shared scenario lab
// (internal/scenarios) into the policy IR, for tests that need the IR
// without the kernel (the datapaths' render tests). It is imported by tests
// only, and never touches the kernel.
package policytest

import (
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Compile resolves the scenario lab (with overrides) and compiles the given
// policies against it, for tests that need the IR without the kernel.
func Compile(t testing.TB, yaml string, ov topology.Overrides) (*topology.Spec, *policy.Compiled) {
	t.Helper()
	lab, err := topology.Parse([]byte(scenarios.Lab), "scenario lab", ov)
	if err != nil {
		t.Fatal(err)
	}
	return lab, CompileOn(t, lab, yaml)
}

// CompileOn compiles the given policies against a lab.
func CompileOn(t testing.TB, lab *topology.Spec, yaml string) *policy.Compiled {
	t.Helper()
	var pols []*policy.Policy
	if yaml != "" {
		var err error
		if pols, err = policy.Parse([]byte(yaml), "scenario.yaml"); err != nil {
			t.Fatal(err)
		}
	}
	m, err := policy.NewModel(lab, pols)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
