package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/cnlab/cnlab/internal/files"
)

// SeriesDir is the results directory's folder of per-sample series.
const SeriesDir = "series"

// Series is one sample's measured time second by second, as the
// measuring tool reported it (iperf3's intervals, cnlab rr's seconds,
// cnlab http's seconds). It is kept in a file of its own,
// series/POINT-rN.json, that the sample names (Sample.Series), so that
// results.json stays small for big sweeps.
type Series struct {
	// T is the end of each interval in seconds from the start of the
	// measured time (after the warm-up).
	T []float64 `json:"t"`
	// Values are per-interval values aligned with T, by metric name
	// (throughput_gbps, retransmits, transactions_per_s, latency_p50_us,
	// ...: docs/methodology.md). NaN, written null, where an interval
	// has no value (no transaction completed in it).
	Values map[string]Floats `json:"values"`
}

// Floats are numbers where NaN stands for "none": written as null in
// JSON (which has no NaN), read back from null as NaN.
type Floats []float64

// MarshalJSON writes NaN and infinities as null.
func (f Floats) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, v := range f {
		if i > 0 {
			b.WriteByte(',')
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			b.WriteString("null")
		} else {
			b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// UnmarshalJSON reads null as NaN.
func (f *Floats) UnmarshalJSON(b []byte) error {
	var raw []*float64
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*f = make(Floats, len(raw))
	for i, p := range raw {
		(*f)[i] = math.NaN()
		if p != nil {
			(*f)[i] = *p
		}
	}
	return nil
}

// Names are the series' metrics, sorted.
func (s *Series) Names() []string {
	var names []string
	for k := range s.Values {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// Check reports a series whose arrays are not aligned with T.
func (s *Series) Check() error {
	for _, k := range s.Names() {
		if len(s.Values[k]) != len(s.T) {
			return fmt.Errorf("series %s has %d values for %d intervals", k, len(s.Values[k]), len(s.T))
		}
	}
	return nil
}

// SeriesName is the file of a sample's series, relative to the results
// directory.
func SeriesName(point string, repetition int) string {
	return filepath.Join(SeriesDir, fmt.Sprintf("%s-r%d.json", point, repetition))
}

// WriteSeries writes a series to name (SeriesName) under the results
// directory dir, refusing a symlink planted as series/.
func WriteSeries(dir, name string, s *Series) error {
	if err := s.Check(); err != nil {
		return err
	}
	if err := files.Mkdir(filepath.Join(dir, filepath.Dir(name))); err != nil {
		return err
	}
	return files.WriteJSON(filepath.Join(dir, name), s, false)
}

// LoadSeries reads a sample's series file (Sample.Series) of the results
// directory dir.
func LoadSeries(dir, name string) (*Series, error) {
	var s Series
	if err := files.ReadJSON(filepath.Join(dir, name), &s); err != nil {
		return nil, fmt.Errorf("series of %s: %w", dir, err)
	}
	if err := s.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
	}
	return &s, nil
}
