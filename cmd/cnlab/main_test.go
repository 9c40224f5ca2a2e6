package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/topology"
)

// The test binary doubles as the cnlab binary: with CNLAB_TEST_MAIN=1 it
// runs main, so tests drive the real CLI in a separate process.
func TestMain(m *testing.M) {
	if os.Getenv("CNLAB_TEST_MAIN") == "1" {
		armFault(os.Getenv(faultEnv))
		main()
		return
	}
	testutil.Main(m)
}

func cnlab(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CNLAB_TEST_MAIN=1")
	return cmd
}

// runCLI runs cnlab and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := cnlab(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestBadInputExitsTwoAndCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	badExp := filepath.Join(dir, "exp.yaml")
	os.WriteFile(badExp, []byte("workloads: [{kind: tcp-rr}]\nmatrix: {policies: [-1]}\n"), 0o644)
	os.WriteFile(bad, []byte("name: t-cli-bad\nhosts:\n  - {name: a, podCIDR: 10.0.0.0/24}\n  - {name: b, podCIDR: 10.0.0.128/25}\n"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"up", "-f", bad}, bad + ": hosts[1].podCIDR: 10.0.0.128/25 overlaps hosts[0].podCIDR 10.0.0.0/24"},
		{[]string{"up"}, "give exactly one of -f FILE or --preset"},
		{[]string{"up", "--preset", "star"}, `unknown preset "star"`},
		{[]string{"up", "--preset", "chain", "--length", "2", "--name", "Bad Name"}, `--name: "Bad Name" must consist`},
		{[]string{"up", "--preset", "single-host", "--datapath", "ovs"}, `--datapath: unknown datapath "ovs"`},
		{[]string{"up", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"status", "-o", "yaml"}, `unknown output format "yaml"`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"down"}, "give one LAB or --all"},
		{[]string{"exec", "lab", "ep"}, "usage: cnlab exec LAB ENDPOINT -- CMD...: give the command to run after --, e.g. cnlab exec demo x/a -- ip addr"},
		{[]string{"exec", "lab", "ep", "--"}, "give the command to run after --, e.g. cnlab exec demo x/a -- ip addr"},
		{[]string{"exec", "lab", "ep", "ip"}, "put -- before the command, e.g. cnlab exec demo x/a -- ip addr"},
		{[]string{"exec", "lab"}, "give the lab and the endpoint, then the command after --"},
		{[]string{"up", "--preset", "chain", "--length", "0"}, "--length must be at least 1"},
		{[]string{"up", "--preset", "single-host", "--name="}, "--name must not be empty"},
		{[]string{"up", "--preset", "single-host", "--workers", "0"}, "--workers must be between 1 and 64"},
		{[]string{"down", "../../etc"}, `LAB: lab name: "../../etc" must consist of lower case`},
		{[]string{"status", ".."}, `LAB: lab name: ".." must consist`},
		{[]string{"policy", "frob"}, `unknown policy command "frob" (apply, delete, show, trace)`},
		{[]string{"policy", "delete", "lab", "--all", "x/a"}, "give policy names or --all, not both"},
		{[]string{"policy", "delete", "lab", "--kind", "Pod", "x/a"}, `--kind "Pod": one of NetworkPolicy, CiliumNetworkPolicy, ClusterNetworkPolicy, AdminNetworkPolicy, BaselineAdminNetworkPolicy`},
		{[]string{"policy", "apply", "lab"}, "give at least one -f FILE"},
		{[]string{"policy", "trace", "lab", "--from", "a", "--to", "b", "--port", "Http"}, `--port "Http" is not a port number (1-65535) nor a port name`},
		{[]string{"policy", "trace", "lab", "--from", "a", "--to", "b", "--port", "70000"}, `--port "70000" is not a port number (1-65535)`},
		{[]string{"policy", "trace", "lab", "--from", "a", "--to", "b", "--port", "80", "--family", "5"}, `--family "5": 4 or 6`},
		{[]string{"probe", "lab", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"probe", "lab", "--protocol", "icmp"}, `--protocol "icmp": tcp, udp or sctp`},
		{[]string{"probe", "lab", "--spoof", "--family", "6"}, "--family applies to the probe of every pair (--port, --protocol, --http) and --service"},
		{[]string{"probe", "lab", "--service", "x/web", "--family", "7"}, `--family "7": 4, 6 or both`},
		{[]string{"up", "--preset", "single-host", "--datapath", "nftables", "--filler", "10"}, "--filler: filler rules are for the iptables datapath, but the lab's datapath is nftables"},
		{[]string{"up", "--preset", "single-host", "--host-routing", "legacy"}, "--host-routing: an option of the ebpf datapath, but the lab's datapath is iptables"},
		{[]string{"up", "--preset", "single-host", "--datapath", "ebpf", "--ipsets"}, "--ipsets: an option of the iptables datapath, but the lab's datapath is ebpf"},
		{[]string{"up", "--preset", "single-host", "--datapath", "nftables", "--connect-hook"}, "--connect-hook: an option of the ebpf datapath, but the lab's datapath is nftables"},
		{[]string{"up", "--preset", "single-host", "--datapath", "ebpf", "--host-routing", "fast"}, `--host-routing: unknown mode "fast" (bpf, legacy)`},
		{[]string{"monitor"}, "give the lab to monitor: cnlab monitor LAB"},
		{[]string{"rr", "bogus"}, "give server or client: cnlab rr server|client [flags]"},
		{[]string{"rr", "client", "--to", "somewhere"}, `--to "somewhere": IPv4:port or [IPv6]:port of the server`},
		{[]string{"rr", "client", "--to", "10.0.0.1:80", "--mode", "tcp-stream"}, `mode "tcp-stream": one of tcp-rr, tcp-crr, udp-rr`},
		{[]string{"rr", "server", "--request-size", "0"}, "request size 0: 1 to 65000 bytes"},
		{[]string{"monitor", "lab", "--type", "some"}, `--type "some": drop or all`},
		{[]string{"monitor", "lab", "--count", "-1"}, "--count and --duration cannot be negative"},
		{[]string{"run", filepath.Join(dir, "missing.yaml")}, "missing.yaml: no such file or directory"},
		{[]string{"run", badExp}, badExp + ": matrix.policies[0]: -1: between 0 and 100000"},
		{[]string{"run", "a.yaml", "b.yaml"}, "accepts at most 1 arg"},
	}
	for _, tc := range cases {
		_, stderr, code := runCLI(t, tc.args...)
		if code != 2 {
			t.Errorf("cnlab %s: exit %d, want 2 (stderr %q)", strings.Join(tc.args, " "), code, stderr)
		}
		if !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("cnlab %s: stderr %q, want one line containing %q", strings.Join(tc.args, " "), stderr, tc.want)
		}
	}
	if os.Geteuid() == 0 {
		if names, _ := netns.List(topology.LabNetnsPrefix("t-cli-bad")); len(names) != 0 {
			t.Errorf("bad input created namespaces: %v", names)
		}
	}
}

