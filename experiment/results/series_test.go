package results

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSeriesRoundTrip: a series file reads back as written, NaN as null.
func TestSeriesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := &Series{T: []float64{1, 2}, Values: map[string]Floats{"latency_p50_us": {12.5, math.NaN()}, "transactions_per_s": {10, 0}}}
	name := SeriesName("p0003", 1)
	if name != filepath.Join("series", "p0003-r1.json") {
		t.Errorf("name %s", name)
	}
	if err := WriteSeries(dir, name, s); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, name))
	if !strings.Contains(string(data), `"latency_p50_us":[12.5,null]`) {
		t.Errorf("file: %s", data)
	}
	back, err := LoadSeries(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	if v := back.Values["latency_p50_us"]; v[0] != 12.5 || !math.IsNaN(v[1]) || back.Values["transactions_per_s"][1] != 0 || len(back.T) != 2 {
		t.Errorf("read back %+v", back)
	}
	// Arrays out of step with t are refused both ways.
	bad := &Series{T: []float64{1}, Values: map[string]Floats{"x": {1, 2}}}
	if err := WriteSeries(dir, SeriesName("p1", 0), bad); err == nil {
		t.Error("misaligned series written")
	}
	// A sample of a run before series were kept has none; one with a
	// series names its file.
	var old Sample
	if err := json.Unmarshal([]byte(`{"repetition":0,"metrics":{"x":1},"log":"logs/p1-r0.log"}`), &old); err != nil || old.Series != "" {
		t.Errorf("old sample: %+v %v", old, err)
	}
	js, _ := json.Marshal(Sample{Series: name})
	if !strings.Contains(string(js), `"seriesFile":"series/p0003-r1.json"`) {
		t.Errorf("sample: %s", js)
	}
}
