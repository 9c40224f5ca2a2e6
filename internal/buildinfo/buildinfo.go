// Package buildinfo says which cnlab this is: the module version, the VCS
// revision it was built from (with "-dirty" when the tree was modified) and
// the Go version, as the Go toolchain recorded them in the binary. It is
// read by `cnlab version` and by the environment.json of every run. It
// does no I/O beyond reading the binary's own build information.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info is what the binary knows about its own build.
type Info struct {
	Version  string // module version, "(devel)" when not stamped
	Revision string // VCS revision, "" when unknown
	Modified bool   // the working tree had uncommitted changes
	Go       string // Go toolchain version
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(devel)", Go: runtime.Version()}
	}
	return FromBuildInfo(bi)
}

// FromBuildInfo extracts an Info from Go's build information.
func FromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, Go: bi.GoVersion}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	if in.Go == "" {
		in.Go = runtime.Version()
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// Commit is the VCS revision with "-dirty" when the tree was modified, or
// "devel" when the binary was built without VCS information.
func (in Info) Commit() string {
	if in.Revision == "" {
		return "devel"
	}
	if in.Modified {
		return in.Revision + "-dirty"
	}
	return in.Revision
}

// String is the one line `cnlab version` prints, e.g.
// "cnlab v0.0.0-20261101120000-926e3f8a1b2c, commit 926e3f8…, go1.26.0".
func (in Info) String() string {
	return fmt.Sprintf("cnlab %s, commit %s, %s", in.Version, in.Commit(), in.Go)
}

// Commit is the running binary's revision (see Info.Commit).
func Commit() string { return Read().Commit() }
