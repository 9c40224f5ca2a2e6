package report

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"sort"
	"strings"
	"time"

	"github.com/cnlab/cnlab/internal/plural"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
)

// HTML renders the report as one self-contained page: figures inline as
// SVG, styles inline, nothing loaded from anywhere.
func (rep *Report) HTML() ([]byte, error) {
	type fig struct {
		Figure
		SVG template.HTML
		PNG string
	}
	var figs []fig
	for _, f := range rep.Figures {
		svg, err := f.Plot.SVG()
		if err != nil {
			return nil, fmt.Errorf("figure %s: %w", f.ID, err)
		}
		figs = append(figs, fig{f, template.HTML(svg), "figures/" + f.ID + ".png"}) // #nosec: our own renderer escapes its text
	}
	r := rep.Results
	var env [][2]string
	if c := r.Cluster; c != nil {
		// A kubernetes run: the cluster first; the machine rows below are
		// where cnlab ran.
		env = append(env, [2]string{"backend", r.Backend + " (API server " + c.Server + ", " + c.Version + ")"},
			[2]string{"CNI", strings.TrimSpace(c.CNI + " " + c.CNIImage)}, [2]string{"kube-proxy", c.KubeProxy})
		for _, k := range sortedKeys(c.CiliumConfig) {
			env = append(env, [2]string{"cilium-config " + k, c.CiliumConfig[k]})
		}
		for _, n := range c.Nodes {
			env = append(env, [2]string{"node " + n.Name, fmt.Sprintf("kernel %s, %s %s, %s CPU, %s memory, %s, kubelet %s", n.Kernel, n.OSImage, n.Arch, n.CPU, n.Memory, n.ContainerRuntime, n.Kubelet)})
		}
	}
	if e := rep.Env; e != nil {
		if r.Cluster != nil {
			env = append(env, [2]string{"cnlab ran on", e.Hostname + ": the machine of the rows below, not a node"})
		}
		env = append(env,
			[2]string{"kernel", e.Kernel},
			[2]string{"CPU", fmt.Sprintf("%s, %s%s", e.CPUModel, plural.N(e.Cores, "core"), map[bool]string{true: " (virtualized: " + e.Virtualized + ")", false: ""}[e.Virtualized != ""])},
			[2]string{"memory", fmt.Sprintf("%.1f GiB", float64(e.MemoryBytes)/(1<<30))},
			[2]string{"cnlab", e.Cnlab}, [2]string{"Go", e.Go}, [2]string{"default MTU", fmt.Sprint(e.DefaultMTU)},
			[2]string{"CPU governor", e.CPUGovernor})
		for _, k := range sortedKeys(e.Tools) {
			env = append(env, [2]string{k, e.Tools[k]})
		}
		for _, k := range sortedKeys(e.Sysctls) {
			env = append(env, [2]string{k, e.Sysctls[k]})
		}
		var offs []string
		for _, k := range sortedKeys(e.Offloads) {
			offs = append(offs, k+" "+e.Offloads[k])
		}
		if len(offs) > 0 {
			env = append(env, [2]string{"offloads as built", strings.Join(offs, ", ")})
		}
	}
	finished := "—"
	if r.FinishedAt != nil {
		finished = r.FinishedAt.Format(time.RFC3339)
	}
	data := map[string]any{
		"R": r, "Rep": rep, "Figs": figs, "Env": env, "Finished": finished, "CVWarn": 100 * CVWarn,
		"Started": r.StartedAt.Format(time.RFC3339), "Fonts": goFonts,
	}
	var b bytes.Buffer
	if err := page.Execute(&b, data); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// goFonts are the fonts the figures' text is measured with (the Go
// fonts, which the PNGs are drawn with), embedded in the page so that a
// browser draws the SVGs' text at the widths the layout gave it, whatever
// fonts the machine has. The Go fonts are Copyright (c) 2016 Bigelow &
// Holmes Inc., under the BSD-style license in goFontsLicense, which the
// page reproduces whole.
var goFonts = template.CSS(`/* The Go fonts (Go Regular, Go Bold), embedded below.
` + goFontsLicense + `*/
@font-face { font-family: "Go"; font-weight: 400; src: url(data:font/ttf;base64,` + base64.StdEncoding.EncodeToString(goregular.TTF) + `) format("truetype"); }
@font-face { font-family: "Go"; font-weight: 700; src: url(data:font/ttf;base64,` + base64.StdEncoding.EncodeToString(gobold.TTF) + `) format("truetype"); }
`)

var funcs = template.FuncMap{
	"num":  fmtNum,
	"pct":  func(v float64) string { return fmtNum(100*v) + "%" },
	"join": strings.Join,
	"sign": signed,
}

var page = template.Must(template.New("report").Funcs(funcs).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cnlab report — {{.R.Experiment.Name}}</title>
<style>
{{.Fonts}}
/* The page scrolls inside main, not the window: headless Chromium draws
   a window scrolled to an anchor (report.html#table) blank, an element
   scrolled to it whole. Printing lays the page out as one long sheet. */
html, body { height: 100%; margin: 0; }
body { overflow: hidden; font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222; }
main { height: 100%; overflow-y: auto; outline: none; }
main > .content { margin: 2em auto; max-width: 1100px; padding: 0 1em; }
@media print { html, body, main { height: auto; overflow: visible; } }
h1 { font-size: 1.6em; margin-bottom: .2em; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
.meta { color: #555; }
.note { background: #fff6d6; border-left: 4px solid #e6b800; padding: .5em 1em; }
figure { margin: 1.5em 0; }
figure svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: .9em; }
table { border-collapse: collapse; font-size: .85em; width: 100%; }
th, td { border-bottom: 1px solid #eee; padding: .25em .5em; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.noisy td.cv { color: #b00; font-weight: bold; }
tr.failed td { color: #b00; }
ul.findings li { margin: .4em 0; }
.pts { color: #777; font-size: .85em; }
code { font-size: .9em; }
</style>
</head>
<body>
<main id="top" tabindex="-1"><div class="content">
<h1>{{.R.Experiment.Name}}</h1>
<p class="meta">cnlab report of <code>{{.R.Experiment.File}}</code>{{if .R.Experiment.Quick}} (--quick){{end}} — run {{.R.Status}}, started {{.Started}}, finished {{.Finished}};
{{len .R.Points}} points, seed {{.R.Seed}}, cnlab {{.R.Cnlab}}.</p>
{{range .Rep.Notes}}<p class="note">{{.}}</p>
{{end}}{{if .Rep.Noisy}}<p class="note">{{.Rep.Noisy}} of {{len .Rep.Rows}} table rows have a coefficient of variation above {{.CVWarn}}%: see the CV column.</p>
{{end}}
<h2 id="findings">Findings</h2>
{{if .Rep.Findings}}<ul class="findings">
{{range .Rep.Findings}}<li>{{.Text}} <span class="pts">(<a href="#{{.Panel}}">figure</a>; points {{join .Points ", "}})</span></li>
{{end}}</ul>{{else}}<p>No sweep in this run has two values of a parameter: nothing to say about a trend.</p>{{end}}

<h2 id="figures">Figures</h2>
{{range .Figs}}<figure id="{{.ID}}" class="report-figure" data-kind="{{.Kind}}">
{{.SVG}}
<figcaption><a href="{{.PNG}}">PNG</a></figcaption>
</figure>
{{else}}<p>No point has samples: no figure.</p>
{{end}}
{{if .Rep.Fits}}<h2 id="fits">Fits</h2>
<table>
<tr><th>figure</th><th>series</th><th>law</th><th>samples</th><th>result</th></tr>
{{range .Rep.Fits}}<tr><td><a href="#{{.Panel}}">{{.Panel}}</a></td><td>{{.Series}}</td><td>{{.Kind}}</td><td class="n">{{.N}}</td><td>{{if .Note}}{{.Note}}{{else}}{{.Text}}{{end}}</td></tr>
{{end}}</table>
<p class="meta">Linear: ordinary least squares on every sample, slope with its 95% CI (Student's t, n−2); relative slope: per unit of x as a share of the fitted intercept. Power law: t(n) = t(1)·(1 − l)^(n−1), least squares on log t; R² of the curve against the raw samples. Bend: continuous two-segment fit, reported when its F test against a straight line gives p &lt; 0.01. Every fit is in x itself, also in a figure whose x axis is on a log scale (x all above 0 and spanning two decades or more), where a straight line in x is a curve.</p>
{{end}}
{{if .Rep.UnitCosts}}<h2 id="unit-costs">Costs per packet</h2>
<table>
<tr><th>figure</th><th>series</th><th>per</th><th>ns (95% CI)</th><th>ns per packet at x = 0</th><th>CPU µs per packet (transaction), first → last x</th><th>samples</th><th>packets from</th><th>the seed</th></tr>
{{range .Rep.UnitCosts}}<tr><td><a href="#{{.Panel}}">{{.Panel}}</a></td><td>{{.Series}}</td><td>{{.Per}} per {{.Of}}</td>{{if .Note}}<td colspan="6">{{.Note}}</td>{{else}}<td class="n">{{sign .Ns}} ({{sign .CI.Lo}} to {{sign .CI.Hi}})</td><td class="n">{{num .BaseNs}}</td><td class="n">{{if .CPUFirst}}{{num .CPUFirst}} → {{num .CPULast}}{{else}}—{{end}}</td><td class="n">{{.N}}</td><td>{{.Source}}{{if .MSS}} ({{.MSS}} B){{end}}</td>{{end}}<td>{{with .Seed}}{{num .Ns}} ns: {{.Source}}, {{num .From}} → {{num .To}} Gb/s{{else}}—{{end}}</td></tr>
{{end}}</table>
<p class="meta">The slope of the time per packet (1/rate: per transaction for rr, per connection for crr, per request for http) against x, least squares on every sample, with its 95% CI (Student's t, n−2): what each added unit of the sweep's axis costs on every packet. Unlike a relative drop, it does not depend on the machine's per-packet base cost, so two machines or two days can be compared on it. Packets are the skbs the server's interfaces received (skb_per_s) where the run counted them, otherwise bytes over an assumed segment size (said in the row). CPU per packet is the machine's busy CPU time over the packets (netperf's service demand).</p>
{{end}}
{{if .Rep.Proxy}}<h2 id="proxy">What the L7 proxy adds over the L3/L4 path</h2>
<table>
<tr><th>point</th><th>topology</th><th>series</th><th>workload</th><th>proxy</th><th>p50 (µs)</th><th>L3/L4 p50 (µs)</th><th>added (µs)</th><th>×</th><th>proxy CPU per request (µs)</th><th>added ÷ HAProxy's</th><th>CPU ÷ HAProxy's</th></tr>
{{range .Rep.Proxy}}<tr><td>{{.Point}}</td><td>{{.Topology}}</td><td>{{.Series}}</td><td>{{.Workload}}</td><td>{{.Proxy}}</td><td class="n">{{num .P50Us}}</td><td class="n">{{num .BaseUs}} ({{.Base}})</td><td class="n">{{num .AddedUs}}</td><td class="n">{{printf "%.2f" .Times}}</td><td class="n">{{if .CPUUsPerReq}}{{num .CPUUsPerReq}}{{else}}—{{end}}</td><td class="n">{{if .AddedVsHAProxy}}{{printf "%.2f" .AddedVsHAProxy}}{{else}}—{{end}}</td><td class="n">{{if .CPUVsHAProxy}}{{printf "%.2f" .CPUVsHAProxy}}{{else}}—{{end}}</td></tr>
{{end}}</table>
<p class="meta">Each proxied point (l7Mode http-any or rules) against the l4 point (an L3/L4 allow: no proxy) of the same topology, datapath and workload: medians of the samples' p50 latency; × is their ratio. The last two columns put cnlab's proxy beside HAProxy at the same point: what it adds over the L3/L4 path, and its CPU per request, each divided by HAProxy's. HAProxy (reference) is a comparison series, not a datapath.</p>
{{end}}
<h2 id="table">Points</h2>
<table>
<tr><th>point</th><th>topology</th><th>series</th><th>parameters</th><th>workload</th><th>metric</th><th>median</th><th>95% CI of the mean<br>(cut at the metric's range)</th><th>CV</th><th>n</th><th>status</th></tr>
{{range .Rep.Rows}}<tr class="{{if .Noisy}}noisy{{end}}{{if eq .Status "failed"}} failed{{end}}"><td>{{.Point}}</td><td>{{.Topology}}</td><td>{{.Series}}</td><td>{{.Params}}</td><td>{{.Workload}}</td><td>{{.Metric}}</td>
{{if .N}}<td class="n">{{num .Median}}</td><td class="n">{{if gt .N 1}}{{num .CI.Lo}} – {{num .CI.Hi}}{{else}}—{{end}}</td><td class="n cv">{{if gt .N 1}}{{pct .CV}}{{if .Noisy}} ⚠{{end}}{{else}}—{{end}}</td><td class="n">{{.N}}</td>{{else}}<td></td><td></td><td></td><td class="n">0</td>{{end}}
<td>{{.Status}}{{if .Error}}: {{.Error}}{{end}}</td></tr>
{{end}}</table>

<h2 id="environment">Environment</h2>
{{if .Env}}<table>
{{range .Env}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>
{{end}}</table>{{else}}<p>No environment.json in the results directory.</p>{{end}}

<h2 id="experiment">Experiment file</h2>
<pre>{{.R.Experiment.Text}}</pre>
</div></main>
<script>
// Marks the page once laid out: how many figures have a drawn SVG (a
// check for tests and for a reader's browser alike).
(function () {
  // Keys (Page Down, arrows) scroll the page from the start.
  document.querySelector("main").focus({preventScroll: true});
  var n = 0;
  document.querySelectorAll("figure.report-figure svg").forEach(function (s) {
    var b = s.getBoundingClientRect();
    if (b.width > 0 && b.height > 0 && s.querySelector("title")) { n++; }
  });
  document.body.setAttribute("data-figures-drawn", String(n));
  document.body.setAttribute("data-figures", String(document.querySelectorAll("figure.report-figure").length));
  // Text that runs out of its figure (a legend or caption measured with
  // another font than the one drawn): counted once the fonts are in.
  var check = function () {
    var out = [];
    document.querySelectorAll("figure.report-figure svg").forEach(function (s) {
      var f = s.getBoundingClientRect();
      s.querySelectorAll("text").forEach(function (t) {
        var b = t.getBoundingClientRect();
        if (b.width > 0 && (b.left < f.left - 1 || b.right > f.right + 1 || b.top < f.top - 1 || b.bottom > f.bottom + 1)) {
          out.push(s.getAttribute("data-figure-id") + ": " + t.textContent);
        }
      });
    });
    document.body.setAttribute("data-text-overflow", String(out.length));
    document.body.setAttribute("data-text-overflow-list", out.slice(0, 20).join(" | "));
  };
  if (document.fonts && document.fonts.ready) { document.fonts.ready.then(check); } else { check(); }
})();
</script>
</body>
</html>
`))
