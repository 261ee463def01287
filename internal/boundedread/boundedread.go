// Package boundedread opens the files tq reads whole (config.json, tokenizer files, chat
// templates, quantize_config.json, imatrix files, prompt and tool files, verify inputs) and the
// files it maps or streams (GGUF, safetensors, statistics). Paths are untrusted: a config.json
// that is a symlink to /dev/zero, or an imatrix path that names a FIFO, must give an error,
// not exhaust memory or block forever.
//
// Open refuses anything that is not a regular file: it checks the path before opening it (so
// a device is never opened), opens it with O_NONBLOCK where the platform has it (so opening a
// FIFO cannot block), and checks the opened descriptor again with fstat (so a path swapped
// between the check and the open is caught). Symlinks are followed; what they resolve to must
// be a regular file. ReadFile adds a size limit: it refuses a file larger than the limit and
// reads through io.LimitReader(limit+1), so a file that grows while it is read is still
// bounded.
package boundedread

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
)

// Limits shared by several readers. Parsers with a file type of their own keep their limit
// beside the parser and pass it to ReadFile.
const (
	// MaxJSONConfig bounds small JSON side files: config.json, special_tokens_map.json,
	// added_tokens.json, chat templates, quantize_config.json, --tools files.
	MaxJSONConfig = 16 << 20
	// MaxTokenizerJSON bounds tokenizer.json (the largest real ones are tens of MiB).
	MaxTokenizerJSON = 256 << 20
	// MaxTokenizerFile bounds tokenizer.model and tokenizer_config.json.
	MaxTokenizerFile = 64 << 20
	// MaxPromptFile bounds a prompt file (tq run -f).
	MaxPromptFile = 64 << 20
	// MaxTextFile bounds an evaluation text (tq verify --text).
	MaxTextFile = 1 << 30
)

// ErrNotRegular is wrapped by the error for a path that is not a regular file (a FIFO, a
// device, a directory, a socket), or a symlink to one.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by the error for a file over its size limit.
var ErrTooLarge = errors.New("file too large")

// Error is a refused or failed read. It unwraps to ErrNotRegular, ErrTooLarge or the
// operating system's error (so errors.Is(err, fs.ErrNotExist) works).
type Error struct {
	Kind string // what the file is to tq ("config", "imatrix", "prompt file", ...)
	Path string
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Kind == "" {
		return e.Path + ": " + e.Msg
	}
	return e.Kind + " " + e.Path + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Open opens path for reading after checking that it is (or a symlink resolves to) a regular
// file; kind names the file in errors. It returns the file and its fstat information.
func Open(path, kind string) (*os.File, fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, osError(path, kind, err)
	}
	if !st.Mode().IsRegular() {
		return nil, nil, notRegular(path, kind, st.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, nil, osError(path, kind, err)
	}
	st, err = f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, osError(path, kind, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, notRegular(path, kind, st.Mode())
	}
	return f, st, nil
}

// ReadFile reads the regular file at path (see Open), refusing one larger than limit bytes;
// kind names the file in errors.
func ReadFile(path, kind string, limit int64) ([]byte, error) {
	if limit <= 0 || limit >= math.MaxInt {
		return nil, &Error{Kind: kind, Path: path, Msg: fmt.Sprintf("invalid read limit %d", limit), Err: ErrTooLarge}
	}
	f, st, err := Open(path, kind)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, tooLarge(path, kind, fmt.Sprintf("file is %d bytes", st.Size()), limit)
	}
	r := io.LimitReader(f, limit+1)
	b := make([]byte, 0, st.Size()+1)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, osError(path, kind, err)
		}
	}
	if int64(len(b)) > limit {
		return nil, tooLarge(path, kind, "file grew while being read", limit)
	}
	return b, nil
}

// CheckRegular returns an error when path exists and is not a regular file (or a symlink to
// one); kind names the file in errors. A missing path is not an error: it is for optional
// files whose absence is fine but whose replacement by a device or FIFO is not.
func CheckRegular(path, kind string) error {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return osError(path, kind, err)
	}
	if !st.Mode().IsRegular() {
		return notRegular(path, kind, st.Mode())
	}
	return nil
}

func osError(path, kind string, err error) error {
	msg := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		msg = pe.Err.Error()
	}
	return &Error{Kind: kind, Path: path, Msg: msg, Err: err}
}

func notRegular(path, kind string, m fs.FileMode) error {
	what := Describe(m)
	msg := "is " + what + ", not a regular file"
	if lst, err := os.Lstat(path); err == nil && lst.Mode()&fs.ModeSymlink != 0 {
		if target, err := filepath.EvalSymlinks(path); err == nil {
			msg = "is a symlink to " + target + ", " + what + ", not a regular file"
		} else {
			msg = "is a symlink to " + what + ", not a regular file"
		}
	}
	return &Error{Kind: kind, Path: path, Msg: msg, Err: ErrNotRegular}
}

func tooLarge(path, kind, what string, limit int64) error {
	return &Error{Kind: kind, Path: path, Err: ErrTooLarge,
		Msg: fmt.Sprintf("%s, over the %s limit for this file", what, FormatSize(limit))}
}

// Describe names the kind of file mode m describes ("a named pipe (FIFO)", "a character
// device", ...).
func Describe(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "an irregular file"
}

// FormatSize writes a byte count as "N bytes", or in KiB/MiB/GiB when it is a whole multiple.
func FormatSize(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s (%d bytes)", n>>u.shift, u.name, n)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// LimitReader returns a reader of r (the file at path, for errors) that fails with an
// ErrTooLarge error once r holds more than limit bytes, for files that are streamed rather
// than read whole.
func LimitReader(r io.Reader, path, kind string, limit int64) io.Reader {
	return &limitReader{r: io.LimitReader(r, limit+1), path: path, kind: kind, limit: limit}
}

type limitReader struct {
	r          io.Reader
	path, kind string
	limit, n   int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.n > l.limit {
		over := int(l.n - l.limit)
		return n - over, tooLarge(l.path, l.kind, "file grew while being read", l.limit)
	}
	return n, err
}
