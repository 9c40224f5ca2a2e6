package profile

import (
	"bufio"
	"fmt"
	"github.com/cnlab/cnlab/experiment/results"
	"io"
	"sort"
	"strconv"
	"strings"
)

// ReportArgs are the perf report options whose output ParseReport reads
// (after `-i FILE`): one line per (shared object, symbol) with its self
// sample count, call chains not printed.
var ReportArgs = []string{
	"report", "--stdio", "--no-children", "-g", "none",
	"--sort", "dso,sym", "-F", "overhead,sample,dso,sym", "--percent-limit", "0",
}

// Report is a parsed `perf report` (see ReportArgs).
type Report struct {
	Event         string               `json:"event"`
	Samples       int64                `json:"samples"`
	KernelSamples int64                `json:"kernelSamples"`
	LostSamples   int64                `json:"lostSamples"`
	Symbols       []results.Symbol     `json:"symbols"` // most samples first
	Groups        []results.GroupShare `json:"groups"`  // in the order of Groups, then other, user
}

// ParseReport reads the text of `perf report` run with ReportArgs. Only the
// first event's section is read. Sample counts are perf's own per-symbol
// counts; the total is their sum (perf's header rounds it: "3K").
func ParseReport(r io.Reader) (*Report, error) {
	rep := &Report{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	sections := 0
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if c, ok := strings.CutPrefix(line, "#"); ok {
			c = strings.TrimSpace(c)
			if v, ok := strings.CutPrefix(c, "Total Lost Samples:"); ok && sections == 0 {
				rep.LostSamples, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
			if v, ok := strings.CutPrefix(c, "Samples:"); ok {
				sections++
				if _, ev, ok := strings.Cut(v, " of event "); ok && sections == 1 {
					rep.Event = strings.Trim(strings.TrimSpace(ev), "'")
				}
			}
			continue
		}
		if sections > 1 {
			break
		}
		s, err := parseSymbolLine(line)
		if err != nil {
			return nil, fmt.Errorf("perf report line %d: %w", n, err)
		}
		rep.Symbols = append(rep.Symbols, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read perf report: %w", err)
	}
	rep.summarize()
	return rep, nil
}

// parseSymbolLine parses "  2.29%   91  [kernel.kallsyms]   [k] ipt_do_table".
// The shared object may contain spaces; the symbol follows the first
// privilege marker ([k] kernel, [.] user, [g] guest kernel, [u] guest
// user, [H] hypervisor) after it.
func parseSymbolLine(line string) (results.Symbol, error) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasSuffix(f[0], "%") {
		return results.Symbol{}, fmt.Errorf("want \"OVERHEAD SAMPLES DSO [x] SYMBOL\", got %q", line)
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return results.Symbol{}, fmt.Errorf("sample count %q: %w", f[1], err)
	}
	for i := 3; i < len(f); i++ {
		switch f[i] {
		case "[k]", "[.]", "[g]", "[u]", "[H]":
		default:
			continue
		}
		s := results.Symbol{
			DSO:     strings.Join(f[2:i], " "),
			Kernel:  f[i] == "[k]",
			Name:    strings.Join(f[i+1:], " "),
			Samples: n,
		}
		s.Group = GroupUser
		if s.Kernel {
			s.Group = GroupOf(s.Name)
			s.BPFProg = BPFProgName(s.Name)
		}
		return s, nil
	}
	return results.Symbol{}, fmt.Errorf("no [k]/[.] marker in %q", line)
}

func pct(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) * 100 / float64(of)
}

// summarize computes totals, shares and groups, and sorts the symbols.
func (rep *Report) summarize() {
	rep.Samples, rep.KernelSamples = 0, 0
	byGroup := map[string]int64{}
	kernelByGroup := map[string]int64{}
	for _, s := range rep.Symbols {
		rep.Samples += s.Samples
		byGroup[s.Group] += s.Samples
		if s.Kernel {
			rep.KernelSamples += s.Samples
			kernelByGroup[s.Group] += s.Samples
		}
	}
	for i := range rep.Symbols {
		s := &rep.Symbols[i]
		s.Percent = pct(s.Samples, rep.Samples)
		s.KernelPercent = 0
		if s.Kernel {
			s.KernelPercent = pct(s.Samples, rep.KernelSamples)
		}
	}
	sort.SliceStable(rep.Symbols, func(i, j int) bool {
		a, b := rep.Symbols[i], rep.Symbols[j]
		if a.Samples != b.Samples {
			return a.Samples > b.Samples
		}
		return a.Name < b.Name
	})
	rep.Groups = rep.Groups[:0]
	for _, g := range GroupNames() {
		rep.Groups = append(rep.Groups, results.GroupShare{
			Name:          g,
			Samples:       byGroup[g],
			Percent:       pct(byGroup[g], rep.Samples),
			KernelPercent: pct(kernelByGroup[g], rep.KernelSamples),
		})
	}
}

// GroupNames lists every group in report order: Groups, then other and
// user.
func GroupNames() []string {
	var names []string
	for _, r := range Groups {
		names = append(names, r.Group)
	}
	return append(names, GroupOther, GroupUser)
}

// Group returns the share of the named group (zero if unknown).
func (rep *Report) Group(name string) results.GroupShare {
	for _, g := range rep.Groups {
		if g.Name == name {
			return g
		}
	}
	return results.GroupShare{Name: name}
}

// Top returns the n symbols with the most samples.
func (rep *Report) Top(n int) []results.Symbol {
	if n > len(rep.Symbols) {
		n = len(rep.Symbols)
	}
	return rep.Symbols[:n]
}
