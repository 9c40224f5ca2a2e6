package experiment

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/l7proxy/haproxy"

	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/lab"
)

// ErrInterrupted is returned by Run when its context ended: the results
// directory holds a valid partial run.
var ErrInterrupted = errors.New("interrupted: finished points are kept, the lab is torn down")

// Options tune a run.
type Options struct {
	Out      string    // results directory: must not hold a run already
	RR       []string  // argv of cnlab's rr command (default: this executable + "rr")
	Progress io.Writer // progress lines (nil: none)
	Terminal bool      // Progress is a terminal: one updating bar instead of lines
	LabName  string    // default: "xp-" and 4 random hex digits
	Seed     *int64    // overrides the file's seed
	Flags    []string  // the flags that changed the file, recorded (Spec.Override)
	// Backend measures on a cluster instead of a lab (nil: a lab here);
	// the Spec must have been parsed for it (ParseFor).
	Backend Cluster
	// Unenforced measures a point whose policies the cluster does not
	// enforce as the model says, recording the mismatch, instead of
	// failing it; EnforceTimeout bounds the wait (0: the default).
	Unenforced     bool
	EnforceTimeout time.Duration
	// NoReference: do not measure (or look up) the machine's reference
	// speed (cnlab doctor's own runs measure it themselves).
	NoReference bool
}

// Run runs an experiment and writes its results directory. text is the
// experiment file as given (kept in results.json). A point that fails is
// recorded with its error and the run goes on; when ctx ends (Ctrl-C) the
// finished points are kept, results.json is marked interrupted, the lab
// is torn down and ErrInterrupted is returned.
func Run(ctx context.Context, s *Spec, text []byte, o Options) (*results.Results, error) {
	points, err := s.Points()
	if err != nil {
		return nil, err
	}
	if err := checkBackend(s, o, points); err != nil {
		return nil, err
	}
	if o.Out == "" {
		return nil, errors.New("no results directory given")
	}
	if _, err := os.Stat(filepath.Join(o.Out, "results.json")); err == nil {
		return nil, &input.Error{File: o.Out, Msg: "already holds a run (results.json): choose another --out"}
	}
	if err := pickLabName(&o); err != nil {
		return nil, err
	}
	if err := makeOut(o.Out); err != nil {
		return nil, err
	}
	if o.RR == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find cnlab's own executable for the rr workloads: %w", err)
		}
		o.RR = []string{exe, "rr"}
	}
	seed := int64(0)
	switch {
	case o.Seed != nil:
		seed = *o.Seed
	case s.Seed != nil:
		seed = *s.Seed
	default:
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = int64(binary.LittleEndian.Uint64(b[:]) >> 1)
	}
	env := CaptureEnvironment()
	var prog *progress
	be := newBackend(o, env, func(msg string) { prog.note(msg) })
	if be.name() == results.BackendLab && !o.NoReference {
		env.Reference = recordReference(ctx, o)
	}
	if env.Cluster, err = be.describe(ctx); err != nil {
		return nil, err
	}
	r := &results.Results{Schema: results.Schema, Cnlab: env.Cnlab, Seed: seed, Lab: o.LabName, Backend: be.name(), Cluster: env.Cluster, StartedAt: time.Now().UTC(), Status: results.StatusRunning,
		Experiment: results.ExperimentInfo{File: s.File, Name: s.Name, Quick: s.IsQuick(), Text: string(text), Spec: &s.Spec, Flags: o.Flags}, Builds: []results.Build{}}
	byID := map[string]*results.PointResult{}
	for _, p := range points {
		r.Points = append(r.Points, results.PointResult{Point: p, Status: results.PointPending, Samples: []results.Sample{}, Summary: map[string]results.Summary{}})
	}
	for i := range r.Points {
		byID[r.Points[i].ID] = &r.Points[i]
	}
	rng := mrand.New(mrand.NewSource(seed))
	r.Order = schedule(points, s.Repetitions, rng)
	if err := r.Write(o.Out); err != nil {
		return nil, err
	}
	if err := files.WriteJSON(filepath.Join(o.Out, "environment.json"), env, true); err != nil {
		return nil, err
	}
	ru := &runner{s: s, o: o, r: r, be: be, byID: byID, rng: rng, points: points}
	prog = newProgress(o.Progress, o.Terminal, len(r.Order), time.Duration(s.Warmup+s.Duration))
	ru.prog = prog
	err = ru.run(ctx)
	now := time.Now().UTC()
	r.FinishedAt = &now
	switch {
	case ctx.Err() != nil:
		r.Status = results.StatusInterrupted
		err = ErrInterrupted
	case err != nil:
		r.Status, r.Error = results.StatusFailed, err.Error()
	default:
		r.Status = results.StatusComplete
	}
	for i := range r.Points {
		p := &r.Points[i]
		if p.Precision != nil && p.Status == results.PointPending && len(p.Samples) >= p.Repetitions {
			// Its minimum is measured; whatever stopped it, it is done.
			p.Status = results.PointDone
			if p.JudgePrecision(false) {
				p.Reached.State = results.PrecisionStopped // the run ended first
			}
		}
		if r.Status != results.StatusComplete && p.Status == results.PointPending && len(p.Samples) > 0 {
			p.Status = results.PointPartial
		}
	}
	if werr := files.WriteJSON(filepath.Join(o.Out, "environment.json"), env, true); werr != nil && err == nil {
		err = werr
	}
	if werr := r.Write(o.Out); werr != nil && err == nil {
		err = werr
	}
	ru.prog.finish(r)
	return r, err
}

