package traffic

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

// TestParseIperf3 parses reports recorded from iperf3 3.12 on loopback
// (testdata/, made with `iperf3 -c 127.0.0.1 ... -J`).
func TestParseIperf3(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tcp, err := ParseIperf3(read("iperf3-tcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Values as in the file.
	if tcp.Protocol != "TCP" || tcp.Streams != 1 || tcp.ReceivedBps != 22722976637.0464 || tcp.SentBps < tcp.ReceivedBps ||
		tcp.Seconds < 1.9 || tcp.SenderCPU <= 0 || tcp.ReceiverCPU <= 0 || tcp.IperfVersion != "iperf 3.12" {
		t.Errorf("tcp: %+v", tcp)
	}
	par, err := ParseIperf3(read("iperf3-tcp-parallel-zerocopy.json"))
	if err != nil || par.Streams != 2 || par.ReceivedBps <= 0 {
		t.Errorf("parallel: %+v %v", par, err)
	}
	udp, err := ParseIperf3(read("iperf3-udp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if udp.Protocol != "UDP" || udp.Packets == 0 || udp.LostPercent < 0 || udp.ReceivedBps > udp.SentBps || udp.SentBps < 90e6 || udp.SentBps > 110e6 {
		t.Errorf("udp: %+v", udp)
	}
	if _, err := ParseIperf3(read("iperf3-refused.json")); err == nil || !strings.Contains(err.Error(), "Connection refused") {
		t.Errorf("refused: %v", err)
	}
	if _, err := ParseIperf3([]byte("iperf3: error")); err == nil {
		t.Error("text parsed as a report")
	}
}

// TestParseIperf3Totals parses UDP and reverse (-R) reports recorded from
// iperf3 3.12 on loopback:
//
//	iperf3 -c 127.0.0.1 -u -b 100M -t 1 -J            iperf3-udp-100m-1s.json
//	iperf3 -c 127.0.0.1 -u -b 0 -l 1400 -t 1 -J       iperf3-udp-lossy.json
//	iperf3 -c 127.0.0.1 -u -b 100M -t 1 -R -J         iperf3-udp-reverse.json
//	iperf3 -c 127.0.0.1 -t 1 -R -J                    iperf3-tcp-reverse.json
func TestParseIperf3Totals(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	parse := func(name string) *Iperf3Result {
		r, err := ParseIperf3(read(name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	// Values as in the files: the sender's rate from sum_sent, the
	// receiver's rate, loss and jitter from sum_received.
	udp := parse("iperf3-udp-100m-1s.json")
	if udp.SentBps != 100125991.62108926 || udp.ReceivedBps != 100081461.1598331 || udp.Seconds != 1.000575 ||
		udp.Packets != 382 || udp.JitterMs != 0.00746981135769711 || udp.Reverse || udp.SenderCPU != 3.9284565054167118 {
		t.Errorf("udp: %+v", udp)
	}
	lossy := parse("iperf3-udp-lossy.json")
	if lossy.SentBps != 2553131237.175667 || lossy.ReceivedBps != 2498693777.64624 || lossy.Packets != 227970 ||
		lossy.LostPackets != 4842 || math.Abs(lossy.LostPercent-2.123963679431504) > 1e-9 || lossy.IperfLostPercent != 2.123963679431504 {
		t.Errorf("lossy udp: %+v", lossy)
	}
	// -R: the client received, so its CPU is the receiver's.
	rev := parse("iperf3-udp-reverse.json")
	if !rev.Reverse || rev.ReceivedBps != 100124790.27978027 || rev.Seconds != 1.000142 ||
		rev.SenderCPU != 4.270446979315585 || rev.ReceiverCPU != 0.8370595349979976 {
		t.Errorf("udp -R: %+v", rev)
	}
	tcpRev := parse("iperf3-tcp-reverse.json")
	if !tcpRev.Reverse || tcpRev.ReceivedBps != 17725229266.73327 || tcpRev.Retransmits != 2 ||
		tcpRev.SenderCPU != 96.96498310719795 || tcpRev.ReceiverCPU != 40.36636286086293 {
		t.Errorf("tcp -R: %+v", tcpRev)
	}
	// A report with only "sum" (no sum_sent/sum_received): the receiver's
	// rate is estimated from the loss. Derived from the recording, which
	// stays as iperf3 wrote it.
	var raw map[string]any
	if err := json.Unmarshal(read("iperf3-udp-lossy.json"), &raw); err != nil {
		t.Fatal(err)
	}
	end := raw["end"].(map[string]any)
	delete(end, "sum_sent")
	delete(end, "sum_received")
	old, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	est, err := ParseIperf3(old)
	if err != nil {
		t.Fatal(err)
	}
	sent, lost := 2553131237.175667, 2.123963679431504
	if want := sent * (1 - lost/100); est.SentBps != sent || est.ReceivedBps != want ||
		est.Seconds != 1.000136 || est.LostPackets != 4842 {
		t.Errorf("udp from sum: %+v, want received %v", est, want)
	}
}

// udpReports are every recorded UDP report that parses.
var udpReports = []string{"iperf3-udp.json", "iperf3-udp-100m-1s.json", "iperf3-udp-lossy.json", "iperf3-udp-reverse.json",
	"iperf3-udp-omit-shaped.json", "iperf3-udp-nothing-arrives.json", "iperf3-udp-ovs-wrapped.json",
	"iperf3-udp-shaped-tiny.json", "iperf3-udp-shaped-tiny-omit.json", "iperf3-udp-dropped-omit.json",
	"iperf3-udp-dropped-reverse-omit.json", "iperf3-udp-omit-late.json"}

// TestUDPMetricsAddUp: what arrived is what was sent less what was lost,
// in every recorded UDP report, including iperf3-udp-omit-shaped.json,
// one of four flows of 32,739-byte datagrams at 100G each through a
// one-hop chain with an HTB shaper, with -O 1 (recorded by cnlab run
// experiments/shaper-vnf.yaml --quick, point p0004), where iperf3's own
// receiver reports 6,005 of 6,001 datagrams lost (100.07%) while 3,119
// arrived. No count is ever below 0 or past what was sent.
func TestUDPMetricsAddUp(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b)) }
	for _, name := range udpReports {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseIperf3(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.LostPercent < 0 || r.LostPercent > 100 || r.LostPackets < 0 || r.LostPackets > r.Packets || r.LatePackets < 0 ||
			r.ReceivedPackets < 0 || r.ReceivedPackets != r.Packets-r.LostPackets+r.LatePackets {
			t.Errorf("%s: loss %.2f%%, %d of %d datagrams lost, %d arrived, %d late", name, r.LostPercent, r.LostPackets, r.Packets, r.ReceivedPackets, r.LatePackets)
		}
		// The rates are the bytes over each side's own seconds, and what
		// arrived of what was sent is 1 − loss.
		if !near(r.SentBps*r.SentSeconds/8, r.SentBytes) || !near(r.ReceivedBps*r.Seconds/8, r.ReceivedBytes) ||
			!near(min(r.ReceivedBytes, r.SentBytes), r.SentBytes*(1-r.LostPercent/100)) {
			t.Errorf("%s: sent %.0f B in %.4g s at %.4g b/s, received %.0f B in %.4g s at %.4g b/s, %.4g%% lost", name,
				r.SentBytes, r.SentSeconds, r.SentBps, r.ReceivedBytes, r.Seconds, r.ReceivedBps, r.LostPercent)
		}
		// When the receiver's seconds end within 2% of the sender's (the
		// last datagrams' flight; a shaper's queue takes longer to drain),
		// the rates add up too.
		if want := r.SentBps * (1 - r.LostPercent/100); r.Seconds < 1.02*r.SentSeconds && math.Abs(r.ReceivedBps-want) > 0.02*want {
			t.Errorf("%s: received %.4g b/s, sent %.4g × (1 − %.2f%%) = %.4g", name, r.ReceivedBps, r.SentBps, r.LostPercent, want)
		}
	}
	b, _ := os.ReadFile("testdata/iperf3-udp-omit-shaped.json")
	r, _ := ParseIperf3(b)
	if r.IperfLostPercent <= 100 || r.LostPercent < 47 || r.LostPercent > 49 || r.ReceivedPackets != 3119 || r.LostPackets != 6001-3119 {
		t.Errorf("shaped: iperf3 says %.2f%% lost, cnlab %.2f%% (%d of %d); want over 100%% and 48%% (2,882 of 6,001)", r.IperfLostPercent, r.LostPercent, r.LostPackets, r.Packets)
	}
}

// TestUDPShapedAndOmitted: reports recorded from iperf3 3.12 between two
// namespaces joined by a veth pair (client 10.77.0.1, server 10.77.0.2),
// 1448-byte datagrams:
//
//	tbf rate 8kbit burst 1600 limit 3200 on the client's veth,
//	    -u -b 100M -t 2                   iperf3-udp-shaped-tiny.json
//	    -u -b 100M -t 2 -O 1              iperf3-udp-shaped-tiny-omit.json
//	tbf rate 50mbit burst 64kb limit 30mb on the client's veth,
//	    -u -b 80M -t 1 -O 1               iperf3-udp-omit-late.json
//	nft drop of the flow's UDP in the server's input once it runs,
//	    -u -b 100M -t 2 -O 1              iperf3-udp-dropped-omit.json
//	nft drop of the flow's UDP in the client's input once it runs,
//	    -u -b 100M -t 2 -O 1 -R           iperf3-udp-dropped-reverse-omit.json
func TestUDPShapedAndOmitted(t *testing.T) {
	parse := func(name string) *Iperf3Result {
		t.Helper()
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseIperf3(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	// 3 of 17,258 datagrams got through the shaper; iperf3 counts only
	// the gaps up to the last sequence number it saw (31.5%). The
	// receiver's seconds run until the queue drains (3.89 s for 2 s
	// sent): its rate is the shaper's.
	tiny := parse("iperf3-udp-shaped-tiny.json")
	if tiny.Packets != 17258 || tiny.ReceivedPackets != 3 || tiny.LostPackets != 17255 || math.Abs(tiny.LostPercent-99.98262) > 1e-4 ||
		math.Abs(tiny.IperfLostPercent-31.51) > 0.01 || tiny.Seconds != 3.891852 || tiny.SentSeconds != 2.000126 || tiny.ReceivedBps > 10e3 {
		t.Errorf("shaped: %+v", tiny)
	}
	// With -O 1, iperf3 says 84.3%: its losses start counting in the
	// omitted second, its datagrams in the measured ones.
	tinyO := parse("iperf3-udp-shaped-tiny-omit.json")
	if tinyO.Packets != 17265 || tinyO.ReceivedPackets != 3 || math.Abs(tinyO.IperfLostPercent-84.30) > 0.01 || tinyO.LostPercent < 99.98 {
		t.Errorf("shaped -O 1: %+v", tinyO)
	}
	// Nothing of the measured seconds arrived: iperf3 writes the
	// receiver's datagrams as 2^64 − 3,435 and 0% lost.
	drop := parse("iperf3-udp-dropped-omit.json")
	if drop.LostPercent != 100 || drop.ReceivedBps != 0 || drop.Packets != 17266 || drop.LostPackets != 17266 || drop.ReceivedPackets != 0 ||
		drop.IperfLostPercent != 0 || drop.SentBps < 99e6 {
		t.Errorf("dropped -O 1: %+v", drop)
	}
	// -R: iperf3's sender count (20,718) takes in the omitted second;
	// the bytes say 17,283 datagrams were sent in the measured two.
	rev := parse("iperf3-udp-dropped-reverse-omit.json")
	if !rev.Reverse || rev.Packets != 17283 || rev.LostPackets != 17283 || rev.LostPercent != 100 || rev.ReceivedBps != 0 {
		t.Errorf("dropped -R -O 1: %+v", rev)
	}
	// A deep queue delivers datagrams of the omitted second in the
	// measured one: 4,241 arrived of 4,194 sent. The loss is 0 and the
	// excess is counted apart, not a negative loss.
	late := parse("iperf3-udp-omit-late.json")
	if late.Packets != 4194 || late.ReceivedPackets != 4241 || late.LatePackets != 47 || late.LostPackets != 0 || late.LostPercent != 0 ||
		!strings.Contains(late.Note, "47 more datagrams arrived") {
		t.Errorf("late: %+v", late)
	}
	if tiny.Note != "" || drop.Note != "" {
		t.Errorf("notes where nothing was inferred: %q, %q", tiny.Note, drop.Note)
	}
}

// TestUDPReceiverSectionMissing: a report whose receiver section is
// missing or empty is a receiver that got nothing: 100% lost, with the
// sender's figures. Derived from a recording, which stays as iperf3
// wrote it.
func TestUDPReceiverSectionMissing(t *testing.T) {
	b, err := os.ReadFile("testdata/iperf3-udp-shaped-tiny-omit.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(end map[string]any)
	}{
		{"missing", func(end map[string]any) { delete(end, "sum_received") }},
		{"empty", func(end map[string]any) { end["sum_received"] = map[string]any{} }},
		{"no time, no bytes", func(end map[string]any) {
			end["sum_received"] = map[string]any{"seconds": 0, "bytes": 0, "bits_per_second": nil, "packets": 0}
		}},
	} {
		var raw map[string]any
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatal(err)
		}
		tc.edit(raw["end"].(map[string]any))
		data, err := json.Marshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseIperf3(data)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if r.LostPercent != 100 || r.ReceivedBps != 0 || r.Packets != 17265 || r.LostPackets != 17265 || r.ReceivedPackets != 0 ||
			r.SentBps != 100000180.00234003 || r.Seconds != r.SentSeconds || r.SentSeconds != 1.999974 || !strings.Contains(r.Note, "no receiver totals") {
			t.Errorf("%s: %+v", tc.name, r)
		}
	}
}

// TestUDPNothingArrives: recorded from iperf3 3.12 between two namespaces
// with an nftables rule on the server side dropping the UDP flow.
//
//	drop once established: iperf3-udp-nothing-arrives.json (the test runs,
//	    no datagram of the measured time arrives; iperf3 says 0% lost)
//	drop every datagram:   iperf3-udp-setup-dropped.json (iperf3's UDP
//	    set-up datagram never arrives and the client gives up)
func TestUDPNothingArrives(t *testing.T) {
	b, err := os.ReadFile("testdata/iperf3-udp-nothing-arrives.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseIperf3(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.LostPercent != 100 || r.ReceivedBps != 0 || r.Packets == 0 || r.LostPackets != r.Packets || r.SentBps < 90e6 || r.Seconds < 1.9 {
		t.Errorf("nothing arrived: %+v; want 100%% lost, every datagram", r)
	}
	b, err = os.ReadFile("testdata/iperf3-udp-setup-dropped.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseIperf3(b); err == nil || !strings.Contains(err.Error(), "the first datagram never reached the server") {
		t.Errorf("set-up dropped: %v", err)
	}
	// An old-style report (end.sum only) whose loss counts run outside
	// what was sent is kept within it.
	old := []byte(`{"start":{"test_start":{"protocol":"UDP","num_streams":1}},"end":{"sum":{"seconds":1,"bits_per_second":1e8,"packets":100,"lost_packets":130,"lost_percent":130}}}`)
	r, err = ParseIperf3(old)
	if err != nil {
		t.Fatal(err)
	}
	if r.LostPackets != 100 || r.LostPercent != 100 || r.ReceivedBps != 0 || r.IperfLostPercent != 130 {
		t.Errorf("old report past 100%%: %+v", r)
	}
	neg := []byte(`{"start":{"test_start":{"protocol":"UDP","num_streams":1}},"end":{"sum":{"seconds":1,"bits_per_second":1e8,"packets":100,"lost_packets":-3,"lost_percent":-3}}}`)
	if r, err = ParseIperf3(neg); err != nil || r.LostPackets != 0 || r.LostPercent != 0 || r.ReceivedBps != 1e8 {
		t.Errorf("old report below 0: %+v %v", r, err)
	}
}

// TestUDPWrappedCount: a report recorded through an Open vSwitch chain
// (userspace datapath, 4 flows at 100G each, 32,739-byte datagrams) whose
// receiver got no byte in the measured second: iperf3 3.12 wrote its
// received packets as 18446744073709522414 (2^64 - 29,202, sent minus a
// larger lost count in unsigned arithmetic). It parses, as 100% lost.
func TestUDPWrappedCount(t *testing.T) {
	b, err := os.ReadFile("testdata/iperf3-udp-ovs-wrapped.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseIperf3(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Packets != 12422 || r.LostPackets != 12422 || r.LostPercent != 100 || r.ReceivedBps != 0 {
		t.Errorf("wrapped count: %+v", r)
	}
	var c iperfCount
	if err := json.Unmarshal([]byte("18446744073709522414"), &c); err != nil || c != -29202 {
		t.Errorf("2^64 - 29202 read as %d, %v", c, err)
	}
	if err := json.Unmarshal([]byte("1e3"), &c); err == nil {
		t.Error("a count that is no integer parsed")
	}
}
