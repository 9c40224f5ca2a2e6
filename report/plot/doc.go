// Package plot draws the small set of scientific figures that cnlab's report
// needs — lines with markers and confidence-interval error bars, grouped bar
// charts with error bars, and dashed fitted curves — and renders each figure
// both as a standalone inline SVG element and as a PNG image.
//
// A Figure is laid out once into a list of drawing primitives (paths,
// polygons, rectangles, circles and text with an anchor and an optional
// quarter-turn rotation) in pixel coordinates. Two backends render that same
// list: SVG writes one element per primitive, PNG rasterizes the primitives in
// pure Go with golang.org/x/image/vector (antialiased) and draws text with the
// embedded Go fonts through golang.org/x/image/font/opentype. Because both
// outputs come from the same primitives they show the same figure; text
// widths for the layout are measured with the Go fonts, which the SVG names
// first in its font-family list.
//
// Guarantees:
//
//   - Deterministic: the same Figure always gives byte-identical SVG and PNG.
//   - Robust: NaN and ±Inf values are skipped, empty figures get a frame with a
//     "no data" note, single points and constant series get a sensible range,
//     long names are truncated with an ellipsis.
//   - The SVG is a single <svg> element (no XML prolog) that is valid XML and
//     can be pasted into an HTML page; it carries the figure ID in a
//     data-figure-id attribute and the title in a <title> child.
//
// The package must never do file I/O, touch the network, run external
// programs, use cgo, or keep global mutable state: every call builds what it
// needs (fonts are parsed from the embedded bytes per call) and returns bytes
// for the caller to write.
package plot
