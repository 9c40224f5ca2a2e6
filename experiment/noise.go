package experiment

import (
	"bufio"
	"bytes"
	"fmt"
	"github.com/cnlab/cnlab/experiment/results"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

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
func noiseBetween(a, b noiseSnap) *results.Noise {
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 || len(a.cpus) != len(b.cpus) {
		return nil
	}
	const hz = 100 // USER_HZ: /proc/stat counts in 1/100 s on Linux
	pct := func(ticks uint64) float64 { return math.Round(float64(ticks)/hz/secs*100*100) / 100 }
	n := &results.Noise{Seconds: secs, CPUPressurePct: -1, RunQueue: b.running}
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
