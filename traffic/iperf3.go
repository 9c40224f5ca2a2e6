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
	Seconds     float64 `json:"seconds"`               // the receiver's measured seconds
	SentSeconds float64 `json:"sentSeconds,omitempty"` // the sender's measured seconds
	SentBps     float64 `json:"sentBitsPerSecond"`
	ReceivedBps float64 `json:"receivedBitsPerSecond"` // TCP: at the receiver; UDP: what arrived
	Retransmits int     `json:"retransmits"`           // TCP
	// UDP, over the measured seconds (after -O): bytes and datagrams
	// sent and arrived. iperf3's datagrams are all blksize bytes long, so
	// the counts are the bytes over blksize, exact, and free of iperf3's
	// own counts, which mix the omitted seconds in (docs/methodology.md).
	SentBytes       float64 `json:"sentBytes,omitempty"`
	ReceivedBytes   float64 `json:"receivedBytes,omitempty"`
	Packets         int     `json:"packets,omitempty"`         // UDP datagrams sent
	ReceivedPackets int     `json:"receivedPackets,omitempty"` // UDP datagrams that arrived
	// LostPackets is what was sent and did not arrive: sent minus
	// arrived, never below 0.
	LostPackets int `json:"lostPackets,omitempty"`
	// LatePackets is what arrived beyond what was sent in the measured
	// seconds: datagrams sent during -O's omitted seconds that a queue
	// (a shaper) delivered in the measured ones. The loss is then 0, not
	// negative, and Note says so.
	LatePackets int     `json:"latePackets,omitempty"`
	LostPercent float64 `json:"lostPercent"` // UDP: 100 × (1 − bytes arrived / bytes sent), within 0–100
	// IperfLostPercent is the loss iperf3 itself reports (sum_received):
	// with -O it counts the losses of the omitted seconds against the
	// datagrams of the measured ones, and can pass 100% (docs/methodology.md).
	IperfLostPercent float64 `json:"iperfLostPercent,omitempty"`
	JitterMs         float64 `json:"jitterMs,omitempty"` // UDP
	SenderCPU        float64 `json:"senderCPUPercent"`   // the sending side's total CPU (the client's, or the server's with -R)
	ReceiverCPU      float64 `json:"receiverCPUPercent"` // the receiving side's total CPU
	Reverse          bool    `json:"reverse,omitempty"`  // -R: the server sent
	IperfVersion     string  `json:"iperfVersion,omitempty"`
	// Note says what cnlab inferred or clamped reading the report (a
	// missing receiver section, late datagrams), empty when nothing.
	Note string `json:"note,omitempty"`
	// Bidir is the server→client direction of a --bidir test (iperf3
	// 3.7 and later); the fields above are then the client→server
	// direction's (CPU: SenderCPU is the client's, ReceiverCPU the
	// server's, each of which both sends and receives).
	Bidir *Iperf3Direction `json:"bidir,omitempty"`
	// Intervals are the client's per-second reports (-i 1, iperf3's
	// default), summed over its streams, the omitted ones (-O) included.
	Intervals []Iperf3Interval `json:"intervals,omitempty"`
}

// Iperf3Direction is one direction's totals of a --bidir test.
type Iperf3Direction struct {
	SentBps     float64 `json:"sentBitsPerSecond"`
	ReceivedBps float64 `json:"receivedBitsPerSecond"`
	Retransmits int     `json:"retransmits"` // TCP, counted by its sender
}

// Iperf3Interval is one of the client's per-second reports, summed over
// its streams. The client sees its own side only: Bps is what it sent
// (what it received with -R), Retransmits its own (TCP, when it sends);
// ReverseBps, with --bidir, is what it received from the server.
type Iperf3Interval struct {
	Start       float64 `json:"start"` // seconds from the test's start, omitted seconds included
	End         float64 `json:"end"`
	Bps         float64 `json:"bitsPerSecond"`
	Retransmits int     `json:"retransmits,omitempty"`
	ReverseBps  float64 `json:"reverseBitsPerSecond,omitempty"`
	Omitted     bool    `json:"omitted,omitempty"` // a -O warm-up second, not measured
}

// Measured returns the intervals after the omitted ones, their times
// moved to start at 0 (the start of the measured time).
func (r *Iperf3Result) Measured() []Iperf3Interval {
	var out []Iperf3Interval
	for _, iv := range r.Intervals {
		if iv.Omitted {
			continue
		}
		out = append(out, iv)
	}
	if len(out) > 0 {
		t0 := out[0].Start
		for i := range out {
			out[i].Start -= t0
			out[i].End -= t0
		}
	}
	return out
}

