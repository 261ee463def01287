// Package safeout creates output files without destroying what is already at the path.
// Every tq writer (GGUF, token files, calibration statistics, reference logits,
// safetensors, reports) goes through it, so the rules below hold for all of them
// (docs/safety.md):
//
//   - no file at the path: the data goes to a hidden temporary file ".NAME.tmp-N" in the
//     same directory, which is fsynced and renamed to NAME on Commit; permission Perm
//     (0644) less the umask.
//   - an existing regular file: replaced the same way; the new file keeps the old
//     file's permission bits (and, when running as root, its owner and group). A file
//     without any write permission bit (e.g. 0444), or one the process may not write,
//     is refused, as cp without -f refuses it; nothing is written.
//   - a symbolic link: never replaced. When it resolves to a regular file that file is
//     written (by temporary file and rename in the target's directory) and the link is
//     kept; a link to a device or FIFO streams to it; a dangling link is refused.
//   - a character device or FIFO (e.g. /dev/null): written directly, in order, without
//     temporary file, rename or fsync; its write errors (ENOSPC from /dev/full) are
//     returned. A FIFO without a reader is refused at once rather than blocking. Writers
//     that must seek (RegularOnly) refuse both.
//   - a directory, block device, socket or other special file: refused.
//
// While a temporary file is being written its writer holds an exclusive flock(2) on it.
// Create removes the temporary files of the same output that earlier, killed runs left
// behind (name ".NAME.tmp-<digits>", regular file, and only when it can take that lock,
// i.e. no live process is writing it); see RemoveStale.
package safeout

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
)

// Options configures Create.
type Options struct {
	// Perm is the permission of a new file, before the umask; 0 means 0644. A replaced
	// file keeps its own permission bits.
	Perm os.FileMode
	// NoSync skips the fsync of the file and of its directory (outputs that are cheap to
	// regenerate, such as test fixtures).
	NoSync bool
	// RegularOnly refuses character devices and FIFOs: for writers that seek back into
	// their output.
	RegularOnly bool
}

// File is an output being written. It is not safe for concurrent use.
type File struct {
	path   string // as given to Create
	target string // the file created or replaced: path, or what the symbolic link resolves to
	tmp    string // temporary file; "" when streaming
	f      *os.File
	stream string // "character device" or "FIFO" when written directly
	noSync bool
	synced bool
	done   bool // committed or aborted
}

var notify atomic.Pointer[func(string)]

// SetNotify sets the function that receives one-line notes on what was done besides a
// plain write: a symbolic link written through, a device or FIFO written directly, stale
// temporary files or superseded shards removed. nil discards the notes.
func SetNotify(f func(msg string)) {
	if f == nil {
		notify.Store(nil)
		return
	}
	notify.Store(&f)
}

// Notef sends a note to the function set with SetNotify.
func Notef(format string, args ...any) {
	if f := notify.Load(); f != nil {
		(*f)(fmt.Sprintf(format, args...))
	}
}

// Create starts writing path according to the package rules. Errors name the path.
func Create(path string, o Options) (*File, error) {
	if o.Perm == 0 {
		o.Perm = 0o644
	}
	if path == "" {
		return nil, errors.New("empty output path")
	}
	target, fi, err := resolve(path)
	if err != nil {
		return nil, err
	}
	out := &File{path: path, target: target, noSync: o.NoSync}
	if fi != nil && !fi.Mode().IsRegular() {
		kind := "FIFO"
		if fi.Mode()&fs.ModeCharDevice != 0 {
			kind = "character device"
		}
		if o.RegularOnly {
			return nil, fmt.Errorf("%s is a %s; this output must be a regular file", path, kind)
		}
		f, err := openStream(target, kind)
		if err != nil {
			return nil, err
		}
		out.f, out.stream = f, kind
		Notef("%s is a %s: writing to it directly (no temporary file, no rename)", path, kind)
		return out, nil
	}
	if target != path {
		Notef("%s is a symbolic link: writing its target %s (the link is kept)", path, target)
	}
	dir, base := filepath.Split(target)
	if dir == "" {
		dir = "."
	}
	RemoveStale(dir, func(b string) bool { return b == base })
	perm := o.Perm
	if fi != nil {
		perm = fi.Mode().Perm()
	}
	f, tmp, err := createTemp(dir, base, perm)
	if err != nil {
		return nil, fmt.Errorf("create temporary file for %s in %s: %w", path, dir, err)
	}
	if fi != nil {
		// OpenFile applied the umask: give the new file exactly the old file's bits.
		if err := f.Chmod(perm); err != nil {
			f.Close()
			os.Remove(tmp)
			return nil, fmt.Errorf("chmod %s: %w", tmp, err)
		}
		keepOwner(f, fi)
	}
	out.f, out.tmp = f, tmp
	return out, nil
}

