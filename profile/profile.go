package profile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/cnlab/cnlab/experiment/results"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/internal/files"
)

// Defaults.
const (
	DefaultFrequency = 999 // Hz per CPU; off the 1000 Hz tick so samples do not lock to it
	DefaultTop       = 30
	DataFile         = "perf.data"
	ReportFile       = "perf-report.txt"
)

// How long perf gets to set up (it synthesizes every running task first)
// and to write its data after SIGINT.
var (
	startTimeout = 30 * time.Second
	stopTimeout  = 60 * time.Second
)

// Options say what to sample and where to keep the data.
type Options struct {
	// Dir receives perf.data and perf-report.txt; it is created if missing.
	Dir string
	// Frequency is the sampling rate per CPU in Hz (default 999).
	Frequency int
	// CallGraph records kernel call chains (perf record -g) so perf.data
	// can be explored later with `perf report -i`; the KernelProfile itself
	// counts self time either way.
	CallGraph bool
	// Event is the perf event to sample; empty means cycles when the
	// machine has a hardware PMU, else cpu-clock.
	Event string
	// Top is how many symbols KernelProfile.Top keeps (default 30).
	Top int
}

// Profile is a running `perf record`.
type Profile struct {
	opts    Options
	res     results.KernelProfile
	cmd     *exec.Cmd
	stderr  bytes.Buffer
	done    chan struct{} // closed when perf has exited
	waitErr error
	fifoDir string
	fifos   []*os.File
	started time.Time
	restore func()
	stopped bool
}

// Start starts system-wide sampling and returns once perf samples. When
// this machine cannot profile, it still returns a Profile, whose Stop
// returns Available: false and the reason. The error is for misuse (no
// Dir, a negative frequency), an unusable Dir, or ctx ended. Cancelling ctx
// stops perf (SIGINT); Stop must still be called.
func Start(ctx context.Context, opts Options) (*Profile, error) {
	if opts.Dir == "" {
		return nil, errors.New("profile: no Dir")
	}
	if opts.Frequency < 0 || opts.Top < 0 {
		return nil, fmt.Errorf("profile: negative frequency %d or top %d", opts.Frequency, opts.Top)
	}
	if opts.Frequency == 0 {
		opts.Frequency = DefaultFrequency
	}
	if opts.Top == 0 {
		opts.Top = DefaultTop
	}
	if err := files.Mkdir(opts.Dir); err != nil {
		return nil, fmt.Errorf("profile dir: %w", err)
	}
	p := &Profile{opts: opts, restore: func() {}}
	p.res.Frequency, p.res.CallGraph = opts.Frequency, opts.CallGraph
	if _, err := exec.LookPath("perf"); err != nil {
		return p.unavailable("perf not found in PATH (Debian package linux-perf)"), nil
	}
	p.res.Event = opts.Event
	if p.res.Event == "" {
		switch {
		case probe(unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES) == nil:
			p.res.Event = "cycles"
		default:
			p.res.Event = "cpu-clock"
			p.note("no hardware PMU (cycles): sampling cpu-clock, a timer; time with interrupts off " +
				"is charged to where they are turned back on (e.g. _raw_spin_unlock_irqrestore)")
		}
	}
	if err := probe(unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CPU_CLOCK); err != nil {
		return p.unavailable(fmt.Sprintf("system-wide perf_event_open: %v (kernel.perf_event_paranoid=%s; "+
			"needs root, CAP_PERFMON or paranoid <= 0)", err, sysctl("kernel/perf_event_paranoid"))), nil
	}
	p.checkSymbols()
	if err := p.startPerf(ctx); err != nil {
		p.restore()
		return nil, err
	}
	return p, nil
}

