//go:build linux

package convert

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tq-project/tq/internal/fixtures"
)

// A full disk (simulated with RLIMIT_FSIZE in a child process) fails cleanly.
func TestDiskFull(t *testing.T) {
	if os.Getenv("TQ_CONVERT_DISKFULL_CHILD") != "" {
		diskFullChild()
		return
	}
	dir := genModel(t, fixtures.Preset("qwen3"))
	outDir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDiskFull$", "-test.v")
	cmd.Env = append(os.Environ(), "TQ_CONVERT_DISKFULL_CHILD="+dir+"|"+filepath.Join(outDir, "out.gguf"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "CHILD-ERROR:") || !strings.Contains(string(out), "file too large") {
		t.Fatalf("child did not report the write failure:\n%s", out)
	}
	if f := dirFiles(t, outDir); len(f) != 0 {
		t.Errorf("files left: %v", f)
	}
}

func diskFullChild() {
	parts := strings.SplitN(os.Getenv("TQ_CONVERT_DISKFULL_CHILD"), "|", 2)
	// without this the kernel kills the process with SIGXFSZ instead of failing the write
	signal.Ignore(syscall.SIGXFSZ)
	lim := syscall.Rlimit{Cur: 1 << 20, Max: 1 << 20}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		os.Stdout.WriteString("CHILD-SETUP-FAILED: " + err.Error() + "\n")
		os.Exit(3)
	}
	_, err := Convert(context.Background(), parts[0], parts[1], Options{Types: TypeOptions{OutType: "f32"}})
	if err == nil {
		os.Stdout.WriteString("CHILD-NO-ERROR\n")
		return
	}
	os.Stdout.WriteString("CHILD-ERROR: " + err.Error() + "\n")
}
