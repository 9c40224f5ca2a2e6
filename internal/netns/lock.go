package netns

import "runtime"

// lockForExec pins the calling goroutine to its thread for good, right
// before the thread's namespaces are changed and the process image replaced.
func lockForExec() { runtime.LockOSThread() }
