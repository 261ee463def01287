//go:build unix

package safeout

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newFileMode is perm less the process umask.
func newFileMode(perm os.FileMode) os.FileMode {
	u := unix.Umask(0)
	unix.Umask(u)
	return perm &^ os.FileMode(u)
}

func flockSupported(t *testing.T, dir string) bool {
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	return flock(int(f.Fd())) == nil
}

// mknodChar creates a character device node in dir (never the machine's own /dev
// entries: a bug would replace those). It skips the calling (sub)test unless root.
func mknodChar(t *testing.T, dir, name string, major, minor uint32) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("creating a character device node (%d,%d) needs root; device output not tested", major, minor)
	}
	p := filepath.Join(dir, name)
	if err := mknodChar0666(p, major, minor); err != nil {
		t.Skipf("mknod %s: %v (no device nodes on this file system?)", p, err)
	}
	return p
}

func assertCharDevice(t *testing.T, p string, major, minor uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(uint64(st.Rdev)) != major || unix.Minor(uint64(st.Rdev)) != minor {
		t.Fatalf("%s is no longer the character device (%d,%d): mode %o rdev %x", p, major, minor, st.Mode, st.Rdev)
	}
}

// withTimeout fails the test instead of hanging when fn does not return in time.
func withTimeout(t *testing.T, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still blocked after %v", d)
	}
}

func TestCharDevice(t *testing.T) {
	data := make([]byte, 3<<20)
	t.Run("null", func(t *testing.T) {
		dir := t.TempDir()
		p := mknodChar(t, dir, "null", 1, 3)
		var notes []string
		SetNotify(func(m string) { notes = append(notes, m) })
		defer SetNotify(nil)
		f, err := Create(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if f.Streaming() != "character device" || f.Name() != p {
			t.Fatalf("Streaming %q, Name %s", f.Streaming(), f.Name())
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		assertCharDevice(t, p, 1, 3)
		assertNames(t, dir, "null")
		if len(notes) != 1 || !strings.Contains(notes[0], "character device") {
			t.Fatalf("notes %q", notes)
		}
		// Through a symbolic link: the device is written, the link stays.
		link := filepath.Join(dir, "out.gguf")
		os.Symlink("null", link)
		if err := WriteFile(link, data, Options{}); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("link replaced: %v", err)
		}
		assertCharDevice(t, p, 1, 3)
		// Writers that seek refuse it.
		if _, err := Create(p, Options{RegularOnly: true}); err == nil || !strings.Contains(err.Error(), "character device") {
			t.Fatalf("RegularOnly: %v", err)
		}
		assertCharDevice(t, p, 1, 3)
	})
	t.Run("full", func(t *testing.T) {
		dir := t.TempDir()
		p := mknodChar(t, dir, "full", 1, 7)
		err := Write(p, Options{}, func(w io.Writer) error { _, err := w.Write(data); return err })
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("write to a full device: %v, want ENOSPC", err)
		}
		assertCharDevice(t, p, 1, 7)
		assertNames(t, dir, "full")
	})
}

func TestFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// No reader: refused at once, not a blocked open.
	withTimeout(t, 10*time.Second, func() {
		if _, err := Create(p, Options{}); err == nil || !strings.Contains(err.Error(), "without a reader") {
			t.Errorf("FIFO without reader: %v", err)
		}
	})
	if _, err := Create(p, Options{RegularOnly: true}); err == nil || !strings.Contains(err.Error(), "FIFO") {
		t.Fatalf("RegularOnly: %v", err)
	}
	// With a reader: streamed through, in order; the FIFO stays a FIFO.
	r, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetReadDeadline(time.Now().Add(20 * time.Second))
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	var f *File
	withTimeout(t, 10*time.Second, func() { f, err = Create(p, Options{}) })
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(r); got <- b }()
	withTimeout(t, 20*time.Second, func() {
		if _, err := f.Write(data); err != nil {
			t.Error(err)
		}
		if err := f.Commit(); err != nil {
			t.Error(err)
		}
	})
	select {
	case b := <-got:
		if string(b) != string(data) {
			t.Fatalf("reader got %d bytes, want the %d written", len(b), len(data))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("reader did not finish")
	}
	if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("FIFO replaced: %v %v", fi.Mode(), err)
	}
	assertNames(t, dir, "pipe")
}

// TestKeepOwner: root replacing another user's file gives the new file the same owner.
func TestKeepOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("x"), 0o644)
	if err := os.Chown(p, 4321, 4322); err != nil {
		t.Skip(err)
	}
	if err := WriteFile(p, []byte("y"), Options{}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 4321 || st.Gid != 4322 {
		t.Fatalf("owner %d:%d, want 4321:4322", st.Uid, st.Gid)
	}
}
