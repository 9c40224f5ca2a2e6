package netns

import (
	"errors"
	"strings"
	"testing"
)

func TestRunError(t *testing.T) {
	exit := errors.New("exit status 1")
	for _, tc := range []struct{ stderr, want string }{
		{"", "nft -f - in ns1: exit status 1"},
		{" \n\t", "nft -f - in ns1: exit status 1"},
		{"\n  Error: syntax error\n", "nft -f - in ns1: exit status 1: Error: syntax error"},
		{strings.Repeat("x", maxStderr+1), "nft -f - in ns1: exit status 1: " + strings.Repeat("x", maxStderr) + "..."},
		{strings.Repeat("x", maxStderr), "nft -f - in ns1: exit status 1: " + strings.Repeat("x", maxStderr)},
	} {
		err := runError("nft -f -", "ns1", exit, tc.stderr)
		if err.Error() != tc.want {
			t.Errorf("stderr %.20q: %.60q, want %.60q", tc.stderr, err, tc.want)
		}
		if !errors.Is(err, exit) {
			t.Errorf("stderr %.20q: %v does not wrap the exit error", tc.stderr, err)
		}
	}
}