// schedule orders the jobs: each repetition is a round (a point with
// fewer repetitions than others sits out the last rounds); in a round the
// labs come in a random order and each lab's points in a random order, so
// drift of the machine over the run does not line up with a parameter,
// while a lab is built once per round (and each set of Services installed
// once per round in it). Profiled runs come last.
func schedule(points []results.Point, reps int, rng *mrand.Rand) []results.Job {
	groups := map[string][]results.Point{}
	var keys []string
	for _, p := range points {
		k := labKey(p.Params)
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], p)
	}
	var jobs []results.Job
	round := func(rep int, keep func(results.Point) bool) {
		order := append([]string(nil), keys...)
		if rng != nil {
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		for _, k := range order {
			ps := append([]results.Point(nil), groups[k]...)
			if rng != nil {
				rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
			}
			// A lab's points with the same Services installed run
			// together (the sets in the shuffled order of their first
			// point): 10,000 Services are installed once a round, not
			// once a point.
			// So do the points with the same L7 policy (10,000 rules
			// compiled by the proxy once a round), and those with the
			// same observe level (changed at most once per set).
			set := func(p results.Point) string {
				return serviceSet(p.Params) + " " + l7Set(p.Params) + " " + p.Params.Observe
			}
			first := map[string]int{}
			for i, p := range ps {
				if _, ok := first[set(p)]; !ok {
					first[set(p)] = i
				}
			}
			slices.SortStableFunc(ps, func(a, b results.Point) int { return first[set(a)] - first[set(b)] })
			for _, p := range ps {
				if keep(p) {
					jobs = append(jobs, results.Job{Point: p.ID, Repetition: rep})
				}
			}
		}
	}
	// reps is the default of points that do not say.
	repsOf := func(p results.Point) int {
		if p.Repetitions > 0 {
			return p.Repetitions
		}
		return reps
	}
	rounds := 0
	for _, p := range points {
		rounds = max(rounds, repsOf(p))
	}
	for rep := 0; rep < rounds; rep++ {
		round(rep, func(p results.Point) bool { return rep < repsOf(p) })
	}
	round(-1, func(p results.Point) bool { return p.Profile })
	return jobs
}

// checkTools fails early when a workload's tool is missing.
func checkTools(points []results.Point) error {
	need := map[string]string{}
	for _, p := range points {
		switch p.Workload.Kind {
		case results.TCPStream, results.UDPStream, results.TCPRRUnderLoad:
			need["iperf3"] = "apt-get install iperf3"
		case results.Ping:
			need["ping"] = "apt-get install iputils-ping"
		case results.AB:
			need["ab"] = "apt-get install apache2-utils"
		}
		if p.Params.Offloads != "" {
			need["ethtool"] = "apt-get install ethtool"
		}
		if p.Params.L7Proxy == results.L7ProxyHAProxy {
			need[haproxy.Binary] = "apt-get install haproxy"
		}
	}
	for _, tool := range sortedKeys(need) {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (%s; or run scripts/install.sh)", tool, need[tool])
		}
	}
	return nil
}

type runner struct {
	s    *Spec
	o    Options
	r    *results.Results
	be   backend
	byID map[string]*results.PointResult
	prog *progress

	rng    *mrand.Rand
	points []results.Point
	start  time.Time

	curKey   string // labKey of what the backend has up ("" : nothing)
	curBuild int    // its index in r.Builds
}

