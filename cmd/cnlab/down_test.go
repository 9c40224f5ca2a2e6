package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// down --all lists the labs it takes down; on a terminal it asks first and
// only y or yes goes on; without one (scripts) it goes on as before. Pure:
// no lab is touched (issue 37).
func TestConfirmDownAll(t *testing.T) {
	labs := []string{"h-a", "h-b"}
	for _, tc := range []struct {
		ask    bool
		answer string
		want   bool
	}{
		{false, "", true}, // no terminal, or --yes: no question
		{true, "y\n", true},
		{true, "YES\n", true},
		{true, "n\n", false},
		{true, "\n", false},
		{true, "", false}, // end of input
	} {
		var stderr bytes.Buffer
		e := &env{stdout: &bytes.Buffer{}, stderr: &stderr}
		ok, err := confirmDownAll(e, labs, tc.ask, strings.NewReader(tc.answer))
		if ok != tc.want {
			t.Errorf("ask %v, answer %q: go on %v, want %v", tc.ask, tc.answer, ok, tc.want)
		}
		var st exitStatus
		if !ok && (!errors.As(err, &st) || int(st) != exitFail) {
			t.Errorf("answer %q: err %v, want exit 1", tc.answer, err)
		}
		if !strings.Contains(stderr.String(), "down --all: 2 labs on this machine: h-a, h-b") {
			t.Errorf("does not list the labs: %q", stderr.String())
		}
		if asked := strings.Contains(stderr.String(), "[y/N]"); asked != tc.ask {
			t.Errorf("ask %v: asked %v", tc.ask, asked)
		}
	}
}
