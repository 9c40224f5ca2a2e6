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
		// One lookup on the ethertype: IPv4 and ARP to their rules,
		// everything else (IPv6 here, VLAN tags) dropped.
		"add rule bridge cnlab port ether type vmap { ip : jump from4, arp : jump fromarp }\nadd rule bridge cnlab port counter drop\n",
		"add rule bridge cnlab from4 iifname . ether saddr . ip saddr @ip4 accept\nadd rule bridge cnlab from4 counter drop\n",
		"add rule bridge cnlab fromarp iifname . ether saddr . arp saddr ether . arp saddr ip @arp4 accept\nadd rule bridge cnlab fromarp counter drop\n",
		// Out of an endpoint's port, IPv4 only to its address.
		"add chain bridge cnlab forward { type filter hook forward priority filter; policy accept; }\n" +
			"add rule bridge cnlab forward oifname @ports ether type vmap { ip : jump to4, 8021q : drop, 8021ad : drop }\n" +
			"add rule bridge cnlab to4 oifname . ip daddr != @dst4 counter drop\n",
		`add element bridge cnlab dst4 { "vetha" . 10.0.0.10, "vethb" . 10.0.0.11 }` + "\n",
		`add element bridge cnlab ports { "vetha", "vethb" }` + "\n",
		`add element bridge cnlab ip4 { "vetha" . 02:00:00:00:00:0a . 10.0.0.10, "vethb" . 02:00:00:00:00:0b . 10.0.0.11 }` + "\n",
		`add element bridge cnlab arp4 { "vetha" . 02:00:00:00:00:0a . 02:00:00:00:00:0a . 10.0.0.10, "vethb" . 02:00:00:00:00:0b . 02:00:00:00:00:0b . 10.0.0.11 }` + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("script lacks %q:\n%s", want, got)
		}
	}
	if empty := PortScript(nil); strings.Contains(empty, "add element") {
		t.Errorf("no endpoints, yet elements:\n%s", empty)
	}
}

func TestPortScriptDualStack(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:0a")
	a4, a6 := netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("fd00::10")
	v4 := PortScript([]Port{{Dev: "vetha", MAC: mac, IP: a4}})
	// Addrs holding only the IPv4 address renders the IPv4 script.
	if got := PortScript([]Port{{Dev: "vetha", MAC: mac, IP: a4, Addrs: []netip.Addr{a4}}}); got != v4 {
		t.Errorf("IPv4 Addrs changed the script:\n%s\nwant\n%s", got, v4)
	}
	if strings.Contains(v4, "ip6") || strings.Contains(v4, "icmpv6") {
		t.Errorf("IPv4-only script has IPv6 rules:\n%s", v4)
	}
	got := PortScript([]Port{{Dev: "vetha", MAC: mac, IP: a4, Addrs: []netip.Addr{a4, a6}}})
	for _, want := range []string{
		"add set bridge cnlab src6 { type ifname . ether_addr . ipv6_addr; }\n",
		"add set bridge cnlab dst6 { type ifname . ipv6_addr; }\n",
		"add set bridge cnlab nd6 { typeof iifname . @th,64,128; }\n",
		// IPv6 to its own rules: neighbour discovery checked, then
		// the source binding, then the drop.
		"add rule bridge cnlab port ether type vmap { ip : jump from4, arp : jump fromarp, ip6 : jump from6 }\n",
		"add rule bridge cnlab from6 meta l4proto ipv6-icmp jump nd6check\n" +
			"add rule bridge cnlab from6 iifname . ether saddr . ip6 saddr @src6 accept\n" +
			"add rule bridge cnlab from6 counter drop\n",
		"add rule bridge cnlab nd6check icmpv6 type { nd-router-advert, nd-redirect } counter drop\n" +
			"add rule bridge cnlab nd6check icmpv6 type nd-neighbor-advert iifname . @th,64,128 != @nd6 counter drop\n",
		"add rule bridge cnlab forward oifname @ports ether type vmap { ip : jump to4, 8021q : drop, 8021ad : drop, ip6 : jump to6 }\n",
		"add rule bridge cnlab to6 ip6 daddr { ff02::1, ff02::1:ff00:0/104 } icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept\n" +
			"add rule bridge cnlab to6 oifname . ip6 daddr != @dst6 counter drop\n",
		`add element bridge cnlab ip4 { "vetha" . 02:00:00:00:00:0a . 10.0.0.10 }` + "\n",
		`add element bridge cnlab dst4 { "vetha" . 10.0.0.10 }` + "\n",
		`add element bridge cnlab src6 { "vetha" . 02:00:00:00:00:0a . fd00::10 }` + "\n",
		`add element bridge cnlab dst6 { "vetha" . fd00::10 }` + "\n",
		`add element bridge cnlab nd6 { "vetha" . 0xfd000000000000000000000000000010 }` + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("dual-stack script lacks %q:\n%s", want, got)
		}
	}
	// IPv6 only: no IPv4 elements (an empty element list is an error).
	v6 := PortScript([]Port{{Dev: "vetha", MAC: mac, IP: a6, Addrs: []netip.Addr{a6}}})
	for _, bad := range []string{"add element bridge cnlab ip4", "add element bridge cnlab arp4", "add element bridge cnlab dst4"} {
		if strings.Contains(v6, bad) {
			t.Errorf("IPv6-only script has %q:\n%s", bad, v6)
		}
	}
	if !strings.Contains(v6, `add element bridge cnlab src6 { "vetha" . 02:00:00:00:00:0a . fd00::10 }`) {
		t.Errorf("IPv6-only script lacks src6 element:\n%s", v6)
	}
}
