//go:build unix

package prompts

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/boundedread/hostiletest"
)

func TestLoadFilesRefusesDevicesAndFIFOs(t *testing.T) {
	for _, name := range []string{"p.txt", "p.json", "p.jsonl"} {
		for _, h := range hostiletest.Paths(t, name) {
			err := hostiletest.Within(t, 10*time.Second, name+" "+h.What, func() error { _, err := LoadFiles(h.Path); return err })
			if !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), h.Path) {
				t.Errorf("%s as %s: %v", h.What, name, err)
			}
		}
	}
}
