package plot

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// legendNames fits every name to width w at the legend's size, so that no
// two entries read the same: a name is cut at its end ("…") where that
// keeps it apart from the others; names that would then read the same
// keep their start and their end around a "…" (what tells two lines apart
// is often last: "iptables no-match, measured Service first" and "…
// last"); names still alike after that (a very narrow legend) get their
// number in the figure's order in front.
func legendNames(fs *fontSet, names []string, w float64) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fs.truncate(n, legendSize, false, w)
	}
	for _, group := range alike(out) {
		// The shortest end that tells the group's full names apart.
		longest := 0
		for _, i := range group {
			longest = max(longest, utf8.RuneCountInString(names[i]))
		}
		for n := 1; n <= longest; n++ {
			ends := map[string]bool{}
			for _, i := range group {
				ends[lastRunes(names[i], n)] = true
			}
			if len(ends) == len(group) {
				for _, i := range group {
					out[i] = middleCut(fs, names[i], n, w)
				}
				break
			}
		}
	}
	for _, group := range alike(out) {
		for _, i := range group {
			num := strconv.Itoa(i+1) + ". "
			out[i] = num + fs.truncate(names[i], legendSize, false, w-fs.width(num, legendSize, false))
		}
	}
	return out
}

// alike are the groups of indices of ss that hold the same text (two or
// more), in order.
func alike(ss []string) [][]int {
	at := map[string][]int{}
	var order []string
	for i, s := range ss {
		if at[s] == nil {
			order = append(order, s)
		}
		at[s] = append(at[s], i)
	}
	var out [][]int
	for _, s := range order {
		if len(at[s]) > 1 {
			out = append(out, at[s])
		}
	}
	return out
}

func lastRunes(s string, n int) string {
	r := []rune(s)
	if n >= len(r) {
		return s
	}
	return string(r[len(r)-n:])
}

// middleCut is s in width w keeping its last n characters (or more, up
// to the start of the word they begin in, where that fits) and as much
// of its start as fits, joined by "…".
func middleCut(fs *fontSet, s string, n int, w float64) string {
	if fs.width(s, legendSize, false) <= w {
		return s
	}
	r := []rune(s)
	if n > len(r) {
		n = len(r)
	}
	// Take the whole word the end starts in, if it fits in half the room.
	k := len(r) - n
	for k > 0 && r[k-1] != ' ' && fs.width(string(r[k-1:]), legendSize, false) <= w/2 {
		k--
	}
	tail := string(r[k:])
	if k > 0 && r[k-1] == ' ' {
		tail = " " + tail // "measured… first"
	}
	room := w - fs.width(tail, legendSize, false)
	return fs.truncate(strings.TrimRight(string(r[:k]), " "), legendSize, false, room) + tail
}

// LegendTexts are the legend's entries as the figure draws them, in order
// (cut to fit; none when the figure draws no legend).
func (f *Figure) LegendTexts() ([]string, error) {
	d, _, err := f.draw()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range d.prims {
		if p.kind == primText && p.class == "legend" {
			out = append(out, p.text)
		}
	}
	return out, nil
}
