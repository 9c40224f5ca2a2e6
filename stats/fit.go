package stats

import (
	"errors"
	"fmt"
	"math"
)

// Errors returned by the fits; test for them with errors.Is.
var (
	// ErrTooFewPoints: the fit needs more points (or more distinct x
	// values) than it was given.
	ErrTooFewPoints = errors.New("too few points to fit")
	// ErrNoSpread: every x value is equal, so no slope can be fitted.
	ErrNoSpread = errors.New("all x values are equal")
	// ErrNotFinite: an x or y value is NaN or infinite.
	ErrNotFinite = errors.New("value is not finite")
	// ErrNonPositive: a throughput given to PowerLawFit is 0 or negative.
	ErrNonPositive = errors.New("value is not positive")
	// ErrLengthMismatch: x and y have different lengths.
	ErrLengthMismatch = errors.New("x and y have different lengths")
)

// checkXY checks that x and y pair up and hold finite values.
func checkXY(x, y []float64) error {
	if len(x) != len(y) {
		return fmt.Errorf("%w: %d and %d", ErrLengthMismatch, len(x), len(y))
	}
	for i := range x {
		if math.IsNaN(x[i]) || math.IsInf(x[i], 0) || math.IsNaN(y[i]) || math.IsInf(y[i], 0) {
			return fmt.Errorf("%w: point %d is (%v, %v)", ErrNotFinite, i, x[i], y[i])
		}
	}
	return nil
}

// Linear is an ordinary least-squares fit of y = Intercept + Slope·x.
// Intervals are 95% confidence intervals from Student's t with N−2
// degrees of freedom, under the usual assumptions (independent errors of
// equal variance, roughly normal).
type Linear struct {
	// N is the number of points used: all of them, repeated x included.
	N           int      `json:"n"`
	Intercept   float64  `json:"intercept"`
	Slope       float64  `json:"slope"`
	InterceptSE float64  `json:"intercept_se"`
	SlopeSE     float64  `json:"slope_se"`
	InterceptCI Interval `json:"intercept_ci"`
	SlopeCI     Interval `json:"slope_ci"`
	// SlopeP is the two-sided p-value of the slope against 0: is there a
	// trend at all.
	SlopeP float64 `json:"slope_p"`
	// R2 is the coefficient of determination, 1 − SSE/SST; 1 when every
	// y is equal (the flat line fits exactly).
	R2 float64 `json:"r2"`
	// SSE is the sum of squared residuals, ResidualSE = √(SSE/(N−2)).
	SSE        float64 `json:"sse"`
	ResidualSE float64 `json:"residual_se"`
}

// Predict returns Intercept + Slope·x.
func (l Linear) Predict(x float64) float64 { return l.Intercept + l.Slope*x }

// LinearFit fits y = a + b·x by ordinary least squares over every (x[i],
// y[i]) pair. It needs at least 3 points (so that N−2 ≥ 1 degree of
// freedom is left for the error) and at least 2 distinct x values; it
// returns ErrTooFewPoints or ErrNoSpread otherwise, and ErrNotFinite or
// ErrLengthMismatch for bad input.
func LinearFit(x, y []float64) (Linear, error) {
	if err := checkXY(x, y); err != nil {
		return Linear{}, err
	}
	n := len(x)
	if n < 3 {
		return Linear{}, fmt.Errorf("%w: linear fit needs 3, got %d", ErrTooFewPoints, n)
	}
	mx, my := mean(x), mean(y)
	var sxx, sxy, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		return Linear{}, ErrNoSpread
	}
	b := sxy / sxx
	a := my - b*mx
	var sse float64
	for i := range x {
		r := y[i] - (a + b*x[i])
		sse += r * r
	}
	df := n - 2
	fn := float64(n)
	s := math.Sqrt(sse / float64(df))
	l := Linear{
		N: n, Intercept: a, Slope: b, SSE: sse, ResidualSE: s,
		SlopeSE:     s / math.Sqrt(sxx),
		InterceptSE: s * math.Sqrt(1/fn+mx*mx/sxx),
		R2:          1,
	}
	if syy > 0 {
		l.R2 = 1 - sse/syy
	}
	tc := TQuantile975(df)
	l.SlopeCI = Interval{b - tc*l.SlopeSE, b + tc*l.SlopeSE}
	l.InterceptCI = Interval{a - tc*l.InterceptSE, a + tc*l.InterceptSE}
	switch {
	case l.SlopeSE > 0:
		l.SlopeP = tSF2(b/l.SlopeSE, float64(df))
	case b == 0:
		l.SlopeP = 1
	default:
		l.SlopeP = 0 // an exact, non-flat line
	}
	return l, nil
}

