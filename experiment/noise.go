package experiment

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
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

// noiseSnap is one reading of the counters.
type noiseSnap struct {
	at        time.Time
	cpus      [][]uint64 // per CPU: user nice system idle iowait irq softirq steal
	ctxt      uint64
	intr      uint64
	running   int
	psiSomeUS int64 // -1: no PSI
}

// readNoise reads the counters.
func readNoise() (noiseSnap, error) {
	s := noiseSnap{at: time.Now(), psiSomeUS: -1}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	if err := s.parseStat(stat); err != nil {
		return s, err
	}
	if psi, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		s.psiSomeUS = parsePSISome(psi)
	}
	return s, nil
}

// parseStat reads /proc/stat's per-CPU lines, ctxt, intr and
// procs_running.
func (s *noiseSnap) parseStat(stat []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(stat))
	sc.Buffer(make([]byte, 64*1024), 1024*1024) // intr is one long line
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch {
		case strings.HasPrefix(f[0], "cpu") && f[0] != "cpu":
			if len(f) < 9 {
				return fmt.Errorf("/proc/stat: short line %q", sc.Text())
			}
			v := make([]uint64, 8)
			for i := range v {
				n, err := strconv.ParseUint(f[i+1], 10, 64)
				if err != nil {
					return fmt.Errorf("/proc/stat: %q: %w", sc.Text(), err)
				}
				v[i] = n
			}
			s.cpus = append(s.cpus, v)
		case f[0] == "ctxt":
			s.ctxt, _ = strconv.ParseUint(f[1], 10, 64)
		case f[0] == "intr":
			s.intr, _ = strconv.ParseUint(f[1], 10, 64)
		case f[0] == "procs_running":
			s.running, _ = strconv.Atoi(f[1])
		}
	}
	if len(s.cpus) == 0 {
		return fmt.Errorf("/proc/stat: no cpuN line")
	}
	return sc.Err()
}

// parsePSISome returns the "some" line's total (µs), or -1.
func parsePSISome(b []byte) int64 {
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err == nil {
					return n
				}
			}
		}
	}
	return -1
}

// noiseBetween is what happened from a to b.
func noiseBetween(a, b noiseSnap) *Noise {
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 || len(a.cpus) != len(b.cpus) {
		return nil
	}
	const hz = 100 // USER_HZ: /proc/stat counts in 1/100 s on Linux
	pct := func(ticks uint64) float64 { return math.Round(float64(ticks)/hz/secs*100*100) / 100 }
	n := &Noise{Seconds: secs, CPUPressurePct: -1, RunQueue: b.running}
	for i := range a.cpus {
		d := make([]uint64, 8)
		for k := range d {
			if b.cpus[i][k] >= a.cpus[i][k] {
				d[k] = b.cpus[i][k] - a.cpus[i][k]
			}
		}
		n.BusyPct = append(n.BusyPct, pct(d[0]+d[1]+d[2]+d[5]+d[6]))
		n.IRQPct = append(n.IRQPct, pct(d[5]))
		n.SoftIRQPct = append(n.SoftIRQPct, pct(d[6]))
		n.StealPct = append(n.StealPct, pct(d[7]))
	}
	n.ContextSwitches = math.Round(float64(b.ctxt-a.ctxt) / secs)
	n.Interrupts = math.Round(float64(b.intr-a.intr) / secs)
	if a.psiSomeUS >= 0 && b.psiSomeUS >= a.psiSomeUS {
		n.CPUPressurePct = math.Round(float64(b.psiSomeUS-a.psiSomeUS)/1e6/secs*100*100) / 100
	}
	return n
}

// Noisy-sample rule (the report's --exclude-noisy and its flags).
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
		p.summarize()
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
