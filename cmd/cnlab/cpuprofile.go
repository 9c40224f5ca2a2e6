package main

import (
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a CPU profile of this process to the file named
// by CNLAB_CPUPROFILE, if set (a developer's knob: how `up` and `down`
// spend their time at scale, BENCHMARKS.md). The returned function stops it.
func startCPUProfile() func() {
	path := os.Getenv("CNLAB_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