// PowerLaw is the chain model of the seed study, t(n) = T1·(1 − Loss)^(n−1):
// the throughput t of a chain of n hops, T1 that of a single hop, Loss the
// fraction of throughput lost at each further hop.
type PowerLaw struct {
	// N is the number of points used: all of them, repeated n included.
	N  int     `json:"n"`
	T1 float64 `json:"t1"`
	// T1CI is the 95% interval of T1, exp of the intercept's interval.
	T1CI Interval `json:"t1_ci"`
	// Loss is l, the per-hop loss fraction; negative when throughput
	// grows with n.
	Loss float64 `json:"loss"`
	// LossCI is the 95% interval of l, 1 − exp of the slope's interval.
	LossCI Interval `json:"loss_ci"`
	// R2Log is R² of the regression in log space; R2 is R² of the fitted
	// curve T1·(1−l)^(n−1) against the raw throughputs.
	R2Log float64 `json:"r2_log"`
	R2    float64 `json:"r2"`
	// Log is the underlying regression of log t on n − 1.
	Log Linear `json:"log"`
}

// Predict returns T1·(1 − Loss)^(n−1).
func (p PowerLaw) Predict(n float64) float64 {
	return p.T1 * math.Pow(1-p.Loss, n-1)
}

// PowerLawFit fits t(n) = t1·(1 − l)^(n−1) to chain lengths n (normally
// 1, 2, ...) and throughputs t by least squares on log t = log t1 +
// (n−1)·log(1−l), that is a LinearFit of log t on n − 1, which suits
// multiplicative noise. T1 = exp(intercept) is therefore a geometric, not
// arithmetic, mean at n = 1. Every throughput must be positive
// (ErrNonPositive otherwise); the other errors are LinearFit's.
func PowerLawFit(n, t []float64) (PowerLaw, error) {
	if err := checkXY(n, t); err != nil {
		return PowerLaw{}, err
	}
	xs := make([]float64, len(n))
	ys := make([]float64, len(t))
	for i := range n {
		if t[i] <= 0 {
			return PowerLaw{}, fmt.Errorf("%w: throughput %v at n = %v", ErrNonPositive, t[i], n[i])
		}
		xs[i] = n[i] - 1
		ys[i] = math.Log(t[i])
	}
	lf, err := LinearFit(xs, ys)
	if err != nil {
		return PowerLaw{}, err
	}
	p := PowerLaw{
		N:      lf.N,
		T1:     math.Exp(lf.Intercept),
		T1CI:   Interval{math.Exp(lf.InterceptCI.Lo), math.Exp(lf.InterceptCI.Hi)},
		Loss:   -math.Expm1(lf.Slope),
		LossCI: Interval{-math.Expm1(lf.SlopeCI.Hi), -math.Expm1(lf.SlopeCI.Lo)},
		R2Log:  lf.R2,
		Log:    lf,
	}
	mt := mean(t)
	var sse, sst float64
	for i := range t {
		r := t[i] - p.Predict(n[i])
		d := t[i] - mt
		sse += r * r
		sst += d * d
	}
	p.R2 = 1
	if sst > 0 {
		p.R2 = 1 - sse/sst
	}
	return p, nil
}
