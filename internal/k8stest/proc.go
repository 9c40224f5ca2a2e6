package k8stest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// proc is one process of the control plane, in a process group of its own
// so that stopping it also stops what it started (kwok's exec'd commands).
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been waited for
	err  error         // its exit, valid after done
}

// startProc starts bin with args, its output going to logDir/name.log.
func startProc(name, bin, dir, logDir string, env []string, args ...string) (*proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	fmt.Fprintf(f, "# %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = f
	cmd.Stderr = f
	// Pdeathsig: a test binary that dies (go test -timeout) takes the
	// control plane with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited returns an error naming the process and its log if it has ended.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); log: %s", p.name, p.err, p.log)
	default:
		return nil
	}
}

// stop sends SIGTERM to the process group, SIGKILL after grace, and then
// SIGKILL again to the group for children that outlived their parent.
func (p *proc) stop(grace time.Duration) {
	pg := -p.cmd.Process.Pid
	_ = syscall.Kill(pg, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(pg, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
	_ = syscall.Kill(pg, syscall.SIGKILL)
	// Killed children that outlived their parent are init's to reap.
	for deadline := time.Now().Add(2 * time.Second); p.groupAlive() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// groupAlive reports whether any process is left in the process group.
func (p *proc) groupAlive() bool {
	err := syscall.Kill(-p.cmd.Process.Pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freePorts returns n distinct TCP ports free on 127.0.0.1 right now. The
// listeners are held until all n are chosen so that none repeats.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
