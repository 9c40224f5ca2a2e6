package report

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// report.html and figures/*.png are written by root into the results
// directory: a symlink planted there must not make cnlab overwrite the
// file it points at.
func TestWriteDoesNotFollowLinks(t *testing.T) {
	rep := Build(synth(2, 2), nil)
	if len(rep.Figures) == 0 {
		t.Fatal("no figures")
	}
	fig := filepath.Join("figures", rep.Figures[0].ID+".png")
	for _, at := range []string{"report.html", "report.html.tmp", fig, fig + ".tmp", "figures"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			elsewhere := t.TempDir()
			outside := filepath.Join(elsewhere, "victim")
			if err := os.WriteFile(outside, []byte("precious"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(dir, "figures"), 0o755); err != nil {
				t.Fatal(err)
			}
			target := outside
			if at == "figures" {
				_ = os.Remove(filepath.Join(dir, "figures"))
				target = elsewhere
			}
			if err := os.Symlink(target, filepath.Join(dir, at)); err != nil {
				t.Fatal(err)
			}
			_, err := rep.Write(dir)
			if data, _ := os.ReadFile(outside); string(data) != "precious" {
				t.Errorf("the file outside was overwritten through %s (write: %v)", at, err)
			}
			if at == "figures" {
				if err == nil {
					t.Error("a link planted as figures/ was taken for the directory")
				}
				if m, _ := filepath.Glob(filepath.Join(elsewhere, "*.png")); len(m) > 0 {
					t.Errorf("figures written through the link: %v", m)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"report.html", fig} {
				if fi, err := os.Lstat(filepath.Join(dir, f)); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("%s: %v", f, err)
				}
			}
		})
	}
}

// TestPageCarriesFontLicense: the page embeds the Go fonts, whose license
// asks a redistribution to reproduce its notice, conditions and
// disclaimer.
func TestPageCarriesFontLicense(t *testing.T) {
	page, err := Build(synth(2, 1), nil).HTML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Copyright (c) 2016 Bigelow & Holmes Inc.", "Redistributions in binary form must reproduce", "DISCLAIMER: THIS SOFTWARE IS PROVIDED"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(string(page), "The Go Authors") {
		t.Error("the page still names The Go Authors as the fonts' copyright holder")
	}
}

// TestFontLicenseIsVerbatim: the notice the page carries is the Go fonts'
// license file as golang.org/x/image ships it (font/gofont/ttfs/README in
// the module this package builds with), word for word, and the page holds
// all of it in its style element.
func TestFontLicenseIsVerbatim(t *testing.T) {
	gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if p, err := exec.LookPath("go"); err == nil {
		gotool = p
	}
	out, err := exec.Command(gotool, "list", "-m", "-f", "{{.Dir}}", "golang.org/x/image").Output()
	if err != nil {
		t.Fatalf("go list -m golang.org/x/image: %v", err)
	}
	want, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "font", "gofont", "ttfs", "README"))
	if err != nil {
		t.Fatal(err)
	}
	if goFontsLicense != string(want) {
		t.Errorf("goFontsLicense differs from the module's font/gofont/ttfs/README:\n%s\nwant:\n%s", goFontsLicense, want)
	}
	page, err := Build(synth(2, 1), nil).HTML()
	if err != nil {
		t.Fatal(err)
	}
	style, _, _ := strings.Cut(string(page), "</style>")
	if !strings.Contains(style, "/* The Go fonts (Go Regular, Go Bold), embedded below.\n"+string(want)+"*/") {
		t.Error("the page's style element does not carry the whole license in its comment")
	}
}
