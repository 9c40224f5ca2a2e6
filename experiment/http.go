package experiment

import (
	"context"
	"fmt"
	"github.com/cnlab/cnlab/experiment/results"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/traffic"
)

// HTTPPort is where the http and ab workloads' server listens, and the
// port the generated L7 policies are about.
const HTTPPort = 80

// maxConcurrency bounds an http or ab workload's workers.
const maxConcurrency = 1000

var httpMethod = regexp.MustCompile(`^[A-Z][A-Z-]{0,19}$`)

// checkHTTPWorkload validates an http or ab workload's options and fills
// their defaults: keepalive, one worker, GET. The path and the expected
// statuses are the point's (effectiveWorkload).
func (s *Spec) checkHTTPWorkload(p string, w *results.Workload) error {
	if w.Mode == "" {
		w.Mode = traffic.HTTPKeepAlive
	}
	if !slices.Contains(traffic.HTTPModes, w.Mode) {
		return s.errf(p+".mode", "%q: one of %s", w.Mode, strings.Join(traffic.HTTPModes, ", "))
	}
	if w.Concurrency == 0 {
		w.Concurrency = 1
	}
	if w.Concurrency < 1 || w.Concurrency > maxConcurrency {
		return s.errf(p+".concurrency", "%d: between 1 and %d", w.Concurrency, maxConcurrency)
	}
	if w.Method == "" {
		w.Method = http.MethodGet
	}
	if !httpMethod.MatchString(w.Method) {
		return s.errf(p+".method", "%q: an HTTP method in upper case (GET, HEAD, POST, ...)", w.Method)
	}
	if w.Kind == results.AB && w.Method != http.MethodGet && w.Method != http.MethodHead {
		return s.errf(p+".method", "%q: ab sends GET, or HEAD (ab -i)", w.Method)
	}
	if w.Path != "" && (!strings.HasPrefix(w.Path, "/") || len(w.Path) > 1000 || strings.ContainsFunc(w.Path, func(r rune) bool { return r <= ' ' || r >= 0x7f })) {
		return s.errf(p+".path", "%q: a request-target starting with /, without spaces or control characters", w.Path)
	}
	seen := map[int]bool{}
	for i, st := range w.Expect {
		switch {
		case st < 100 || st > 599:
			return s.errf(fmt.Sprintf("%s.expect[%d]", p, i), "%d: a status from 100 to 599", st)
		case seen[st]:
			return s.errf(fmt.Sprintf("%s.expect[%d]", p, i), "%d is listed twice", st)
		}
		seen[st] = true
	}
	return nil
}

// httpWorkload gives an http or ab workload the point's request path (the
// L7 sweeps' /match unless the workload names one) and expected statuses
// (the workload's, else the status the point's policy gives the request).
func httpWorkload(w results.Workload, p results.Params) results.Workload {
	if w.Path == "" {
		w.Path = "/"
		if p.L7Mode != "" {
			w.Path = l7MatchPath
		}
	}
	if len(w.Expect) == 0 {
		w.Expect = []int{l7Status(p, w.Method, w.Path)}
	}
	return w
}

// httpURL is where an http or ab workload sends its requests.
func httpURL(e sampleEnv, w results.Workload) string {
	return "http://" + netip.AddrPortFrom(e.ep.dest, HTTPPort).String() + w.Path // [IPv6]:port
}

// httpServerArgv runs cnlab's HTTP server on HTTPPort.
func httpServerArgv(cnlab []string) []string {
	return append(slices.Clone(cnlab), "http", "server", "--listen", fmt.Sprintf(":%d", HTTPPort), "--name", "server")
}

// httpClientArgv is cnlab's HTTP client for d.
func httpClientArgv(cnlab []string, url string, w results.Workload, d time.Duration) []string {
	return append(slices.Clone(cnlab), "http", "client", "-o", "json", "--url", url, "--method", w.Method, "--mode", w.Mode,
		"--concurrency", strconv.Itoa(w.Concurrency), "--duration", d.String(), "--expect", results.JoinInts(w.Expect))
}

