package gguf

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/tq-project/tq/internal/safeout"
)

// WriterOptions configures Create. The zero value writes one file with 32-byte alignment,
// a 1 MiB write buffer and a SHA-256 manifest.
type WriterOptions struct {
	// Alignment of the data section and of every tensor; 0 means DefaultAlignment (32).
	// Any other value is recorded as general.alignment (UINT32). llama.cpp tools that
	// rewrite files (quantize, gguf-split) assume 32, so keep the default.
	Alignment uint32
	// MaxShardBytes splits the output so that each shard's tensor data (each tensor padded
	// to the alignment, metadata not counted) stays within this many bytes, like
	// llama-gguf-split --split-max-size. A tensor larger than the limit gets a shard of its
	// own. 0 disables.
	MaxShardBytes uint64
	// MaxShardTensors splits the output after every this many tensors, like
	// llama-gguf-split --split-max-tensors. 0 disables.
	MaxShardTensors int
	// BufferSize is the write buffer size (the memory bound of tensor data in flight);
	// 0 means 1 MiB.
	BufferSize int
	// NoManifest disables the SHA-256 manifest.
	NoManifest bool
	// Perm is the permission of new output files, before the umask; 0 means 0644. A
	// replaced file keeps its own permission bits (internal/safeout).
	Perm os.FileMode

	// failAfter (tests only) makes the write path fail once this many bytes in total have
	// been written; 0 disables.
	failAfter int64
}

// WrittenFile describes one output file after a successful Close.
type WrittenFile struct {
	Path   string
	Size   int64
	SHA256 string // lowercase hex
}

// ManifestName is the manifest file written beside the shards of a split model.
const ManifestName = "SHA256SUMS"

// ManifestSuffix is appended to a single output file's name to name its manifest.
const ManifestSuffix = ".sha256"

const defaultBufferSize = 1 << 20

// Writer streams a GGUF file (or a set of llama.cpp-compatible shards) to disk.
//
// Usage: Create; fill Metadata; AddTensor for every tensor in file order; then hand over
// each tensor's bytes in the same order with WriteTensor, WriteTensorData or
// TensorWriter; finally Close. The header is written when the first tensor data arrives
// (or at Close), after which Metadata and AddTensor are frozen. Only one buffer of
// BufferSize bytes is held, whatever the model size.
//
// Output is atomic: data goes to hidden temporary files in the output directory, each
// fsynced; Close renames them to their final names only when everything succeeded, then
// writes the manifest the same way. After any error, or Abort, the temporary files are
// removed and nothing named like the output is left. Once tensor data has started,
// every error is fatal: the writer is aborted and later calls return the same error.
// Files are created through internal/safeout: a symbolic link is written through, a
// read-only file or a directory is refused, and a character device or FIFO (/dev/null, a
// pipe) is streamed to directly, unsplit and without manifest. After a split write,
// shards of the same name with another shard count are removed (see Close).
//
// The writer owns the keys general.alignment and split.*: values for them in Metadata
// are dropped and replaced by what the options require.
//
// A Writer is not safe for concurrent use.
type Writer struct {
	// Metadata is written, in this order, to the file (to the first shard when split).
	Metadata Metadata

	path  string
	opts  WriterOptions
	align uint64

	decls []TensorInfo
	sizes []uint64
	index map[string]int

	started bool
	closed  bool
	err     error

	shards []shardRange
	paths  []string
	cur    int
	next   int
	out    *shardFile
	first  *safeout.File // created by Create for path, used for shard 0 when unsplit
	man    *safeout.File // the manifest, created when data starts

	open     []*safeout.File // files created and neither committed nor aborted
	finished []finishedShard
	renamed  []string // final paths created by Close (removed again if Close fails)
	written  int64    // total bytes written (for failAfter)
	tw       *tensorWriter
	result   []WrittenFile
	manifest string
}

type finishedShard struct {
	f *safeout.File
	WrittenFile
}

