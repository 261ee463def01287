//go:build unix

package prompts

import (
	"testing"

	"github.com/tq-project/tq/internal/boundedread/hostiletest"
)

func TestLoadFilesRefusesDevicesAndFIFOs(t *testing.T) {
	load := func(p string) error { _, err := LoadFiles(p); return err }
	hostiletest.Refused(t, map[string]func(string) error{"p.txt": load, "p.json": load, "p.jsonl": load})
}
