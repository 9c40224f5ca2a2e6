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

// TestUDPMetricsAddUp: what arrived is what was sent less what was lost,
// over the same measured seconds, in every recorded UDP report, including
// iperf3-udp-omit-shaped.json, one of four flows of 32,739-byte datagrams
// at 100G each through a one-hop chain with an HTB shaper, with -O 1
// (recorded by cnlab run experiments/shaper-vnf.yaml --quick, point p0004),
// where iperf3's own receiver reports 6,005 of 6,001 datagrams lost
// (100.07%) while 3,119 arrived.
func TestUDPMetricsAddUp(t *testing.T) {
	for _, name := range []string{"iperf3-udp.json", "iperf3-udp-100m-1s.json", "iperf3-udp-lossy.json", "iperf3-udp-reverse.json", "iperf3-udp-omit-shaped.json", "iperf3-udp-nothing-arrives.json", "iperf3-udp-ovs-wrapped.json"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseIperf3(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.LostPercent < 0 || r.LostPercent > 100 || r.LostPackets < 0 || r.LostPackets > r.Packets {
			t.Errorf("%s: loss %.2f%%, %d of %d datagrams", name, r.LostPercent, r.LostPackets, r.Packets)
		}
		// The receiver's seconds run a little past the sender's (the
		// last datagrams' flight): within 2%.
		if want := r.SentBps * (1 - r.LostPercent/100); math.Abs(r.ReceivedBps-want) > 0.02*want {
			t.Errorf("%s: received %.4g b/s, sent %.4g × (1 − %.2f%%) = %.4g", name, r.ReceivedBps, r.SentBps, r.LostPercent, want)
		}
	}
	b, _ := os.ReadFile("testdata/iperf3-udp-omit-shaped.json")
	r, _ := ParseIperf3(b)
	if r.IperfLostPercent <= 100 || r.LostPercent < 47 || r.LostPercent > 49 {
		t.Errorf("shaped: iperf3 says %.2f%% lost, cnlab %.2f%%; want over 100%% and 48%%", r.IperfLostPercent, r.LostPercent)
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