type iperfInterval struct {
	Start         float64 `json:"start"`
	End           float64 `json:"end"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Retransmits   int     `json:"retransmits"`
	Omitted       bool    `json:"omitted"`
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
				Blksize    int    `json:"blksize"`
				Reverse    int    `json:"reverse"`
			} `json:"test_start"`
		} `json:"start"`
		Intervals []struct {
			Sum             iperfInterval  `json:"sum"`
			SumBidirReverse *iperfInterval `json:"sum_bidir_reverse"`
		} `json:"intervals"`
		End struct {
			Sum         *iperfSum `json:"sum"`
			SumSent     *iperfSum `json:"sum_sent"`
			SumReceived *iperfSum `json:"sum_received"`
			// --bidir: the server→client direction.
			SumSentReverse     *iperfSum `json:"sum_sent_bidir_reverse"`
			SumReceivedReverse *iperfSum `json:"sum_received_bidir_reverse"`
			CPU                struct {
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
		r.Seconds, r.SentSeconds = received.Seconds, sent.Seconds
		r.SentBps = sent.BitsPerSecond
		r.ReceivedBps = received.BitsPerSecond
		r.Retransmits = sent.Retransmits
		if rs, rr := raw.End.SumSentReverse, raw.End.SumReceivedReverse; rs != nil && rr != nil {
			r.Bidir = &Iperf3Direction{SentBps: rs.BitsPerSecond, ReceivedBps: rr.BitsPerSecond, Retransmits: rs.Retransmits}
		}
	case "UDP":
		if sent != nil {
			udpTotals(r, sent, received, raw.Start.TestStart.Blksize)
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
		r.ReceivedPackets = r.Packets - r.LostPackets
	default:
		return nil, fmt.Errorf("iperf3 report: protocol %q", r.Protocol)
	}
	if r.Seconds <= 0 {
		return nil, errors.New("iperf3 report: no measured time")
	}
	for _, iv := range raw.Intervals {
		s := iv.Sum
		out := Iperf3Interval{Start: s.Start, End: s.End, Bps: s.BitsPerSecond, Retransmits: s.Retransmits, Omitted: s.Omitted}
		if b := iv.SumBidirReverse; b != nil {
			out.ReverseBps = b.BitsPerSecond
		}
		r.Intervals = append(r.Intervals, out)
	}
	return r, nil
}

// udpTotals reads both sides' UDP totals over the measured seconds (after
// -O): what was sent, what arrived. The loss is computed from the bytes,
// not taken from iperf3: its receiver counts a gap in the sequence
// numbers against the measured datagrams even when it was lost in the
// omitted seconds (a shaped chain showed 101.7% loss, 3,140 of 6,454
// datagrams having arrived), and iperf3 3.12 writes a count below zero as
// 2^64 - n.
//
// A receiver section that is missing or empty ({}, or no time and no
// bytes) is a receiver that got nothing: 100% lost, over the sender's
// seconds.
func udpTotals(r *Iperf3Result, sent, received *iperfSum, blksize int) {
	r.SentSeconds, r.SentBytes, r.SentBps = sent.Seconds, sent.Bytes, sent.BitsPerSecond
	r.Packets = max(int(sent.Packets), 0)
	if n, ok := datagrams(sent.Bytes, blksize); ok {
		r.Packets = n
	}
	if received == nil || received.Seconds <= 0 && received.Bytes <= 0 {
		r.Note = "the report has no receiver totals: taken as nothing arrived"
		received = &iperfSum{}
	}
	r.Seconds = received.Seconds
	if r.Seconds <= 0 {
		r.Seconds = r.SentSeconds
	}
	r.ReceivedBytes = max(received.Bytes, 0)
	r.ReceivedBps = received.BitsPerSecond
	if r.ReceivedBps <= 0 && r.ReceivedBytes > 0 && r.Seconds > 0 {
		r.ReceivedBps = 8 * r.ReceivedBytes / r.Seconds
	}
	r.IperfLostPercent, r.JitterMs = received.LostPercent, received.JitterMs
	if sent.Bytes <= 0 {
		return
	}
	share := r.ReceivedBytes / sent.Bytes
	r.ReceivedPackets = int(math.Round(share * float64(r.Packets)))
	if n, ok := datagrams(r.ReceivedBytes, blksize); ok {
		r.ReceivedPackets = n
	}
	r.LostPercent = 100 * (1 - min(share, 1))
	r.LostPackets = max(r.Packets-r.ReceivedPackets, 0)
	r.LatePackets = max(r.ReceivedPackets-r.Packets, 0)
	if share > 1 {
		r.Note = fmt.Sprintf("%d more datagrams arrived in the receiver's measured seconds than were sent in the sender's (sent during the omitted seconds, delivered late): loss taken as 0", r.LatePackets)
	}
}

// datagrams is how many iperf3 UDP datagrams of blksize bytes make
// bytes; false when blksize is unknown or does not divide bytes.
func datagrams(bytes float64, blksize int) (int, bool) {
	if blksize <= 0 || bytes < 0 || bytes > 1<<53 {
		return 0, false
	}
	n := bytes / float64(blksize)
	if n != math.Trunc(n) {
		return 0, false
	}
	return int(n), true
}
