package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// ExitError is a command that ran in a pod and exited non-zero.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("exit status %d", e.Code)
}

// ExitCode is the command's exit status (as exec.ExitError's).
func (e *ExitError) ExitCode() int { return e.Code }

// kwokExit is how kwok reports a local command's non-zero exit ("Internal
// error occurred: ... exit status 3"), where a kubelet returns a
// CodeExitError.
var kwokExit = regexp.MustCompile(`exit status (\d+)\s*$`)

// Exec runs argv in a pod's agent container without a TTY, streaming
// stdin (may be nil) in and stdout and stderr back, and returns when it
// exits: nil for exit status 0, an *ExitError for another. When ctx ends
// the stream is closed; what that does to the process depends on the
// runtime, so callers stop long-running commands themselves (StopCommand).
func (c *Client) Exec(ctx context.Context, ns, pod string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	req := c.K.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "agent", Command: argv, Stdin: stdin != nil, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(c.REST, "GET", req.URL().String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.REST, "POST", req.URL())
	if err != nil {
		return err
	}
	// Fall back to SPDY only when the WebSocket upgrade itself failed: a
	// catch-all fallback runs a command that failed in the pod twice.
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	var errb bytes.Buffer
	if stderr == nil {
		stderr = io.Discard
	}
	if stdout == nil {
		stdout = io.Discard
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: io.MultiWriter(stderr, &tail{b: &errb})})
	return exitError(err, errb.String())
}

// exitError turns a stream's error into an *ExitError when it is the
// command's non-zero exit (a kubelet's CodeExitError, or kwok's message).
func exitError(err error, stderr string) error {
	if err == nil {
		return nil
	}
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return &ExitError{Code: ce.Code, Msg: lastLine(stderr)}
	}
	var pce *utilexec.CodeExitError
	if errors.As(err, &pce) {
		return &ExitError{Code: pce.Code, Msg: lastLine(stderr)}
	}
	if m := kwokExit.FindStringSubmatch(err.Error()); m != nil {
		code, _ := strconv.Atoi(m[1])
		return &ExitError{Code: code, Msg: lastLine(stderr)}
	}
	return err
}

// tail keeps the last 4 KiB written to it.
type tail struct{ b *bytes.Buffer }

func (t *tail) Write(p []byte) (int, error) {
	t.b.Write(p)
	if n := t.b.Len(); n > 4096 {
		t.b.Next(n - 4096)
	}
	return len(p), nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// Output runs argv in a pod and returns its stdout; an error carries the
// last line of its stderr.
func (c *Client) Output(ctx context.Context, ns, pod string, argv ...string) (string, error) {
	var out, errb bytes.Buffer
	err := c.Exec(ctx, ns, pod, argv, nil, &out, &errb)
	if err != nil {
		if msg := lastLine(errb.String()); msg != "" {
			return out.String(), fmt.Errorf("%s in pod %s/%s: %w: %s", argv[0], ns, pod, err, msg)
		}
		return out.String(), fmt.Errorf("%s in pod %s/%s: %w", argv[0], ns, pod, err)
	}
	return out.String(), nil
}

// WrapCommand returns argv wrapped so that the process's PID is in a
// file named name in the pod's $TMPDIR (default /tmp) while it runs:
// StopCommand can then end it, whatever the runtime does with a closed
// exec stream (a kubelet's CRI may leave it running, kwok always does).
// The wrapper waits for it, removes the file and exits with its status.
func WrapCommand(name string, argv []string) []string {
	// A stop that came before the PID was written left name.stop: the
	// command is then ended at once.
	script := `f="${TMPDIR:-/tmp}/$0"; "$@" & p=$!; echo $p > "$f.new" && mv -f "$f.new" "$f"; [ -e "$f.stop" ] && kill -TERM $p; wait $p; s=$?; rm -f "$f" "$f.stop"; exit $s`
	return append([]string{"sh", "-c", script, name}, argv...)
}

// StopCommand ends a command started with WrapCommand: SIGTERM, then
// SIGKILL after two seconds. It leaves name.stop behind for a wrapper
// that has not written its PID yet (the wrapper removes it).
func StopCommand(name string) []string {
	script := `f="${TMPDIR:-/tmp}/$0"; : > "$f.stop"; p=$(cat "$f" 2>/dev/null) && [ -n "$p" ] || exit 0; kill -TERM "$p" 2>/dev/null; i=0; while kill -0 "$p" 2>/dev/null && [ $i -lt 20 ]; do sleep 0.1; i=$((i+1)); done; kill -KILL "$p" 2>/dev/null; rm -f "$f" "$f.stop"; exit 0`
	return []string{"sh", "-c", script, name}
}
