// Package results is the schema of a run's results directory
// (results.json, results.csv, environment.json): what the runner writes
// and what report and compare read. It is a leaf: it imports nothing
// that touches the kernel, so drawing a results.json links no datapath.
package results
