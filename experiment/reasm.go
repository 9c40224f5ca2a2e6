package experiment

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
)

// reasmDrain bounds the wait for a lab's IP reassembly memory to drain: a
// fragment queue that never completes is freed net.ipv4.ipfrag_time (30 s
// by default) after its first fragment came.
const reasmDrain = 40 * time.Second

// reasmMemory returns the bytes held in IP reassembly queues in a
// namespace: the "FRAG: inuse N memory M" line of its sockstat.
func reasmMemory(ns string) (int, error) {
	var mem int
	err := netns.Do(ns, func() error {
		// /proc/net is the process's namespace; thread-self is the
		// namespace this (locked) thread entered.
		data, err := os.ReadFile("/proc/thread-self/net/sockstat")
		if err != nil {
			return err
		}
		mem, err = parseFragMemory(string(data))
		return err
	})
	return mem, err
}

// parseFragMemory reads the FRAG line of a sockstat file.
func parseFragMemory(sockstat string) (int, error) {
	for _, line := range strings.Split(sockstat, "\n") {
		rest, ok := strings.CutPrefix(line, "FRAG: ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		for i := 0; i+1 < len(f); i += 2 {
			if f[i] == "memory" {
				return strconv.Atoi(f[i+1])
			}
		}
	}
	return 0, fmt.Errorf("sockstat has no FRAG memory line")
}

// settleReassembly waits, before a UDP sample, until no namespace of the
// lab holds fragments of datagrams that never completed. A lossy sample of
// fragmented datagrams can leave ipfrag_high_thresh (4 MB) of them behind,
// and until they expire every fragment of a new datagram in that
// namespace is dropped, so the next sample would report the previous one's
// loss (docs/methodology.md). It logs what it waited for, and gives up
// (logging it) after reasmDrain.
func settleReassembly(ctx context.Context, lab *topology.Spec, log io.Writer) error {
	return settleReassemblyIn(ctx, lab.Netns(), reasmDrain, time.Second, log)
}

func settleReassemblyIn(ctx context.Context, names []string, limit, every time.Duration, log io.Writer) error {
	start := time.Now()
	for {
		held := map[string]int{}
		for _, ns := range names {
			if mem, err := reasmMemory(ns); err == nil && mem > 0 {
				held[ns] = mem
			}
		}
		waited := time.Since(start).Round(100 * time.Millisecond)
		switch {
		case len(held) == 0 && waited > 0:
			fmt.Fprintf(log, "IP reassembly memory drained after %s\n", waited)
			return nil
		case len(held) == 0:
			return nil
		case waited >= limit:
			fmt.Fprintf(log, "IP reassembly memory still held after %s, measuring anyway: %v\n", waited, held)
			return nil
		case waited == 0:
			fmt.Fprintf(log, "waiting for IP reassembly memory left by an earlier sample to drain (bytes per namespace): %v\n", held)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}
