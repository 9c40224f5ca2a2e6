// Package results is the schema of a run's results directory
// (results.json, results.csv, environment.json) and the experiment as
// parsed, which results.json records (Spec, Params, Point, Workload,
// Matrix): what the runner writes and what report and compare read.
// It holds the one registry of metrics (units, directions, labels, each
// workload's headline) and the one table of experiment axes (Axes: the
// matrix's keys, their values, the backends that refuse them, their
// results.csv columns and labels), and reads and writes a results
// directory.
//
// It is a leaf: it must never import what touches the kernel (datapath
// packages but the kinds' descriptors, proxy, lab, topology, profile,
// netlink, eBPF) or the runner (experiment), so that drawing a
// results.json links none of them (report's TestReportLinksNoKernelCode).
// Parsing an experiment file, which needs topologies, is experiment's.
package results
