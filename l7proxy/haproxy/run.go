package haproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/topology"
)

// Table is the nftables table that, on the eBPF datapath, gives what
// HAProxy sends the mark of cnlab's proxy (l7proxy.Mark): HAProxy 2.6
// sets no mark on its connections to servers, so they are marked by the
// uid it runs as, and what its transparent listener's sockets send to
// clients (SYN-ACKs, answers) by the socket's transparency (http-request
// set-mark would keep HAProxy from dropping root).
const Table = "cnlab_haproxy"

// Check reports whether HAProxy is installed, with an error naming the
// missing binary.
func Check() error {
	if _, err := exec.LookPath(Binary); err != nil {
		return fmt.Errorf("%s is not installed (apt-get install haproxy; or run scripts/install.sh): the l7Proxy haproxy points run it in the L7 proxy's place", Binary)
	}
	return nil
}

// Dir is where a host's HAProxy keeps its files (under the directory of
// the host's cnlab proxy, so that the lab's run directory holds it).
func Dir(lab, host string) string { return filepath.Join(l7proxy.Dir(lab, host), "haproxy") }

// Write writes a rendered configuration into dir.
func (r Rendered) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, text := range r {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Start makes HAProxy enforce cfg on a host of a lab in the place of
// cnlab's proxy: it stops the host's cnlab proxy (and an HAProxy of an
// earlier configuration), writes the configuration, starts HAProxy in
// the host's namespace (bound to l7proxy.Port once Start returns) and,
// with mark (the eBPF datapath), adds the nftables table Table there. It
// returns HAProxy's pid; on an error it leaves nothing behind.
func Start(ctx context.Context, lab *topology.Spec, host string, cfg *l7proxy.Config, mark bool) (pid int, err error) {
	if err := Check(); err != nil {
		return 0, err
	}
	h := lab.Host(host)
	if h == nil {
		return 0, fmt.Errorf("haproxy: lab %s has no host %s", lab.Name, host)
	}
	if err := Stop(ctx, lab, host); err != nil {
		return 0, err
	}
	if err := stopPid(l7proxy.Pid(lab.Name, host)); err != nil {
		return 0, fmt.Errorf("haproxy on host %s: stop cnlab's proxy: %w", host, err)
	}
	dir := Dir(lab.Name, host)
	defer func() {
		if err != nil {
			_ = Stop(context.WithoutCancel(ctx), lab, host)
		}
	}()
	// IPv6 on eBPF only: behind a nat REDIRECT (iptables, nftables)
	// HAProxy 2.6 reads no IPv6 original destination and would answer
	// every IPv6 request 403; unbound, the connection is refused.
	r, err := Render(cfg, dir, slices.Contains(lab.Families(), 6) && lab.Datapath == kind.EBPF)
	if err != nil {
		return 0, fmt.Errorf("haproxy on host %s: %w", host, err)
	}
	if err := r.Write(dir); err != nil {
		return 0, fmt.Errorf("haproxy on host %s: %w", host, err)
	}
	if mark {
		if _, err := netns.Run(ctx, h.Netns, []byte(nftTable()), "nft", "-f", "-"); err != nil {
			return 0, fmt.Errorf("haproxy on host %s: %w", host, err)
		}
	}
	// -D: the command returns once HAProxy has bound its listener and
	// forked its process (which outlives this one; the lab's down kills
	// it with the namespace's processes, Stop before).
	cmd := exec.CommandContext(ctx, Binary, "-D", "-f", filepath.Join(dir, ConfigFile))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := netns.Start(h.Netns, cmd); err != nil {
		return 0, fmt.Errorf("haproxy on host %s: start: %w", host, err)
	}
	werr := cmd.Wait()
	_ = os.WriteFile(filepath.Join(dir, LogFile), out.Bytes(), 0o644)
	if werr != nil {
		return 0, fmt.Errorf("haproxy on host %s: %v: %s", host, werr, lastLines(out.String(), 5))
	}
	pid, err = readPid(dir)
	if err != nil {
		return 0, fmt.Errorf("haproxy on host %s: %w", host, err)
	}
	return pid, nil
}

// nftTable is the table that marks what HAProxy sends: from its uid (its
// connections to servers), and from a transparent socket (its listener's
// SYN-ACKs, its answers to clients: the addresses are the endpoints').
func nftTable() string {
	return fmt.Sprintf(`table inet %[1]s {
	chain out {
		type route hook output priority mangle; policy accept;
		meta skuid %[2]s meta mark set %#[3]x
		socket transparent 1 meta mark set %#[3]x
	}
}
`, Table, User, l7proxy.Mark)
}

// Stop stops a host's HAProxy, removes the nftables table (when there is
// one) and HAProxy's files. Nothing to stop is no error: a host without
// HAProxy's directory (Start makes it first) costs a stat.
func Stop(ctx context.Context, lab *topology.Spec, host string) error {
	dir := Dir(lab.Name, host)
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	var errs []error
	if pid, err := readPid(dir); err == nil {
		if err := stopPid(pid); err != nil {
			errs = append(errs, fmt.Errorf("haproxy on host %s: %w", host, err))
		}
	}
	if h := lab.Host(host); h != nil && netns.Exists(h.Netns) {
		if out, err := netns.Run(ctx, h.Netns, nil, "nft", "list", "tables"); err == nil && strings.Contains(string(out), " "+Table+"\n") {
			if _, err := netns.Run(ctx, h.Netns, nil, "nft", "delete", "table", "inet", Table); err != nil {
				errs = append(errs, fmt.Errorf("haproxy on host %s: %w", host, err))
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// StopAll stops the HAProxy of every host of a lab (Stop).
func StopAll(ctx context.Context, lab *topology.Spec) error {
	var errs []error
	for _, h := range lab.Hosts {
		errs = append(errs, Stop(ctx, lab, h.Name))
	}
	return errors.Join(errs...)
}

// Pids are the pids of the HAProxy processes running for a lab, per host.
func Pids(lab *topology.Spec) map[string]int {
	out := map[string]int{}
	for _, h := range lab.Hosts {
		if pid, err := readPid(Dir(lab.Name, h.Name)); err == nil && alive(pid) {
			out[h.Name] = pid
		}
	}
	return out
}

// PidsByName is Pids for a lab known by name alone: the hosts whose
// run directory has an HAProxy pid file.
func PidsByName(lab string) map[string]int {
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(l7proxy.Dir(lab, "*"), "haproxy", PidFile))
	for _, f := range files {
		if pid, err := readPid(filepath.Dir(f)); err == nil && alive(pid) {
			out[filepath.Base(filepath.Dir(filepath.Dir(f)))] = pid
		}
	}
	return out
}

func readPid(dir string) (int, error) {
	data, err := os.ReadFile(filepath.Join(dir, PidFile))
	if err != nil {
		return 0, err
	}
	// HAProxy writes one pid per line (one process without master-worker).
	first, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s: no pid", filepath.Join(dir, PidFile))
	}
	return pid, nil
}

// alive reports whether a process runs (a zombie does not).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// stopPid ends a process (SIGTERM, SIGKILL after 5 s) and waits until it
// is gone (or a zombie: its parent reaps it). 0 is nothing to stop.
func stopPid(pid int) error {
	if pid <= 0 || !alive(pid) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if time.Now().After(deadline.Add(5 * time.Second)) {
				return fmt.Errorf("process %d did not exit", pid)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "; ")
}
