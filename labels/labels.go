// Package labels validates Kubernetes-style names and labels the way the
// Kubernetes API server does (DNS-1123 labels, qualified label keys, label
// values, IANA service names for ports). It is pure logic: no I/O.
package labels

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

var (
	dnsLabelRe  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubRe    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	qualNameRe  = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	portNameRe  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	hasLetterRe = regexp.MustCompile(`[a-z]`)
)

// CheckDNSLabel returns why s is not a DNS-1123 label of at most max
// characters, or nil.
func CheckDNSLabel(s string, max int) error {
	if s == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(s) > max {
		return fmt.Errorf("%q is longer than %d characters", s, max)
	}
	if !dnsLabelRe.MatchString(s) {
		return fmt.Errorf("%q must consist of lower case letters, digits and '-', and start and end with a letter or digit", s)
	}
	return nil
}

// CheckKey returns why k is not a valid label key ([prefix/]name), or nil.
func CheckKey(k string) error {
	name := k
	if i := strings.LastIndex(k, "/"); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if prefix == "" || len(prefix) > 253 || !dnsSubRe.MatchString(prefix) {
			return fmt.Errorf("label key %q: prefix must be a DNS subdomain (lower case, at most 253 characters)", k)
		}
	}
	if name == "" || len(name) > 63 || !qualNameRe.MatchString(name) {
		return fmt.Errorf("label key %q: name must be 1-63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit", k)
	}
	return nil
}

// CheckValue returns why v is not a valid label value, or nil.
func CheckValue(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > 63 || !qualNameRe.MatchString(v) {
		return fmt.Errorf("label value %q must be at most 63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit", v)
	}
	return nil
}

// CheckSet validates every key and value of a label set, in key order so
// the first error is deterministic.
func CheckSet(set map[string]string) error {
	for _, k := range SortedKeys(set) {
		if err := CheckKey(k); err != nil {
			return err
		}
		if err := CheckValue(set[k]); err != nil {
			return fmt.Errorf("key %q: %w", k, err)
		}
	}
	return nil
}

// CheckPortName returns why s is not an IANA service name usable as a
// named container port, or nil.
func CheckPortName(s string) error {
	if len(s) == 0 || len(s) > 15 {
		return fmt.Errorf("port name %q must be 1-15 characters", s)
	}
	if !portNameRe.MatchString(s) || strings.Contains(s, "--") || !hasLetterRe.MatchString(s) {
		return fmt.Errorf("port name %q must be lower case letters, digits and single '-', with at least one letter", s)
	}
	return nil
}

// SortedKeys returns the keys of a label set in order.
func SortedKeys(set map[string]string) []string {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// String renders a label set as k=v,k=v in key order.
func String(set map[string]string) string {
	parts := make([]string, 0, len(set))
	for _, k := range SortedKeys(set) {
		parts = append(parts, k+"="+set[k])
	}
	return strings.Join(parts, ",")
}

// CheckDNSSubdomain returns why s is not a DNS-1123 subdomain (the form of
// Kubernetes object names), or nil.
func CheckDNSSubdomain(s string) error {
	if s == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(s) > 253 || !dnsSubRe.MatchString(s) {
		return fmt.Errorf("%q must be at most 253 characters of lower case letters, digits, '-' and '.', starting and ending with a letter or digit", s)
	}
	return nil
}