// shardFile is the file being written: bufio on top of a sink that hashes and counts.
type shardFile struct {
	f   *safeout.File
	bw  *bufio.Writer
	snk *sink
}

type sink struct {
	w *Writer
	f *safeout.File
	h hash.Hash
	n int64
}

// parallelHashMin is the write size from which hashing runs concurrently with the
// write system call (the two together then take about max rather than sum of the times).
const parallelHashMin = 64 << 10

func (s *sink) Write(p []byte) (int, error) {
	if fa := s.w.opts.failAfter; fa > 0 && s.w.written+int64(len(p)) > fa {
		k := max(int(fa-s.w.written), 0)
		n, _ := s.f.Write(p[:k])
		s.h.Write(p[:n])
		s.n += int64(n)
		s.w.written += int64(n)
		return n, errors.New("simulated write failure (test)")
	}
	var n int
	var err error
	if len(p) >= parallelHashMin {
		done := make(chan struct{})
		go func() { s.h.Write(p); close(done) }()
		n, err = s.f.Write(p)
		<-done
		// On a short write the digest covers bytes that are not in the file; the writer
		// fails and discards the file anyway.
	} else {
		n, err = s.f.Write(p)
		s.h.Write(p[:n])
	}
	s.n += int64(n)
	s.w.written += int64(n)
	return n, err
}

func (s *shardFile) pos() int64 { return s.snk.n + int64(s.bw.Buffered()) }

// Create starts writing a GGUF file at path ("dir/model.gguf"). With splitting enabled
// and more than one shard needed, the shards are named
// "dir/model-00001-of-0000N.gguf" instead (see SplitPath) and path itself is not created.
// The output directory must exist; the output for path is created right away (a
// temporary file, or the device or FIFO path names) so that an unwritable directory or
// a path that must not be written fails here.
func Create(path string, opts WriterOptions) (*Writer, error) {
	if opts.Alignment == 0 {
		opts.Alignment = DefaultAlignment
	}
	if opts.Alignment&(opts.Alignment-1) != 0 {
		return nil, fmt.Errorf("gguf: alignment %d is not a power of two", opts.Alignment)
	}
	if opts.BufferSize <= 0 {
		opts.BufferSize = defaultBufferSize
	}
	if opts.Perm == 0 {
		opts.Perm = 0o644
	}
	if opts.MaxShardTensors < 0 {
		return nil, fmt.Errorf("gguf: negative MaxShardTensors %d", opts.MaxShardTensors)
	}
	base := filepath.Base(path)
	if path == "" || base == "." || base == string(filepath.Separator) {
		return nil, fmt.Errorf("gguf: invalid output path %q", path)
	}
	if strings.ContainsAny(base, "\n\r\\") {
		return nil, fmt.Errorf("gguf: output name %q contains a newline or backslash (not representable in a manifest)", base)
	}
	w := &Writer{path: path, opts: opts, align: uint64(opts.Alignment), index: map[string]int{}}
	f, err := w.create(path)
	if err != nil {
		return nil, err
	}
	w.first = f
	return w, nil
}

// create starts one output file through internal/safeout.
func (w *Writer) create(path string) (*safeout.File, error) {
	f, err := safeout.Create(path, safeout.Options{Perm: w.opts.Perm})
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	w.open = append(w.open, f)
	return f, nil
}

// forget drops f from the files to abort on failure.
func (w *Writer) forget(f *safeout.File) {
	for i, g := range w.open {
		if g == f {
			w.open = append(w.open[:i], w.open[i+1:]...)
			return
		}
	}
}

