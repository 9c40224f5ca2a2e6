package traffic

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ab's summary lines, "Label:   value ..." and the percentile table's
// "  50%      0" rows (in ms; the 100% row ends with "(longest request)").
var (
	abField     = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9 -]*):\s+([0-9.]+)(.*)$`)
	abPercent   = regexp.MustCompile(`^\s*([0-9]+)%\s+([0-9]+)`)
	abBreakdown = regexp.MustCompile(`\(Connect: ([0-9]+), Receive: ([0-9]+), Length: ([0-9]+), Exceptions: ([0-9]+)\)`)
)

// ABResolutionUs is the step of ab's percentile table: whole
// milliseconds.
const ABResolutionUs = 1000

// ParseAB reads the output of ApacheBench (ab, from apache2-utils) into an
// HTTPResult of Mode "ab", for comparing with cnlab's own client:
//
//   - Requests, PerSecond, Seconds and Concurrency are ab's "Complete
//     requests", "Requests per second", "Time taken for tests" and
//     "Concurrency Level";
//   - LatencyUs.Mean is ab's "Time per request" (mean, the first line: one
//     request's time as its client saw it), Min the "Total:" row's min, and
//     P50, P90, P99 and Max its percentile table's 50%, 90%, 99% and 100%
//     rows. ab prints whole milliseconds there (rounded), so a percentile
//     below 1 ms reads 0, which is no measurement: ResolutionUs is
//     ABResolutionUs and the metrics leave such percentiles out
//     (docs/methodology.md); the mean, from "Time per request", has
//     decimals. ab has no p99.9 (P999 stays 0);
//   - Errors are ab's Connect and Receive failures: requests without a
//     response. ab's "Failed requests" is not used, as it counts one reset
//     connection up to three times (Receive, Length and Exceptions; see
//     testdata/ab-reset.txt), and its Length failures are responses whose
//     length differs from the first's;
//   - ab tells only 2xx from the rest: Statuses stays nil, and Unexpected
//     is its "Non-2xx responses" plus Errors. Connections is not known (0).
func ParseAB(out []byte) (*HTTPResult, error) {
	r := &HTTPResult{Mode: "ab", ResolutionUs: ABResolutionUs}
	var seen struct{ complete, rate, taken, table bool }
	var non2xx uint64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := abPercent.FindStringSubmatch(line); m != nil {
			ms, _ := strconv.ParseFloat(m[2], 64)
			switch m[1] {
			case "50":
				r.LatencyUs.P50 = ms * 1e3
			case "90":
				r.LatencyUs.P90 = ms * 1e3
			case "99":
				r.LatencyUs.P99 = ms * 1e3
			case "100":
				r.LatencyUs.Max = ms * 1e3
				seen.table = true
			}
			continue
		}
		if m := abBreakdown.FindStringSubmatch(line); m != nil {
			connect, _ := strconv.ParseUint(m[1], 10, 64)
			receive, _ := strconv.ParseUint(m[2], 10, 64)
			r.Errors = connect + receive
			continue
		}
		m := abField.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		label, value, rest := m[1], m[2], m[3]
		var err error
		switch label {
		case "Concurrency Level":
			r.Concurrency, err = strconv.Atoi(value)
		case "Time taken for tests":
			r.Seconds, err = strconv.ParseFloat(value, 64)
			seen.taken = true
		case "Complete requests":
			r.Requests, err = strconv.ParseUint(value, 10, 64)
			seen.complete = true
		case "Non-2xx responses":
			non2xx, err = strconv.ParseUint(value, 10, 64)
		case "Requests per second":
			r.PerSecond, err = strconv.ParseFloat(value, 64)
			seen.rate = true
		case "Time per request":
			// The first is the mean per request, the second the mean
			// "across all concurrent requests" (its inverse rate).
			if !strings.Contains(rest, "across") {
				var ms float64
				ms, err = strconv.ParseFloat(value, 64)
				r.LatencyUs.Mean = ms * 1e3
			}
		case "Total":
			// Connection Times' "Total:  min  mean  [+/-sd]  median  max".
			var ms float64
			ms, err = strconv.ParseFloat(value, 64)
			r.LatencyUs.Min = ms * 1e3
		}
		if err != nil {
			return nil, fmt.Errorf("ab output: %s %q: %w", label, value, err)
		}
	}
	switch {
	case !seen.complete || !seen.rate || !seen.taken:
		return nil, errors.New(`ab output: no summary ("Complete requests", "Requests per second", "Time taken for tests"); did ab stop early?`)
	case !seen.table && r.Requests > 0:
		return nil, errors.New("ab output: no percentile table (its 100% row)")
	}
	r.Unexpected = non2xx + r.Errors
	return r, nil
}
