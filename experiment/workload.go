package experiment

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/stats"
	"github.com/cnlab/cnlab/traffic"
)

// endpoints is where a workload runs: the client and server namespaces
// and the server's address.
type endpoints struct {
	client, server string
	serverIP       netip.Addr
	dest           netip.Addr // where connections go: serverIP, or a Service's cluster IP
}

// sampleEnv is what one sample needs besides its point.
type sampleEnv struct {
	ep       endpoints
	warmup   time.Duration
	duration time.Duration
	pin      *results.Pin
	rr       []string // argv of cnlab's rr command
	cnlab    []string // argv of cnlab itself (rr's without "rr"), for cnlab http
	lab      string   // the lab's name, to find its L7 proxies
	log      io.Writer
	// host runs the processes where client and server are: namespaces of
	// this machine, or a cluster's endpoints (by ID).
	host host
	// listenWait bounds the wait for a server to listen.
	listenWait time.Duration
	// nodeCPU: the CPU's busy share is measured on the endpoints' nodes
	// around the clients only (the client's node, and the server's when
	// splitNodes: another node), not on this machine over the whole
	// sample.
	nodeCPU, splitNodes bool
	// settle, when set, runs before a sample (the lab's reassembly
	// memory drains before a UDP stream); counters, when set, reads the
	// iptables rule counters a profiled run records.
	settle   func(ctx context.Context, w results.Workload, log io.Writer) error
	counters func(ctx context.Context, p results.Params, log io.Writer) map[string][]results.RuleCounter
	// policyCounters, when set, reads the datapath's per-rule counters
	// around each measured sample (PointResult.PolicyCounters).
	policyCounters readPolicyCounters
	// series, when set, receives the sample's per-second series.
	series *seriesSink
}

// host runs a sample's processes.
type host interface {
	// start runs argv in where (a namespace, an endpoint), writing its
	// output to stdout and stderr; it is stopped when ctx ends.
	start(ctx context.Context, where string, argv []string, stdout, stderr io.Writer) (process, error)
	// procStat is /proc/stat of where's machine (not namespaced).
	procStat(ctx context.Context, where string) ([]byte, error)
}

// process is a running measuring process.
type process interface {
	// wait waits for it to exit: nil for status 0, an error with an
	// ExitCode() int method for another.
	wait() error
	// stop ends it: SIGTERM, then SIGKILL after a grace period.
	stop()
	// exited reports whether it has exited (before it was waited for).
	exited() bool
	// cpuTime is the CPU time it used, once waited for, when it ran here.
	cpuTime() (time.Duration, bool)
	// socketTable is its network namespace's /proc/net table (tcp, udp6...).
	socketTable(ctx context.Context, table string) ([]byte, error)
}

// proc is a measuring process started inside a namespace (or endpoint).
type proc struct {
	run  process
	out  syncBuffer
	errb syncBuffer
	t0   time.Time
	prog string // argv[0] of the measuring process
}

// syncBuffer is a bytes.Buffer that can be read while the process writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Bytes() []byte { return []byte(s.String()) }

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// start runs argv inside ns (an endpoint, when a cluster runs it),
// pinned to cpu when set. The process is stopped when ctx ends.
func (e sampleEnv) start(ctx context.Context, ns string, cpu *int, argv ...string) (*proc, error) {
	if cpu != nil {
		argv = append([]string{"taskset", "-c", strconv.Itoa(*cpu)}, argv...)
	}
	fmt.Fprintf(e.log, "$ [%s] %s\n", ns, strings.Join(argv, " "))
	p := &proc{prog: argv[0], t0: time.Now()}
	var err error
	if p.run, err = e.host.start(ctx, ns, argv, &p.out, &p.errb); err != nil {
		return nil, fmt.Errorf("start %s in %s: %w", argv[0], ns, err)
	}
	return p, nil
}

// wait waits for the process and logs its output.
func (p *proc) wait(log io.Writer) error {
	err := p.run.wait()
	p.dump(log)
	return err
}