// AddTensor declares the next tensor: its name, ggml dims (ne0 first) and type. Tensors
// are stored, and their data must be handed over, in declaration order. It fails for
// empty, non-UTF-8, too long (> 63 bytes) or duplicate names, 0 or more than 4 dims,
// unknown types, ne0 not a multiple of the block size, and after tensor data has
// started. Such errors leave the writer usable.
func (w *Writer) AddTensor(name string, dims []uint64, typ GGMLType) error {
	if err := w.usable(); err != nil {
		return err
	}
	if w.started {
		return fmt.Errorf("gguf: AddTensor(%q) after tensor data started", name)
	}
	n, err := validateTensorDecl(name, dims, typ)
	if err != nil {
		return err
	}
	if _, dup := w.index[name]; dup {
		return fmt.Errorf("gguf: duplicate tensor name %q", name)
	}
	w.index[name] = len(w.decls)
	w.decls = append(w.decls, TensorInfo{Name: name, Dims: append([]uint64(nil), dims...), Type: typ})
	w.sizes = append(w.sizes, n)
	return nil
}

func (w *Writer) usable() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("gguf: writer is closed")
	}
	return nil
}

// fail records err as fatal, removes all temporary and partial output and returns err.
func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
		w.cleanup()
	}
	return w.err
}

func (w *Writer) cleanup() {
	w.first, w.out, w.man = nil, nil, nil
	for _, f := range w.open {
		f.Abort()
	}
	w.open = nil
	for _, p := range w.renamed {
		os.Remove(p)
	}
	w.renamed = nil
}

// start freezes metadata and tensor list, plans the shards and writes the first header.
func (w *Writer) start() error {
	w.started = true
	md := w.Metadata.Clone()
	for _, k := range []string{KeyAlignment, KeySplitNo, KeySplitCount, KeySplitTensorsCount} {
		md.Delete(k)
	}
	if err := validateMetadata(md); err != nil {
		return w.fail(err)
	}
	padded := make([]uint64, len(w.sizes))
	for i, n := range w.sizes {
		p, ok := alignUp(n, w.align)
		if !ok {
			return w.fail(fmt.Errorf("gguf: tensor %q size overflows", w.decls[i].Name))
		}
		padded[i] = p
	}
	w.shards = planShards(padded, w.opts.MaxShardBytes, w.opts.MaxShardTensors)
	n := len(w.shards)
	if n > MaxShards {
		return w.fail(fmt.Errorf("gguf: %d shards needed, split.count allows at most %d", n, MaxShards))
	}
	if len(w.decls) > 1<<31-1 {
		return w.fail(fmt.Errorf("gguf: %d tensors do not fit split.tensors.count (int32)", len(w.decls)))
	}
	if n == 1 {
		w.paths = []string{w.path}
	} else {
		if kind := w.first.Streaming(); kind != "" {
			return w.fail(fmt.Errorf("gguf: %s is a %s: a split output (%d shards) needs a file path", w.path, kind, n))
		}
		// The shards replace path: its temporary file goes, and with it any stale
		// temporary shards of an earlier interrupted split.
		w.first.Abort()
		w.forget(w.first)
		w.first = nil
		prefix := splitPrefix(w.path)
		dir, base := filepath.Split(prefix)
		if dir == "" {
			dir = "."
		}
		safeout.RemoveStale(dir, func(name string) bool {
			p, _, _, ok := ParseSplitPath(name)
			return ok && p == base
		})
		for i := range w.shards {
			w.paths = append(w.paths, SplitPath(prefix, i, n))
		}
	}
	if !w.opts.NoManifest {
		if n == 1 && w.first.Streaming() != "" {
			safeout.Notef("no SHA-256 manifest for %s: a %s has no file to check", w.path, w.first.Streaming())
		} else {
			if n == 1 {
				w.manifest = w.path + ManifestSuffix
			} else {
				w.manifest = filepath.Join(filepath.Dir(w.path), ManifestName)
			}
			f, err := w.create(w.manifest)
			if err != nil {
				return w.fail(err)
			}
			w.man = f
		}
	}
	// Offsets relative to each shard's data section.
	for _, s := range w.shards {
		var off uint64
		for i := s.first; i < s.end; i++ {
			w.decls[i].Offset = off
			off += padded[i]
		}
	}
	w.Metadata = md
	return w.startShard(0)
}

