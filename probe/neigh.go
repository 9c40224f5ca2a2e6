package probe

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cnlab/cnlab/topology"
)

// The kernel keeps one ARP (neighbour) table for every network namespace
// together, and refuses a new entry once it holds
// net.ipv4.neigh.default.gc_thresh3 of them (1024 by default) that are not
// at least five seconds old. A lab's endpoints each resolve the peers on
// their own subnet, so a full matrix of 100 endpoints on two hosts needs
// about 5,000 entries at once: past the limit, packets wait for an entry
// that is never made and are dropped, which a probe would read as
// "denied by policy". The probe refuses to start when its estimate does
// not fit, and refuses its verdicts when the kernel counted a full table
// while it ran.

// gcThresh3 is the path of the limit (readable in the initial namespace
// only, which is where cnlab runs).
const gcThresh3 = "/proc/sys/net/ipv4/neigh/default/gc_thresh3"

// neighboursNeeded estimates the ARP entries the probe makes at once:
// each source endpoint resolves every destination on its own subnet, and
// its gateway for any other; each host resolves its endpoints that get
// traffic from another host.
func neighboursNeeded(lab *topology.Spec) int {
	n := 0
	fromAfar := map[string]bool{}
	for i := range lab.Endpoints {
		src := &lab.Endpoints[i]
		gw := false
		for j := range lab.Endpoints {
			dst := &lab.Endpoints[j]
			if i == j {
				continue
			}
			if src.Prefix > 0 && src.IP.IsValid() && onLink(src, dst) {
				n++
			} else {
				gw = true
				if dst.Host != src.Host {
					fromAfar[dst.ID()] = true
				}
			}
		}
		if gw {
			n++
		}
	}
	return n + len(fromAfar)
}

func onLink(src, dst *topology.Endpoint) bool {
	p, err := src.IP.Prefix(src.Prefix)
	return err == nil && p.Contains(dst.IP)
}

// neighbourLimit reads gc_thresh3; ok is false when it cannot be read.
func neighbourLimit() (int, bool) {
	b, err := os.ReadFile(gcThresh3)
	if err != nil {
		return 0, false
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return v, err == nil
}

// neighbourTableFulls sums the kernel's count of refused ARP entries
// ("table_fulls", every CPU), or -1 when it cannot be read.
func neighbourTableFulls() int64 {
	f, err := os.Open("/proc/net/stat/arp_cache")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	col := -1
	var sum int64
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if col < 0 {
			for i, h := range fields {
				if h == "table_fulls" {
					col = i
				}
			}
			if col < 0 {
				return -1
			}
			continue
		}
		if col >= len(fields) {
			continue
		}
		v, err := strconv.ParseInt(fields[col], 16, 64)
		if err != nil {
			return -1
		}
		sum += v
	}
	return sum
}

// neighbourAdvice says how to make room.
func neighbourAdvice(need int) string {
	want := 1024
	for want < 2*need {
		want *= 2
	}
	return fmt.Sprintf("raise it for every namespace: sysctl -w net.ipv4.neigh.default.gc_thresh3=%d net.ipv4.neigh.default.gc_thresh2=%d (docs/policy.md, \"The probe at scale\")", want, want/2)
}
