package results

// The profiled run of a point (package profile measures it; these are
// its results as results.json keeps them).

// KernelProfile is what a profile found (package profile's Stop).
type KernelProfile struct {
	Available bool `json:"available"`
	// Reason says why Available is false.
	Reason        string       `json:"reason,omitempty"`
	Command       []string     `json:"command,omitempty"` // the perf record command line
	Event         string       `json:"event,omitempty"`
	Frequency     int          `json:"frequency"`
	CallGraph     bool         `json:"callGraph"`
	Seconds       float64      `json:"seconds"` // from sampling enabled to SIGINT
	Samples       int64        `json:"samples"`
	KernelSamples int64        `json:"kernelSamples"`
	LostSamples   int64        `json:"lostSamples"`
	Top           []Symbol     `json:"top"`
	Groups        []GroupShare `json:"groups"`
	DataFile      string       `json:"dataFile,omitempty"`
	// ReportFile is perf report's full text (every symbol): the raw data
	// Top and Groups are derived from (see ParseReport).
	ReportFile string `json:"reportFile,omitempty"`
	// Notes record what about the machine affects the numbers.
	Notes []string `json:"notes,omitempty"`
}

// Symbol is one line of the report: a function and the samples taken in
// it (self time, not counting its callees).
type Symbol struct {
	Name    string `json:"name"`
	DSO     string `json:"dso"`
	Kernel  bool   `json:"kernel"`
	Group   string `json:"group"`
	BPFProg string `json:"bpfProg,omitempty"` // program name of a JIT'ed BPF symbol
	Samples int64  `json:"samples"`
	// Percent is the share of all samples; KernelPercent the share of
	// kernel samples (0 for user-space symbols).
	Percent       float64 `json:"percent"`
	KernelPercent float64 `json:"kernelPercent"`
}

// GroupShare is the samples of one group (see Groups).
type GroupShare struct {
	Name          string  `json:"name"`
	Samples       int64   `json:"samples"`
	Percent       float64 `json:"percent"`
	KernelPercent float64 `json:"kernelPercent"`
}

// RuleCounter is one rule of `iptables-save -c` and the packets and bytes
// it matched.
type RuleCounter struct {
	Table   string `json:"table"`
	Chain   string `json:"chain"`
	Rule    string `json:"rule"` // the rule after "-A CHAIN "
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}
