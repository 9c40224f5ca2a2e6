package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/testutil"
)

// pcapPackets reads a pcap file's header (microsecond or nanosecond,
// either byte order) and counts its records; it returns the link type.
func pcapPackets(t *testing.T, data []byte) (linkType uint32, packets int) {
	t.Helper()
	if len(data) < 24 {
		t.Fatalf("pcap of %d bytes: no header", len(data))
	}
	var bo binary.ByteOrder
	switch m := binary.LittleEndian.Uint32(data); m {
	case 0xa1b2c3d4, 0xa1b23c4d:
		bo = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		bo = binary.BigEndian
	default:
		t.Fatalf("not a pcap file: magic %#x", m)
	}
	linkType = bo.Uint32(data[20:])
	for off := 24; off < len(data); packets++ {
		if off+16 > len(data) {
			t.Fatalf("pcap record %d cut in its header", packets)
		}
		off += 16 + int(bo.Uint32(data[off+8:]))
		if off > len(data) {
			t.Fatalf("pcap record %d cut in its data", packets)
		}
	}
	return linkType, packets
}

// TestGraphAndCapture brings up a small lab, draws it, captures three
// ICMP packets of a ping on an endpoint, a second on a host's bridge,
// and takes it down.
func TestGraphAndCapture(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "tcpdump", "tcpdump")
	lab, dir := "t-graph", t.TempDir()
	if _, stderr, code := runCLI(t, "up", "--preset", "single-host", "--name", lab); code != 0 {
		t.Fatalf("up: exit %d: %s", code, stderr)
	}
	t.Cleanup(func() { runCLI(t, "down", lab) })

	out := filepath.Join(dir, "lab.svg")
	if _, stderr, code := runCLI(t, "graph", lab, "-o", out); code != 0 {
		t.Fatalf("graph: exit %d: %s", code, stderr)
	}
	svg, _ := os.ReadFile(out)
	for _, want := range []string{`data-id="default/client"`, `data-id="default/server"`, `data-id="flip"`, "up · datapath iptables"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("graph of the running lab has no %s", want)
		}
	}

	stdout, _, _ := runCLI(t, "status", lab, "-o", "json")
	var st struct{ Endpoints []struct{ ID, IP string } }
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatal(err)
	}
	var server string
	for _, ep := range st.Endpoints {
		if ep.ID == "default/server" {
			server = ep.IP
		}
	}
	pcap := filepath.Join(dir, "ping.pcap")
	capt := cnlab("capture", lab, "client", "icmp", "-c", "3", "-w", pcap)
	stderr, err := capt.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := capt.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var log bytes.Buffer
	listening := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "listening on eth0") {
				listening <- true
			}
		}
		done <- capt.Wait()
	}()
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		capt.Process.Kill()
		t.Fatalf("tcpdump did not listen within 10s")
	}
	if _, e, code := runCLI(t, "exec", lab, "client", "--", "ping", "-c", "3", "-i", "0.2", "-W", "1", server); code != 0 {
		t.Errorf("ping: exit %d %s", code, e)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("capture -c 3: %v: %s", err, log.String())
		}
	case <-time.After(10 * time.Second):
		capt.Process.Kill()
		t.Fatalf("capture -c 3 did not stop: %s", log.String())
	}
	data, err := os.ReadFile(pcap)
	if err != nil {
		t.Fatal(err)
	}
	if lt, n := pcapPackets(t, data); lt != 1 || n != 3 {
		t.Errorf("pcap: link type %d, %d packets; want 1 (Ethernet), 3", lt, n)
	}
	if !strings.Contains(log.String(), "wrote "+pcap) {
		t.Errorf("capture did not say where it wrote: %s", log.String())
	}

	// A host's bridge for a second: stops by itself, a valid empty-ish pcap.
	hostPcap := filepath.Join(dir, "br.pcap")
	start := time.Now()
	if _, e, code := runCLI(t, "capture", lab, "--host", "flip", "--iface", "br0", "--duration", "1s", "-w", hostPcap); code != 0 {
		t.Fatalf("capture --host --duration: exit %d %s", code, e)
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("capture --duration 1s took %v", d)
	}
	data, _ = os.ReadFile(hostPcap)
	if lt, _ := pcapPackets(t, data); lt != 1 {
		t.Errorf("bridge pcap: link type %d", lt)
	}

	// The default file is LAB-NS-NAME.pcap in the current directory, for
	// a bare name too; --duration stops a capture that sees nothing.
	def := cnlab("capture", lab, "server", "udp port 9", "--duration", "300ms")
	def.Dir = dir
	if b, err := def.CombinedOutput(); err != nil {
		t.Errorf("capture --duration: %v %s", err, b)
	}
	if _, err := os.Stat(filepath.Join(dir, "t-graph-default-server.pcap")); err != nil {
		t.Errorf("no default pcap file: %v", err)
	}

	if _, e, code := runCLI(t, "capture", lab, "nobody", "-c", "1"); code != 2 || !strings.Contains(e, `endpoint "nobody" not found in lab t-graph`) {
		t.Errorf("capture of an unknown endpoint: exit %d %q", code, e)
	}
	if _, e, code := runCLI(t, "down", lab); code != 0 {
		t.Errorf("down: %d %s", code, e)
	}
}

// TestCaptureWithoutTcpdump: without tcpdump on PATH, capture says where
// to get it (before it looks for the lab: nothing is touched).
func TestCaptureWithoutTcpdump(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := cnlab("capture", "t-no-such-lab", "client")
	cmd.Env = append(cmd.Env, "PATH=/nonexistent")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(errb.String(), "tcpdump is not installed: sudo ./scripts/install.sh installs it") {
		t.Errorf("capture without tcpdump: %v %q", err, errb.String())
	}
}
