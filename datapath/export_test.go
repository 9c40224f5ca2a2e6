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
		if point == fault.Kernel {
			f(host)
		}
		return nil
	})
}
