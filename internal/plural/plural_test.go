package plural

import "testing"

func TestN(t *testing.T) {
	for _, tc := range []struct {
		n          int
		noun, want string
	}{
		{1, "policy", "1 policy"}, {2, "policy", "2 policies"}, {0, "policy", "0 policies"},
		{1, "namespace", "1 namespace"}, {3, "namespace", "3 namespaces"},
		{2, "key", "2 keys"}, {2, "regression", "2 regressions"}, {2, "match", "2 matches"},
		{2, "box", "2 boxes"}, {1, "identity", "1 identity"}, {9, "identity", "9 identities"},
		{2, "lab build", "2 lab builds"},
	} {
		if got := N(tc.n, tc.noun); got != tc.want {
			t.Errorf("N(%d, %q) = %q, want %q", tc.n, tc.noun, got, tc.want)
		}
	}
}
