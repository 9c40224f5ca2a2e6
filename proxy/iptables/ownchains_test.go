package iptables

import (
	"strings"
	"testing"
)

// TestRebuildLeavesPolicyChains: a host rebuilt after the iptables policy
// datapath put an L7 redirect in the nat table (CNLAB-L7, jumped from
// PREROUTING) keeps it: the proxy neither flushes nor deletes a chain
// that is not its own (before, service apply after an L7 policy failed:
// the rebuild tried to delete CNLAB-L7 while PREROUTING jumped to it),
// and Describe's listing leaves it out.
func TestRebuildLeavesPolicyChains(t *testing.T) {
	nat := "*nat\n:PREROUTING ACCEPT [0:0]\n:CNLAB-L7 - [0:0]\n:CNLAB-SERVICES - [0:0]\n:CNLAB-SVC-AAAAAAAAAAAAAAAA - [0:0]\n" +
		"-A PREROUTING -m comment --comment \"cnlab policy\" -j CNLAB-L7\n" +
		"-A CNLAB-L7 -s 10.0.191.11/32 -d 10.0.192.10/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 15001\nCOMMIT\n"
	want := map[string]map[string][]string{natTable: {servicesChain: {"-j RETURN"}}, filterTable: {rejectChain: nil}}
	script := rebuildScript(map[string]string{natTable: nat, filterTable: "*filter\nCOMMIT\n"}, want)
	if strings.Contains(script, "CNLAB-L7") {
		t.Errorf("the rebuild touches the policy datapath's chain:\n%s", script)
	}
	if !strings.Contains(script, "-X CNLAB-SVC-AAAAAAAAAAAAAAAA") {
		t.Errorf("the rebuild keeps a chain of the proxy's that is no longer wanted:\n%s", script)
	}
	for _, line := range strings.Split(nat, "\n") {
		if mine(natTable, line) && strings.Contains(line, "CNLAB-L7") {
			t.Errorf("Describe lists %q as the proxy's", line)
		}
	}
}
