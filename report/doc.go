// Package report turns a results directory of `cnlab run` into answers:
// the seed studies' figures (a metric against the number of policies, one
// line per datapath, with 95% confidence intervals; baseline bars; a
// metric against chain length with the fitted per-hop power law), fits
// (per-rule cost with its confidence interval, where a curve bends),
// generated sentences of findings each backed by a number of the table, a
// table of every point, and a self-contained report.html with the figures
// inline as SVG plus figures/*.png. It also compares two runs point by
// point with a significance test (Compare).
//
// The statistics live in the top-level package stats and the drawing in
// report/plot; this package decides what to draw and what to say. It reads
// results directories and writes report files; it never runs an experiment,
// touches the kernel, or reaches the network, and the page it writes loads
// nothing from anywhere.
package report
