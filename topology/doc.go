// Package topology turns a topology file or preset into a validated Spec
// (every address allocated, every namespace and device named) and builds
// it in the kernel (Up) or removes it (Down), out of network namespaces,
// veth pairs, bridges and VXLAN devices. It never touches the root network
// namespace, never decides policy, and finds what to tear down from the
// kernel's own state (namespace names tagged with the lab), not from its
// ledger alone.
package topology
