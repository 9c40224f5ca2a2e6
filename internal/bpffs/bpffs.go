// Package bpffs makes sure the BPF filesystem is mounted where pins go.
package bpffs

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Root is where the BPF filesystem is expected.
const Root = "/sys/fs/bpf"

// Ensure mounts the BPF filesystem at Root when something else (or
// nothing) is there, as on machines whose init does not mount it.
func Ensure() error {
	var st unix.Statfs_t
	if err := unix.Statfs(Root, &st); err != nil {
		return fmt.Errorf("%s: %w", Root, err)
	}
	if st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := unix.Mount("bpf", Root, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount the BPF filesystem at %s: %w", Root, err)
	}
	return nil
}