func TestUpStatusExecDown(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iperf3", "iperf3")
	lab := "t-cli"
	stdout, stderr, code := runCLI(t, "up", "--preset", "multi-host", "--name", lab)
	t.Cleanup(func() { runCLI(t, "down", lab) })
	if code != 0 {
		t.Fatalf("up: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "lab t-cli is up") {
		t.Errorf("up said %q", stdout)
	}
	// Again: says so, changes nothing, succeeds.
	stdout, _, code = runCLI(t, "up", "--preset", "multi-host", "--name", lab)
	if code != 0 || !strings.Contains(stdout, "already up; nothing changed") {
		t.Errorf("second up: exit %d, %q", code, stdout)
	}
	// With another datapath: refused, naming what differs (issue 37).
	_, stderr, code = runCLI(t, "up", "--preset", "multi-host", "--name", lab, "--datapath", "nftables")
	if code == 0 || !strings.Contains(stderr, "lab t-cli is already up with datapath iptables (you asked for nftables)") ||
		!strings.Contains(stderr, "or choose another name") {
		t.Errorf("up with another datapath: exit %d, %q", code, stderr)
	}
	stdout, _, code = runCLI(t, "status", lab, "-o", "json")
	var st struct {
		Name, Phase string
		Endpoints   []struct{ ID, IP, Host, Netns string }
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &st) != nil {
		t.Fatalf("status -o json: exit %d: %s", code, stdout)
	}
	if st.Name != lab || st.Phase != "up" || len(st.Endpoints) != 2 {
		t.Fatalf("status: %+v", st)
	}
	var serverIP string
	for _, ep := range st.Endpoints {
		if ep.ID == "default/server" {
			serverIP = ep.IP
		}
	}
	// Real iperf3 between the hosts, as the README's demo does.
	if _, stderr, code := runCLI(t, "exec", lab, "server", "--", "iperf3", "-s", "-D", "-1"); code != 0 {
		t.Fatalf("iperf3 server: %s", stderr)
	}
	var out []byte
	var err error
	for i := 0; i < 50; i++ { // the daemon needs a moment to listen
		out, err = cnlab("exec", lab, "default/client", "--", "iperf3", "-c", serverIP, "-t", "1", "-J").Output()
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("iperf3 client: %v", err)
	}
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.End.SumReceived.BitsPerSecond <= 0 {
		t.Fatalf("iperf3 result: %v %s", err, out)
	}
	// exec passes the command's exit status through, and resolves hosts.
	if _, _, code := runCLI(t, "exec", lab, "client", "--", "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exec exit status %d, want 7", code)
	}
	if _, stderr, code := runCLI(t, "exec", lab, "client", "--", "no-such-program"); code != 127 || !strings.Contains(stderr, "no-such-program") {
		t.Errorf("exec of a missing program: exit %d %q, want 127", code, stderr)
	}
	stdout, _, code = runCLI(t, "exec", lab, "host/flip", "--", "cat", "/proc/sys/net/ipv4/ip_forward")
	if code != 0 || strings.TrimSpace(stdout) != "1" {
		t.Errorf("exec in host: %d %q", code, stdout)
	}
	stdout, _, _ = runCLI(t, "exec", lab, "client", "--", "ls", "/sys/class/net")
	if f := strings.Fields(stdout); len(f) == 0 || f[0] != "eth0" {
		t.Errorf("exec does not show the endpoint's /sys/class/net: %q", stdout)
	}
	if _, stderr, code := runCLI(t, "exec", lab, "nobody", "--", "true"); code != 2 || !strings.Contains(stderr, `endpoint "nobody" not found in lab t-cli`) {
		t.Errorf("exec unknown endpoint: %d %q", code, stderr)
	}
	stdout, stderr, code = runCLI(t, "down", lab)
	if code != 0 || !strings.Contains(stdout, "lab t-cli is down") {
		t.Fatalf("down: %d %s %s", code, stdout, stderr)
	}
	// down is idempotent: a lab that is not there is already down.
	if stdout, stderr, code := runCLI(t, "down", lab); code != 0 || stdout != "" || stderr != "cnlab: lab t-cli not found: nothing to do\n" {
		t.Errorf("down twice: %d %q %q", code, stdout, stderr)
	}
}

