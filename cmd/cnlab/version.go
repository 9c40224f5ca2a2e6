package main

import (
	"fmt"

	"github.com/cnlab/cnlab/internal/buildinfo"
	"github.com/spf13/cobra"
)

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print cnlab's version, commit and Go version",
		Long: `Print the module version, the commit cnlab was built from ("-dirty" when
the tree had uncommitted changes, "devel" when the build recorded none) and
the Go version, as the Go toolchain stamped them in the binary. The same
line as cnlab --version; the commit is the one environment.json records.`,
		Example: `  cnlab version
  cnlab --version`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintln(e.stdout, buildinfo.Read())
			return err
		},
	}
}
