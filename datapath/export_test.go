package datapath

import "github.com/cnlab/cnlab/internal/fault"

// SetAfterKernel sets the hook ApplyHosts calls between a host's kernel
// transaction and the save of its state, for the fault-injection tests.
func SetAfterKernel(f func(host string)) {
	if f == nil {
		fault.SetHook(nil)
		return
	}
	fault.SetHook(func(point, host string) error {
		if point == "kernel" {
			f(host)
		}
		return nil
	})
}

// SetSaveFault makes SaveState fail with the error f returns for a path
// (nil: no fault), for the fault-injection tests.
func SetSaveFault(f func(path string) error) { saveFault = f }