func (p *proc) dump(log io.Writer) {
	if p.out.Len() > 0 {
		fmt.Fprintf(log, "--- stdout of %s\n%s\n", p.name(), strings.TrimSpace(p.out.String()))
	}
	if p.errb.Len() > 0 {
		fmt.Fprintf(log, "--- stderr of %s\n%s\n", p.name(), strings.TrimSpace(p.errb.String()))
	}
}

// stop ends a server: SIGTERM, then SIGKILL after a grace period.
func (p *proc) stop(log io.Writer) {
	p.run.stop()
	p.dump(log)
}

// cpuPercent is the CPU time a finished process used, in percent of one
// core over its lifetime (0 when it ran elsewhere).
func (p *proc) cpuPercent() float64 {
	t, ok := p.run.cpuTime()
	if !ok {
		return 0
	}
	wall := time.Since(p.t0)
	return 100 * t.Seconds() / wall.Seconds()
}

// waitListening waits until the process listens on port (TCP or UDP),
// reading its namespace's socket tables.
func (e sampleEnv) waitListening(ctx context.Context, p *proc, port int, udp bool) error {
	file := "tcp"
	if udp {
		file = "udp"
	}
	limit := e.listenWait
	deadline := time.Now().Add(limit)
	for {
		// Exited first: a server that could not bind exits, and the port
		// may be held by another (an orphan of an earlier point).
		if p.run.exited() {
			return fmt.Errorf("%s exited before it listened on port %d: %s", p.name(), port, strings.TrimSpace(p.errb.String()))
		}
		for _, table := range []string{file, file + "6"} { // iperf3 listens on a dual-stack IPv6 socket
			data, err := p.run.socketTable(ctx, table)
			if err == nil && listens(data, port, udp) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not listen on port %d within %v: %s", p.name(), port, limit, strings.TrimSpace(p.errb.String()))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// listens reports whether a /proc/net/{tcp,udp}[6] table has a socket
// listening on port (unconnected, for UDP).
func listens(table []byte, port int, udp bool) bool {
	state := " 0A " // LISTEN
	if udp {
		state = " 07 " // unconnected UDP sockets are "CLOSE"
	}
	want := fmt.Sprintf(":%04X ", port)
	sc := bufio.NewScanner(bytes.NewReader(table))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 3 && strings.HasSuffix(f[1]+" ", want) && " "+f[3]+" " == state {
			return true
		}
	}
	return false
}

// name is the program the process runs.
func (p *proc) name() string { return p.prog }

// cpuTimes reads the machine's busy and total jiffies from /proc/stat:
// where's machine (this one for a namespace, the node of an endpoint on a
// cluster). 0, 0 when it cannot.
func (e sampleEnv) cpuTimes(ctx context.Context, where string) (busy, total float64) {
	data, err := e.host.procStat(ctx, where)
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0, 0
	}
	for i, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		total += x
		if i != 3 && i != 4 { // idle, iowait
			busy += x
		}
	}
	return busy, total
}

// cpuWindow measures the busy share of the nodes' CPUs while a backend's
// clients run (from just before they start until they exit): the
// client's node as system_cpu_pct, the server's as
// server_system_cpu_pct when it is another node. Around the clients
// only, so that the execs that start the servers and watch them listen
// are not in it (on a lab the whole sample is, as before).
type cpuWindow struct {
	e      sampleEnv
	b0, t0 [2]float64
}

// clientCPU starts the window (nil unless nodeCPU: runSample measures).
func (e sampleEnv) clientCPU(ctx context.Context) *cpuWindow {
	if !e.nodeCPU {
		return nil
	}
	w := &cpuWindow{e: e}
	w.b0[0], w.t0[0] = e.cpuTimes(ctx, e.ep.client)
	if e.splitNodes {
		w.b0[1], w.t0[1] = e.cpuTimes(ctx, e.ep.server)
	}
	return w
}

// end closes the window and adds its metrics to m.
func (w *cpuWindow) end(ctx context.Context, m map[string]float64) {
	if w == nil || m == nil {
		return
	}
	names := [2]string{"system_cpu_pct", "server_system_cpu_pct"}
	for i, where := range []string{w.e.ep.client, w.e.ep.server} {
		if w.t0[i] == 0 {
			continue
		}
		if b1, t1 := w.e.cpuTimes(ctx, where); t1 > w.t0[i] {
			m[names[i]] = 100 * (b1 - w.b0[i]) / (t1 - w.t0[i])
		}
	}
}

