package experiment

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/input"
)

func checkPrecision(p *results.Precision, s *Spec, path string) error {
	if p == nil {
		return nil
	}
	if p.MaxRepetitions == 0 {
		p.MaxRepetitions = results.DefaultMaxRepetitions
	}
	for k, v := range p.ByWorkload {
		if !slices.Contains(results.WorkloadKinds, k) {
			return s.errf(path+".byWorkload."+k, "not a workload kind (%s)", strings.Join(results.WorkloadKinds, ", "))
		}
		if v <= 0 || v > 100 {
			return s.errf(path+".byWorkload."+k, "%g%%: between 0 and 100%%", float64(v))
		}
	}
	switch {
	case len(p.ByWorkload) == 0 && p.Target == 0:
		return s.errf(path+".target", "missing or 0%%: give the 95%% interval's half-width to reach, above 0 (e.g. 2%%)")
	case p.Target < 0 || p.Target > 100:
		return s.errf(path+".target", "%g%%: between 0 and 100%% (a 95%% interval of ±target of the mean)", float64(p.Target))
	case p.MaxRepetitions < 2 || p.MaxRepetitions > MaxRepetitions:
		return s.errf(path+".maxRepetitions", "%d: between 2 and %d", p.MaxRepetitions, MaxRepetitions)
	case p.MaxTime < 0 || p.MaxTime > results.Duration(maxDuration):
		return s.errf(path+".maxTime", "%v: between 0 (no limit) and 24h", time.Duration(p.MaxTime))
	}
	return nil
}

// Overrides are what `cnlab run` flags change in a parsed file, for every
// sweep: a quick A/B comparison without writing a file. Zero values
// change nothing.
type Overrides struct {
	Repetitions    int
	Duration       time.Duration
	Warmup         *time.Duration
	Precision      float64 // target, percent; 0: none given
	MaxRepetitions int
	MaxTime        time.Duration
}

// Override applies o to the spec (after its quick block) and validates
// the result; the flags are named in errors. It returns what changed, to
// be recorded with the run.
func (s *Spec) Override(o Overrides) ([]string, error) {
	var changed []string
	if o.Repetitions != 0 {
		s.Repetitions = o.Repetitions
		for i := range s.Sweeps {
			s.Sweeps[i].Repetitions = 0
		}
		changed = append(changed, fmt.Sprintf("--repetitions %d", o.Repetitions))
	}
	if o.Duration != 0 {
		s.Duration = results.Duration(o.Duration)
		changed = append(changed, "--duration "+o.Duration.String())
	}
	if o.Warmup != nil {
		s.Warmup = results.Duration(*o.Warmup)
		changed = append(changed, "--warmup "+o.Warmup.String())
	}
	if o.Precision != 0 || o.MaxRepetitions != 0 || o.MaxTime != 0 {
		p := results.Precision{}
		if s.Precision != nil {
			p = *s.Precision
		}
		if o.Precision != 0 {
			p.Target, p.ByWorkload = results.Percent(o.Precision), nil
			changed = append(changed, fmt.Sprintf("--precision %g%%", o.Precision))
		}
		if o.MaxRepetitions != 0 {
			p.MaxRepetitions = o.MaxRepetitions
			changed = append(changed, fmt.Sprintf("--max-repetitions %d", o.MaxRepetitions))
		}
		if o.MaxTime != 0 {
			p.MaxTime = results.Duration(o.MaxTime)
			changed = append(changed, "--max-time "+o.MaxTime.String())
		}
		if p.Target == 0 && len(p.ByWorkload) == 0 {
			return nil, &input.Error{File: s.File, Msg: "--max-repetitions and --max-time need a precision target (--precision, or precision: in the file)"}
		}
		s.Precision = &p
		for i := range s.Sweeps {
			s.Sweeps[i].Precision = nil
		}
	}
	if err := s.validate(); err != nil {
		var ie *input.Error
		if errors.As(err, &ie) && ie.Path != "" {
			ie.Msg = fmt.Sprintf("%s (as %s set it)", ie.Msg, strings.Join(changed, " "))
		}
		return nil, err
	}
	return changed, nil
}
