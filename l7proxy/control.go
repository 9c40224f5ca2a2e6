package l7proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnlab/cnlab/internal/rundir"
)

// EnvDir, when set, makes MaybeRun run a proxy in place of the program:
// cnlab starts its proxies by running its own executable again (a test
// binary too, whose TestMain calls MaybeRun).
const EnvDir = "CNLAB_L7PROXY_DIR"

// MaybeRun runs a proxy and exits if this process was started as one.
func MaybeRun() {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, dir, fmt.Sprintf("0.0.0.0:%d", Port))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cnlab l7 proxy:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Dir is the directory of a host's proxy: its configuration, control
// socket, pid and access log.
func Dir(lab, host string) string { return filepath.Join(rundir.Lab(lab), "l7", host) }

// ReadStats reads the counters of a host's proxy (its pid among them); an
// error wrapping os.ErrNotExist when the host runs none that answers.
func ReadStats(ctx context.Context, lab, host string) (*Stats, error) {
	reply, err := Command(ctx, Dir(lab, host), "stats")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", os.ErrNotExist, err)
	}
	var s Stats
	if err := json.Unmarshal([]byte(reply), &s); err != nil {
		return nil, fmt.Errorf("l7 proxy stats: %w", err)
	}
	return &s, nil
}

// AccessLog is the path of a host's access log.
func AccessLog(lab, host string) string { return filepath.Join(Dir(lab, host), accessLog) }

// Pid returns the pid of a host's running proxy, 0 if none.
func Pid(lab, host string) int {
	dir := Dir(lab, host)
	if !Alive(dir) {
		return 0
	}
	pid, _ := readPid(dir)
	return pid
}

func readPid(dir string) (int, error) {
	data, err := os.ReadFile(filepath.Join(dir, PidFile))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// Alive reports whether the proxy recorded in dir runs and answers.
func Alive(dir string) bool {
	pid, err := readPid(dir)
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	reply, err := Command(ctx, dir, "ping")
	return err == nil && reply == "pong"
}

// Command sends one command on a proxy's control socket and returns its
// one-line reply; a reply starting with "error " is an error.
func Command(ctx context.Context, dir, cmd string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", filepath.Join(dir, ctlSocket))
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	if _, err := fmt.Fprintln(c, cmd); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: no reply: %w", cmd, err)
	}
	line = strings.TrimSuffix(line, "\n")
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return "", errors.New(msg)
	}
	return line, nil
}
