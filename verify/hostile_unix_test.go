//go:build unix

package verify

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/boundedread/hostiletest"
	"github.com/tq-project/tq/verify/reflogits"
)

// verify's inputs that are symlinks to /dev/zero or FIFOs are refused at once.
func TestInputsRefuseDevicesAndFIFOs(t *testing.T) {
	readers := map[string]func(string) error{
		"verify.yaml": func(p string) error { _, err := LoadConfig(p); return err },
		"suite.json":  func(p string) error { _, err := LoadSuite(p); return err },
		"ref.logits":  func(p string) error { _, err := reflogits.ReadFile(p); return err },
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
