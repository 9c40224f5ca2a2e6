package profile

import (
	"path"
	"regexp"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
)

// Group names. A symbol belongs to the first group in Groups whose
// patterns match it; kernel symbols that match none are GroupOther, and
// every user-space sample is GroupUser.
const (
	GroupIPTables  = string(kind.IPTables) // the netfilter work of the datapath of that name
	GroupNFTables  = string(kind.NFTables)
	GroupBPF       = "bpf"
	GroupBridge    = "bridge"
	GroupVeth      = "veth"
	GroupConntrack = "conntrack"
	GroupTC        = "tc"
	GroupIdle      = "idle"
	GroupOther     = "other"
	GroupUser      = "user"
)

// GroupRule maps kernel function names to a group. Patterns are
// path.Match globs matched against the symbol with its compiler suffix
// removed (conntrack_mt.isra.0 -> conntrack_mt).
type GroupRule struct {
	Group    string
	Patterns []string
	Doc      string
}

// Groups is the one table that decides which group a kernel symbol counts
// in. Order matters: the first rule that matches wins, so conntrack's
// xt match (conntrack_mt) counts as iptables, and the nft_compat glue that
// runs xt matches under iptables-nft (nft_match_eval) counts as nftables,
// which is what the kernel runs.
var Groups = []GroupRule{
	{GroupIPTables, []string{
		"ipt_*", "ip6t_*", "arpt_*", "ebt_*", "xt_*", "iptable_*", "ip6table_*",
		"*_mt", "*_mt4", "*_mt6", "*_mt_v[0-9]", // xt matches: tcp_mt, conntrack_mt_v3
		"*_tg", "*_tg4", "*_tg6", "*_tg_v[0-9]", // xt targets: reject_tg, mark_tg
	}, "legacy iptables (x_tables): ipt_do_table, its matches (*_mt) and targets (*_tg)"},
	{GroupNFTables, []string{"nft_*", "__nft_*", "nf_tables_*"},
		"nftables and iptables-nft: nft_do_chain, expression evals, nft_compat"},
	{GroupBPF, []string{"bpf_prog_*", "bpf_trampoline_*", "bpf_dispatcher_*"},
		"JIT'ed BPF programs, bpf_prog_<tag>_<name>"},
	{GroupBridge, []string{"br_*", "__br_*", "nbp_*"}, "Linux bridge"},
	{GroupVeth, []string{"veth_*", "__veth_*"}, "veth pairs"},
	{GroupConntrack, []string{
		"nf_conntrack_*", "__nf_conntrack_*", "nf_ct_*", "__nf_ct_*",
		"ipv4_conntrack_*", "ipv6_conntrack_*", "nf_confirm", "hash_conntrack*",
	}, "connection tracking"},
	{GroupTC, []string{
		"sch_*", "__qdisc_*", "qdisc_*", "tcf_*", "__tcf_*", "tc_*", "tcx_*", "cls_*",
		"htb_*", "tbf_*", "netem_*", "pfifo_*", "fq_codel_*", "fq_*",
	}, "tc: qdiscs, classifiers and actions"},
	{GroupIdle, []string{
		"pv_native_safe_halt", "native_safe_halt", "default_idle*", "arch_cpu_idle*",
		"cpuidle_*", "call_cpuidle", "do_idle", "cpu_idle_poll*", "poll_idle",
		"intel_idle*", "acpi_idle_*", "mwait_idle*", "cpu_startup_entry",
	}, "the idle loop: system-wide cpu-clock sampling counts idle CPUs too"},
}

// compilerSuffix matches the suffixes gcc appends to specialised copies.
var compilerSuffix = regexp.MustCompile(`\.(isra|constprop|part|cold|localalias|lto_priv)(\.\d+)?.*$`)

// GroupOf returns the group of a kernel symbol.
func GroupOf(symbol string) string {
	base := compilerSuffix.ReplaceAllString(symbol, "")
	for _, r := range Groups {
		for _, p := range r.Patterns {
			if ok, _ := path.Match(p, base); ok {
				return r.Group
			}
		}
	}
	return GroupOther
}

// BPFProgName returns the program name in a JIT'ed BPF symbol
// (bpf_prog_59f4a931744dcdc6_prof_pass -> prof_pass), or "" when the
// symbol has none.
func BPFProgName(symbol string) string {
	rest, ok := strings.CutPrefix(symbol, "bpf_prog_")
	if !ok {
		return ""
	}
	_, name, _ := strings.Cut(rest, "_") // after the 16-hex-digit tag
	return name
}
