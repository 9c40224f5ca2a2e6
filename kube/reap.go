package kube

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// reaper is `cnlab agent reap`, a process of its own beside a run: it is
// told on its stdin which commands run in which pods ("+ NS POD PIDFILE",
// and "- PIDFILE" when one ended) and, when its stdin closes while some
// still run (this process died: kill -9, a crash), stops each in its pod
// (StopCommand). A command is stopped even then, as the relay of every
// command (`cnlab agent exec`) did before commands ran in process; one
// process per run instead of one per command.
type reaper struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	w   io.WriteCloser
}

// ReapArgs are the arguments of `cnlab agent reap` for a cluster.
func ReapArgs(c Config) []string {
	args := []string{"agent", "reap"}
	if c.Kubeconfig != "" {
		args = append(args, "--kubeconfig", c.Kubeconfig)
	}
	if c.Context != "" {
		args = append(args, "--context", c.Context)
	}
	return args
}

// add tells the reaper (started on first use) that a command with
// pidfile is about to run in ns/pod.
func (r *reaper) add(self string, c Config, ns, pod, pidfile string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		cmd := exec.Command(self, ReapArgs(c)...)
		// Its own process group: a Ctrl-C at the terminal is the run's to
		// handle; the reaper acts when the run is gone.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		w, err := cmd.StdinPipe()
		if err != nil {
			return fmt.Errorf("start the reaper: %w", err)
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start the reaper (%s agent reap): %w", self, err)
		}
		r.cmd, r.w = cmd, w
	}
	if _, err := fmt.Fprintf(r.w, "+ %s %s %s\n", ns, pod, pidfile); err != nil {
		return fmt.Errorf("tell the reaper: %w", err)
	}
	return nil
}

// done tells the reaper that the command with pidfile ended (or was
// stopped).
func (r *reaper) done(pidfile string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil {
		_, _ = fmt.Fprintf(r.w, "- %s\n", pidfile)
	}
}

// close ends the reaper: what it still knows of is stopped.
func (r *reaper) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	r.w.Close()
	_ = r.cmd.Wait()
	r.cmd, r.w = nil, nil
}

// Reap is `cnlab agent reap`: it reads in until it closes or ctx ends,
// then stops the commands still running (each by StopCommand, at once,
// StopTimeout each) and returns how many it stopped.
func (c *Client) Reap(ctx context.Context, in io.Reader) (int, error) {
	type cmdRef struct{ ns, pod string }
	running := map[string]cmdRef{}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
read:
	for {
		select {
		case <-ctx.Done():
			break read
		case l, ok := <-lines:
			if !ok {
				break read
			}
			f := strings.Fields(l)
			switch {
			case len(f) == 4 && f[0] == "+":
				running[f[3]] = cmdRef{f[1], f[2]}
			case len(f) == 2 && f[0] == "-":
				delete(running, f[1])
			}
		}
	}
	var wg sync.WaitGroup
	for pidfile, r := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
			defer cancel()
			_ = c.Exec(sctx, r.ns, r.pod, StopCommand(pidfile), nil, nil, nil)
		}()
	}
	wg.Wait()
	return len(running), nil
}
