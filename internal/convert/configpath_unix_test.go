//go:build unix

package convert

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/fixtures"
)

// An imatrix named by quantize_config.json that is a FIFO made convert hang (ignoring
// SIGTERM); one that is a symlink to /dev/zero exhausted memory; a quantize_config.json that
// is a symlink to /dev/zero did too. Each now fails at once with an error naming the file.
func TestTurboQuantRefusesIrregularConfigFiles(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen3"))
	plan := func(cfgPath string) error {
		done := make(chan error, 1)
		go func() {
			_, err := PlanConvert(dir, Options{Types: TypeOptions{TurboQuant: true, ConfigPath: cfgPath}})
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatalf("PlanConvert with %s still running after 20s", cfgPath)
			return nil
		}
	}
	const cfgJSON = `{"quant_method":"turboquant","imatrix":"imatrix.gguf"}`

	fifoDir := t.TempDir()
	cfg := filepath.Join(fifoDir, "quantize_config.json")
	writeFile(t, cfg, cfgJSON)
	fifo := filepath.Join(fifoDir, "imatrix.gguf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := plan(cfg); !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), fifo) {
		t.Errorf("imatrix FIFO: %v", err)
	}

	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skipf("no /dev/zero: %v", err)
	}
	zeroDir := t.TempDir()
	cfg = filepath.Join(zeroDir, "quantize_config.json")
	writeFile(t, cfg, cfgJSON)
	zero := filepath.Join(zeroDir, "imatrix.gguf")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	// Refused by the folder rule already: /dev/zero is outside the config's folder.
	if err := plan(cfg); err == nil || !strings.Contains(err.Error(), cfg) || !strings.Contains(err.Error(), "/dev/zero") {
		t.Errorf("imatrix symlink to /dev/zero: %v", err)
	}

	cfg = filepath.Join(t.TempDir(), "quantize_config.json")
	if err := os.Symlink("/dev/zero", cfg); err != nil {
		t.Fatal(err)
	}
	if err := plan(cfg); !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), cfg) {
		t.Errorf("quantize_config.json symlink to /dev/zero: %v", err)
	}
}
