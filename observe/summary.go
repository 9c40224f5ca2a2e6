package observe

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Summary counts flows over a window: per verdict, per policy rule and per
// endpoint pair, and the events lost.
type Summary struct {
	From     time.Time      `json:"from"`
	To       time.Time      `json:"to"`
	Flows    int            `json:"flows"`
	Lost     uint64         `json:"lost"`
	Verdicts map[string]int `json:"verdicts"`
	Policies []Count        `json:"policies"`
	Pairs    []Count        `json:"pairs"`
	policies map[string]int // by PolicyRef.String
	pairs    map[string]int // "from -> to verdict"
}

// Count is one row of a summary.
type Count struct {
	Key   string `json:"key"`
	Count int    `json:"count"`
}

// Add counts one record.
func (s *Summary) Add(r Record) {
	if s.Verdicts == nil {
		s.Verdicts, s.policies, s.pairs = map[string]int{}, map[string]int{}, map[string]int{}
	}
	if r.Lost != nil {
		s.Lost += r.Lost.Lost
		return
	}
	f := r.Flow
	if s.Flows == 0 || f.Time.Before(s.From) {
		s.From = f.Time
	}
	if f.Time.After(s.To) {
		s.To = f.Time
	}
	s.Flows++
	s.Verdicts[f.Verdict]++
	if f.Policy != nil {
		s.policies[f.Policy.String()+" ("+f.Verdict+")"]++
	}
	s.pairs[fmt.Sprintf("%s -> %s %s", name(f.From, f.SrcIP), name(f.To, f.DstIP), f.Verdict)]++
}

func name(id, ip string) string {
	if id == "" {
		return ip
	}
	return id
}

// Done sorts the counts (most first).
func (s *Summary) Done() {
	if s.Verdicts == nil {
		s.Verdicts = map[string]int{}
	}
	s.Policies, s.Pairs = sorted(s.policies), sorted(s.pairs)
}

func sorted(m map[string]int) []Count {
	out := make([]Count, 0, len(m))
	for k, n := range m {
		out = append(out, Count{k, n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// Print writes the summary as text.
func (s *Summary) Print(w io.Writer) {
	if s.Flows == 0 {
		fmt.Fprintf(w, "no flows")
		if s.Lost > 0 {
			fmt.Fprintf(w, " (%d lost)", s.Lost)
		}
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, "%d flows from %s to %s", s.Flows, s.From.Local().Format("15:04:05.000"), s.To.Local().Format("15:04:05.000"))
	if s.Lost > 0 {
		fmt.Fprintf(w, ", %d lost", s.Lost)
	}
	fmt.Fprintln(w)
	var vs []string
	for _, v := range []string{Forwarded, Dropped, Redirected, Translated} {
		if n := s.Verdicts[v]; n > 0 {
			vs = append(vs, fmt.Sprintf("%s %d", v, n))
		}
	}
	fmt.Fprintf(w, "verdicts: %s\n", strings.Join(vs, ", "))
	for _, t := range []struct {
		title string
		rows  []Count
	}{{"by policy rule", s.Policies}, {"by endpoint pair", s.Pairs}} {
		if len(t.rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s:\n", t.title)
		for _, c := range t.rows {
			fmt.Fprintf(w, "  %7d  %s\n", c.Count, c.Key)
		}
	}
}
