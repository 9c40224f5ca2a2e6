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

	checkPage(t, dir, "report.html", len(rep.Figures), os.Getenv("CNLAB_REPORT_SCREENSHOT"))
	// Every section as a link opens it: #table once rendered blank in
	// headless Chromium (the window scrolled to it was not drawn).
	checkPage(t, dir, "report.html#table", len(rep.Figures), "")
}

// TestSeedReportsInChromium renders the report of a quick run of seed
// 004's file, whose figures carry the seed's values (synthetic samples),
// and checks every figure is drawn, no text runs out of it, and the page
// logs nothing.
func TestSeedReportsInChromium(t *testing.T) {
	testutil.RequireTool(t, "chromium", "chromium")
	for _, file := range []string{"seed004-services.yaml"} { // the longest legends, and seed values flat and at x
		dir := t.TempDir()
		r := quickResults(t, filepath.Join("../experiments", file))
		rep := Build(r, nil)
		if _, err := rep.Write(dir); err != nil {
			t.Fatal(err)
		}
		checkPage(t, dir, "report.html", len(rep.Figures), "")
	}
}

// TestComparePageInChromium renders cnlab compare's page of the fixture
// against itself and checks it is drawn and logs nothing.
func TestComparePageInChromium(t *testing.T) {
	testutil.RequireTool(t, "chromium", "chromium")
	a, err := results.Load(fixture)
	if err != nil {
		t.Fatal(err)
	}
	page, err := Compare(a, a, 0.05, 0.01).HTML()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "compare.html"), page, 0o644); err != nil {
		t.Fatal(err)
	}
	checkPage(t, dir, "compare.html", 0, "")
}

// checkPage opens dir/page (a file, with an #anchor or not) in headless
// Chromium: the page logs nothing to the console; a report page
// (figures > 0) draws every one of its figures with no text out of
// them; and a screenshot of the window (saved to save, if set) is not
// blank.
func checkPage(t *testing.T, dir, page string, figures int, save string) {
	t.Helper()
	url := "file://" + filepath.Join(dir, page)
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
	if c := consoleLine.FindAllString(logs, -1); len(c) > 0 {
		t.Errorf("%s logged to the console:\n%s", page, strings.Join(c, "\n"))
	}
	if figures > 0 {
		want := regexp.MustCompile(`data-figures-drawn="(\d+)"`).FindStringSubmatch(dom)
		all := regexp.MustCompile(`data-figures="(\d+)"`).FindStringSubmatch(dom)
		n := strings.Count(dom, `class="report-figure"`)
		if want == nil || all == nil || want[1] != all[1] || n != figures || all[1] != strconv.Itoa(figures) {
			t.Errorf("%s: %v figures drawn of %v on the page (%d figure elements), report has %d", page, want, all, n, figures)
		}
		// No text runs out of its figure, as the browser draws it.
		over := regexp.MustCompile(`data-text-overflow="(\d+)"`).FindStringSubmatch(dom)
		if over == nil || over[1] != "0" {
			list := regexp.MustCompile(`data-text-overflow-list="([^"]*)"`).FindStringSubmatch(dom)
			t.Errorf("%s: text out of its figure in Chromium: %v %v", page, over, list)
		}
	}

	shot := filepath.Join(t.TempDir(), "screenshot.png")
	_, logs = run("--screenshot="+shot, "--window-size=1280,2400", "--hide-scrollbars", url)
	if c := consoleLine.FindAllString(logs, -1); len(c) > 0 {
		t.Errorf("%s logged to the console:\n%s", page, strings.Join(c, "\n"))
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot of %s: %v", page, err)
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
	// A page of figures inks 1 in 50 sampled pixels and more; a page of
	// text (compare) or the window at a table, 1 in 200.
	share := 200
	if page == "report.html" {
		share = 50
	}
	if total := (b.Dx() / 4) * (b.Dy() / 4); ink < total/share {
		t.Errorf("screenshot of %s, %dx%d, is nearly blank: %d of %d sampled pixels inked", page, b.Dx(), b.Dy(), ink, total)
	}
	if save != "" {
		data, _ := os.ReadFile(shot)
		_ = os.WriteFile(save, data, 0o644)
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
