//go:build unix

package verify

import (
	"testing"

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
	hostiletest.Refused(t, readers)
}