// shardMetadata returns the key/value pairs of shard i.
func (w *Writer) shardMetadata(i int) Metadata {
	var md Metadata
	if i == 0 {
		md = w.Metadata.Clone()
	}
	if w.align != DefaultAlignment {
		md = append(md, KV{KeyAlignment, Uint32(uint32(w.align))})
	}
	if len(w.shards) > 1 {
		md = append(md,
			KV{KeySplitNo, Uint16(uint16(i))},
			KV{KeySplitCount, Uint16(uint16(len(w.shards)))},
			KV{KeySplitTensorsCount, Int32(int32(len(w.decls)))})
	}
	return md
}

func (w *Writer) startShard(i int) error {
	var f *safeout.File
	if w.first != nil {
		f, w.first = w.first, nil
	} else {
		var err error
		if f, err = w.create(w.paths[i]); err != nil {
			return w.fail(err)
		}
	}
	s := &sink{w: w, f: f, h: sha256.New()}
	w.out = &shardFile{f: f, snk: s, bw: bufio.NewWriterSize(s, w.opts.BufferSize)}
	w.cur = i
	r := w.shards[i]
	if err := writeHeader(w.out.bw, w.shardMetadata(i), w.decls[r.first:r.end]); err != nil {
		return w.fail(fmt.Errorf("gguf: write header of %s: %w", w.paths[i], err))
	}
	// The data section starts aligned; like llama.cpp's writer, pad even without tensors.
	if err := w.pad(uint64(w.out.pos())); err != nil {
		return w.fail(fmt.Errorf("gguf: write header of %s: %w", w.paths[i], err))
	}
	return nil
}

var zeros [4096]byte

// pad writes zeros from position n up to the next multiple of the alignment.
func (w *Writer) pad(n uint64) error {
	p, _ := alignUp(n, w.align)
	for k := p - n; k > 0; {
		c := min(k, uint64(len(zeros)))
		if _, err := w.out.bw.Write(zeros[:c]); err != nil {
			return err
		}
		k -= c
	}
	return nil
}

