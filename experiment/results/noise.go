package results

import (
	"fmt"
	"slices"
)

// Noise is what else the machine did while a sample was measured, from
// /proc over the sample's wall time (warm-up included): the shares are of
// each CPU's time, in percent.
type Noise struct {
	Seconds float64 `json:"seconds"`
	// Per CPU, in percent of the sample's time: busy (user, nice,
	// system, irq, softirq), stolen by the hypervisor, in interrupts and
	// in softirqs.
	BusyPct    []float64 `json:"busyPct"`
	StealPct   []float64 `json:"stealPct"`
	IRQPct     []float64 `json:"irqPct"`
	SoftIRQPct []float64 `json:"softirqPct"`
	// Per second over the machine: context switches and interrupts.
	ContextSwitches float64 `json:"contextSwitchesPerS"`
	Interrupts      float64 `json:"interruptsPerS"`
	// CPUPressurePct is the share of the time at least one runnable task
	// waited for a CPU (/proc/pressure/cpu "some"; -1 without PSI).
	CPUPressurePct float64 `json:"cpuPressurePct"`
	// RunQueue is the number of runnable tasks at the sample's end.
	RunQueue int `json:"runQueue"`
}

const (
	// NoisyStealPct: more of any CPU's time than this stolen by the
	// hypervisor.
	NoisyStealPct = 2.0
	// NoisyPressureFactor, NoisyPressureMin: CPU pressure more than this
	// many times the median of the point's samples, and above the floor
	// (the workload itself makes some: client and server on one CPU).
	NoisyPressureFactor = 3.0
	NoisyPressureMin    = 5.0
)

// NoisyRule states the rule in words, for reports.
var NoisyRule = fmt.Sprintf("a sample is noisy when the hypervisor stole more than %g%% of a CPU's time during it, or when CPU pressure (runnable tasks waiting) was above %g%% and more than %g× the median of its point's samples",
	NoisyStealPct, NoisyPressureMin, NoisyPressureFactor)

// NoisySamples returns the indexes of a point's samples taken under
// unusual noise, by NoisyRule (samples without a noise record are never
// flagged).
func (p *PointResult) NoisySamples() []int {
	var psi []float64
	for _, s := range p.Samples {
		if s.Noise != nil && s.Noise.CPUPressurePct >= 0 {
			psi = append(psi, s.Noise.CPUPressurePct)
		}
	}
	med := 0.0
	if len(psi) > 0 {
		slices.Sort(psi)
		med = psi[len(psi)/2]
		if len(psi)%2 == 0 {
			med = (psi[len(psi)/2-1] + psi[len(psi)/2]) / 2
		}
	}
	var out []int
	for i, s := range p.Samples {
		n := s.Noise
		if n == nil {
			continue
		}
		if slices.Max(append([]float64{0}, n.StealPct...)) > NoisyStealPct ||
			(n.CPUPressurePct > NoisyPressureMin && n.CPUPressurePct > NoisyPressureFactor*med) {
			out = append(out, i)
		}
	}
	return out
}

// ExcludeNoisy removes, from every point, the samples NoisySamples flags
// and recomputes the summaries; it returns how many it removed.
func (r *Results) ExcludeNoisy() int {
	n := 0
	for i := range r.Points {
		p := &r.Points[i]
		drop := p.NoisySamples()
		if len(drop) == 0 {
			continue
		}
		keep := p.Samples[:0]
		for k, s := range p.Samples {
			if !slices.Contains(drop, k) {
				keep = append(keep, s)
			}
		}
		p.Samples = keep
		p.Summarize()
		n += len(drop)
	}
	return n
}

// CountNoisy counts the samples NoisySamples flags, and those with a noise
// record.
func (r *Results) CountNoisy() (noisy, recorded int) {
	for i := range r.Points {
		p := &r.Points[i]
		noisy += len(p.NoisySamples())
		for _, s := range p.Samples {
			if s.Noise != nil {
				recorded++
			}
		}
	}
	return noisy, recorded
}