// runSample runs one workload once and returns its metrics.
func runSample(ctx context.Context, w results.Workload, e sampleEnv) (map[string]float64, error) {
	var b0, t0 float64
	if !e.nodeCPU {
		b0, t0 = e.cpuTimes(ctx, e.ep.client)
	}
	var m map[string]float64
	var err error
	switch w.Kind {
	case results.TCPStream, results.UDPStream:
		m, err = runIperf3(ctx, w, e)
	case results.TCPRR, results.TCPCRR, results.UDPRR:
		m, err = runRR(ctx, w, e)
	case results.Ping:
		m, err = runPing(ctx, w, e)
	case results.HTTP, results.AB:
		m, err = runHTTPWorkload(ctx, w, e)
	case results.TCPRRUnderLoad:
		m, err = runRRUnderLoad(ctx, w, e)
	default:
		err = fmt.Errorf("workload %q", w.Kind)
	}
	if err != nil {
		return nil, err
	}
	if w.Kind == results.TCPRRUnderLoad {
		// The machine's CPU served the rr and the load streams at once:
		// no service demand of either (skb_per_s is the load's).
		delete(m, "cpu_us_per_packet")
		delete(m, "cpu_us_per_transaction")
	}
	if !e.nodeCPU && t0 > 0 {
		if b1, t1 := e.cpuTimes(ctx, e.ep.client); t1 > t0 {
			m["system_cpu_pct"] = 100 * (b1 - b0) / (t1 - t0)
		}
	}
	return m, nil
}

// secs rounds a duration up to whole seconds: iperf3 takes -t and -O in
// whole seconds.
func secs(d time.Duration) int { return int(math.Ceil(d.Seconds())) }

