package report

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/testutil"
)

// fixture is a real run, committed: `cnlab run report/testdata/fixture.yaml`
// on the development VM (its README says how it was made).
const fixture = "testdata/run"

// chromiumFlags start Debian's Chromium headless with nothing that
// reaches out to the network (this machine's network is closed).
var chromiumFlags = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
	"--enable-logging=stderr", "--v=0"}

// consoleLine is how Chromium logs a page's console message or uncaught
// error on stderr.
var consoleLine = regexp.MustCompile(`(?m)^.*:CONSOLE[:(].*$`)

// TestReportInChromium renders the committed fixture's report, opens it in
// headless Chromium, saves a screenshot, and checks that every figure is
// drawn (the page's own script counts the SVGs with a size) and that the
// page logs nothing to the console.
func TestReportInChromium(t *testing.T) {
	testutil.RequireTool(t, "chromium", "chromium")
	dir := t.TempDir()
	for _, f := range []string{"results.json", "environment.json"} {
		data, err := os.ReadFile(filepath.Join(fixture, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	written, err := rep.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Figures) < 4 {
		t.Fatalf("%d figures from the fixture, want a sweep, its baseline, a chain and a profile at least", len(rep.Figures))
	}
	for _, f := range rep.Figures {
		if _, err := os.Stat(filepath.Join(dir, "figures", f.ID+".png")); err != nil {
			t.Errorf("figure %s: %v", f.ID, err)
		}
	}
	if len(written) != len(rep.Figures)+1 {
		t.Errorf("wrote %d files for %d figures and the page", len(written), len(rep.Figures))
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	// Self-contained: nothing to load from anywhere.
	if m := regexp.MustCompile(`(src|href)="(https?:)?//|<link |<img |@import|url\([^d]|url\(d[^a]`).Find(page); m != nil {
		t.Errorf("the page loads something: %q", m)
	}

	url := "file://" + filepath.Join(dir, "report.html")
	run := func(args ...string) (stdout, stderr string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "chromium", append(append(append([]string(nil), chromiumFlags...),
			"--user-data-dir="+filepath.Join(t.TempDir(), "profile")), args...)...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, e.String())
		}
		return o.String(), e.String()
	}
	dom, logs := run("--dump-dom", "--virtual-time-budget=5000", url)
	want := regexp.MustCompile(`data-figures-drawn="(\d+)"`).FindStringSubmatch(dom)
	all := regexp.MustCompile(`data-figures="(\d+)"`).FindStringSubmatch(dom)
	n := strings.Count(dom, `class="report-figure"`)
	if want == nil || all == nil || want[1] != all[1] || n != len(rep.Figures) || all[1] != strconv.Itoa(len(rep.Figures)) {
		t.Errorf("figures: %v drawn of %v on the page (%d figure elements), report has %d", want, all, n, len(rep.Figures))
	}
	// No text runs out of its figure, as the browser draws it.
	over := regexp.MustCompile(`data-text-overflow="(\d+)"`).FindStringSubmatch(dom)
	if over == nil || over[1] != "0" {
		list := regexp.MustCompile(`data-text-overflow-list="([^"]*)"`).FindStringSubmatch(dom)
		t.Errorf("text out of its figure in Chromium: %v %v", over, list)
	}
	for _, f := range rep.Figures {
		if !strings.Contains(dom, `data-figure-id="`+f.ID+`"`) {
			t.Errorf("figure %s is not in the page", f.ID)
		}
	}
	if c := consoleLine.FindAllString(logs, -1); len(c) > 0 {
		t.Errorf("the page logged to the console:\n%s", strings.Join(c, "\n"))
	}

	shot := filepath.Join(dir, "screenshot.png")
	_, logs = run("--screenshot="+shot, "--window-size=1280,2400", "--hide-scrollbars", url)
	if c := consoleLine.FindAllString(logs, -1); len(c) > 0 {
		t.Errorf("the page logged to the console:\n%s", strings.Join(c, "\n"))
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	// Not blank: a fair share of the pixels are not the white background.
	b := img.Bounds()
	ink := 0
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				ink++
			}
		}
	}
	if total := (b.Dx() / 4) * (b.Dy() / 4); ink < total/50 {
		t.Errorf("screenshot %dx%d is nearly blank: %d of %d sampled pixels inked", b.Dx(), b.Dy(), ink, total)
	}
	if out := os.Getenv("CNLAB_REPORT_SCREENSHOT"); out != "" {
		data, _ := os.ReadFile(shot)
		_ = os.WriteFile(out, data, 0o644)
	}
}

// TestFixtureIsValid: the committed fixture passes the results schema's
// checks, so the browser test renders what a real run writes.
func TestFixtureIsValid(t *testing.T) {
	r, err := results.Load(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if bad := r.Check(); len(bad) > 0 {
		t.Errorf("fixture: %v", bad)
	}
}