func (ru *runner) run(ctx context.Context) (err error) {
	defer func() {
		if terr := ru.teardown(); terr != nil && err == nil {
			err = terr
		}
	}()
	failedLab := map[string]string{} // a lab that failed to build, per round
	ru.start = time.Now()
	for i := 0; ; i++ {
		if ctx.Err() != nil {
			return nil
		}
		order := ru.r.Order
		if i > 0 && order[i-1].Repetition >= 0 && (i == len(order) || order[i].Repetition < 0) {
			// The measured rounds are over: points short of their
			// precision target get another round, before the profiled runs.
			if extra := ru.extraRound(order[i-1].Repetition + 1); len(extra) > 0 {
				ru.r.Order = slices.Insert(order, i, extra...)
				ru.prog.total = len(ru.r.Order)
			}
		}
		if i == len(ru.r.Order) {
			return nil
		}
		j := ru.r.Order[i]
		pr := ru.byID[j.Point]
		if pr.Status == results.PointFailed {
			ru.prog.step(i, pr, j, "skipped (failed before)")
			continue
		}
		ru.prog.step(i, pr, j, "")
		key := fmt.Sprintf("%d %s", j.Repetition, labKey(pr.Params))
		if msg, ok := failedLab[key]; ok {
			ru.fail(pr, msg)
			continue
		}
		err := ru.job(ctx, pr, j)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errTeardown) || errors.Is(err, lab.ErrAlreadyUp) {
			return err // the run cannot go on (its lab's name is taken)
		}
		if err != nil {
			if errors.Is(err, errLab) {
				failedLab[key] = err.Error()
			}
			ru.fail(pr, err.Error())
			ru.prog.note(fmt.Sprintf("%s failed: %v", pr.ID, err))
		} else if pr.Status == results.PointPending && pr.Precision == nil && len(pr.Samples) == pr.Repetitions {
			pr.Status = results.PointDone
		}
		if werr := ru.r.Write(ru.o.Out); werr != nil {
			return werr
		}
	}
}

// extraRound returns round rep for the points still short of their
// precision target (none when every one has reached it or a cap),
// shuffled as the first rounds are, and records each precision point's
// state.
func (ru *runner) extraRound(rep int) []results.Job {
	var need []results.Point
	for _, p := range ru.points {
		pr := ru.byID[p.ID]
		if p.Precision == nil {
			continue
		}
		timeUp := p.Precision.MaxTime > 0 && time.Since(ru.start) >= time.Duration(p.Precision.MaxTime)
		if pr.JudgePrecision(timeUp) {
			need = append(need, p)
		}
	}
	if len(need) == 0 {
		return nil
	}
	jobs := schedule(need, 1, ru.rng)
	out := jobs[:0]
	for _, j := range jobs {
		if j.Repetition == 0 {
			out = append(out, results.Job{Point: j.Point, Repetition: rep})
		}
	}
	ru.prog.note(fmt.Sprintf("round %d: %s still short of their precision target", rep+1, plural.N(len(out), "point")))
	return out
}

func (ru *runner) fail(pr *results.PointResult, msg string) {
	pr.Status = results.PointFailed
	if pr.Error == "" {
		pr.Error = msg
	}
}

// errLab marks a failure to build or configure a lab; errTeardown one to
// take it down, which ends the run.
var (
	errLab      = errors.New("lab")
	errTeardown = errors.New("teardown")
)

type labError struct{ err error }

func (e labError) Error() string        { return e.err.Error() }
func (e labError) Is(target error) bool { return target == errLab }
func (e labError) Unwrap() error        { return e.err }

// job runs one repetition of a point (or its profiled run).
func (ru *runner) job(ctx context.Context, pr *results.PointResult, j results.Job) error {
	if err := ru.ensureUp(ctx, pr.Params); err != nil {
		return labError{err}
	}
	b := &ru.r.Builds[ru.curBuild]
	if err := ru.be.policies(ctx, pr.Params, b, ru.curBuild); err != nil {
		return err // this point's policies only: the lab's other points go on
	}
	dest, err := ru.be.services(ctx, pr.Params, b, ru.curBuild)
	if err != nil {
		return err // this point's Services only
	}
	if err := ru.be.observe(ctx, pr.Params, b); err != nil {
		return err // this point's level only
	}
	e, err := ru.be.sample(pr, dest)
	if err != nil {
		return err
	}
	e.warmup, e.duration, e.pin = time.Duration(ru.s.Warmup), time.Duration(ru.s.Duration), ru.s.Pin
	return ru.measure(ctx, pr, j, e)
}

