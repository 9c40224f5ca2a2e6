package kind

// OptionAxis is a datapath option an experiment can sweep (a matrix key
// such as hostRouting): package results adds it to its table of axes,
// so the matrix, its checks, results.csv, the point's label and series,
// and the kubernetes backend's refusal all follow from this declaration.
// The option's effect is the datapath's (Overrides.Apply).
type OptionAxis struct {
	Key      string // the matrix key, Params' JSON key, results.csv's column
	Datapath Kind   // the datapath it is an option of
	// Of names that datapath in errors ("applies to the eBPF datapath
	// only").
	Of     string
	Values []string // the values a string option takes (nil: a bool)
	// Text labels a point that sets it ("routing" gives "routing=legacy";
	// a bool's Text is shown alone when true).
	Text string
	// Series are the suffixes of the point's series for its values ("+"
	// joins the datapath's name, as iptables+ipsets; " " follows the
	// policy mode).
	Series map[string]string
	// Kube says why a cluster refuses it (the cluster's CNI is not
	// cnlab's datapath).
	Kube string
}

// OptionAxes are the datapath options experiments sweep, in the matrix's
// order (after datapath).
var OptionAxes = []OptionAxis{
	{Key: "hostRouting", Datapath: EBPF, Of: "eBPF", Values: []string{HostRoutingBPF, HostRoutingLegacy}, Text: "routing",
		Series: map[string]string{HostRoutingLegacy: " legacy-routing"}, Kube: "an option of cnlab's eBPF datapath, not of the cluster's CNI"},
	{Key: "socketLB", Datapath: EBPF, Of: "eBPF", Text: "socket-lb",
		Series: map[string]string{"true": " socket-lb"}, Kube: "an option of cnlab's eBPF datapath, not of the cluster's CNI"},
	{Key: "peers", Datapath: IPTables, Of: string(IPTables), Values: []string{PeersAddresses, PeersIPSets}, Text: "peers",
		Series: map[string]string{PeersIPSets: "+ipsets"}, Kube: "an option of cnlab's iptables datapath"},
}
