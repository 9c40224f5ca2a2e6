package experiment

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/buildinfo"
	"golang.org/x/sys/unix"
)

func firstLine(argv ...string) string {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil && len(out) == 0 {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// CaptureEnvironment describes this machine.
func CaptureEnvironment() *results.Environment {
	e := &results.Environment{Arch: runtime.GOARCH, Cores: runtime.NumCPU(), Cnlab: buildinfo.Commit(), Go: runtime.Version(),
		Tools: map[string]string{}, Sysctls: map[string]string{}, DefaultMTU: 1500, CapturedAt: time.Now().UTC()}
	e.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		e.Kernel = unix.ByteSliceToString(u.Release[:])
		e.KernelVersion = unix.ByteSliceToString(u.Version[:])
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if ok && k == "model name" && e.CPUModel == "" {
				e.CPUModel = v
			}
			if ok && k == "flags" && strings.Contains(" "+v+" ", " hypervisor ") {
				e.Virtualized = "hypervisor"
			}
		}
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		e.MemoryBytes = uint64(si.Totalram) * uint64(si.Unit)
	}
	tools := map[string][]string{
		"iperf3":   {"iperf3", "--version"},
		"ethtool":  {"ethtool", "--version"},
		"perf":     {"perf", "--version"},
		"ping":     {"ping", "-V"},
		"sockperf": {"sockperf", "--version"},
		"ab":       {"ab", "-V"},
	}
	for _, t := range kind.VersionTools() { // iptables, iptables-legacy, nft
		tools[t.Name] = append([]string{t.Name}, t.Version...)
	}
	for name, argv := range tools {
		if v := firstLine(argv...); v != "" {
			e.Tools[name] = v
		}
	}
	for _, k := range []string{"net/core/bpf_jit_enable", "net/core/rmem_max", "net/core/wmem_max", "net/ipv4/tcp_rmem", "net/ipv4/tcp_wmem",
		"net/ipv4/tcp_congestion_control", "net/bridge/bridge-nf-call-iptables", "kernel/perf_event_paranoid"} {
		if v := readTrim("/proc/sys/" + k); v != "" {
			e.Sysctls[strings.ReplaceAll(k, "/", ".")] = v
		}
	}
	e.CPUGovernor = readTrim("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
	// How an idle CPU waits: with the haltpoll driver and no polling, a
	// vCPU halts at once and a wakeup from another CPU costs tens of µs
	// (docs/methodology.md, "Noise on a VM").
	if v := readTrim("/sys/devices/system/cpu/cpuidle/current_driver"); v != "" {
		e.Sysctls["cpuidle.driver"] = v
	}
	if v := readTrim(HaltPollPath); v != "" {
		e.Sysctls["haltpoll.guest_halt_poll_ns"] = v
	}
	return e
}

func itoa(n int) string { return strconv.Itoa(n) }

// HaltPollPath is the haltpoll cpuidle driver's polling time before an
// idle vCPU halts (ns).
const HaltPollPath = "/sys/module/haltpoll/parameters/guest_halt_poll_ns"
