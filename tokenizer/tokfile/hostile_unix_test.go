//go:build unix

package tokfile

import (
	"testing"

	"github.com/tq-project/tq/internal/boundedread/hostiletest"
)

func TestReadFileRefusesDevicesAndFIFOs(t *testing.T) {
	hostiletest.Refused(t, map[string]func(string) error{"tokens.tqtok": func(p string) error { _, err := ReadFile(p); return err }})
}