// abRequestsPerSecond bounds ab's -n: ab allocates its per-request
// statistics for -n requests up front, and -t alone stops at 50,000.
const abRequestsPerSecond = 50000

// abArgv is ApacheBench for d (whole seconds): -t, with -n after it so
// that it is not ab's 50,000; -k with keepalive, -i for HEAD.
func abArgv(url string, w results.Workload, d time.Duration) []string {
	argv := []string{"ab", "-q", "-r", "-c", strconv.Itoa(w.Concurrency), "-t", strconv.Itoa(secs(d)), "-n", strconv.Itoa(max(1, secs(d)) * abRequestsPerSecond)}
	if w.Mode == traffic.HTTPKeepAlive {
		argv = append(argv, "-k")
	}
	if w.Method == http.MethodHead {
		argv = append(argv, "-i")
	}
	return append(argv, url)
}

// httpMetrics are a result's metrics: requests/s, latency, and counts of
// statuses (status_NNN; ab: status_2xx and status_non2xx), errors and
// unexpected responses.
func httpMetrics(r *traffic.HTTPResult) map[string]float64 {
	l := r.LatencyUs
	m := map[string]float64{
		"requests_per_s":  r.PerSecond,
		"requests":        float64(r.Requests),
		"latency_mean_us": l.Mean,
		"latency_p50_us":  l.P50,
		"latency_p90_us":  l.P90,
		"latency_p99_us":  l.P99,
		"errors":          float64(r.Errors),
		"unexpected":      float64(r.Unexpected),
	}
	if r.ResolutionUs > 0 {
		// ab's percentiles are whole milliseconds: one that reads below
		// that step was not measured (traffic.ParseAB).
		for _, k := range []string{"latency_p50_us", "latency_p90_us", "latency_p99_us"} {
			if m[k] < r.ResolutionUs {
				delete(m, k)
			}
		}
	}
	for st, n := range r.Statuses {
		if st != 0 {
			m[fmt.Sprintf("status_%d", st)] = float64(n)
		}
	}
	if k := r.ConnectUs; k != nil {
		m["connect_p50_us"], m["connect_p99_us"] = k.P50, k.P99
	}
	return m
}

// abCounts is what ab tells of statuses: 2xx, the others, and requests
// without a response.
type abCounts struct{ ok, non2xx, errors uint64 }

// abSplit reads ParseAB's counts (its Unexpected is Non-2xx responses
// plus errors). With -t, ab's "Non-2xx responses" also counts responses
// to requests still in flight when time was up, which "Complete
// requests" leaves out (a few more than complete at c=10): clamped.
func abSplit(r *traffic.HTTPResult) abCounts {
	errs := min(r.Errors, r.Requests)
	non2xx := min(r.Unexpected-min(r.Unexpected, r.Errors), r.Requests-errs)
	return abCounts{ok: r.Requests - non2xx - errs, non2xx: non2xx, errors: errs}
}

func (c abCounts) String() string {
	return fmt.Sprintf("2xx: %d, non-2xx: %d, error: %d", c.ok, c.non2xx, c.errors)
}

// unexpected counts ab's requests against the expected statuses: ab
// tells only 2xx from the rest, so a non-2xx response is expected when
// some expected status is not 2xx, and a 2xx one when some is 2xx.
// Errors are never expected.
func (c abCounts) unexpected(expect []int) uint64 {
	want2xx := slices.ContainsFunc(expect, func(s int) bool { return s >= 200 && s < 300 })
	wantOther := slices.ContainsFunc(expect, func(s int) bool { return s < 200 || s >= 300 })
	n := c.errors
	if !want2xx {
		n += c.ok
	}
	if !wantOther {
		n += c.non2xx
	}
	return n
}

