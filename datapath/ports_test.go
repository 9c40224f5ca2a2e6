package datapath

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestPortScript(t *testing.T) {
	mac := func(s string) net.HardwareAddr {
		m, err := net.ParseMAC(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	got := PortScript([]Port{
		{Dev: "vethb", MAC: mac("02:00:00:00:00:0b"), IP: netip.MustParseAddr("10.0.0.11")},
		{Dev: "vetha", MAC: mac("02:00:00:00:00:0a"), IP: netip.MustParseAddr("10.0.0.10")},
	})
	for _, want := range []string{
		// Replaces whatever table was there, in the same transaction.
		"add table bridge cnlab\ndelete table bridge cnlab\nadd table bridge cnlab\n",
		"add rule bridge cnlab prerouting iifname @ports jump port\n",
		"add rule bridge cnlab port ether type { 8021q, 8021ad } counter drop\nadd rule bridge cnlab port iifname . ether saddr . ip saddr @ip4 accept\n",
		"add rule bridge cnlab port iifname . ether saddr . arp saddr ether . arp saddr ip @arp4 accept\n",
		"add rule bridge cnlab port counter drop\n",
		// Out of an endpoint's port, IPv4 only to its address.
		"add chain bridge cnlab forward { type filter hook forward priority filter; policy accept; }\n" +
			"add rule bridge cnlab forward oifname @ports oifname . ip daddr != @dst4 counter drop\n",
		`add element bridge cnlab dst4 { "vetha" . 10.0.0.10, "vethb" . 10.0.0.11 }` + "\n",
		`add element bridge cnlab ports { "vetha", "vethb" }` + "\n",
		`add element bridge cnlab ip4 { "vetha" . 02:00:00:00:00:0a . 10.0.0.10, "vethb" . 02:00:00:00:00:0b . 10.0.0.11 }` + "\n",
		`add element bridge cnlab arp4 { "vetha" . 02:00:00:00:00:0a . 02:00:00:00:00:0a . 10.0.0.10, "vethb" . 02:00:00:00:00:0b . 02:00:00:00:00:0b . 10.0.0.11 }` + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("script lacks %q:\n%s", want, got)
		}
	}
	// The drop comes last in the port chain.
	if strings.LastIndex(got, "counter drop") < strings.Index(got, "@arp4 accept") {
		t.Errorf("drop before the accepts:\n%s", got)
	}
	if empty := PortScript(nil); strings.Contains(empty, "add element") {
		t.Errorf("no endpoints, yet elements:\n%s", empty)
	}
}