// TestKilledUpIsReclaimed kills `cnlab up` with SIGKILL while it is
// building a large lab, and checks that `down` removes everything. (It
// names the lab: `down` with --all would take down every lab on the machine.)
func TestKilledUpIsReclaimed(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "big.yaml")
	var b strings.Builder
	b.WriteString("name: t-killed\nhosts:\n  - {name: h1, podCIDR: 10.10.0.0/22}\n  - {name: h2, podCIDR: 10.11.0.0/22}\nlinks: [{between: [h1, h2], kind: vxlan}]\nendpoints:\n")
	for i := 0; i < 600; i++ {
		fmt.Fprintf(&b, "  - {name: e%d, host: h%d}\n", i, 1+i%2)
	}
	os.WriteFile(file, []byte(b.String()), 0o644)
	cmd := cnlab("up", "-f", file, "--workers", "1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runCLI(t, "down", "t-killed") })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		names, _ := netns.List(topology.LabNetnsPrefix("t-killed"))
		if len(names) >= 50 {
			break
		}
		if ctx.Err() != nil {
			cmd.Process.Kill()
			t.Fatalf("up made only %d namespaces in 30s", len(names))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	stdout, _, _ := runCLI(t, "status")
	if !strings.Contains(stdout, "t-killed") || !strings.Contains(stdout, "incomplete") {
		t.Errorf("status after kill -9 does not show an incomplete lab:\n%s", stdout)
	}
	if _, stderr, code := runCLI(t, "up", "-f", file); code == 0 || !strings.Contains(stderr, "incomplete") {
		t.Errorf("up over a half-built lab: exit %d %q", code, stderr)
	}
	stdout, stderr, code := runCLI(t, "down", "t-killed")
	if code != 0 || !strings.Contains(stdout, "lab t-killed is down") {
		t.Fatalf("down t-killed: %d %s %s", code, stdout, stderr)
	}
	if names, _ := netns.List(topology.LabNetnsPrefix("t-killed")); len(names) != 0 {
		t.Errorf("left after down: %v", names)
	}
	if _, err := os.Stat(filepath.Join(rundir.Dir, "t-killed")); !os.IsNotExist(err) {
		t.Errorf("ledger left: %v", err)
	}
}
