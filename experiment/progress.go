package experiment

import (
	"fmt"
	"github.com/cnlab/cnlab/experiment/results"
	"io"
	"strings"
	"time"

	"github.com/cnlab/cnlab/internal/plural"
)

// progress reports a run: on a terminal one line redrawn in place (a bar,
// the job, the ETA); otherwise one plain line per job, for logs.
type progress struct {
	w        io.Writer
	term     bool
	total    int
	perJob   time.Duration // first guess of a job's time
	start    time.Time
	done     int
	lastLine string
}

func newProgress(w io.Writer, term bool, total int, perJob time.Duration) *progress {
	return &progress{w: w, term: term, total: total, perJob: perJob + 500*time.Millisecond, start: time.Now()}
}

// eta extrapolates from the jobs done so far (the first guess before).
func (p *progress) eta() time.Duration {
	left := p.total - p.done
	if p.done == 0 {
		return time.Duration(left) * p.perJob
	}
	return time.Duration(float64(time.Since(p.start)) / float64(p.done) * float64(left))
}

func short(d time.Duration) string {
	d = d.Round(time.Second)
	if d >= time.Hour {
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	if d >= time.Minute {
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}

// label describes a point in a few words.
func label(pr *results.PointResult, j results.Job) string {
	q := pr.Params
	parts := []string{pr.ID, q.Topology, pr.Series}
	if q.Policies > 0 || q.PolicyMode == results.ModeL4Rules {
		parts = append(parts, fmt.Sprintf("policies=%d", q.Policies))
	}
	if q.ClusterPolicies > 0 {
		parts = append(parts, fmt.Sprintf("cluster-policies=%d match=%s", q.ClusterPolicies, q.ClusterPolicyMatch))
	}
	if results.IsChain(q.Topology) {
		parts = append(parts, fmt.Sprintf("length=%d", q.ChainLength))
	}
	if q.FirewallRules > 0 {
		parts = append(parts, fmt.Sprintf("rules=%d", q.FirewallRules))
	}
	parts = append(parts, pr.Workload.Name())
	if j.Repetition < 0 {
		parts = append(parts, "(profiled)")
	} else {
		parts = append(parts, fmt.Sprintf("rep %d", j.Repetition+1))
	}
	return strings.Join(parts, " ")
}

func (p *progress) step(i int, pr *results.PointResult, j results.Job, note string) {
	if p.w == nil {
		return
	}
	p.done = i
	text := label(pr, j)
	if note != "" {
		text += ": " + note
	}
	if p.term {
		const width = 24
		filled := width * i / max(p.total, 1)
		line := fmt.Sprintf("[%s%s] %d/%d ETA %s  %s", strings.Repeat("=", filled), strings.Repeat(" ", width-filled), i+1, p.total, short(p.eta()), text)
		if len(line) > 120 {
			line = line[:120]
		}
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.lastLine = line
		return
	}
	fmt.Fprintf(p.w, "cnlab: [%d/%d, ETA %s] %s\n", i+1, p.total, short(p.eta()), text)
}

// result prints a sample's headline figure (plain mode only: on a
// terminal the bar moves on).
func (p *progress) result(pr *results.PointResult, m map[string]float64) {
	if p.w == nil || p.term {
		return
	}
	k := results.Headline(pr.Workload.Kind)
	if v, ok := m[k]; ok {
		fmt.Fprintf(p.w, "cnlab:   %s %.4g\n", k, v)
	}
}

// note prints a message on a line of its own.
func (p *progress) note(msg string) {
	if p.w == nil {
		return
	}
	if p.term {
		fmt.Fprintf(p.w, "\r\033[K%s\n%s", "cnlab: "+msg, p.lastLine)
		return
	}
	fmt.Fprintf(p.w, "cnlab: %s\n", msg)
}

func (p *progress) doneLine(r *results.Results) string {
	var done, partial, failed, pending int
	for _, pt := range r.Points {
		switch pt.Status {
		case results.PointDone:
			done++
		case results.PointPartial:
			partial++
		case results.PointFailed:
			failed++
		default:
			pending++
		}
	}
	part := ""
	if partial > 0 {
		part = fmt.Sprintf(", %d partial (some repetitions measured)", partial)
	}
	return fmt.Sprintf("%s in %s: %s done%s, %d failed, %d not run", r.Status, short(time.Since(p.start)), plural.N(done, "point"), part, failed, pending)
}

// finish prints the run's outcome.
func (p *progress) finish(r *results.Results) {
	if p.w == nil {
		return
	}
	if p.term {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "cnlab: %s\n", p.doneLine(r))
}
