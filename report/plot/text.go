package plot

import (
	"math"
	"strings"
	"unicode/utf8"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// fontSet holds the parsed Go fonts and the faces made from them for one
// render. It is built per call: the package keeps no global state.
type fontSet struct {
	regular, bold *opentype.Font
	faces         map[faceKey]font.Face
}

type faceKey struct {
	size float64 // pixels
	bold bool
}

func newFontSet() (*fontSet, error) {
	r, err := opentype.Parse(goregular.TTF)
	if err != nil {
		return nil, err
	}
	b, err := opentype.Parse(gobold.TTF)
	if err != nil {
		return nil, err
	}
	return &fontSet{regular: r, bold: b, faces: map[faceKey]font.Face{}}, nil
}

// face returns the face for a pixel size (72 DPI: points = pixels).
func (fs *fontSet) face(size float64, bold bool) font.Face {
	k := faceKey{size, bold}
	if f, ok := fs.faces[k]; ok {
		return f
	}
	src := fs.regular
	if bold {
		src = fs.bold
	}
	f, err := opentype.NewFace(src, &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingNone})
	if err != nil {
		// NewFace cannot fail for a parsed font; keep going with regular.
		f, _ = opentype.NewFace(fs.regular, &opentype.FaceOptions{Size: size, DPI: 72})
	}
	fs.faces[k] = f
	return f
}

func fromFixed(v fixed.Int26_6) float64 { return float64(v) / 64 }

// width is the advance width of s in pixels.
func (fs *fontSet) width(s string, size float64, bold bool) float64 {
	return fromFixed(font.MeasureString(fs.face(size, bold), s))
}

// capHeight approximates the height of capital letters and digits, used to
// centre text vertically on a point.
func capHeight(size float64) float64 { return 0.72 * size }

const ellipsis = "…"

// truncate shortens s with an ellipsis so that it fits in maxW pixels.
func (fs *fontSet) truncate(s string, size float64, bold bool, maxW float64) string {
	if fs.width(s, size, bold) <= maxW {
		return s
	}
	r := []rune(s)
	// binary search the longest prefix that fits with the ellipsis
	lo, hi := 0, len(r)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fs.width(strings.TrimRight(string(r[:mid]), " ")+ellipsis, size, bold) <= maxW {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return strings.TrimRight(string(r[:lo]), " ") + ellipsis
}

// wrap breaks s into at most maxLines lines of at most maxW pixels, breaking
// after spaces, '-', '_' and '/' (not after '.' or ',', which would split
// numbers such as 7.10 and 1,000), and truncating the last line with
// an ellipsis when the text does not fit.
func (fs *fontSet) wrap(s string, size float64, bold bool, maxW float64, maxLines int) []string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return nil
	}
	if fs.width(s, size, bold) <= maxW || maxLines <= 1 {
		return []string{fs.truncate(s, size, bold, maxW)}
	}
	// tokens keep their trailing break character; spaces are kept too and
	// trimmed at line ends.
	var tokens []string
	start := 0
	for i, ch := range s {
		switch ch {
		case ' ', '-', '_', '/':
			end := i + utf8.RuneLen(ch)
			tokens = append(tokens, s[start:end])
			start = end
		}
	}
	if start < len(s) {
		tokens = append(tokens, s[start:])
	}
	var lines []string
	cur := ""
	for i, t := range tokens {
		if len(lines) == maxLines-1 {
			// last line: everything that is left
			rest := cur + strings.Join(tokens[i:], "")
			lines = append(lines, fs.truncate(strings.TrimSpace(rest), size, bold, maxW))
			return lines
		}
		cand := cur + t
		if cur != "" && fs.width(strings.TrimRight(cand, " "), size, bold) > maxW {
			lines = append(lines, fs.truncate(strings.TrimSpace(cur), size, bold, maxW))
			cur = t
			continue
		}
		cur = cand
	}
	if strings.TrimSpace(cur) != "" {
		lines = append(lines, fs.truncate(strings.TrimSpace(cur), size, bold, maxW))
	}
	return lines
}

// wrapBalanced wraps like wrap but evens out the line lengths: it looks for
// the narrowest width that still needs no more lines and no truncation.
func (fs *fontSet) wrapBalanced(s string, size float64, bold bool, maxW float64, maxLines int) []string {
	lines := fs.wrap(s, size, bold, maxW, maxLines)
	if len(lines) < 2 || truncated(lines) {
		return lines
	}
	lo, hi := maxW/float64(len(lines)), maxW
	best := lines
	for range 12 {
		mid := (lo + hi) / 2
		try := fs.wrap(s, size, bold, mid, maxLines)
		if len(try) <= len(lines) && !truncated(try) {
			best, hi = try, mid
		} else {
			lo = mid
		}
	}
	return best
}

func truncated(lines []string) bool {
	for _, l := range lines {
		if strings.HasSuffix(l, ellipsis) {
			return true
		}
	}
	return false
}

// maxWidth is the widest of the strings.
func (fs *fontSet) maxWidth(ss []string, size float64, bold bool) float64 {
	w := 0.0
	for _, s := range ss {
		w = math.Max(w, fs.width(s, size, bold))
	}
	return w
}