// resolve classifies what is at path. It returns the file to create or replace (path
// itself, or the target of a symbolic link) and its FileInfo (nil when nothing exists),
// or an error for what must not be written.
func resolve(path string) (string, fs.FileInfo, error) {
	lfi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return path, nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	target, fi := path, lfi
	if lfi.Mode()&fs.ModeSymlink != 0 {
		if fi, err = os.Stat(path); err != nil {
			dest, _ := os.Readlink(path)
			if errors.Is(err, fs.ErrNotExist) {
				return "", nil, fmt.Errorf("%s is a symbolic link to %s, which does not exist: refusing to create a file through a dangling link", path, dest)
			}
			return "", nil, fmt.Errorf("%s is a symbolic link to %s: %w", path, dest, err)
		}
		if fi.Mode().IsRegular() {
			if target, err = filepath.EvalSymlinks(path); err != nil {
				return "", nil, err
			}
		}
	}
	m := fi.Mode()
	switch {
	case m.IsRegular():
		if m.Perm()&0o222 == 0 {
			return "", nil, fmt.Errorf("%s is read-only (mode %04o): not replacing it; remove it or make it writable first", path, m.Perm())
		}
		if err := canWrite(target); err != nil {
			return "", nil, fmt.Errorf("%s: not replacing a file this user may not write: %w", path, err)
		}
		return target, fi, nil
	case m.IsDir():
		return "", nil, fmt.Errorf("%s is a directory", path)
	case m&fs.ModeNamedPipe != 0, m&fs.ModeCharDevice != 0:
		return path, fi, nil
	case m&fs.ModeDevice != 0:
		return "", nil, fmt.Errorf("%s is a block device: refusing to write to it", path)
	default:
		return "", nil, fmt.Errorf("%s is not a regular file (mode %s): refusing to write to it", path, m.Type())
	}
}

// tempRe matches the temporary files of this package: ".NAME.tmp-<digits>".
var tempRe = regexp.MustCompile(`^\.(.+)\.tmp-([0-9]+)$`)

func createTemp(dir, base string, perm os.FileMode) (*os.File, string, error) {
	var last error
	for range 100 {
		name := filepath.Join(dir, "."+base+".tmp-"+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			last = err
			continue
		}
		if err != nil {
			return nil, "", err
		}
		// Lock before anyone can mistake it for a stale file. A RemoveStale that locked it
		// first may be about to remove it (lock fails) or has removed it (the name now
		// leads elsewhere): take another name then.
		switch held, err := lockTemp(f, name); {
		case err != nil:
			f.Close()
			os.Remove(name)
			return nil, "", err
		case !held:
			f.Close()
			last = fmt.Errorf("%s was taken by a concurrent cleanup", name)
			continue
		}
		return f, name, nil
	}
	return nil, "", last
}

// RemoveStale removes the temporary files in dir left by writes of outputs whose base name
// satisfies match, provided nothing holds them: each must be a regular file named
// ".NAME.tmp-<digits>" on which an exclusive flock can be taken without waiting (a live
// writer holds that lock until it commits or aborts). Where flock is not supported
// nothing is removed. It returns the paths removed and notes each one.
func RemoveStale(dir string, match func(base string) bool) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		m := tempRe.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() || !match(m[1]) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if removeUnlocked(p) {
			removed = append(removed, p)
			Notef("removed %s, a temporary file left by an interrupted run", p)
		}
	}
	return removed
}

// Path returns the path given to Create.
func (f *File) Path() string { return f.path }

// Target returns the file that Commit creates or replaces (the resolved target when Path
// is a symbolic link), or the device or FIFO written directly.
func (f *File) Target() string { return f.target }

