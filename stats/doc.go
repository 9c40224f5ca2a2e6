// Package stats is the statistics behind the summaries experiment writes,
// `cnlab report` and `cnlab compare`: the summary of repeated measurements (median, mean, spread, a
// confidence interval of the mean), a two-sample test and a bootstrap
// interval for "did it change between run A and run B", and the fits that
// turn a sweep into a few numbers: a straight line, the per-hop loss of a
// chain of length n (t(n) = t1·(1−l)^(n−1)), and the point where a curve
// bends. The χ² distribution (ChiSquareCritical) is the test of `probe
// --service --expect` that a proxy spreads connections evenly.
//
// Every fit uses all the samples it is given, repeated x values included:
// several runs at one x are several points, never first reduced to their
// median, so the spread between runs enters the standard errors and the
// tests.
//
// The package must never read files, print, or touch the network or the
// kernel: it computes on the slices it is given and returns values. It is
// deterministic: the same input gives the same output, and the one
// function that draws random numbers (BootstrapMedianDiffCI) takes an
// explicit seed. Result structs never hold NaN or Inf, so they marshal to
// JSON: where a value is undefined the function returns an error, or the
// struct says so (N is 0). The scalar distribution functions (TQuantile,
// TCDF, FCDF, ChiSquareSurvival, ...) return NaN for arguments outside
// their domain, as the math package does. It depends on the standard library only.
package stats
