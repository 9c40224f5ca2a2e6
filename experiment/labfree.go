package experiment

import (
	"fmt"
	"slices"

	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/lab"
)

// CheckLabFree refuses, as Run would, a --lab that names a lab already up
// (the run would tear it down at its end), so that a command can refuse
// before it says anything of the run.
func CheckLabFree(name string) error {
	labs, err := lab.Labs()
	if err != nil {
		return fmt.Errorf("list labs: %w", err)
	}
	return checkLabFree(name, labs)
}

func checkLabFree(name string, labs []string) error {
	if slices.Contains(labs, name) {
		return &input.Error{File: "--lab", Msg: fmt.Sprintf("lab %s is already up: a run builds and tears down its own lab, so give a name no lab has (or take it down with cnlab down %s)", name, name)}
	}
	return nil
}
