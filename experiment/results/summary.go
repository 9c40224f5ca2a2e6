package results

import "github.com/cnlab/cnlab/stats"

// Summary describes the samples of one metric at one point.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Mean   float64 `json:"mean"`
	Stdev  float64 `json:"stdev"` // sample standard deviation (n-1)
	CV     float64 `json:"cv"`    // stdev / mean; 0 when the mean is 0
	CILow  float64 `json:"ci95Low"`
	CIHigh float64 `json:"ci95High"` // 95% confidence interval of the mean (Student's t)
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summarize computes a Summary (package stats does the arithmetic; this is
// results.json's shape of it). With one sample the stdev is 0 and the
// confidence interval is the sample itself: it cannot be estimated.
func Summarize(xs []float64) Summary {
	st := stats.Summarize(xs)
	return Summary{N: st.N, Median: st.Median, Mean: st.Mean, Stdev: st.Stdev, CV: st.CV,
		CILow: st.MeanCI.Lo, CIHigh: st.MeanCI.Hi, Min: st.Min, Max: st.Max}
}
