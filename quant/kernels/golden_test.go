package kernels

import (
	"testing"

	"github.com/tq-project/tq/internal/testenv"
)

// loadGolden reads testdata/golden/<name>.bin (layout in its README, parsed by
// testenv.ParseGolden) and checks that its blocks are typeSize bytes, as the kernels expect.
func loadGolden(t testing.TB, name string, typeSize int) *testenv.GoldenFile {
	t.Helper()
	g := testenv.LoadGolden(t, name)
	if g.TypeSize != typeSize {
		t.Fatalf("golden %s: type size %d, want %d", name, g.TypeSize, typeSize)
	}
	return g
}
