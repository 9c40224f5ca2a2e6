// Package labgraph draws a lab's topology, as containerlab's `graph`
// draws its labs: hosts as boxes with their endpoints inside, the links
// between hosts (wire or vxlan) under them, a chain's client, hops and
// server in a row with the segments between them (veth, bridge or ovs)
// and the network functions of each hop, and the lab's datapath, service
// proxy and L7 proxies in the header and in each host.
//
// Build turns a resolved topology.Spec (a running lab's ledger, or a file
// or preset not yet up) into a Graph; the Graph renders as SVG, PNG or
// Graphviz DOT. The SVG and the PNG come from the same list of drawing
// primitives laid out once, in a monospace font (Go Mono, embedded) so
// that text widths are known without measuring. More endpoints on a host
// than Options.MaxEndpoints are summarised in one box ("… 80 more"),
// whose tooltip lists them.
//
// The package does no file I/O, touches no kernel and runs no program:
// everything it knows of the running lab (which L7 proxies run) comes in
// Options.
package labgraph
