//go:build unix

package tokfile

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/boundedread/hostiletest"
)

func TestReadFileRefusesDevicesAndFIFOs(t *testing.T) {
	for _, h := range hostiletest.Paths(t, "tokens.tqtok") {
		err := hostiletest.Within(t, 10*time.Second, h.What, func() error { _, err := ReadFile(h.Path); return err })
		if !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), h.Path) {
			t.Errorf("%s: %v", h.What, err)
		}
	}
}
