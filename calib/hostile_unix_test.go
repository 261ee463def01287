//go:build unix

package calib

import (
	"testing"

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
	hostiletest.Refused(t, readers)
}
