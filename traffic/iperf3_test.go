package traffic

import (
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
