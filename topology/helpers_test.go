package topology

import "os/exec"

func execSleep() *exec.Cmd { return exec.Command("sleep", "300") }
