package ebpf

import (
	"testing"
	"unsafe"

	"github.com/cilium/ebpf/btf"

	"github.com/cnlab/cnlab/policy"
)

// cEnum reads an enum of bpf/cnlab.c from the BTF of the compiled object.
func cEnum(t *testing.T, name string) *btf.Enum {
	t.Helper()
	cs, err := loadCnlab()
	if err != nil {
		t.Fatal(err)
	}
	var e *btf.Enum
	if err := cs.Types.TypeByName(name, &e); err != nil {
		t.Fatalf("enum %s: %v", name, err)
	}
	return e
}

// TestReasonNames checks that every verdict reason of the C program has a
// name, and that the table names no value the program does not have.
func TestReasonNames(t *testing.T) {
	values := map[cnlabReason]bool{}
	for _, v := range cEnum(t, "reason").Values {
		r := cnlabReason(v.Value)
		if r == cnlabReasonR_MAX {
			continue
		}
		values[r] = true
		if r > cnlabReasonR_MAX {
			t.Errorf("%s is %d, past R_MAX (%d): the counters have no slot for it", v.Name, r, cnlabReasonR_MAX)
		}
		if _, ok := reasonNames[r]; !ok {
			t.Errorf("%s (%d) has no name in reasonNames", v.Name, r)
		}
	}
	for r, name := range reasonNames {
		if !values[r] {
			t.Errorf("reasonNames names %d (%s), which enum reason does not have", r, name)
		}
	}
}

// TestSharedNumbering checks what the Go side passes through unchanged:
// policy directions are the programs' directions, and the inner maps Go
// builds have the key and value sizes of the C templates.
func TestSharedNumbering(t *testing.T) {
	if uint8(policy.Ingress) != uint8(cnlabDirDIR_INGRESS) || uint8(policy.Egress) != uint8(cnlabDirDIR_EGRESS) {
		t.Errorf("policy numbers ingress %d and egress %d, the programs %d and %d",
			policy.Ingress, policy.Egress, cnlabDirDIR_INGRESS, cnlabDirDIR_EGRESS)
	}
	// The programs tell an endpoint from a router by its identity.
	if uint32(cnlabIdentityFIRST_CIDR_IDENTITY) != policy.FirstCIDRIdentity || policy.FirstIdentity <= WorldIdentity {
		t.Errorf("the programs take identities %d to %d for endpoints, policy gives them %d to %d",
			WorldIdentity+1, cnlabIdentityFIRST_CIDR_IDENTITY-1, policy.FirstIdentity, policy.FirstCIDRIdentity-1)
	}
	cs, err := loadCnlab()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		outer    string
		key, val uintptr
	}{
		{"cnlab_policy", unsafe.Sizeof(cnlabPolicyKey{}), unsafe.Sizeof(cnlabPolicyVal{})},
		{"cnlab_policy_exact", unsafe.Sizeof(cnlabPolicyKey{}), unsafe.Sizeof(cnlabPolicyVal{})},
		{"cnlab_ipcache", unsafe.Sizeof(cnlabIpcacheKey{}), unsafe.Sizeof(cnlabPeer{})},
	} {
		in := cs.Maps[c.outer].InnerMap
		if uintptr(in.KeySize) != c.key || uintptr(in.ValueSize) != c.val {
			t.Errorf("%s: inner template has key %d and value %d bytes, Go builds %d and %d",
				c.outer, in.KeySize, in.ValueSize, c.key, c.val)
		}
	}
}
