package experiment

import (
	"bytes"
	"context"
	"encoding/binary"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"golang.org/x/sys/unix"
)

func TestParseFragMemory(t *testing.T) {
	const s = "sockets: used 5\nTCP: inuse 0 orphan 0 tw 0 alloc 0 mem 0\nFRAG: inuse 3 memory 12672\n"
	if m, err := parseFragMemory(s); err != nil || m != 12672 {
		t.Errorf("parseFragMemory = %d, %v; want 12672", m, err)
	}
	if _, err := parseFragMemory("sockets: used 5\n"); err == nil {
		t.Error("a sockstat without FRAG parsed")
	}
}

// TestSettleReassembly leaves the first fragment of a datagram whose other
// fragments never come in a namespace (ipfrag_time 2 s there), and checks
// that the wait before a UDP sample sees it held, waits until the kernel
// frees it, and says so in the log.
func TestSettleReassembly(t *testing.T) {
	testutil.RequireRoot(t)
	a, z := "cnlab.t-reasm.a", "cnlab.t-reasm.z"
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { _ = netns.Delete(a); _ = netns.Delete(z) })
	for _, n := range []string{a, z} {
		if err := netns.Create(n, nil); err != nil {
			t.Fatal(err)
		}
	}
	sh("ip", "-n", a, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", z)
	sh("ip", "-n", a, "addr", "add", "10.99.7.1/24", "dev", "eth0")
	sh("ip", "-n", z, "addr", "add", "10.99.7.2/24", "dev", "eth0")
	sh("ip", "-n", a, "link", "set", "eth0", "up")
	sh("ip", "-n", z, "link", "set", "eth0", "up")
	sh("ip", "netns", "exec", z, "sysctl", "-qw", "net.ipv4.ipfrag_time=2")

	// The first fragment (more fragments follow) of a UDP datagram: 8
	// bytes of UDP header and 96 of data, a multiple of 8 as a first
	// fragment's payload must be.
	pkt := make([]byte, 20+104)
	pkt[0], pkt[8], pkt[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	binary.BigEndian.PutUint16(pkt[4:], 4242)
	binary.BigEndian.PutUint16(pkt[6:], 0x2000) // MF, offset 0
	copy(pkt[12:], []byte{10, 99, 7, 1})
	copy(pkt[16:], []byte{10, 99, 7, 2})
	binary.BigEndian.PutUint16(pkt[20:], 40000)
	binary.BigEndian.PutUint16(pkt[22:], 9)
	binary.BigEndian.PutUint16(pkt[24:], 4000) // the whole datagram's length
	err := netns.Do(a, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: [4]byte{10, 99, 7, 2}})
	})
	if err != nil {
		t.Fatal(err)
	}
	var held int
	for i := 0; i < 20 && held == 0; i++ { // the veth delivers it at once; allow a little
		time.Sleep(10 * time.Millisecond)
		if held, err = reasmMemory(z); err != nil {
			t.Fatal(err)
		}
	}
	if held == 0 {
		t.Fatal("the lone fragment is not held in the receiving namespace's reassembly memory")
	}
	var log bytes.Buffer
	start := time.Now()
	if err := settleReassemblyIn(context.Background(), []string{a, z}, 10*time.Second, 200*time.Millisecond, &log); err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)
	if mem, _ := reasmMemory(z); mem != 0 || !strings.Contains(log.String(), "drained after") || waited < time.Second {
		t.Errorf("after %s: %d bytes held, log:\n%s", waited, mem, log.String())
	}
	t.Logf("held %d bytes; %s", held, strings.TrimSpace(log.String()))
}
