package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	cases := []struct {
		name       string
		bi         debug.BuildInfo
		commit     string
		wantString string
	}{
		{"clean", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}},
			"abc123", "cnlab v1.2.3, commit abc123, go1.26.0"},
		{"dirty", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261101120000-abc123+dirty"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}},
			"abc123-dirty", "cnlab v0.0.0-20261101120000-abc123+dirty, commit abc123-dirty, go1.26.0"},
		{"no vcs", debug.BuildInfo{GoVersion: "go1.26.0"},
			"devel", "cnlab (devel), commit devel, go1.26.0"},
	}
	for _, tc := range cases {
		in := FromBuildInfo(&tc.bi)
		if got := in.Commit(); got != tc.commit {
			t.Errorf("%s: Commit() = %q, want %q", tc.name, got, tc.commit)
		}
		if got := in.String(); got != tc.wantString {
			t.Errorf("%s: String() = %q, want %q", tc.name, got, tc.wantString)
		}
	}
}

func TestReadNamesGo(t *testing.T) {
	if in := Read(); !strings.HasPrefix(in.Go, "go") || in.Version == "" {
		t.Errorf("Read() = %+v", in)
	}
}