// Name returns the file being written: the temporary file, or the device or FIFO.
func (f *File) Name() string {
	if f.tmp != "" {
		return f.tmp
	}
	return f.target
}

// Streaming returns "character device" or "FIFO" when the output is written directly,
// "" otherwise.
func (f *File) Streaming() string { return f.stream }

// Write writes to the temporary file, or to the device or FIFO.
func (f *File) Write(p []byte) (int, error) {
	if f.done {
		return 0, fmt.Errorf("write %s: output already closed", f.path)
	}
	return f.f.Write(p)
}

// WriteAt, Seek and Read work on the temporary file (Create with RegularOnly).
func (f *File) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(p, off) }

// Seek sets the offset of the temporary file.
func (f *File) Seek(offset int64, whence int) (int64, error) { return f.f.Seek(offset, whence) }

// Read reads the temporary file.
func (f *File) Read(p []byte) (int, error) { return f.f.Read(p) }

// Finish fsyncs the temporary file (nothing for a device or FIFO) but keeps it open and
// locked; Commit finishes the job. A failed Finish aborts.
func (f *File) Finish() error {
	if f.done {
		return fmt.Errorf("%s: output already closed", f.path)
	}
	if f.synced || f.stream != "" || f.noSync {
		f.synced = true
		return nil
	}
	if err := f.f.Sync(); err != nil {
		f.Abort()
		return fmt.Errorf("fsync %s: %w", f.tmp, err)
	}
	f.synced = true
	return nil
}

// Commit finishes the output: the temporary file is fsynced and renamed over the target,
// then the directory is fsynced; a device or FIFO is closed. On error the temporary file
// is removed and the target is untouched.
func (f *File) Commit() error {
	if err := f.Finish(); err != nil {
		return err
	}
	f.done = true
	if f.stream != "" {
		if err := f.f.Close(); err != nil {
			return fmt.Errorf("close %s: %w", f.target, err)
		}
		return nil
	}
	if err := os.Rename(f.tmp, f.target); err != nil {
		f.f.Close()
		os.Remove(f.tmp)
		return fmt.Errorf("rename %s to %s: %w", f.tmp, f.target, err)
	}
	// Closing after the rename keeps the lock until the final name exists.
	cerr := f.f.Close()
	if !f.noSync {
		syncDir(filepath.Dir(f.target))
	}
	if cerr != nil {
		return fmt.Errorf("close %s: %w", f.target, cerr)
	}
	return nil
}

// Abort discards the output: the temporary file is removed (a device or FIFO is closed;
// what was written to it stays written). It does nothing after Commit.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	if f.tmp != "" {
		os.Remove(f.tmp)
	}
	f.f.Close()
}

// Write creates path with Create, lets fill write the content through a 1 MiB buffer and
// commits; on any error the output is aborted.
func Write(path string, o Options, fill func(w io.Writer) error) error {
	f, err := Create(path, o)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := fill(bw); err != nil {
		f.Abort()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

// WriteFile writes data to path with Create and Commit.
func WriteFile(path string, data []byte, o Options) error {
	f, err := Create(path, o)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

// syncDir makes a rename in dir durable (best effort: not every platform or file system
// supports fsync on a directory).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// CheckNotInput returns an error naming both paths when writing output would write into
// one of inputs: output is the same file (os.SameFile, after following symbolic links),
// i.e. the same path, a symbolic link to the input or another hard link of it. Inputs
// that cannot be stat'ed are ignored; so is an output that does not exist.
func CheckNotInput(output string, inputs []string) error {
	ofi, err := os.Stat(output)
	if err != nil {
		return nil
	}
	for _, in := range inputs {
		ifi, err := os.Stat(in)
		if err != nil || !os.SameFile(ofi, ifi) {
			continue
		}
		how := "is"
		if lfi, err := os.Lstat(output); err == nil && lfi.Mode()&fs.ModeSymlink != 0 {
			how = "is a symbolic link to"
		} else if a, b := realPath(output), realPath(in); a != "" && b != "" && a != b {
			how = "is a hard link of"
		}
		return fmt.Errorf("refusing to write %s: it %s the input file %s", output, how, in)
	}
	return nil
}

func realPath(p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	a, err := filepath.Abs(r)
	if err != nil {
		return ""
	}
	return a
}
