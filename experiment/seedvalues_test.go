package experiment

import (
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/input"
)

// TestSeedValuesErrors: a bad figures.seedValues entry is refused with
// one error naming the file, the field and what is wrong.
func TestSeedValuesErrors(t *testing.T) {
	base := "workloads: [{kind: tcp-stream}]\nmatrix: {topology: [single-host]}\nsweeps: [{name: a, figures: {seedValues: [%s]}}]\n"
	ok := `{label: "seed 000 thesis, Fig. 7.2", metric: throughput_gbps, topology: single-host, workload: tcp-stream, points: [{series: iptables, line: iptables no-match, x: 0, y: 3.17}, {series: max, y: 3.6, low: 3.5, high: 3.7}]}`
	if _, err := Parse([]byte(strings.Replace(base, "%s", ok, 1)), "x.yaml", false); err != nil {
		t.Fatalf("a good entry: %v", err)
	}
	cases := []struct{ entry, want string }{
		{`{metric: throughput_gbps, points: [{series: a, y: 1}]}`, "x.yaml: sweeps[0].figures.seedValues[0].label: the seed and its table or figure"},
		{`{label: s, metric: speed, points: [{series: a, y: 1}]}`, `x.yaml: sweeps[0].figures.seedValues[0].metric: "speed": one of throughput_gbps`},
		{`{label: s, metric: rtt_us, topology: multi-host, points: [{series: a, y: 1}]}`, `x.yaml: sweeps[0].figures.seedValues[0].topology: "multi-host": not a topology of this sweep (single-host)`},
		{`{label: s, metric: rtt_us, workload: iperf, points: [{series: a, y: 1}]}`, `x.yaml: sweeps[0].figures.seedValues[0].workload: "iperf": a workload as a figure names it`},
		{`{label: s, metric: rtt_us, points: []}`, "x.yaml: sweeps[0].figures.seedValues[0].points: 0 values: 1 to 200"},
		{`{label: s, metric: rtt_us, points: [{y: 1}]}`, "x.yaml: sweeps[0].figures.seedValues[0].points[0].series: the seed's name of the line or bar"},
		{`{label: s, metric: rtt_us, points: [{series: a, y: .nan}]}`, "x.yaml: sweeps[0].figures.seedValues[0].points[0].y: NaN: a finite number"},
		{`{label: s, metric: rtt_us, points: [{series: a, x: .inf, y: 1}]}`, "x.yaml: sweeps[0].figures.seedValues[0].points[0].x: +Inf: a finite number"},
		{`{label: s, metric: rtt_us, points: [{series: a, y: 1, low: 0.5}]}`, "x.yaml: sweeps[0].figures.seedValues[0].points[0]: low and high go together"},
		{`{label: s, metric: rtt_us, points: [{series: a, y: 1, low: 2, high: 3}]}`, "x.yaml: sweeps[0].figures.seedValues[0].points[0]: low 2, y 1, high 3: a range around its value"},
		{`{label: s, metric: rtt_us, points: [{series: a, y: 1, colour: red}]}`, "x.yaml: sweeps[0].figures.seedValues[0].points[0]"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(strings.Replace(base, "%s", c.entry, 1)), "x.yaml", false)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant %s...", c.entry, err, c.want)
			continue
		}
		if !input.Is(err) {
			t.Errorf("%s: %v is not an input error", c.entry, err)
		}
	}
}
