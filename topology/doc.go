// Package topology turns a topology file or preset into a validated Spec
// (every address allocated, every namespace and device named; the
// datapath's kind and options resolved through datapath/kind) and provides
// the kernel primitives that build it (Build) and remove it (Teardown), out
// of network namespaces, veth pairs, bridges and VXLAN devices.
//
// It never touches the root network namespace, never decides policy, never
// locks a lab or keeps its ledger (package lab does, and calls Build and
// Teardown under its lock; nothing here calls back up), and finds what to
// tear down from the kernel's own state (namespace names tagged with the
// lab).
package topology