func (w *Writer) finishShard() error {
	s := w.out
	w.out = nil
	if err := s.bw.Flush(); err != nil {
		return fmt.Errorf("gguf: write %s: %w", w.paths[w.cur], err)
	}
	// The file stays open (and its temporary file locked) until Close renames it.
	if err := s.f.Finish(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	w.finished = append(w.finished, finishedShard{f: s.f, WrittenFile: WrittenFile{
		Path: w.paths[w.cur], Size: s.snk.n, SHA256: hex.EncodeToString(s.snk.h.Sum(nil))}})
	return nil
}

// TensorWriter returns a writer for the data of tensor name, which must be the next
// declared tensor. Exactly its byte size must be written, then the writer closed; the
// padding is added on Close. Writing more than the size fails at once.
func (w *Writer) TensorWriter(name string) (io.WriteCloser, error) {
	if err := w.usable(); err != nil {
		return nil, err
	}
	if !w.started {
		if err := w.start(); err != nil {
			return nil, err
		}
	}
	if w.tw != nil && !w.tw.done {
		return nil, w.fail(fmt.Errorf("gguf: TensorWriter(%q) while the writer of tensor %q is still open", name, w.tw.info.Name))
	}
	if w.next >= len(w.decls) {
		if _, ok := w.index[name]; ok {
			return nil, w.fail(fmt.Errorf("gguf: tensor %q written twice", name))
		}
		return nil, w.fail(fmt.Errorf("gguf: tensor %q was not declared with AddTensor", name))
	}
	if want := w.decls[w.next].Name; want != name {
		if _, ok := w.index[name]; !ok {
			return nil, w.fail(fmt.Errorf("gguf: tensor %q was not declared with AddTensor", name))
		}
		return nil, w.fail(fmt.Errorf("gguf: tensor %q written out of order: next is %q", name, want))
	}
	w.tw = &tensorWriter{w: w, info: w.decls[w.next], size: w.sizes[w.next]}
	return w.tw, nil
}

// WriteTensor copies the data of tensor name from r, which must yield exactly the
// tensor's byte size (more or fewer bytes is an error).
func (w *Writer) WriteTensor(name string, r io.Reader) error {
	tw, err := w.TensorWriter(name)
	if err != nil {
		return err
	}
	t := tw.(*tensorWriter)
	n, err := io.CopyN(t, r, int64(t.size))
	if err != nil {
		if errors.Is(err, io.EOF) {
			return w.fail(fmt.Errorf("gguf: tensor %q: reader ended after %d of %d bytes", name, n, t.size))
		}
		return w.fail(fmt.Errorf("gguf: tensor %q: %w", name, err))
	}
	var one [1]byte
	if k, err := io.ReadFull(r, one[:]); k > 0 {
		return w.fail(fmt.Errorf("gguf: tensor %q: reader yields more than %d bytes", name, t.size))
	} else if err != nil && !errors.Is(err, io.EOF) {
		return w.fail(fmt.Errorf("gguf: tensor %q: %w", name, err))
	}
	return t.Close()
}

// WriteTensorData writes the data of tensor name from b, which must be exactly the
// tensor's byte size.
func (w *Writer) WriteTensorData(name string, b []byte) error {
	tw, err := w.TensorWriter(name)
	if err != nil {
		return err
	}
	if _, err := tw.Write(b); err != nil {
		return err
	}
	return tw.Close()
}

type tensorWriter struct {
	w    *Writer
	info TensorInfo
	size uint64
	n    uint64
	done bool
}

func (t *tensorWriter) Write(p []byte) (int, error) {
	w := t.w
	if err := w.usable(); err != nil {
		return 0, err
	}
	if t.done {
		return 0, w.fail(fmt.Errorf("gguf: tensor %q: write after Close", t.info.Name))
	}
	if uint64(len(p)) > t.size-t.n {
		return 0, w.fail(fmt.Errorf("gguf: tensor %q: %d bytes written, more than its size %d (%s %v)",
			t.info.Name, t.n+uint64(len(p)), t.size, t.info.Type, t.info.Dims))
	}
	n, err := w.out.bw.Write(p)
	t.n += uint64(n)
	if err != nil {
		return n, w.fail(fmt.Errorf("gguf: write tensor %q to %s: %w", t.info.Name, w.paths[w.cur], err))
	}
	return n, nil
}

// Close checks the byte count, writes the padding and, at a shard boundary, finishes the
// shard file and starts the next.
func (t *tensorWriter) Close() error {
	w := t.w
	if t.done {
		return w.err
	}
	if err := w.usable(); err != nil {
		return err
	}
	t.done = true
	if t.n != t.size {
		return w.fail(fmt.Errorf("gguf: tensor %q: got %d bytes, want %d (%s %v)", t.info.Name, t.n, t.size, t.info.Type, t.info.Dims))
	}
	if err := w.pad(uint64(w.out.pos())); err != nil {
		return w.fail(fmt.Errorf("gguf: write tensor %q padding to %s: %w", t.info.Name, w.paths[w.cur], err))
	}
	w.next++
	if w.next == w.shards[w.cur].end {
		if err := w.finishShard(); err != nil {
			return w.fail(err)
		}
		if w.cur+1 < len(w.shards) {
			return w.startShard(w.cur + 1)
		}
	}
	return nil
}

// Close finishes the output: it checks that every declared tensor was written, fsyncs,
// writes the manifest and renames everything into place. On error nothing named like the
// output remains. Close after Close returns nil (or the earlier error).
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	if w.err != nil {
		w.closed = true
		return w.err
	}
	if !w.started {
		if err := w.start(); err != nil {
			w.closed = true
			return err
		}
	}
	err := w.finish()
	w.closed = true
	if err != nil {
		return w.fail(err)
	}
	return nil
}

