package experiment

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/rundir"
)

// ReferenceOptions say how long the reference speed is measured.
type ReferenceOptions struct {
	// StreamSamples of one second of one TCP stream, RRSamples of
	// RRDuration of tcp-rr 100/200.
	StreamSamples, RRSamples int
	RRDuration               time.Duration
	RR                       []string  // argv of cnlab's rr command (default: this executable's)
	Log                      io.Writer // the commands and their output (default: discarded)
}

// QuickReference is what cnlab run measures: about 5 s in all.
var QuickReference = ReferenceOptions{StreamSamples: 3, RRSamples: 4, RRDuration: 300 * time.Millisecond}

// DoctorReference is what cnlab doctor measures: about 8 s.
var DoctorReference = ReferenceOptions{StreamSamples: 4, RRSamples: 6, RRDuration: 500 * time.Millisecond}

// referenceCache is where the last reference speed of this boot is kept
// (/run is emptied at boot), and referenceMaxAge how long a run uses it
// instead of measuring again.
var referenceCache = rundir.ReferenceSpeed()

const referenceMaxAge = 10 * time.Minute

// referenceAddrs are the client's and the server's addresses on the
// reference pair: a /30 of their own namespaces, seen by nothing else.
var referenceAddrs = [2]string{"10.254.254.1/30", "10.254.254.2/30"}

// removeStaleReference removes the reference pairs of cnlab processes
// that died measuring (killed before their deferred removal ran): the
// namespaces cnlab-ref-PID-* whose PID runs no more, with what runs in
// them.
func removeStaleReference() {
	names, err := netns.List("cnlab-ref-")
	if err != nil {
		return
	}
	var stale []string
	for _, n := range names {
		pid, _, ok := strings.Cut(strings.TrimPrefix(n, "cnlab-ref-"), "-")
		if !ok {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // its cnlab still measures
		}
		stale = append(stale, n)
	}
	if len(stale) == 0 {
		return
	}
	_ = netns.KillAll(netns.Inodes(stale), 3*time.Second)
	for _, n := range stale {
		_ = netns.Delete(n)
	}
}

// MeasureReference measures the reference speed on a veth pair between
// two namespaces of its own (cnlab-ref-PID-c and -s, removed after), and
// keeps it for the runs of the next minutes (CachedReference).
func MeasureReference(ctx context.Context, o ReferenceOptions) (*results.ReferenceSpeed, error) {
	t0 := time.Now()
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.RR == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("reference speed: find cnlab's own executable for rr: %w", err)
		}
		o.RR = []string{exe, "rr"}
	}
	removeStaleReference()
	pfx := fmt.Sprintf("cnlab-ref-%d-", os.Getpid())
	names := [2]string{pfx + "c", pfx + "s"}
	defer func() {
		_ = netns.KillAll(netns.Inodes(names[:]), 3*time.Second)
		for _, n := range names {
			_ = netns.Delete(n)
		}
	}()
	for _, n := range names {
		if err := netns.Create(n, nil); err != nil {
			return nil, fmt.Errorf("reference speed: %w", err)
		}
	}
	steps := [][]string{
		{names[0], "ip", "link", "add", "ref0", "type", "veth", "peer", "name", "ref1", "netns", names[1]},
		{names[0], "ip", "addr", "add", referenceAddrs[0], "dev", "ref0"},
		{names[1], "ip", "addr", "add", referenceAddrs[1], "dev", "ref1"},
		{names[0], "ip", "link", "set", "ref0", "up"},
		{names[1], "ip", "link", "set", "ref1", "up"},
		{names[0], "ip", "link", "set", "lo", "up"},
		{names[1], "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if _, err := netns.Run(ctx, s[0], nil, s[1], s[2:]...); err != nil {
			return nil, fmt.Errorf("reference speed: %w", err)
		}
	}
	server := netip.MustParsePrefix(referenceAddrs[1]).Addr()
	cpu := 0
	e := sampleEnv{ep: endpoints{client: names[0], server: names[1], serverIP: server, dest: server},
		pin: &results.Pin{Client: &cpu, Server: &cpu}, rr: o.RR, log: o.Log, host: localHost{}, listenWait: 5 * time.Second}
	ref := &results.ReferenceSpeed{StreamSeconds: 1, RRSeconds: o.RRDuration.Seconds(), MeasuredAt: t0.UTC()}
	e.duration = time.Second
	for i := 0; i < o.StreamSamples; i++ {
		m, err := runSample(ctx, results.Workload{Kind: results.TCPStream, Flows: 1, Streams: 1}, e)
		if err != nil {
			return nil, fmt.Errorf("reference speed, tcp-stream: %w", err)
		}
		ref.StreamGbps = append(ref.StreamGbps, m["throughput_gbps"])
	}
	e.duration = o.RRDuration
	for i := 0; i < o.RRSamples; i++ {
		m, err := runSample(ctx, results.Workload{Kind: results.TCPRR, RequestSize: 100, ResponseSize: 200}, e)
		if err != nil {
			return nil, fmt.Errorf("reference speed, tcp-rr: %w", err)
		}
		ref.RRP50Us = append(ref.RRP50Us, m["latency_p50_us"])
	}
	ref.Seconds = time.Since(t0).Seconds()
	if id := bootID(); id != "" {
		_ = os.MkdirAll(filepath.Dir(referenceCache), 0o755)
		_ = files.WriteJSON(referenceCache, cachedReference{Boot: id, Reference: ref}, true)
	}
	return ref, nil
}

// cachedReference is the cache file: the boot it was measured in.
type cachedReference struct {
	Boot      string                  `json:"boot"`
	Reference *results.ReferenceSpeed `json:"reference"`
}

func bootID() string { return readTrim("/proc/sys/kernel/random/boot_id") }

// CachedReference is the reference speed measured on this boot less than
// maxAge ago (nil if none).
func CachedReference(maxAge time.Duration) *results.ReferenceSpeed {
	var c cachedReference
	if err := files.ReadJSON(referenceCache, &c); err != nil || c.Reference == nil || c.Boot == "" || c.Boot != bootID() {
		return nil
	}
	if age := time.Since(c.Reference.MeasuredAt); age < 0 || age > maxAge {
		return nil
	}
	c.Reference.Cached = true
	return c.Reference
}

// recordReference is the reference speed a lab run records: the one
// measured on this boot within referenceMaxAge, or a new quick one. A
// failure is recorded, not fatal: the run measures what it was asked to.
func recordReference(ctx context.Context, ro Options) *results.ReferenceSpeed {
	if ref := CachedReference(referenceMaxAge); ref != nil {
		return ref
	}
	if ro.Progress != nil {
		fmt.Fprintln(ro.Progress, "cnlab: measuring this machine's reference speed (one veth pair, about 5 s; kept for 10 minutes)")
	}
	o := QuickReference
	o.RR = ro.RR
	ref, err := MeasureReference(ctx, o)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		msg := err.Error()
		if errors.Is(err, os.ErrPermission) {
			msg = "not root: " + msg
		}
		return &results.ReferenceSpeed{MeasuredAt: time.Now().UTC(), Error: strings.TrimSpace(msg)}
	}
	return ref
}