// probe checks that a system-wide event of that kind can be opened on
// CPU 0, as perf record -a will.
func probe(typ uint32, config uint64) error {
	attr := unix.PerfEventAttr{
		Type:   typ,
		Config: config,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: DefaultFrequency,
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

func sysctl(key string) string {
	b, err := os.ReadFile(filepath.Join("/proc/sys", key))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func (p *Profile) note(s string) { p.res.Notes = append(p.res.Notes, s) }

// unavailable ends the profile before it started.
func (p *Profile) unavailable(reason string) *Profile {
	p.res.Available, p.res.Reason = false, reason
	return p
}

// checkSymbols notes what would leave kernel samples without names, and
// turns on names for JIT'ed BPF programs for the profile's duration.
func (p *Profile) checkSymbols() {
	if f, err := os.Open("/proc/kallsyms"); err == nil {
		line, _ := bufio.NewReader(f).ReadString('\n')
		f.Close()
		if strings.HasPrefix(line, "0000000000000000 ") {
			p.note("kernel symbol addresses hidden (kernel.kptr_restrict=" + sysctl("kernel/kptr_restrict") +
				"): kernel samples show as addresses")
		}
	}
	const jit = "/proc/sys/net/core/bpf_jit_kallsyms"
	old := sysctl("net/core/bpf_jit_kallsyms")
	if old != "0" {
		return
	}
	if err := os.WriteFile(jit, []byte("1"), 0o644); err != nil {
		p.note("net.core.bpf_jit_kallsyms=0 and could not be set: BPF programs show as addresses")
		return
	}
	p.note("set net.core.bpf_jit_kallsyms=1 for the profile (restored after)")
	p.restore = func() { _ = os.WriteFile(jit, []byte(old), 0o644) }
}

// startPerf starts perf record with events disabled (-D -1) and enables
// them through its control fifo: the ack means perf is set up and
// sampling, so the measurement that follows is covered from its start.
func (p *Profile) startPerf(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "cnlab-profile-")
	if err != nil {
		return fmt.Errorf("profile control dir: %w", err)
	}
	p.fifoDir = dir
	ctl, ack := filepath.Join(dir, "ctl"), filepath.Join(dir, "ack")
	for _, f := range []string{ctl, ack} {
		if err := unix.Mkfifo(f, 0o600); err != nil {
			p.cleanup()
			return fmt.Errorf("profile control fifo: %w", err)
		}
		// O_RDWR: opening a fifo does not wait for the other end.
		fh, err := os.OpenFile(f, os.O_RDWR, 0)
		if err != nil {
			p.cleanup()
			return fmt.Errorf("profile control fifo: %w", err)
		}
		p.fifos = append(p.fifos, fh)
	}
	p.res.DataFile = filepath.Join(p.opts.Dir, DataFile)
	args := []string{"record", "-e", p.res.Event, "-F", fmt.Sprint(p.opts.Frequency), "-a"}
	if p.opts.CallGraph {
		args = append(args, "-g")
	}
	args = append(args, "-D", "-1", "--control", "fifo:"+ctl+","+ack, "-o", p.res.DataFile)
	p.res.Command = append([]string{"perf"}, args...)

	p.cmd = exec.CommandContext(ctx, "perf", args...)
	p.cmd.Stderr = &p.stderr
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(os.Interrupt) }
	p.cmd.WaitDelay = stopTimeout
	if err := p.cmd.Start(); err != nil {
		p.cleanup()
		p.unavailable(fmt.Sprintf("start perf record: %v", err))
		return nil
	}
	p.done = make(chan struct{})
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()

	acked := make(chan error, 1)
	go func() {
		if _, err := p.fifos[0].WriteString("enable\n"); err != nil {
			acked <- err
			return
		}
		line, err := bufio.NewReader(p.fifos[1]).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ack" {
			err = fmt.Errorf("unexpected reply %q", line)
		}
		acked <- err
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case err := <-acked:
		if err == nil {
			p.started = time.Now()
			p.res.Available = true
			return nil
		}
		p.abort()
		p.unavailable(fmt.Sprintf("perf record control: %v: %s", err, p.stderrText()))
	case <-p.done:
		p.cleanup()
		p.unavailable(fmt.Sprintf("perf record exited at start (%v): %s", p.waitErr, p.stderrText()))
	case <-timer.C:
		p.abort()
		p.unavailable(fmt.Sprintf("perf record did not start sampling within %v: %s", startTimeout, p.stderrText()))
	case <-ctx.Done():
		p.abort()
		return ctx.Err()
	}
	return nil
}

func (p *Profile) stderrText() string {
	s := strings.TrimSpace(p.stderr.String())
	if len(s) > 1000 {
		s = s[:1000] + "..."
	}
	return s
}

// abort kills perf and waits for it.
func (p *Profile) abort() {
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cleanup()
}

func (p *Profile) cleanup() {
	for _, f := range p.fifos {
		f.Close()
	}
	p.fifos = nil
	if p.fifoDir != "" {
		os.RemoveAll(p.fifoDir)
		p.fifoDir = ""
	}
}

// Stop ends sampling (SIGINT to perf, which then writes perf.data), runs
// perf report and returns the result. A profile that could not run
// returns Available: false and the reason; the error is for a second Stop.
func (p *Profile) Stop() (*results.KernelProfile, error) {
	if p == nil {
		return nil, errors.New("profile: Stop on nil Profile")
	}
	if p.stopped {
		return nil, errors.New("profile: already stopped")
	}
	p.stopped = true
	defer p.restore()
	res := p.res
	if !res.Available {
		return &res, nil
	}
	res.Seconds = time.Since(p.started).Seconds()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cleanup()
	if p.waitErr != nil && !interrupted(p.waitErr) {
		if fi, err := os.Stat(res.DataFile); err != nil || fi.Size() == 0 {
			return failed(res, fmt.Sprintf("perf record: %v: %s", p.waitErr, p.stderrText())), nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "perf", append([]string{ReportArgs[0], "-i", res.DataFile}, ReportArgs[1:]...)...).Output()
	if err != nil {
		msg := err.Error()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			msg += ": " + strings.TrimSpace(string(ee.Stderr))
		}
		return failed(res, "perf report: "+msg), nil
	}
	res.ReportFile = filepath.Join(p.opts.Dir, ReportFile)
	if err := files.WriteAtomic(res.ReportFile, out); err != nil {
		return nil, fmt.Errorf("write %s: %w", res.ReportFile, err)
	}
	rep, err := ParseReport(bytes.NewReader(out))
	if err != nil {
		return failed(res, err.Error()), nil
	}
	if rep.Samples == 0 {
		return failed(res, "perf recorded no samples"), nil
	}
	if rep.LostSamples > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("perf lost %d samples", rep.LostSamples))
	}
	res.Samples, res.KernelSamples, res.LostSamples = rep.Samples, rep.KernelSamples, rep.LostSamples
	res.Top, res.Groups = rep.Top(p.opts.Top), rep.Groups
	return &res, nil
}

func failed(res results.KernelProfile, reason string) *results.KernelProfile {
	res.Available, res.Reason = false, reason
	return &res
}

// interrupted reports whether perf ended by the SIGINT it was sent.
func interrupted(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGINT
}
