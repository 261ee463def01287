// Package gguf reads, writes and checks GGUF files, the model format of llama.cpp.
//
// Reading: ReadFile parses a header (metadata and tensor infos, GGUF v2/v3,
// little-endian) from any io.ReaderAt without loading tensor data, bounding every
// allocation by the bytes left in the file. Open opens a model — one file or all shards
// of a llama.cpp split model ("name-00001-of-00003.gguf") — and exposes tensor data as
// zero-copy slices of a read-only memory map.
//
// Writing: Create returns a streaming Writer: metadata and tensor declarations first,
// then each tensor's bytes in order through an io.Writer, with memory bounded by one
// buffer. Output can be split like llama-gguf-split, is atomic (temporary files, fsync,
// rename) and comes with a sha256sum-compatible manifest.
//
// Checking: Check/CheckFile/CheckModel list structural problems (layout, types, llama.cpp
// compatibility); VerifyManifest re-hashes the files a manifest lists.
//
// The package knows the file format only, not model semantics. See docs/formats-gguf.md.
package gguf
