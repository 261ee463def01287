package tokenizer

import (
	"sync"
	"unicode"
)

// Code point classes used by the pre-tokenizer splitters. They correspond to the regex classes
// \p{L}, \p{N}, \p{M} and \s (Unicode White_Space), which is also how llama.cpp's unicode tables
// classify code points (src/unicode.cpp, unicode_cpt_flags).
const (
	clsLetter uint8 = 1 << iota
	clsNumber
	clsMark
	clsSpace
)

const maxCodepoint = 0x110000

var (
	clsTableOnce sync.Once
	clsTable     []uint8 // one entry per code point, built lazily (1.1 MiB)
)

// cjkExtI is CJK Unified Ideographs Extension I (Unicode 15.1, category Lo). Go's unicode
// package is at Unicode 15.0.0 and lacks it; llama.cpp's tables (Unicode 15.1) have it.
var cjkExtI = &unicode.RangeTable{R32: []unicode.Range32{{Lo: 0x2EBF0, Hi: 0x2EE5D, Stride: 1}}}

func buildClassTable() {
	t := make([]uint8, maxCodepoint)
	set := func(rt *unicode.RangeTable, bit uint8) {
		for _, r := range rt.R16 {
			for c := uint32(r.Lo); c <= uint32(r.Hi); c += uint32(r.Stride) {
				t[c] |= bit
			}
		}
		for _, r := range rt.R32 {
			for c := r.Lo; c <= r.Hi; c += r.Stride {
				t[c] |= bit
			}
		}
	}
	set(unicode.L, clsLetter)
	set(cjkExtI, clsLetter)
	set(unicode.N, clsNumber)
	set(unicode.M, clsMark)
	set(unicode.White_Space, clsSpace)
	clsTable = t
}

// asciiClass is the class of every ASCII code point, so the common case needs no table build.
var asciiClass = func() (t [128]uint8) {
	for c := 0; c < 128; c++ {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			t[c] = clsLetter
		case c >= '0' && c <= '9':
			t[c] = clsNumber
		case c == ' ', c >= '\t' && c <= '\r':
			t[c] = clsSpace
		}
	}
	return
}()

// runeClass returns the class bits of code point r (0 for anything outside the Unicode range).
func runeClass(r rune) uint8 {
	if r < 128 {
		if r < 0 {
			return 0
		}
		return asciiClass[r]
	}
	if r >= maxCodepoint {
		return 0
	}
	clsTableOnce.Do(buildClassTable)
	return clsTable[r]
}

// decodeRune decodes one code point at s[i:] the way llama.cpp's unicode_cpt_from_utf8 does:
// a lead byte announces the length, continuation bytes must be 10xxxxxx, but overlong forms,
// surrogates and values above U+10FFFF are not rejected. Anything else yields (U+FFFD, 1).
func decodeRune(s string, i int) (rune, int) {
	b0 := s[i]
	if b0 < 0x80 {
		return rune(b0), 1
	}
	n := len(s) - i
	switch {
	case b0&0x40 == 0:
		return 0xFFFD, 1
	case b0&0x20 == 0:
		if n < 2 || s[i+1]&0xC0 != 0x80 {
			return 0xFFFD, 1
		}
		return rune(b0&0x1F)<<6 | rune(s[i+1]&0x3F), 2
	case b0&0x10 == 0:
		if n < 3 || s[i+1]&0xC0 != 0x80 || s[i+2]&0xC0 != 0x80 {
			return 0xFFFD, 1
		}
		return rune(b0&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F), 3
	case b0&0x08 == 0:
		if n < 4 || s[i+1]&0xC0 != 0x80 || s[i+2]&0xC0 != 0x80 || s[i+3]&0xC0 != 0x80 {
			return 0xFFFD, 1
		}
		return rune(b0&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F), 4
	}
	return 0xFFFD, 1
}

// appendRune appends the UTF-8 form of r as llama.cpp's unicode_cpt_to_utf8 writes it
// (surrogates are encoded as three bytes). r must be <= U+10FFFF.
func appendRune(dst []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(dst, byte(r))
	case r < 0x800:
		return append(dst, 0xC0|byte(r>>6), 0x80|byte(r)&0x3F)
	case r < 0x10000:
		return append(dst, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	default:
		return append(dst, 0xF0|byte(r>>18), 0x80|byte(r>>12)&0x3F, 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	}
}

// sanitizeUTF8 returns s re-encoded code point by code point with decodeRune's rules, which is
// what llama.cpp's BPE path does before pre-tokenization: every byte that does not start a
// well-formed sequence becomes U+FFFD, an overlong form becomes the code point it spells, and
// a value above U+10FFFF (which llama.cpp cannot re-encode) also becomes U+FFFD.
// Strings without such bytes are returned unchanged without allocating.
func sanitizeUTF8(s string) string {
	i := 0
	for i < len(s) {
		if s[i] < 0x80 {
			i++
			continue
		}
		r, n := decodeRune(s, i)
		if r == 0xFFFD && n == 1 || r >= maxCodepoint || isOverlong(r, n) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	out := make([]byte, 0, len(s)+8)
	out = append(out, s[:i]...)
	for i < len(s) {
		r, n := decodeRune(s, i)
		if r >= maxCodepoint {
			r = 0xFFFD
		}
		out = appendRune(out, r)
		i += n
	}
	return string(out)
}

// isOverlong reports whether a sequence of n bytes decoded to r uses more bytes than needed
// (re-encoding would change the bytes).
func isOverlong(r rune, n int) bool {
	switch n {
	case 2:
		return r < 0x80
	case 3:
		return r < 0x800
	case 4:
		return r < 0x10000
	}
	return false
}
