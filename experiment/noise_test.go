package experiment

import (
	"slices"
	"testing"
	"time"
)

// Two readings of this VM's /proc/stat (trimmed intr line), 2 s apart.
const (
	stat0 = `cpu  413907 102932 272112 2087730 4470 0 56768 303 0 0
cpu0 204954 51288 132873 1049108 851 0 30010 156 0 0
cpu1 208952 51644 139239 1038622 3619 0 26758 147 0 0
intr 54751351 0 0 0 0 0
ctxt 158233378
btime 1763930700
processes 912345
procs_running 2
procs_blocked 0
softirq 1 2 3
`
	stat1 = `cpu  414107 102932 272212 2087730 4470 0 56868 313 0 0
cpu0 205054 51288 132923 1049158 851 0 30060 156 0 0
cpu1 209052 51644 139289 1038622 3619 0 26808 157 0 0
intr 54761351 0 0 0 0 0
ctxt 158253378
procs_running 3
`
	psi0 = "some avg10=2.57 avg60=4.29 avg300=5.47 total=2368932626\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
	psi1 = "some avg10=2.57 avg60=4.29 avg300=5.47 total=2369132626\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)

func TestNoiseBetween(t *testing.T) {
	var a, b noiseSnap
	if err := a.parseStat([]byte(stat0)); err != nil {
		t.Fatal(err)
	}
	if err := b.parseStat([]byte(stat1)); err != nil {
		t.Fatal(err)
	}
	a.psiSomeUS, b.psiSomeUS = parsePSISome([]byte(psi0)), parsePSISome([]byte(psi1))
	a.at = time.Unix(1000, 0)
	b.at = a.at.Add(2 * time.Second)
	n := noiseBetween(a, b)
	// cpu0: 100+50+50 ticks busy of 200 in 2 s = 100%; cpu1: 100+50+50
	// busy, 10 stolen.
	if !slices.Equal(n.BusyPct, []float64{100, 100}) || !slices.Equal(n.StealPct, []float64{0, 5}) ||
		!slices.Equal(n.SoftIRQPct, []float64{25, 25}) || !slices.Equal(n.IRQPct, []float64{0, 0}) {
		t.Errorf("per CPU: busy %v steal %v softirq %v irq %v", n.BusyPct, n.StealPct, n.SoftIRQPct, n.IRQPct)
	}
	if n.ContextSwitches != 10000 || n.Interrupts != 5000 || n.RunQueue != 3 || n.CPUPressurePct != 10 {
		t.Errorf("ctxt %g/s, intr %g/s, run queue %d, pressure %g%%; want 10000, 5000, 3, 10", n.ContextSwitches, n.Interrupts, n.RunQueue, n.CPUPressurePct)
	}
	if err := new(noiseSnap).parseStat([]byte("intr 1\n")); err == nil {
		t.Error("a /proc/stat without cpu lines parsed")
	}
	if parsePSISome([]byte("full total=3\n")) != -1 {
		t.Error("PSI without a some line")
	}
}
