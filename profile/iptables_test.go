package profile

import (
	"github.com/cnlab/cnlab/experiment/results"
	"os"
	"strings"
	"testing"
)

// testdata/iptables-{legacy,nft}-save-c.txt were recorded with
// `ip netns exec prof-test iptables-{legacy,nft}-save -c` after the run
// described in report_test.go.
func TestParseIPTablesSaveLegacy(t *testing.T) {
	rules := parseFile(t, "testdata/iptables-legacy-save-c.txt")
	if len(rules) != 104 {
		t.Fatalf("%d rules, want 104", len(rules))
	}
	first := rules[0]
	if first != (results.RuleCounter{Table: "filter", Chain: "INPUT", Rule: "-j CNLAB-TEST", Packets: 179833, Bytes: 5352108941}) {
		t.Errorf("first rule %+v", first)
	}
	last := rules[len(rules)-1]
	if last.Chain != "CNLAB-TEST" || last.Packets != 2 || last.Bytes != 120 ||
		last.Rule != `-p tcp -m tcp --dport 5201 -m comment --comment "cnlab prof-test iperf3" -j ACCEPT` {
		t.Errorf("last rule %+v", last)
	}
	sum := PacketsByChain(rules)
	if sum["filter/CNLAB-TEST"] != 179833 || sum["filter/INPUT"] != 179833 || sum["filter/OUTPUT"] != 178598 || len(sum) != 3 {
		t.Errorf("packets by chain %v", sum)
	}
}

func TestParseIPTablesSaveNFT(t *testing.T) {
	rules := parseFile(t, "testdata/iptables-nft-save-c.txt")
	if len(rules) != 2 || rules[1].Chain != "OUTPUT" || rules[1].Packets != 118885 || rules[0].Packets != 0 {
		t.Errorf("rules %+v", rules)
	}
}

func parseFile(t *testing.T, name string) []results.RuleCounter {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rules, err := ParseIPTablesSave(f)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

func TestSaveBinary(t *testing.T) {
	if SaveBinary("nft") != "iptables-nft-save" || SaveBinary("legacy") != "iptables-legacy-save" || SaveBinary("") != "iptables-legacy-save" {
		t.Error("SaveBinary")
	}
}

func TestParseIPTablesSaveErrors(t *testing.T) {
	for _, in := range []string{"*filter\n[1:x] -A INPUT -j ACCEPT\n", "*filter\n[1:2] -I INPUT -j ACCEPT\n", "*filter\n[1:2\n"} {
		if _, err := ParseIPTablesSave(strings.NewReader(in)); err == nil {
			t.Errorf("ParseIPTablesSave(%q): no error", in)
		}
	}
}
