package datapath

// SetAfterKernel sets the hook ApplyHosts calls between a host's kernel
// transaction and the save of its state, for the fault-injection tests.
func SetAfterKernel(f func(host string)) { afterKernel = f }

// SetSaveFault makes SaveState fail with the error f returns for a path
// (nil: no fault), for the fault-injection tests.
func SetSaveFault(f func(path string) error) { saveFault = f }
