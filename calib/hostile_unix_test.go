//go:build unix

package calib

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/boundedread/hostiletest"
)

// calib's inputs that are symlinks to /dev/zero or FIFOs are refused at once.
func TestInputsRefuseDevicesAndFIFOs(t *testing.T) {
	readers := map[string]func(string) error{
		"quantize_config.json": func(p string) error { _, err := LoadConfig(p); return err },
		"stats.tqstats":        func(p string) error { _, err := LoadStats(p); return err },
		"imatrix.gguf":         func(p string) error { _, err := LoadIMatrix(p, nil); return err },
		"tokens.tqtok":         func(p string) error { _, _, err := SequencesFromTokenFile(p, ""); return err },
	}
	for name, read := range readers {
		for _, h := range hostiletest.Paths(t, name) {
			err := hostiletest.Within(t, 10*time.Second, name+" "+h.What, func() error { return read(h.Path) })
			if !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), h.Path) {
				t.Errorf("%s as %s: %v", h.What, name, err)
			}
		}
	}
}
