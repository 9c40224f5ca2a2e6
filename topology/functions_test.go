package topology

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/input"
)

func TestResolveChainFunctions(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "examples", "chain-firewall.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(data, "chain-firewall.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	fns := s.Chain.Functions
	if len(fns) != 2 || fns[0].Kind != FunctionFirewall || fns[1].Kind != FunctionShaper {
		t.Fatalf("functions: %+v", fns)
	}
	fw := fns[0].Firewall
	want := &Firewall{Rules: 100, Stateful: true, Backend: BackendLegacy, HopRules: []int{100, 100, 100}, ServerRules: 100, ClientRules: 100}
	if !reflect.DeepEqual(fw, want) || fns[0].Shaper != nil {
		t.Errorf("firewall: %+v, want %+v", fw, want)
	}
	sh := fns[1].Shaper
	// The default burst of a fast shaper is a millisecond at its rate.
	wantSh := &Shaper{Rate: 1e12, Ceil: 1e12, Burst: 125_000_000, Direction: ShapeToServer, Devs: []string{"eth1"}}
	if !reflect.DeepEqual(sh, wantSh) || fns[1].Firewall != nil {
		t.Errorf("shaper: %+v, want %+v", sh, wantSh)
	}

	// The spec goes through the ledger as JSON and must come back the same.
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Spec
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Chain.Functions, s.Chain.Functions) || !Same(&back, s) {
		t.Errorf("functions after a JSON round trip: %+v", back.Chain.Functions)
	}
	// A lab with other functions is another lab.
	other, err := Parse([]byte(strings.Replace(string(data), "rules: 100", "rules: 101", 1)), "x.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if Same(s, other) {
		t.Error("different firewall rules count as the same spec")
	}
}