// checkHTTPResult fails a sample with no request, or with any unexpected
// status or error, naming the statuses seen (seen: "" for the client's
// own list).
func checkHTTPResult(r *traffic.HTTPResult, w results.Workload, seen string) error {
	if seen == "" {
		seen = r.StatusList()
	}
	switch {
	case r.Requests == 0:
		return fmt.Errorf("%s: no request completed in %.1f s", w.Kind, r.Seconds)
	case r.Unexpected > 0:
		msg := fmt.Sprintf("%s: %d of %d requests unexpected: statuses seen %s; expected %s", w.Kind, r.Unexpected, r.Requests, seen, results.JoinInts(w.Expect))
		if r.FirstError != "" {
			msg += "; first error: " + r.FirstError
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}

// runHTTPWorkload runs cnlab's HTTP server in the server endpoint and
// the client (cnlab http client, or ab) in the client's, for the warm-up
// (its result dropped) and then the measured duration.
func runHTTPWorkload(ctx context.Context, w results.Workload, e sampleEnv) (map[string]float64, error) {
	srv, err := e.start(ctx, e.ep.server, e.pin.ServerCPU(), httpServerArgv(e.cnlab)...)
	if err != nil {
		return nil, err
	}
	defer srv.stop(e.log)
	if err := e.waitListening(ctx, srv, HTTPPort, false); err != nil {
		return nil, err
	}
	url := httpURL(e, w)
	argv := func(d time.Duration) []string {
		if w.Kind == results.AB {
			return abArgv(url, w, d)
		}
		return httpClientArgv(e.cnlab, url, w, d)
	}
	if e.warmup > 0 {
		fmt.Fprintf(e.log, "--- warm-up (%s), not measured\n", e.warmup)
		if cli, err := e.start(ctx, e.ep.client, e.pin.ClientCPU(), argv(e.warmup)...); err == nil {
			_ = cli.wait(e.log)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	cpu0 := proxyCPU(e.lab)
	t0 := time.Now()
	cli, err := e.start(ctx, e.ep.client, e.pin.ClientCPU(), argv(e.duration)...)
	if err != nil {
		return nil, err
	}
	werr := cli.wait(e.log)
	wall := time.Since(t0)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	var r *traffic.HTTPResult
	var ab abCounts
	seen := ""
	if w.Kind == results.AB {
		r, err = traffic.ParseAB(cli.out.Bytes())
		if err == nil {
			ab = abSplit(r)
			r.Unexpected, seen = ab.unexpected(w.Expect), ab.String()
		}
	} else {
		r, err = traffic.ParseHTTP(cli.out.Bytes())
	}
	if err != nil {
		if werr != nil {
			return nil, fmt.Errorf("%s client: %v: %s (%w)", w.Kind, werr, lastLine(cli.errb.String()), err)
		}
		return nil, err
	}
	if err := checkHTTPResult(r, w, seen); err != nil {
		return nil, err
	}
	if werr != nil && w.Kind == results.AB {
		return nil, fmt.Errorf("ab: %v: %s", werr, lastLine(cli.errb.String()))
	}
	e.series.set(httpSeries(r.Series))
	m := httpMetrics(r)
	if w.Kind == results.AB {
		m["status_2xx"], m["status_non2xx"] = float64(ab.ok), float64(ab.non2xx)
	}
	m["client_cpu_pct"] = cli.cpuPercent()
	if cpu1 := proxyCPU(e.lab); cpu0 >= 0 && cpu1 >= cpu0 && wall > 0 {
		m["proxy_cpu_pct"] = 100 * (cpu1 - cpu0).Seconds() / wall.Seconds()
		if r.Requests > 0 {
			m["proxy_cpu_us_per_req"] = float64((cpu1 - cpu0).Microseconds()) / float64(r.Requests)
		}
	}
	return m, nil
}

// proxyCPU is the CPU time the lab's L7 proxies used so far (-1 when the
// lab has none running): HAProxy's, where it stands in their place.
func proxyCPU(labName string) time.Duration {
	if labName == "" {
		return -1
	}
	if t := haproxyCPU(labName); t >= 0 {
		return t
	}
	st, err := lab.ReadState(labName)
	if err != nil || len(st.L7Proxies) == 0 {
		return -1
	}
	var total time.Duration
	for _, pid := range st.L7Proxies {
		t, err := procCPU(pid)
		if err != nil {
			return -1
		}
		total += t
	}
	return total
}

// procCPU reads a process's user and system time from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// Fields 14 and 15 of stat (utime, stime), counted from the state.
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	stt, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+stt) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc's times: 100 on Linux.
const clockTicks = 100
