package experiment

import "github.com/cnlab/cnlab/experiment/results"

// The results schema lives in package results (a leaf that report and
// compare read without linking the runner). These aliases keep the
// runner's files unchanged while they are rewritten; new code names
// results' types directly.
type (
	Results         = results.Results
	ExperimentInfo  = results.ExperimentInfo
	Job             = results.Job
	Build           = results.Build
	Apply           = results.Apply
	ServiceApply    = results.ServiceApply
	PointResult     = results.PointResult
	Sample          = results.Sample
	ProfileResult   = results.ProfileResult
	Summary         = results.Summary
	Noise           = results.Noise
	Environment     = results.Environment
	PrecisionResult = results.PrecisionResult
	Precision       = results.Precision
	Percent         = results.Percent
	Params          = results.Params
	Point           = results.Point
	Workload        = results.Workload
	Matrix          = results.Matrix
	Sweep           = results.Sweep
	Figures         = results.Figures
	Quick           = results.Quick
	Pin             = results.Pin
	Duration        = results.Duration
)

// Names of results' constants, as above.
const (
	Schema            = results.Schema
	StatusRunning     = results.StatusRunning
	StatusComplete    = results.StatusComplete
	StatusInterrupted = results.StatusInterrupted
	StatusFailed      = results.StatusFailed
	PointPending      = results.PointPending
	PointDone         = results.PointDone
	PointPartial      = results.PointPartial
	PointFailed       = results.PointFailed

	PrecisionPending = results.PrecisionPending
	PrecisionReached = results.PrecisionReached
	PrecisionCapReps = results.PrecisionCapReps
	PrecisionCapTime = results.PrecisionCapTime
	PrecisionStopped = results.PrecisionStopped

	TCPStream = results.TCPStream
	UDPStream = results.UDPStream
	TCPRR     = results.TCPRR
	TCPCRR    = results.TCPCRR
	UDPRR     = results.UDPRR
	Ping      = results.Ping
	HTTP      = results.HTTP
	AB        = results.AB

	ModeNoMatch    = results.ModeNoMatch
	ModeTopOfChain = results.ModeTopOfChain
	ModeL4Rules    = results.ModeL4Rules
	ModeSelectors  = results.ModeSelectors
	ModeTerms      = results.ModeTerms

	L7None      = results.L7None
	L7L4        = results.L7L4
	L7HTTPAny   = results.L7HTTPAny
	L7Rules     = results.L7Rules
	MatchFirst  = results.MatchFirst
	MatchLast   = results.MatchLast
	MatchAbsent = results.MatchAbsent

	DefaultMaxRepetitions = results.DefaultMaxRepetitions
)

var (
	workloadKinds = results.WorkloadKinds
	policyModes   = results.PolicyModes
	l7Modes       = results.L7Modes
	l7Matches     = results.L7Matches
	isHTTP        = results.IsHTTP
	isChain       = results.IsChain
	// Load reads a results directory (results.Load).
	Load = results.Load
	// Summarize is results.Summarize.
	Summarize = results.Summarize
	// Headline is a workload kind's headline metric (results.Headline).
	Headline = results.Headline
)
