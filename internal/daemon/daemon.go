// Package daemon runs cnlab's own executable again as one of its daemons
// (a lab's flow recorder): a package that has one registers it at init,
// and main, like every test binary's TestMain (testutil.Main), calls
// MaybeRun first, which runs the daemon the environment names and exits.
package daemon

import "os"

var daemons = map[string]func(value string){}

// Register makes MaybeRun call run with the variable's value when the
// environment variable env is set.
func Register(env string, run func(value string)) { daemons[env] = run }

// MaybeRun runs the daemon this process was started as, if any; the
// daemon exits the process itself.
func MaybeRun() {
	for env, run := range daemons {
		if v := os.Getenv(env); v != "" {
			run(v)
		}
	}
}