func TestResolveFunctionOptions(t *testing.T) {
	doc := func(length int, fns string) string {
		return fmt.Sprintf("name: x\nchain:\n  length: %d\n  functions:\n%s", length, fns)
	}
	cases := []struct {
		name, yaml string
		check      func(t *testing.T, fns []Function)
	}{
		// Spread divides the rules over the namespaces the client's packets
		// cross: the hops and the server (the seed's n-1), not the client.
		{"spread with remainder to the first hops", doc(3, "    - {kind: firewall, rules: 10, spread: true}\n"), func(t *testing.T, fns []Function) {
			if fw := fns[0].Firewall; !reflect.DeepEqual(fw.HopRules, []int{3, 3, 2}) || fw.ServerRules != 2 || fw.ClientRules != 0 {
				t.Errorf("hop rules %v, server %d, client %d", fw.HopRules, fw.ServerRules, fw.ClientRules)
			}
		}},
		{"spread over more hops than rules", doc(3, "    - {kind: firewall, rules: 2, spread: true}\n"), func(t *testing.T, fns []Function) {
			if fw := fns[0].Firewall; !reflect.DeepEqual(fw.HopRules, []int{1, 1, 0}) || fw.ServerRules != 0 {
				t.Errorf("hop rules %v, server %d", fw.HopRules, fw.ServerRules)
			}
		}},
		{"shaper on every interface: the seed's second of burst, within HTB's 32 bits", doc(2, "    - {kind: shaper, rate: 1tbit, direction: all}\n"), func(t *testing.T, fns []Function) {
			if sh := fns[0].Shaper; sh.Burst != MaxShaperBurst || !reflect.DeepEqual(sh.Devs, []string{"eth1", "eth0"}) {
				t.Errorf("shaper %+v", sh)
			}
		}},
		{"shaper on every interface of a direct pair", doc(0, "    - {kind: shaper, rate: 1gbit, direction: all}\n"), func(t *testing.T, fns []Function) {
			if sh := fns[0].Shaper; sh.Burst != 125_000_000 || len(sh.Devs) != 0 {
				t.Errorf("shaper %+v", sh)
			}
		}},
		{"direct pair: the rules in the ends only", doc(0, "    - {kind: firewall, rules: 7, stateful: true}\n"), func(t *testing.T, fns []Function) {
			if fw := fns[0].Firewall; len(fw.HopRules) != 0 || fw.ServerRules != 7 || fw.ClientRules != 7 {
				t.Errorf("hop rules %v, server %d, client %d", fw.HopRules, fw.ServerRules, fw.ClientRules)
			}
		}},
		{"direct pair, spread: all in the server", doc(0, "    - {kind: firewall, rules: 7, spread: true}\n"), func(t *testing.T, fns []Function) {
			if fw := fns[0].Firewall; fw.ServerRules != 7 || fw.ClientRules != 0 {
				t.Errorf("server %d, client %d", fw.ServerRules, fw.ClientRules)
			}
		}},
		{"no rules, nft, block style", doc(2, "    - kind: firewall\n      stateful: false\n      backend: nft\n"), func(t *testing.T, fns []Function) {
			if fw := fns[0].Firewall; !reflect.DeepEqual(fw.HopRules, []int{0, 0}) || fw.Stateful || fw.Backend != BackendNFT {
				t.Errorf("firewall %+v", fw)
			}
		}},
		{"shaper first, both ways, explicit burst and ceil", doc(1, "    - {kind: shaper, rate: 10mbit, ceil: 20Mbit, burst: 32k, direction: both}\n    - {kind: firewall, rules: 1}\n"), func(t *testing.T, fns []Function) {
			want := &Shaper{Rate: 10e6, Ceil: 20e6, Burst: 32 << 10, Direction: ShapeBoth, Devs: []string{"eth1", "eth0"}}
			if fns[0].Kind != FunctionShaper || !reflect.DeepEqual(fns[0].Shaper, want) {
				t.Errorf("shaper %+v, want %+v", fns[0].Shaper, want)
			}
		}},
		{"slow shaper gets a 64k burst", doc(1, "    - {kind: shaper, rate: 1mbit, direction: client}\n"), func(t *testing.T, fns []Function) {
			if sh := fns[0].Shaper; sh.Burst != 64<<10 || !reflect.DeepEqual(sh.Devs, []string{"eth0"}) {
				t.Errorf("shaper %+v", sh)
			}
		}},
		{"no functions", "name: x\nchain: {length: 2, functions: []}\n", func(t *testing.T, fns []Function) {
			if fns != nil {
				t.Errorf("functions %+v", fns)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse([]byte(tc.yaml), "f.yaml", Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s.Chain.Functions)
		})
	}
}

func TestPresetChainFunctions(t *testing.T) {
	s, err := Preset("chain", PresetOptions{Length: 2, Functions: []Function{
		{Kind: FunctionFirewall, Firewall: &Firewall{Rules: 3, Spread: true}},
		{Kind: FunctionShaper, Shaper: &Shaper{Rate: 1e9}},
	}}, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	fns := s.Chain.Functions
	if fw := fns[0].Firewall; !reflect.DeepEqual(fw.HopRules, []int{1, 1}) || fw.ServerRules != 1 || fw.Backend != BackendLegacy {
		t.Errorf("firewall %+v", fns[0].Firewall)
	}
	if sh := fns[1].Shaper; sh.Ceil != 1e9 || sh.Burst != 125_000 || sh.Direction != ShapeToServer {
		t.Errorf("shaper %+v", sh)
	}
	for _, tc := range []struct {
		preset string
		opts   PresetOptions
		want   string
	}{
		{"single-host", PresetOptions{Functions: []Function{{Kind: FunctionFirewall, Firewall: &Firewall{}}}}, "preset single-host: functions: network functions go in the hops of the chain preset only"},
		{"chain", PresetOptions{Functions: []Function{{Kind: FunctionFirewall, Shaper: &Shaper{Rate: 1e9}}}}, "preset chain: functions[0]: a firewall function needs its firewall settings and no others"},
		{"chain", PresetOptions{Functions: []Function{{Kind: "nat"}}}, `preset chain: functions[0].kind: unknown function kind "nat" (supported: firewall, shaper)`},
		{"chain", PresetOptions{Functions: []Function{{Kind: FunctionShaper, Shaper: &Shaper{}}}}, "preset chain: functions[0].rate: 0bit is out of range (1mbit to 10tbit)"},
	} {
		_, err := Preset(tc.preset, tc.opts, Overrides{})
		if err == nil || !input.Is(err) || err.Error() != tc.want {
			t.Errorf("got %v, want %s", err, tc.want)
		}
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]uint64{
		"1gbit": 1e9, "100mbit": 100e6, "1tbit": 1e12, "1.5gbit": 1.5e9, "10Mbit": 10e6,
		"1kibit": 1024, "64bit": 64, "10mbps": 80e6, "1MBps": 8e6, "2kbps": 16e3,
	} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "gbit", "1", "-1gbit", "1e3mbit", "1 gbit x", "1.2.3mbit", "1xbit", "99999999999tbit"} {
		if got, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %d, want an error", in, got)
		}
	}
	for bits, want := range map[uint64]string{1e12: "1tbit", 10e6: "10mbit", 1500e3: "1500kbit", 1234: "1234bit", 0: "0bit"} {
		if got := FormatRate(bits); got != want {
			t.Errorf("FormatRate(%d) = %s, want %s", bits, got, want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"1500": 1500, "1500b": 1500, "64k": 64 << 10, "64KB": 64 << 10, "1mb": 1 << 20, "2g": 2 << 30, "8kbit": 1024} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "k", "1 kb x", "1tb", "-5"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestFirewallScript(t *testing.T) {
	for _, stateful := range []bool{false, true} {
		for _, forward := range []bool{false, true} {
			script := FirewallScript(&Firewall{Stateful: stateful}, 3, forward)
			lines := strings.Split(strings.TrimSpace(script), "\n")
			var jumps, rules []string
			for _, l := range lines {
				switch {
				case strings.HasPrefix(l, "-A "+FirewallChain+" "):
					rules = append(rules, l)
				case strings.HasPrefix(l, "-A "):
					jumps = append(jumps, l)
				}
			}
			if lines[0] != "*filter" || lines[len(lines)-1] != "COMMIT" || strings.Contains(script, " DROP [") {
				t.Errorf("stateful %v: table frame (every policy ACCEPT, as the seed):\n%s", stateful, script)
			}
			wantJumps := []string{"-A INPUT -j " + FirewallChain}
			if forward {
				wantJumps = append(wantJumps, "-A FORWARD -j "+FirewallChain)
			}
			if !reflect.DeepEqual(jumps, wantJumps) {
				t.Errorf("forward %v: jumps %q, want %q", forward, jumps, wantJumps)
			}
			if len(rules) != 3 {
				t.Fatalf("stateful %v: rules:\n%s", stateful, strings.Join(rules, "\n"))
			}
			for i, r := range rules {
				// stateful: a connbytes range no connection reaches (the
				// seed's); stateless: the filler
				want := "-A " + FirewallChain + " " + FillerRules(3)[i]
				if stateful {
					hi := uint64(1<<63 - 1 - i)
					want = fmt.Sprintf("-A %s -m connbytes --connbytes %d:%d --connbytes-dir reply --connbytes-mode bytes -j ACCEPT", FirewallChain, hi-1, hi)
				}
				if r != want {
					t.Errorf("stateful %v: rule %d %q, want %q", stateful, i, r, want)
				}
			}
		}
	}
	// Filler rules are distinct and never match the chain's addresses.
	seen := map[string]bool{}
	for _, r := range FillerRules(MaxFirewallRules) {
		if seen[r] || !strings.HasPrefix(r, "-s 198.1") || !strings.Contains(r, "-d 203.0.113.1/32") {
			t.Fatalf("filler rule %q (seen before: %v)", r, seen[r])
		}
		seen[r] = true
	}
}
