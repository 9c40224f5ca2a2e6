// Package profile samples the kernel while an experiment measures, and says
// where the CPU time went: which kernel functions, and how much of it was
// spent in the parts of the datapath that container networking adds
// (iptables, nftables, BPF programs, bridge, veth, conntrack, tc).
//
// Start runs `perf record -a` (system-wide, every CPU) around a
// measurement; Stop ends it and parses `perf report --stdio` into a
// results.KernelProfile that goes into results.json. IPTablesCounters
// reads the per-rule packet counters of a namespace (`iptables-save -c`),
// the other view of figure 7.10 of the seed study: how many packets each
// rule saw.
//
// The package must never fail an experiment because the machine cannot
// profile: when perf is missing or perf_event_open is denied, the
// KernelProfile says Available: false and why. Errors are for misuse
// only. It must never leave perf running: Stop, or the cancellation of
// Start's context, ends it.
// It changes no kernel state except, for the duration of a profile,
// net.core.bpf_jit_kallsyms (set to 1 so JIT'ed BPF programs have names,
// then restored).
package profile
