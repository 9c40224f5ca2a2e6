package ebpf

import (
	"testing"

	"github.com/cnlab/cnlab/internal/testutil"
)

// TestMain fails the package's tests if they leave namespaces, links,
// nftables tables or bpffs pins behind (the program tests load their maps
// unpinned and create none of these).
func TestMain(m *testing.M) { testutil.Main(m) }