// runIperf3 runs w.Flows iperf3 client/server pairs at once, on ports
// IperfPort, IperfPort+1, ..., each with w.Streams parallel streams: as
// seed 001, one process per flow, so flows are not confined to one core
// (iperf3 before 3.16 runs all the streams of a process on one thread).
func runIperf3(ctx context.Context, w results.Workload, e sampleEnv) (map[string]float64, error) {
	flows := max(w.Flows, 1)
	var clients []*proc
	var first *proc // a server: its namespace's packet counters
	for i := 0; i < flows; i++ {
		port := IperfPort + i
		srv, err := e.start(ctx, e.ep.server, e.pin.ServerCPU(), "iperf3", "-s", "-1", "-p", strconv.Itoa(port))
		if err != nil {
			return nil, err
		}
		defer srv.stop(e.log)
		if err := e.waitListening(ctx, srv, port, false); err != nil {
			return nil, err
		}
		if first == nil {
			first = srv
		}
	}
	rx := e.rxStart(ctx, first)
	cpu := e.clientCPU(ctx)
	for i := 0; i < flows; i++ {
		argv := []string{"iperf3", "-c", e.ep.dest.String(), "-p", strconv.Itoa(IperfPort + i), "-J",
			"-t", strconv.Itoa(secs(e.duration)), "-O", strconv.Itoa(secs(e.warmup)), "-P", strconv.Itoa(max(w.Streams, 1))}
		if w.Length > 0 {
			argv = append(argv, "-l", strconv.Itoa(w.Length))
		}
		if w.Zerocopy {
			argv = append(argv, "-Z")
		}
		if w.Bidirectional {
			argv = append(argv, "--bidir")
		}
		if w.Kind == results.UDPStream {
			rate := w.Rate
			if rate == "" {
				rate = "1G"
			}
			argv = append(argv, "-u", "-b", rate)
		}
		cli, err := e.start(ctx, e.ep.client, e.pin.ClientCPU(), argv...)
		if err != nil {
			for _, c := range clients {
				c.stop(e.log)
			}
			return nil, err
		}
		clients = append(clients, cli)
	}
	var rs []*traffic.Iperf3Result
	var firstErr error
	for _, cli := range clients {
		werr := cli.wait(e.log)
		r, perr := traffic.ParseIperf3(cli.out.Bytes())
		if perr == nil {
			// What cnlab read of the report above: its own loss and counts
			// beside iperf3's, and what it clamped (docs/methodology.md).
			if js, err := json.Marshal(r); err == nil {
				fmt.Fprintf(e.log, "--- cnlab's reading of the report above\n%s\n", js)
			}
		}
		switch {
		case perr != nil && werr != nil && firstErr == nil:
			firstErr = fmt.Errorf("%w (%v)", perr, werr)
		case perr != nil && firstErr == nil:
			firstErr = perr
		case perr == nil:
			rs = append(rs, r)
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if firstErr != nil {
		return nil, firstErr
	}
	if w.Bidirectional {
		for _, r := range rs {
			if r.Bidir == nil {
				return nil, fmt.Errorf("%s reported one direction of a bidirectional stream: bidirectional needs iperf3 3.7 or later (--bidir)", r.IperfVersion)
			}
		}
	}
	e.series.set(iperf3Series(rs, w.Kind == results.UDPStream, w.Bidirectional))
	m := map[string]float64{}
	cpu.end(ctx, m)
	if !w.Bidirectional {
		// Both ways, the server's rx counts one direction's data and
		// the other's ACKs: per packet of neither (docs/methodology.md).
		rx.endStream(ctx, m, float64(secs(e.warmup)+secs(e.duration)))
	}
	var packets, lost int
	for _, r := range rs {
		if d := r.Bidir; d != nil && w.Bidirectional {
			// Both directions: the totals are their sums
			// (docs/methodology.md).
			m["throughput_up_gbps"] += r.ReceivedBps / 1e9
			m["throughput_down_gbps"] += d.ReceivedBps / 1e9
			m["throughput_gbps"] += d.ReceivedBps / 1e9
			m["sent_gbps"] += d.SentBps / 1e9
			m["retransmits"] += float64(d.Retransmits)
		}
		m["throughput_gbps"] += r.ReceivedBps / 1e9
		m["sent_gbps"] += r.SentBps / 1e9
		m["sender_cpu_pct"] += r.SenderCPU
		m["receiver_cpu_pct"] += r.ReceiverCPU
		if w.Kind == results.TCPStream {
			m["retransmits"] += float64(r.Retransmits)
		} else {
			packets += r.Packets
			lost += r.LostPackets
			if r.Seconds > 0 {
				m["packets_per_s"] += float64(r.ReceivedPackets) / r.Seconds
			}
			m["jitter_ms"] += r.JitterMs / float64(len(rs))
		}
	}
	if w.Kind == results.UDPStream && packets > 0 {
		m["loss_pct"] = 100 * float64(lost) / float64(packets)
	}
	return m, nil
}

func runRR(ctx context.Context, w results.Workload, e sampleEnv) (map[string]float64, error) {
	sizes := []string{"--mode", w.Kind, "--request-size", strconv.Itoa(w.RequestSize), "--response-size", strconv.Itoa(w.ResponseSize)}
	srvArgv := append(append(append([]string{}, e.rr...), "server", "--port", strconv.Itoa(RRPort)), sizes...)
	if e.ep.dest.Is6() {
		srvArgv = append(srvArgv, "--bind", "::") // IPv6 (and IPv4)
	}
	srv, err := e.start(ctx, e.ep.server, e.pin.ServerCPU(), srvArgv...)
	if err != nil {
		return nil, err
	}
	defer srv.stop(e.log)
	if err := e.waitListening(ctx, srv, RRPort, w.Kind == results.UDPRR); err != nil {
		return nil, err
	}
	cliArgv := append(append(append([]string{}, e.rr...), "client", "-o", "json", "--to", netip.AddrPortFrom(e.ep.dest, RRPort).String(),
		"--duration", e.duration.String(), "--warmup", e.warmup.String()), sizes...)
	rx := e.rxStart(ctx, srv)
	cpu := e.clientCPU(ctx)
	cli, err := e.start(ctx, e.ep.client, e.pin.ClientCPU(), cliArgv...)
	if err != nil {
		return nil, err
	}
	werr := cli.wait(e.log)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if werr != nil {
		return nil, fmt.Errorf("rr client: %v: %s", werr, lastLine(cli.errb.String()))
	}
	r, err := traffic.ParseRR(cli.out.Bytes())
	if err != nil {
		return nil, err
	}
	e.series.set(rrSeries(r.Series))
	l := r.LatencyUs
	m := map[string]float64{
		"transactions_per_s": r.PerSecond,
		"latency_mean_us":    l.Mean,
		"latency_p50_us":     l.P50,
		"latency_p90_us":     l.P90,
		"latency_p99_us":     l.P99,
		"latency_p999_us":    l.P999,
	}
	if _, ok := cli.run.cpuTime(); ok { // not when it ran in a pod
		m["client_cpu_pct"] = cli.cpuPercent()
	}
	cpu.end(ctx, m)
	rx.endTransactions(ctx, m, r.PerSecond, (e.warmup + e.duration).Seconds())
	if w.Kind == results.UDPRR {
		m["timeouts"] = float64(r.Timeouts)
	}
	if k := r.ConnectUs; k != nil {
		m["connect_p50_us"], m["connect_p99_us"] = k.P50, k.P99
	}
	return m, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

var pingRTT = regexp.MustCompile(`icmp_seq=(\d+) .*time=([0-9.]+) ms`)

// runPing sends w.Count echo requests 10 ms apart from a new ping process
// (a new ICMP flow): the first reply's RTT includes setting the flow up
// (conntrack, the datapath's first lookup), the rest are steady state.
func runPing(ctx context.Context, w results.Workload, e sampleEnv) (map[string]float64, error) {
	// Warm the neighbour caches on the path (client, hosts, server) with
	// one echo of another ICMP flow (ping picks a new identifier per
	// process), so that the measured first echo costs a new flow in the
	// datapath (conntrack, policy, translation) and no ARP resolution.
	if warm, err := e.start(ctx, e.ep.client, e.pin.ClientCPU(), "ping", "-n", "-c", "1", "-W", "1", e.ep.serverIP.String()); err == nil {
		_ = warm.wait(e.log)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	cpu := e.clientCPU(ctx)
	cli, err := e.start(ctx, e.ep.client, e.pin.ClientCPU(), "ping", "-n", "-c", strconv.Itoa(w.Count), "-i", "0.01", "-W", "1", e.ep.serverIP.String())
	if err != nil {
		return nil, err
	}
	_ = cli.wait(e.log) // exit 1 when replies are missing: counted below
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rtts := map[int]float64{}
	for _, m := range pingRTT.FindAllStringSubmatch(cli.out.String(), -1) {
		seq, _ := strconv.Atoi(m[1])
		v, _ := strconv.ParseFloat(m[2], 64)
		rtts[seq] = v * 1000
	}
	first, ok := rtts[1]
	if !ok {
		return nil, fmt.Errorf("ping %s: no reply to the first echo request (%d of %s): %s", e.ep.serverIP, len(rtts), plural.N(w.Count, "reply"), lastLine(cli.out.String()))
	}
	var steady []float64
	for seq, v := range rtts {
		if seq != 1 {
			steady = append(steady, v)
		}
	}
	m := map[string]float64{"first_rtt_us": first, "loss_pct": 100 * float64(w.Count-len(rtts)) / float64(w.Count)}
	cpu.end(ctx, m)
	if len(steady) > 0 {
		m["rtt_us"] = stats.Median(steady)
	}
	return m, nil
}

// DefaultLoadStreams is how many TCP streams load the path of a
// tcp-rr-under-load workload that does not say (flent's RRUL runs 4 each
// way).
const DefaultLoadStreams = 4

// loadTail is how much longer the load streams of tcp-rr-under-load run
// than the rr client: they start with it and must still be running when
// it stops (iperf3 counts whole seconds; process start-up skews both).
const loadTail = time.Second

// checkUnderLoad validates a tcp-rr-under-load workload at YAML path p
// and fills its defaults: DefaultLoadStreams streams, netperf's 1/1
// transactions.
func (s *Spec) checkUnderLoad(p string, w *results.Workload) error {
	if w.Streams == 0 {
		w.Streams = DefaultLoadStreams
	}
	if w.Streams > results.MaxFlows {
		return s.errf(p+".streams", "%d: between 1 and %d (one iperf3 pair per stream, on ports %d to %d)", w.Streams, results.MaxFlows, IperfPort, IperfPort+results.MaxFlows-1)
	}
	if w.RequestSize == 0 {
		w.RequestSize = 1
	}
	if w.ResponseSize == 0 {
		w.ResponseSize = 1
	}
	if time.Duration(s.Warmup) < time.Second {
		return s.errf("warmup", "%v: the tcp-rr-under-load workload (%s) needs a warm-up of at least 1s: its load streams ramp up in it before rr measures", time.Duration(s.Warmup), p)
	}
	return nil
}

// runRRUnderLoad measures tcp-rr latency while w.Streams TCP streams fill
// the same path, client to server: flent's RRUL, adapted
// (docs/methodology.md "Latency under load"). The streams are w.Streams
// iperf3 client/server pairs of one stream each (as flent runs one
// netperf per stream, so they are not confined to one core), started
// with the rr client: both warm up for the warm-up, rr then measures for
// the duration while the streams run on, and the streams stop loadTail
// after it. With w.Bidirectional each pair runs both ways (iperf3
// --bidir): streams up and down at once, as RRUL's. Either failing stops the other; every process is stopped when
// ctx ends. The metrics are rr's (latency_*, transactions_per_s,
// client_cpu_pct) and the load's (throughput_gbps, sent_gbps,
// retransmits, sender_cpu_pct, receiver_cpu_pct).
func runRRUnderLoad(ctx context.Context, w results.Workload, e sampleEnv) (map[string]float64, error) {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.log = &lockedLog{w: e.log} // both write the sample's log at once
	le := e
	le.duration = e.duration + loadTail
	keep := underLoadSeries(&e, &le)
	load := results.Workload{Kind: results.TCPStream, Flows: max(w.Streams, 1), Streams: 1, Bidirectional: w.Bidirectional}
	rr := results.Workload{Kind: results.TCPRR, RequestSize: w.RequestSize, ResponseSize: w.ResponseSize}
	var lm map[string]float64
	var lerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if lm, lerr = runIperf3(ctx, load, le); lerr != nil {
			cancel()
		}
	}()
	rm, rerr := runRR(ctx, rr, e)
	if rerr != nil {
		cancel()
	}
	<-done
	switch {
	case parent.Err() != nil: // Ctrl-C, not one stopping the other
		return nil, parent.Err()
	case rerr != nil && !errors.Is(rerr, context.Canceled):
		return nil, fmt.Errorf("rr under load: %w", rerr)
	case lerr != nil && !errors.Is(lerr, context.Canceled):
		return nil, fmt.Errorf("load streams: %w", lerr)
	case rerr != nil:
		return nil, rerr
	case lerr != nil:
		return nil, lerr
	}
	for k, v := range lm {
		if _, ok := rm[k]; !ok { // rr's own CPU window is the measured one
			rm[k] = v
		}
	}
	keep()
	return rm, nil
}

// lockedLog serializes the writes of processes that share a sample's log.
type lockedLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// rxWindow is what the server's network namespace received (its
// interfaces' rx counters, lo left out) and the busy CPU time of the
// endpoints' machines between two readings that bracket a sample's
// clients. The packets counted are the skbs the datapath handled (one
// per GRO/GSO packet, what netfilter and eBPF traverse): skb_per_s, and
// the CPU time per packet or per transaction (netperf's service demand,
// docs/methodology.md "Costs per packet").
type rxWindow struct {
	e       sampleEnv
	srv     *proc
	t0      time.Time
	packets float64 // rx packets at t0; <0: not read
	busy    float64 // busy jiffies at t0, summed over the nodes; <0: not read
}

// userHz is /proc/stat's jiffies per second (USER_HZ, 100 on Linux).
const userHz = 100

// rxStart reads the counters before the clients start (nil when srv is).
func (e sampleEnv) rxStart(ctx context.Context, srv *proc) *rxWindow {
	if srv == nil {
		return nil
	}
	w := &rxWindow{e: e, srv: srv, packets: -1, busy: -1}
	if p, _, ok := e.rxCounters(ctx, srv); ok {
		w.packets = p
	}
	w.busy = e.busyJiffies(ctx)
	w.t0 = time.Now()
	return w
}

// busyJiffies sums the busy jiffies of the client's machine and, when the
// server is on another node, the server's (-1 when unreadable).
func (e sampleEnv) busyJiffies(ctx context.Context) float64 {
	b, t := e.cpuTimes(ctx, e.ep.client)
	if t == 0 {
		return -1
	}
	if e.splitNodes {
		b1, t1 := e.cpuTimes(ctx, e.ep.server)
		if t1 == 0 {
			return -1
		}
		b += b1
	}
	return b
}

// delta is the window's seconds, packets and busy CPU seconds (ok false
// when a counter could not be read or did not move).
func (w *rxWindow) delta(ctx context.Context) (secs, packets, cpuSecs float64, pOK, cOK bool) {
	if w == nil {
		return 0, 0, 0, false, false
	}
	p1, _, ok := w.e.rxCounters(ctx, w.srv)
	b1 := w.e.busyJiffies(ctx)
	secs = time.Since(w.t0).Seconds()
	if ok && w.packets >= 0 && p1 > w.packets {
		packets, pOK = p1-w.packets, true
	}
	if w.busy >= 0 && b1 >= w.busy {
		cpuSecs, cOK = (b1-w.busy)/userHz, true
	}
	return secs, packets, cpuSecs, pOK, cOK && secs > 0
}

// endStream adds skb_per_s and cpu_us_per_packet to a stream's metrics.
// The packets flowed for flowSecs, iperf3's omitted and measured seconds:
// the window's wall time also holds the clients' start, iperf3's end of
// test and the counters' reads, which would lower the rate by a share
// that depends on the sample's length.
func (w *rxWindow) endStream(ctx context.Context, m map[string]float64, flowSecs float64) {
	_, packets, cpuSecs, pOK, cOK := w.delta(ctx)
	if !pOK || flowSecs <= 0 {
		return
	}
	m["skb_per_s"] = packets / flowSecs
	if cOK {
		m["cpu_us_per_packet"] = 1e6 * cpuSecs / packets
	}
}

// endTransactions adds cpu_us_per_transaction to an rr's metrics: the
// window's busy CPU time over the transactions of its warm-up and
// measured seconds (runSecs), at the measured rate. The window's wall time
// also holds the client's start and exit, with no transactions in them.
func (w *rxWindow) endTransactions(ctx context.Context, m map[string]float64, perSecond, runSecs float64) {
	_, _, cpuSecs, _, cOK := w.delta(ctx)
	if !cOK || perSecond <= 0 || runSecs <= 0 {
		return
	}
	m["cpu_us_per_transaction"] = 1e6 * cpuSecs / (perSecond * runSecs)
}

// rxCounters reads the rx packets and bytes of the server's network
// namespace's interfaces but lo (/proc/net/dev): here from a thread in the
// namespace (the server may have exited: iperf3 -s -1 does with its
// client), on a cluster by an exec in the server's endpoint.
func (e sampleEnv) rxCounters(ctx context.Context, p *proc) (packets, bytes float64, ok bool) {
	var data []byte
	var err error
	if _, local := e.host.(localHost); local {
		err = netns.Do(e.ep.server, func() error {
			data, err = os.ReadFile("/proc/thread-self/net/dev")
			return err
		})
	} else {
		data, err = p.run.socketTable(ctx, "dev")
	}
	if err != nil {
		return 0, 0, false
	}
	return parseNetDev(data)
}

// parseNetDev sums /proc/net/dev's rx packets and bytes over the
// interfaces but lo.
func parseNetDev(data []byte) (packets, bytes float64, ok bool) {
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, found := strings.Cut(line, ":")
		if !found || strings.TrimSpace(name) == "lo" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		b, err1 := strconv.ParseFloat(f[0], 64)
		n, err2 := strconv.ParseFloat(f[1], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		bytes += b
		packets += n
		ok = true
	}
	return packets, bytes, ok
}