func (w *Writer) finish() error {
	if w.tw != nil && !w.tw.done {
		return fmt.Errorf("gguf: Close while the writer of tensor %q is still open", w.tw.info.Name)
	}
	if w.next < len(w.decls) {
		return fmt.Errorf("gguf: Close after %d of %d tensors; tensor %q was not written", w.next, len(w.decls), w.decls[w.next].Name)
	}
	if w.out != nil { // a file without tensors
		if err := w.finishShard(); err != nil {
			return err
		}
	}
	if w.man != nil {
		var b strings.Builder
		for _, f := range w.finished {
			fmt.Fprintf(&b, "%s  %s\n", f.SHA256, filepath.Base(f.Path))
		}
		if _, err := w.man.Write([]byte(b.String())); err != nil {
			return fmt.Errorf("gguf: write manifest %s: %w", w.manifest, err)
		}
		if err := w.man.Finish(); err != nil {
			return fmt.Errorf("gguf: write manifest %s: %w", w.manifest, err)
		}
	}
	for _, f := range w.finished {
		if err := w.commit(f.f); err != nil {
			return err
		}
	}
	if w.man != nil {
		if err := w.commit(w.man); err != nil {
			return err
		}
	}
	for _, f := range w.finished {
		w.result = append(w.result, f.WrittenFile)
	}
	w.renamed = nil
	if len(w.paths) > 1 {
		w.removeSuperseded()
	}
	return nil
}

// commit renames f into place, remembering the final path so that a later failure of
// this Close removes it again.
func (w *Writer) commit(f *safeout.File) error {
	w.forget(f)
	if err := f.Commit(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if f.Streaming() == "" {
		w.renamed = append(w.renamed, f.Target())
	}
	return nil
}

// removeSuperseded removes, after a successful split write of N shards, the shards of an
// earlier split of the same name into another count ("model-00002-of-00005.gguf" beside
// the new "model-0000i-of-00003.gguf"): regular files whose name matches the shard pattern
// exactly with the same prefix. SHA256SUMS, rewritten by this Close, no longer lists them.
func (w *Writer) removeSuperseded() {
	prefix := splitPrefix(w.path)
	dir, base := filepath.Split(prefix)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	var removed []string
	for _, e := range ents {
		p, _, count, ok := ParseSplitPath(e.Name())
		if !ok || p != base || count == len(w.paths) || !e.Type().IsRegular() {
			continue
		}
		if os.Remove(filepath.Join(dir, e.Name())) == nil {
			removed = append(removed, e.Name())
		}
	}
	if len(removed) > 0 {
		safeout.Notef("removed %d shard(s) of an earlier split of %s superseded by the %d new ones: %s",
			len(removed), w.path, len(w.paths), strings.Join(removed, ", "))
	}
}

// Abort discards everything written so far: temporary files are removed and no output
// appears. It is a no-op after a successful Close (it never removes finished output).
func (w *Writer) Abort() error {
	if w.closed && w.err == nil {
		return nil
	}
	w.closed = true
	if w.err == nil {
		w.err = errors.New("gguf: writer aborted")
		w.cleanup()
	}
	return nil
}

// Files returns the files written, in shard order, after a successful Close.
func (w *Writer) Files() []WrittenFile { return append([]WrittenFile(nil), w.result...) }

// ManifestPath returns the manifest written by a successful Close ("" when disabled).
func (w *Writer) ManifestPath() string {
	if w.result == nil {
		return ""
	}
	return w.manifest
}

// Paths returns the final output paths. They are known once tensor data has started (or
// after Close); before that it returns nil.
func (w *Writer) Paths() []string { return append([]string(nil), w.paths...) }

// Tensors returns the declared tensors; offsets are filled in once data has started.
func (w *Writer) Tensors() []TensorInfo { return append([]TensorInfo(nil), w.decls...) }
