package profile

import (
	"testing"

	"github.com/cnlab/cnlab/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }
