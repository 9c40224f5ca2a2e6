package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

func newDownCmd(e *env) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "down LAB | --all",
		Short: "Tear a lab down (or every lab), leaving nothing behind",
		Long: `Tear a lab down: kill the processes running inside it, delete its
namespaces and pins, and return once the kernel has destroyed them. What to
delete is found from the kernel's state (names tagged with the lab), so a
lab left half-built by a crash or kill -9 is removed as well. A lab that is
not there is already down: cnlab says so on stderr and exits 0 (an invalid
lab name is still bad input, exit 2).`,
		Example: `  cnlab down multi-host
  cnlab down --all    # every lab on this machine, other users' too`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) || len(args) > 1 {
				return usagef("give one LAB or --all")
			}
			if len(args) == 1 {
				if err := lab.CheckName(args[0]); err != nil {
					return err
				}
			}
			if err := needRoot(); err != nil {
				return err
			}
			start := time.Now()
			if all {
				labs, err := lab.DownAll(e.progress)
				for _, l := range labs {
					fmt.Fprintf(e.stdout, "lab %s is down\n", l)
				}
				if len(labs) == 0 {
					fmt.Fprintln(e.stdout, "no lab is up")
				}
				return err
			}
			err := lab.Down(args[0], e.progress)
			var nf *topology.NotFoundError
			if errors.As(err, &nf) && nf.What == "lab" && nf.Lab == "" {
				// Idempotent, as deletes are in the field (CNI's DEL): a lab
				// that is not there is already down.
				fmt.Fprintf(e.stderr, "cnlab: lab %s not found: nothing to do\n", args[0])
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "lab %s is down (%.2fs)\n", args[0], time.Since(start).Seconds())
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "tear down every cnlab lab on this machine")
	return cmd
}
