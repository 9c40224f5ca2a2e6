package profile

import (
	"github.com/cnlab/cnlab/experiment/results"
	"os"
	"strings"
	"testing"
)

// testdata/perf-report-iperf3-netns.txt was recorded on a 2-CPU VM (no
// hardware PMU) with: perf record -e cpu-clock -F 999 -a -g around a 2 s
// iperf3 on the loopback of a namespace holding 102 legacy iptables rules
// (a conntrack match among them), two iptables-nft rules, an nft table and
// a tc BPF program named prof_pass; then perf report with ReportArgs.
func TestParseReportRecorded(t *testing.T) {
	f, err := os.Open("testdata/perf-report-iperf3-netns.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := ParseReport(f)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Event != "cpu-clock" || rep.LostSamples != 0 {
		t.Errorf("event %q lost %d, want cpu-clock, 0", rep.Event, rep.LostSamples)
	}
	// The header says "3K": around 2 s x 2 CPUs x 999 Hz.
	if rep.Samples < 3000 || rep.Samples > 4500 || rep.KernelSamples > rep.Samples || rep.KernelSamples < rep.Samples/2 {
		t.Errorf("samples %d, kernel %d", rep.Samples, rep.KernelSamples)
	}
	var sum, groupSum int64
	find := map[string]results.Symbol{}
	for i, s := range rep.Symbols {
		sum += s.Samples
		find[s.Name] = s
		if i > 0 && s.Samples > rep.Symbols[i-1].Samples {
			t.Fatalf("symbols not sorted at %d", i)
		}
	}
	for _, g := range rep.Groups {
		groupSum += g.Samples
	}
	if sum != rep.Samples || groupSum != rep.Samples {
		t.Errorf("symbols sum to %d, groups to %d, total %d", sum, groupSum, rep.Samples)
	}
	ipt := find["ipt_do_table"]
	if ipt.Samples != 91 || !ipt.Kernel || ipt.Group != GroupIPTables || ipt.DSO != "[kernel.kallsyms]" {
		t.Errorf("ipt_do_table = %+v", ipt)
	}
	if want := 91 * 100 / float64(rep.Samples); ipt.Percent != want {
		t.Errorf("ipt_do_table percent %v, want %v", ipt.Percent, want)
	}
	if want := 91 * 100 / float64(rep.KernelSamples); ipt.KernelPercent != want {
		t.Errorf("ipt_do_table kernel percent %v, want %v", ipt.KernelPercent, want)
	}
	bpf := find["bpf_prog_59f4a931744dcdc6_prof_pass"]
	if bpf.Group != GroupBPF || bpf.BPFProg != "prof_pass" || bpf.DSO != "bpf_prog_59f4a931744dcdc6_prof_pass" {
		t.Errorf("bpf program = %+v", bpf)
	}
	if s := find["conntrack_mt.isra.0"]; s.Group != GroupIPTables {
		t.Errorf("conntrack_mt.isra.0 in %q, want iptables", s.Group)
	}
	for _, g := range []string{GroupIPTables, GroupNFTables, GroupBPF, GroupConntrack, GroupIdle, GroupOther, GroupUser} {
		if rep.Group(g).Samples == 0 {
			t.Errorf("group %s has no samples", g)
		}
	}
	if u := rep.Group(GroupUser); u.KernelPercent != 0 {
		t.Errorf("user group kernel percent %v", u.KernelPercent)
	}
	if top := rep.Top(30); len(top) != 30 || top[0].Name != "pv_native_safe_halt" {
		t.Errorf("top: %d symbols, first %+v", len(top), top[0])
	}
}

func TestGroupOf(t *testing.T) {
	for sym, want := range map[string]string{
		"ipt_do_table":                      GroupIPTables,
		"ip6t_do_table":                     GroupIPTables,
		"conntrack_mt_v3":                   GroupIPTables,
		"tcp_mt":                            GroupIPTables,
		"reject_tg4":                        GroupIPTables,
		"iptable_filter_hook":               GroupIPTables,
		"nft_do_chain":                      GroupNFTables,
		"nft_match_large_eval":              GroupNFTables, // iptables-nft's xt compat runs in nftables
		"bpf_prog_59f4a931744dcdc6_handler": GroupBPF,
		"br_handle_frame":                   GroupBridge,
		"br_nf_pre_routing":                 GroupBridge,
		"veth_xmit":                         GroupVeth,
		"nf_conntrack_in":                   GroupConntrack,
		"__nf_conntrack_find_get":           GroupConntrack,
		"nf_ct_get_tuple":                   GroupConntrack,
		"ipv4_conntrack_local":              GroupConntrack,
		"sch_direct_xmit":                   GroupTC,
		"tcf_classify":                      GroupTC,
		"htb_enqueue":                       GroupTC,
		"pv_native_safe_halt":               GroupIdle,
		"default_idle_call":                 GroupIdle,
		"tcp_sendmsg_locked":                GroupOther,
		"nf_hook_slow":                      GroupOther,
		"_raw_spin_unlock_irqrestore":       GroupOther,
	} {
		if got := GroupOf(sym); got != want {
			t.Errorf("GroupOf(%q) = %q, want %q", sym, got, want)
		}
	}
}

func TestBPFProgName(t *testing.T) {
	for sym, want := range map[string]string{
		"bpf_prog_59f4a931744dcdc6_prof_pass":   "prof_pass",
		"bpf_prog_6deef7357e7b4530_cnlab_tc_in": "cnlab_tc_in",
		"bpf_prog_6deef7357e7b4530":             "",
		"ipt_do_table":                          "",
	} {
		if got := BPFProgName(sym); got != want {
			t.Errorf("BPFProgName(%q) = %q, want %q", sym, got, want)
		}
	}
}

func TestParseReportErrors(t *testing.T) {
	for _, in := range []string{
		"  1.00%  x  [kernel.kallsyms]  [k] foo\n",
		"  1.00%  3  [kernel.kallsyms]  foo\n",
		"garbage\n",
	} {
		if _, err := ParseReport(strings.NewReader(in)); err == nil {
			t.Errorf("ParseReport(%q): no error", in)
		}
	}
	rep, err := ParseReport(strings.NewReader("# Samples: 0 of event 'cpu-clock'\n"))
	if err != nil || rep.Samples != 0 || len(rep.Groups) != len(GroupNames()) {
		t.Errorf("empty report: %+v, %v", rep, err)
	}
	// A shared object with a space in its path.
	rep, err = ParseReport(strings.NewReader("  50.00%  1  /opt/my app/bin  [.] main\n  50.00%  1  [kernel.kallsyms]  [k] veth_xmit\n"))
	if err != nil || rep.Symbols[0].DSO != "/opt/my app/bin" && rep.Symbols[1].DSO != "/opt/my app/bin" {
		t.Errorf("dso with space: %+v, %v", rep, err)
	}
	if g := rep.Group(GroupVeth); g.Percent != 50 || g.KernelPercent != 100 {
		t.Errorf("veth share %+v", g)
	}
}
