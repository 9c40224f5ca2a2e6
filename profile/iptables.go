package profile

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"github.com/cnlab/cnlab/experiment/results"
	"io"
	"strconv"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/netns"
)

// SaveBinary returns the iptables-save of an iptables backend as
// kind.IPTablesOptions.Backend names it: "legacy" (the default) or
// "nft".
func SaveBinary(backend string) string {
	_, save, _ := kind.IPTablesOptions{Backend: backend}.Tools()
	return save
}

// IPTablesCounters runs `BINARY -c` (iptables-legacy-save or
// iptables-nft-save; see SaveBinary) in the named network namespace and
// returns the counters of every rule of every table, in order.
// Equivalent to `ip netns exec NETNS BINARY -c`.
func IPTablesCounters(ctx context.Context, netnsName, binary string) ([]results.RuleCounter, error) {
	if binary == "" {
		binary = SaveBinary("")
	}
	out, err := netns.Run(ctx, netnsName, nil, binary, "-c")
	if err != nil {
		return nil, err
	}
	return ParseIPTablesSave(bytes.NewReader(out))
}

// ParseIPTablesSave parses the output of `iptables-save -c`: lines
// "[PACKETS:BYTES] -A CHAIN RULE..." under a "*TABLE" line.
func ParseIPTablesSave(r io.Reader) ([]results.RuleCounter, error) {
	var rules []results.RuleCounter
	table := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
			continue
		case !strings.HasPrefix(line, "["):
			continue // comments, ":CHAIN POLICY [p:b]", COMMIT
		}
		counts, rest, ok := strings.Cut(line[1:], "] ")
		if !ok {
			return nil, fmt.Errorf("iptables-save line %d: no \"]\" in %q", n, line)
		}
		pk, by, ok := strings.Cut(counts, ":")
		packets, err1 := strconv.ParseUint(pk, 10, 64)
		bytes, err2 := strconv.ParseUint(by, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("iptables-save line %d: bad counters [%s]", n, counts)
		}
		rest, ok = strings.CutPrefix(rest, "-A ")
		if !ok {
			return nil, fmt.Errorf("iptables-save line %d: want \"-A CHAIN\" after the counters: %q", n, line)
		}
		chain, rule, _ := strings.Cut(rest, " ")
		rules = append(rules, results.RuleCounter{Table: table, Chain: chain, Rule: rule, Packets: packets, Bytes: bytes})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read iptables-save: %w", err)
	}
	return rules, nil
}

// PacketsByChain sums the packets matched by the rules of each chain,
// keyed "TABLE/CHAIN" (e.g. "filter/INPUT"). A packet that traverses a
// chain without matching any rule adds nothing.
func PacketsByChain(rules []results.RuleCounter) map[string]uint64 {
	sum := map[string]uint64{}
	for _, r := range rules {
		sum[r.Table+"/"+r.Chain] += r.Packets
	}
	return sum
}
