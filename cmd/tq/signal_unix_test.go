//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/fixtures"
)

// signalFixture generates a model whose F32 conversion writes ~40 MiB, long enough to be
// caught mid-write.
func signalFixture(t *testing.T) string {
	t.Helper()
	o := fixtures.Preset("llama")
	o.Hidden, o.Intermediate, o.Heads, o.KVHeads, o.Layers = 512, 1024, 8, 4, 4
	dir := filepath.Join(t.TempDir(), "hf")
	if err := fixtures.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

// temps lists the hidden temporary files of out's name in its directory.
func temps(t *testing.T, out string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(out))
	if err != nil {
		t.Fatal(err)
	}
	var tmp []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "."+filepath.Base(out)+".tmp-") {
			tmp = append(tmp, e.Name())
		}
	}
	return tmp
}

// child is `tq convert` running in a child process (this test binary, TQ_TEST_MAIN=1).
type child struct {
	cmd    *exec.Cmd
	stderr string // file receiving its stderr
	st     *os.ProcessState
	done   chan struct{} // closed when it exited (st set)
}

// convertStopped starts `tq convert` in a child process and stops it (SIGSTOP) while its
// temporary output file exists. ok is false when the child finished before it could be
// caught (the caller tries again).
func convertStopped(t *testing.T, hfDir, out string) (c *child, ok bool) {
	t.Helper()
	c = &child{stderr: filepath.Join(t.TempDir(), "stderr"), done: make(chan struct{})}
	ef, err := os.Create(c.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	c.cmd = exec.Command(os.Args[0], "convert", hfDir, "--outtype", "f32", "--threads", "1", "-o", out)
	c.cmd.Env = append(os.Environ(), "TQ_TEST_MAIN=1")
	c.cmd.Stderr = ef
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.st, _ = c.cmd.Process.Wait(); close(c.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return c, false
		default:
		}
		if len(temps(t, out)) > 0 {
			c.cmd.Process.Signal(syscall.SIGSTOP)
			if _, err := os.Stat(out); len(temps(t, out)) > 0 && errors.Is(err, os.ErrNotExist) {
				return c, true
			}
			c.cmd.Process.Signal(syscall.SIGCONT)
		}
		time.Sleep(200 * time.Microsecond)
	}
	c.cmd.Process.Kill()
	<-c.done
	t.Fatalf("tq convert did not create %s's temporary file within 60s\nstderr: %s", out, c.errText(t))
	return nil, false
}

func (c *child) errText(t *testing.T) string {
	b, _ := os.ReadFile(c.stderr)
	return string(b)
}

// wait waits (at most 60s, then kills) for the child and returns its exit code, or
// -signal when a signal killed it.
func (c *child) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
		t.Fatalf("tq convert still running 60s after the signal\nstderr: %s", c.errText(t))
	}
	ws := c.st.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return -int(ws.Signal())
	}
	return ws.ExitStatus()
}

// TestSignalMidWrite: SIGHUP (a dropped SSH session), SIGINT and SIGTERM in the middle of
// writing the output stop tq with 128+signal, leaving neither the output nor a temporary
// file; after SIGKILL the temporary file stays, and the next run of the same output
// removes it.
func TestSignalMidWrite(t *testing.T) {
	// Signals this test process ignores (nohup, background job) would stay ignored in the
	// child: relaying them here makes the child start with the default action.
	relay := make(chan os.Signal, 8)
	signal.Notify(relay, syscall.SIGHUP, syscall.SIGINT)
	defer signal.Stop(relay)

	hfDir := signalFixture(t)
	for _, c := range []struct {
		sig  syscall.Signal
		code int
		name string
	}{{syscall.SIGHUP, 129, "SIGHUP"}, {syscall.SIGINT, 130, "SIGINT"}, {syscall.SIGTERM, 143, "SIGTERM"}} {
		t.Run(c.name, func(t *testing.T) {
			outDir := t.TempDir()
			out := filepath.Join(outDir, "m.gguf")
			for attempt := 1; ; attempt++ {
				ch, ok := convertStopped(t, hfDir, out)
				if ok {
					ch.cmd.Process.Signal(c.sig)
					ch.cmd.Process.Signal(syscall.SIGCONT)
				}
				code := ch.wait(t)
				if !ok || code == 0 {
					// Finished before the signal could interrupt it: try again.
					os.Remove(out)
					os.Remove(out + ".sha256")
					if attempt == 5 {
						t.Fatalf("tq convert finished before %s could interrupt it in 5 attempts", c.name)
					}
					continue
				}
				if stderr := ch.errText(t); code != c.code || !strings.Contains(stderr, "interrupted by "+c.name) {
					t.Fatalf("exit code %d, want %d; stderr:\n%s", code, c.code, stderr)
				}
				ents, _ := os.ReadDir(outDir)
				if len(ents) != 0 {
					t.Fatalf("left behind after %s: %v", c.name, ents)
				}
				return
			}
		})
	}

	t.Run("SIGKILL", func(t *testing.T) {
		outDir := t.TempDir()
		out := filepath.Join(outDir, "m.gguf")
		var left []string
		for attempt := 1; len(left) == 0; attempt++ {
			ch, ok := convertStopped(t, hfDir, out)
			if ok {
				ch.cmd.Process.Signal(syscall.SIGKILL)
			}
			if code := ch.wait(t); ok && code != -int(syscall.SIGKILL) {
				t.Fatalf("exit %d after SIGKILL", code)
			}
			left = temps(t, out)
			os.Remove(out)
			os.Remove(out + ".sha256")
			if len(left) == 0 && attempt == 5 {
				t.Fatal("could not kill tq convert mid-write in 5 attempts")
			}
		}
		if _, stderr, err := tqRun(t, "convert", hfDir, "--outtype", "q8_0", "-o", out); err != nil {
			t.Fatal(err)
		} else if !strings.Contains(stderr, "removed "+filepath.Join(outDir, left[0])) {
			t.Errorf("the next run does not report removing %s:\n%s", left[0], stderr)
		}
		if rest := temps(t, out); len(rest) != 0 {
			t.Fatalf("stale temporary files survive the next run: %v", rest)
		}
		if _, err := os.Stat(out); err != nil {
			t.Fatal(err)
		}
	})
}
