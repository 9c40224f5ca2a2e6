package policy

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cnlab/cnlab/labels"
)

// Selector is a Kubernetes label selector: every matchLabels pair and every
// expression must hold. The empty selector matches everything.
type Selector struct {
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	Exprs       []Expr            `json:"matchExpressions,omitempty"`
}

// Label selector operators.
const (
	OpIn           = "In"
	OpNotIn        = "NotIn"
	OpExists       = "Exists"
	OpDoesNotExist = "DoesNotExist"
)

// Expr is one matchExpressions entry.
type Expr struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// Matches reports whether a label set satisfies the selector, with the
// semantics of Kubernetes (NotIn and DoesNotExist match a missing key).
func (s Selector) Matches(set map[string]string) bool {
	for k, v := range s.MatchLabels {
		if got, ok := set[k]; !ok || got != v {
			return false
		}
	}
	for _, e := range s.Exprs {
		v, ok := set[e.Key]
		switch e.Operator {
		case OpIn:
			if !ok || !slices.Contains(e.Values, v) {
				return false
			}
		case OpNotIn:
			if ok && slices.Contains(e.Values, v) {
				return false
			}
		case OpExists:
			if !ok {
				return false
			}
		case OpDoesNotExist:
			if ok {
				return false
			}
		}
	}
	return true
}

// Empty reports whether the selector matches everything.
func (s Selector) Empty() bool { return len(s.MatchLabels) == 0 && len(s.Exprs) == 0 }

// mentions reports whether the selector constrains a key.
func (s Selector) mentions(key string) bool {
	if _, ok := s.MatchLabels[key]; ok {
		return true
	}
	for _, e := range s.Exprs {
		if e.Key == key {
			return true
		}
	}
	return false
}

// mentionsPrefix reports whether the selector constrains a key with that
// prefix.
func (s Selector) mentionsPrefix(prefix string) bool {
	for k := range s.MatchLabels {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	for _, e := range s.Exprs {
		if strings.HasPrefix(e.Key, prefix) {
			return true
		}
	}
	return false
}

func (s Selector) String() string {
	if s.Empty() {
		return "{}"
	}
	var parts []string
	for _, k := range labels.SortedKeys(s.MatchLabels) {
		parts = append(parts, k+"="+s.MatchLabels[k])
	}
	for _, e := range s.Exprs {
		switch e.Operator {
		case OpExists:
			parts = append(parts, e.Key)
		case OpDoesNotExist:
			parts = append(parts, "!"+e.Key)
		case OpIn:
			parts = append(parts, e.Key+" in ("+strings.Join(e.Values, ",")+")")
		case OpNotIn:
			parts = append(parts, e.Key+" notin ("+strings.Join(e.Values, ",")+")")
		}
	}
	return strings.Join(parts, ",")
}

// selector validates a raw selector. keyFn maps keys (Cilium's "k8s:"
// prefixes) before validation; nil keeps them.
func (p *parser) selector(r *rawSelector, path string, keyFn func(string) string) (Selector, error) {
	var s Selector
	if r == nil {
		return s, nil
	}
	if keyFn == nil {
		keyFn = func(k string) string { return k }
	}
	if len(r.MatchLabels) > 0 {
		s.MatchLabels = map[string]string{}
		keys := make([]string, 0, len(r.MatchLabels))
		for k := range r.MatchLabels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := r.MatchLabels[k]
			mk := keyFn(k)
			if err := labels.CheckKey(mk); err != nil {
				return s, p.errf(path+".matchLabels", "%v", err)
			}
			if err := labels.CheckValue(v); err != nil {
				return s, p.errf(path+".matchLabels."+k, "%v", err)
			}
			s.MatchLabels[mk] = v
		}
	}
	for i, e := range r.MatchExpressions {
		ep := fmt.Sprintf("%s.matchExpressions[%d]", path, i)
		key := keyFn(e.Key)
		if err := labels.CheckKey(key); err != nil {
			return s, p.errf(ep+".key", "%v", err)
		}
		switch e.Operator {
		case OpIn, OpNotIn:
			if len(e.Values) == 0 {
				return s, p.errf(ep+".values", "must not be empty for operator %s", e.Operator)
			}
		case OpExists, OpDoesNotExist:
			if len(e.Values) > 0 {
				return s, p.errf(ep+".values", "must be empty for operator %s", e.Operator)
			}
		default:
			return s, p.errf(ep+".operator", "unknown operator %q (In, NotIn, Exists, DoesNotExist)", e.Operator)
		}
		for j, v := range e.Values {
			if err := labels.CheckValue(v); err != nil {
				return s, p.errf(fmt.Sprintf("%s.values[%d]", ep, j), "%v", err)
			}
		}
		s.Exprs = append(s.Exprs, Expr{Key: key, Operator: e.Operator, Values: append([]string(nil), e.Values...)})
	}
	return s, nil
}

func itoa(i int) string { return strconv.Itoa(i) }
