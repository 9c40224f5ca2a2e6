// Package lab owns a lab's whole life: its lock and ledger, Up (build the
// topology, set the datapath up, enforce no policy), the policies applied
// to it, its status, and Down (tear the topology down, remove what the
// datapath keeps outside it, forget the ledger). Every command and the
// experiment runner reach a lab through it.
//
// It drives topology (the spec and the kernel primitives Build and
// Teardown), policy and the datapaths (through datapath/registry) by their
// Go APIs; none of them calls back into it. It never parses command lines
// or prints.
package lab