// ensureUp makes the point's lab (or deployment) the one that is up,
// recording the build.
func (ru *runner) ensureUp(ctx context.Context, p results.Params) error {
	key := labKey(p)
	if ru.curKey == key {
		return nil
	}
	spec, err := ru.s.labSpec(p, ru.o.LabName)
	if err != nil {
		return err
	}
	var prev *results.Build
	if ru.curKey != "" {
		prev = &ru.r.Builds[ru.curBuild]
	}
	ru.curKey = ""
	b := results.Build{Key: key, Params: p, At: time.Now().UTC()}
	b.Params.Flows, b.Params.Size, b.Params.Zerocopy = 0, 0, false
	err = ru.be.up(ctx, spec, p, prev, &b)
	if errors.Is(err, errTeardown) {
		return err
	}
	ru.r.Builds = append(ru.r.Builds, b)
	if err != nil {
		return err
	}
	ru.curKey, ru.curBuild = key, len(ru.r.Builds)-1
	return nil
}

// teardown takes down what the backend has up, even after Ctrl-C. What
// cannot be taken down is an error of the whole run: every later build
// of the same name would fail.
func (ru *runner) teardown() error {
	var last *results.Build
	if n := len(ru.r.Builds); n > 0 {
		last = &ru.r.Builds[n-1]
	}
	ru.curKey = ""
	return ru.be.down(last)
}

// measure runs one repetition of a point (or its profiled run) where e
// says, logging to its log file.
func (ru *runner) measure(ctx context.Context, pr *results.PointResult, j results.Job, e sampleEnv) error {
	logName := filepath.Join("logs", fmt.Sprintf("%s-r%d.log", pr.ID, j.Repetition))
	if j.Repetition < 0 {
		logName = filepath.Join("logs", pr.ID+"-profile.log")
	}
	logf, err := openLog(ru.o.Out, logName)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "point %s %s repetition %d\nparams %+v\nworkload %+v\n", pr.ID, pr.Workload.Name(), j.Repetition, pr.Params, pr.Workload)
	e.log = logf
	if j.Repetition < 0 {
		return ru.profiled(ctx, pr, e, logName)
	}
	if e.settle != nil {
		if err := e.settle(ctx, pr.Workload, logf); err != nil {
			return err
		}
	}
	// The datapath's per-rule counters are read around the sample, out
	// of its time and noise.
	var sample results.Sample
	e.series = &seriesSink{}
	err = countPolicies(ctx, e.policyCounters, pr, logf, func() error {
		t0 := time.Now()
		before, nerr := readNoise()
		m, err := runSample(ctx, pr.Workload, e)
		if err != nil {
			return err
		}
		var noise *results.Noise
		if after, err := readNoise(); err == nil && nerr == nil {
			noise = noiseBetween(before, after)
		}
		sample = results.Sample{Repetition: j.Repetition, At: t0.UTC(), Seconds: time.Since(t0).Seconds(), Metrics: m, Log: logName, Noise: noise}
		sample.Series = e.series.save(ru.o.Out, pr.ID, j.Repetition, logf)
		return nil
	})
	if err != nil {
		fmt.Fprintf(logf, "error: %v\n", err)
		return err
	}
	pr.Samples = append(pr.Samples, sample)
	pr.Summarize()
	ru.prog.result(pr, sample.Metrics)
	return nil
}

// cnlabArgv is cnlab's own argv, from its rr command's.
func cnlabArgv(rr []string) []string {
	if n := len(rr); n > 1 && rr[n-1] == "rr" {
		return rr[:n-1]
	}
	return rr
}

// makeOut makes the results directory and its logs/, refusing a symlink
// planted as logs/: root would write the logs wherever it points.
func makeOut(out string) error { return files.Mkdir(filepath.Join(out, "logs")) }

// openLog creates a sample's log file, refusing a symlink planted there.
func openLog(out, name string) (*os.File, error) { return files.Create(filepath.Join(out, name)) }

// pickLabName refuses a --lab that names a lab already up (the run would
// tear it down at its end) and draws a random xp- name that is free when
// none is given. Two runs may still race for a name: ensureLab then fails
// on Up's ErrAlreadyUp and leaves the other lab alone.
func pickLabName(o *Options) error {
	labs, err := lab.Labs()
	if err != nil {
		return fmt.Errorf("list labs: %w", err)
	}
	if o.LabName != "" {
		return checkLabFree(o.LabName, labs)
	}
	for range 100 {
		var b [2]byte
		_, _ = rand.Read(b[:])
		if name := fmt.Sprintf("xp-%x", b); !slices.Contains(labs, name) {
			o.LabName = name
			return nil
		}
	}
	return errors.New("no free xp- lab name in 100 draws: take some labs down")
}
