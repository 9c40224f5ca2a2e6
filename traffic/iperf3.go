package traffic

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Iperf3Result is what cnlab keeps of an iperf3 client's JSON report
// (`iperf3 -c ... -J`), for TCP and UDP streams.
type Iperf3Result struct {
	Protocol    string  `json:"protocol"` // TCP or UDP
	Streams     int     `json:"streams"`
	Seconds     float64 `json:"seconds"`
	SentBps     float64 `json:"sentBitsPerSecond"`
	ReceivedBps float64 `json:"receivedBitsPerSecond"` // TCP: at the receiver; UDP: what arrived
	Retransmits int     `json:"retransmits"`           // TCP
	Packets     int     `json:"packets,omitempty"`     // UDP datagrams sent in the measured time
	LostPackets int     `json:"lostPackets,omitempty"` // UDP: sent minus received (from the bytes)
	LostPercent float64 `json:"lostPercent"`           // UDP: 100 × (1 − bytes received / bytes sent)
	// IperfLostPercent is the loss iperf3 itself reports (sum_received):
	// with -O it counts the losses of the omitted seconds against the
	// datagrams of the measured ones, and can pass 100% (docs/methodology.md).
	IperfLostPercent float64 `json:"iperfLostPercent,omitempty"`
	JitterMs         float64 `json:"jitterMs,omitempty"` // UDP
	SenderCPU        float64 `json:"senderCPUPercent"`   // the sending side's total CPU (the client's, or the server's with -R)
	ReceiverCPU      float64 `json:"receiverCPUPercent"` // the receiving side's total CPU
	Reverse          bool    `json:"reverse,omitempty"`  // -R: the server sent
	IperfVersion     string  `json:"iperfVersion,omitempty"`
}

type iperfSum struct {
	Seconds       float64    `json:"seconds"`
	Bytes         float64    `json:"bytes"`
	BitsPerSecond float64    `json:"bits_per_second"`
	Retransmits   int        `json:"retransmits"`
	Packets       iperfCount `json:"packets"`
	LostPackets   iperfCount `json:"lost_packets"`
	LostPercent   float64    `json:"lost_percent"`
	JitterMs      float64    `json:"jitter_ms"`
}

// iperfCount is a datagram count of iperf3's JSON. iperf3 3.12 computes
// the receiver's packets as sent minus lost in unsigned 64 bits, so when
// it counts more lost than arrived (losses of the omitted seconds) the
// count wraps to 2^64 - n: read as the negative number it stands for.
type iperfCount int

// UnmarshalJSON reads a count, wrapped or not.
func (c *iperfCount) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		*c = iperfCount(v)
		return nil
	}
	u, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("iperf3 count %s: %w", s, err)
	}
	*c = iperfCount(int64(u)) // 2^64 - n is -n
	return nil
}

// ParseIperf3 reads an iperf3 client's JSON report. A report carrying an
// error (server unreachable, interrupted) is returned as that error.
func ParseIperf3(data []byte) (*Iperf3Result, error) {
	var raw struct {
		Start struct {
			Version   string `json:"version"`
			TestStart struct {
				Protocol   string `json:"protocol"`
				NumStreams int    `json:"num_streams"`
				Reverse    int    `json:"reverse"`
			} `json:"test_start"`
		} `json:"start"`
		End struct {
			Sum         *iperfSum `json:"sum"`
			SumSent     *iperfSum `json:"sum_sent"`
			SumReceived *iperfSum `json:"sum_received"`
			CPU         struct {
				HostTotal   float64 `json:"host_total"`
				RemoteTotal float64 `json:"remote_total"`
			} `json:"cpu_utilization_percent"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("iperf3 report: %w", err)
	}
	if raw.Error != "" {
		if strings.Contains(raw.Error, "unable to read from stream socket") {
			// iperf3's UDP client sends a first datagram and waits for the
			// server's answer before the test starts (the report has no
			// test_start yet): a path that drops every datagram fails
			// here, before anything is measured.
			return nil, fmt.Errorf("iperf3: %s (with UDP: the first datagram never reached the server, or its answer never came back; the path drops this flow's UDP, so iperf3 measured nothing)", raw.Error)
		}
		return nil, fmt.Errorf("iperf3: %s", raw.Error)
	}
	r := &Iperf3Result{Protocol: raw.Start.TestStart.Protocol, Streams: raw.Start.TestStart.NumStreams,
		SenderCPU: raw.End.CPU.HostTotal, ReceiverCPU: raw.End.CPU.RemoteTotal, IperfVersion: raw.Start.Version,
		Reverse: raw.Start.TestStart.Reverse != 0}
	if r.Reverse { // the client received: host_total is the receiver's
		r.SenderCPU, r.ReceiverCPU = r.ReceiverCPU, r.SenderCPU
	}
	sent, received := raw.End.SumSent, raw.End.SumReceived
	switch r.Protocol {
	case "TCP":
		if sent == nil || received == nil {
			return nil, errors.New("iperf3 report: no TCP totals")
		}
		r.Seconds = received.Seconds
		r.SentBps = sent.BitsPerSecond
		r.ReceivedBps = received.BitsPerSecond
		r.Retransmits = sent.Retransmits
	case "UDP":
		if sent != nil && received != nil {
			// Both sides' totals over the measured seconds (after -O):
			// what was sent, what arrived. The loss is computed from the
			// bytes, not taken from iperf3: its receiver counts a gap in
			// the sequence numbers against the measured datagrams even
			// when it was lost in the omitted seconds (a shaped chain
			// showed 101.7% loss, 3,140 of 6,454 datagrams having
			// arrived).
			r.Seconds = received.Seconds
			r.SentBps, r.ReceivedBps = sent.BitsPerSecond, received.BitsPerSecond
			r.Packets = int(sent.Packets)
			r.IperfLostPercent, r.JitterMs = received.LostPercent, received.JitterMs
			if sent.Bytes > 0 {
				share := min(max(received.Bytes/sent.Bytes, 0), 1)
				r.LostPercent = 100 * (1 - share)
				r.LostPackets = int(sent.Packets) - int(math.Round(share*float64(sent.Packets)))
			}
			break
		}
		// Older reports have only the sender's totals with the
		// receiver's loss: estimate what arrived.
		s := raw.End.Sum
		if s == nil {
			return nil, errors.New("iperf3 report: no UDP totals")
		}
		r.Seconds = s.Seconds
		r.SentBps = s.BitsPerSecond
		// iperf3's own counts can run past the datagrams sent (losses of
		// omitted seconds) or below zero (reordering): keep them within
		// what was sent.
		r.Packets, r.JitterMs = max(int(s.Packets), 0), s.JitterMs
		r.IperfLostPercent = s.LostPercent
		r.LostPackets = min(max(int(s.LostPackets), 0), r.Packets)
		r.LostPercent = min(max(s.LostPercent, 0), 100)
		r.ReceivedBps = s.BitsPerSecond * (1 - r.LostPercent/100)
	default:
		return nil, fmt.Errorf("iperf3 report: protocol %q", r.Protocol)
	}
	if r.Seconds <= 0 {
		return nil, errors.New("iperf3 report: no measured time")
	}
	return r, nil
}
