package tokenizer

// Hand-written matchers for the pre-tokenizer regexes of the supported BPE families. Go's regexp
// has no look-ahead, so `\s+(?!\S)` cannot be expressed; instead each function below walks the
// text once and reproduces, alternative by alternative, what a backtracking regex engine finds
// with leftmost-first semantics (which is also what llama.cpp's unicode_regex_split_custom_*
// functions compute). The classes are: \p{L} letters, \p{N} numbers, \p{M} marks, \s the
// Unicode White_Space property (see unicode.go).

// splitKind names one pre-tokenizer regex.
type splitKind uint8

const (
	splitNone   splitKind = iota
	splitGPT2             // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	splitLlama3           // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	splitQwen2            // as llama3 but \p{N} (one digit per piece)
	splitQwen35           // as qwen2 but letter runs are [\p{L}\p{M}]+ and marks leave the "other" class
)

// String returns the canonical name used in docs and the vocabulary hash.
func (k splitKind) String() string {
	switch k {
	case splitGPT2:
		return "gpt2"
	case splitLlama3:
		return "llama3"
	case splitQwen2:
		return "qwen2"
	case splitQwen35:
		return "qwen35"
	}
	return "none"
}

// Regex sources as they appear in tokenizer.json files and in llama.cpp, mapped to splitters.
var knownSplitRegexes = map[string]splitKind{
	`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`: splitGPT2,
	`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`:     splitGPT2,

	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:                              splitLlama3,
	`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: splitLlama3,

	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:                              splitQwen2,
	`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: splitQwen2,

	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:                              splitQwen35,
	`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: splitQwen35,
}

// at decodes the code point at byte offset i of s (i < len(s)) with llama.cpp's lenient rules
// and returns it with its class and byte length.
func at(s string, i int) (rune, uint8, int) {
	b := s[i]
	if b < 0x80 {
		return rune(b), asciiClass[b], 1
	}
	r, n := decodeRune(s, i)
	return r, runeClass(r), n
}

// classAt returns the class of the code point at byte offset i, or 0 past the end.
func classAt(s string, i int) uint8 {
	if i >= len(s) {
		return 0
	}
	_, c, _ := at(s, i)
	return c
}

// next returns the byte offset where the piece starting at byte offset i of s ends.
func (k splitKind) next(s string, i int) int {
	switch k {
	case splitGPT2:
		return gpt2Match(s, i)
	case splitLlama3:
		return llama3Match(s, i, clsLetter, 3)
	case splitQwen2:
		return llama3Match(s, i, clsLetter, 1)
	case splitQwen35:
		return llama3Match(s, i, clsLetter|clsMark, 1)
	}
	return len(s)
}

// splitScratch holds reusable buffers of one Encode call.
type splitScratch struct {
	ends []int
}

// split returns the byte offsets where the pieces of s end (the last one is len(s)).
// The slice is owned by sc and valid until the next call.
func (k splitKind) split(s string, sc *splitScratch) []int {
	ends := sc.ends[:0]
	for i := 0; i < len(s); {
		i = k.next(s, i)
		ends = append(ends, i)
	}
	sc.ends = ends
	return ends
}

// contraction returns the byte length (2 or 3) of a contraction 's 't 'm 'd 're 've 'll at
// byte offset i, or 0. With fold set the letters match case-insensitively (ASCII folding is
// exact here: no other code point lowercases to one of these letters).
func contraction(s string, i int, fold bool) int {
	if s[i] != '\'' || i+1 >= len(s) {
		return 0
	}
	lower := func(c byte) byte {
		if fold && c >= 'A' && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	c1 := lower(s[i+1])
	switch c1 {
	case 's', 't', 'm', 'd':
		return 2
	}
	if i+2 < len(s) {
		c2 := lower(s[i+2])
		if (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') {
			return 3
		}
	}
	return 0
}

// whitespaceTail handles the trailing alternatives `\s+(?!\S)|\s+` at byte offset i (and,
// when crlf is set, the preceding `\s*[\r\n]+`). It returns the end of the match, or the end
// of the code point at i when it is not white space (it then becomes a piece of its own).
func whitespaceTail(s string, i int, crlf bool) int {
	e, last, lastNL := i, -1, -1
	for e < len(s) {
		r, c, n := at(s, e)
		if c&clsSpace == 0 {
			break
		}
		if crlf && (r == '\r' || r == '\n') {
			lastNL = e + n
		}
		last = e
		e += n
	}
	switch {
	case lastNL >= 0: // \s*[\r\n]+ : greedy \s* backs off to the last CR/LF of the run
		return lastNL
	case last > i && e < len(s): // \s+(?!\S): leave the last blank for the next word
		return last
	case e > i: // \s+
		return e
	}
	_, _, n := at(s, i)
	return i + n
}

// gpt2Match returns the end of the regex match starting at byte offset i for the GPT-2
// pattern.
func gpt2Match(s string, i int) int {
	if l := contraction(s, i, false); l > 0 {
		return i + l
	}
	p := i
	if s[p] == ' ' {
		p++
	}
	if p < len(s) {
		_, c, n := at(s, p)
		var want uint8
		switch {
		case c&clsLetter != 0: //  ?\p{L}+
			want = clsLetter
		case c&clsNumber != 0: //  ?\p{N}+
			want = clsNumber
		case c&(clsSpace|clsLetter|clsNumber) == 0: //  ?[^\s\p{L}\p{N}]+
			p += n
			for p < len(s) {
				_, c, n := at(s, p)
				if c&(clsSpace|clsLetter|clsNumber) != 0 {
					break
				}
				p += n
			}
			return p
		}
		if want != 0 {
			p += n
			for p < len(s) {
				_, c, n := at(s, p)
				if c&want == 0 {
					break
				}
				p += n
			}
			return p
		}
	}
	return whitespaceTail(s, i, false)
}

// llama3Match returns the end of the regex match starting at byte offset i for the Llama-3 /
// Qwen2 / Qwen3.5 patterns; letter is the class of the letter runs and maxDigits the digit
// group size.
func llama3Match(s string, i int, letter uint8, maxDigits int) int {
	if l := contraction(s, i, true); l > 0 {
		return i + l
	}
	r, c, n := at(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+   (the optional prefix may itself be a mark for qwen35)
	if r != '\r' && r != '\n' && c&clsNumber == 0 {
		if c&letter != 0 || classAt(s, i+n)&letter != 0 {
			p := i + n
			for p < len(s) {
				_, c, n := at(s, p)
				if c&letter == 0 {
					break
				}
				p += n
			}
			return p
		}
	}
	// \p{N}{1,maxDigits}
	if c&clsNumber != 0 {
		p := i + n
		for k := 1; k < maxDigits && p < len(s); k++ {
			_, c, n := at(s, p)
			if c&clsNumber == 0 {
				break
			}
			p += n
		}
		return p
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	other := clsSpace | clsLetter | clsNumber | (letter & clsMark)
	p := i
	if r == ' ' {
		p++
	}
	if p < len(s) && classAt(s, p)&other == 0 {
		for p < len(s) {
			_, c, n := at(s, p)
			if c&other != 0 {
				break
			}
			p += n
		}
		for p < len(s) && (s[p] == '\r' || s[p] == '\n') {
			p++
		}
		return p
	}
	return whitespaceTail(s, i, true)
}

// byteLevelRunes is GPT-2's bytes_to_unicode table: the printable byte ranges map to
// themselves and the other 68 bytes to U+0100 upwards, in byte order.
var byteLevelRunes, byteLevelStrings = func() (r [256]rune, s [256]string) {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			r[b] = rune(b)
		} else {
			r[b] = rune(256 + n)
			n++
		}
		s[b] = string(r[b])
	}
	return
}()

// byteLevelDecode maps the code points of the byte-level alphabet back to bytes.
var byteLevelDecode = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	for b := 0; b < 256; b++ {
		m[byteLevelRunes[b]] = byte(b)
	}
	return m
}()

// byteLevelEncode returns s with every byte replaced by its byte-level code point.
func byteLevelEncode(s string) string {
	buf := make([]byte, 0, len(s)*2)
	for i := 0; i < len(s); i++ {
		buf = append(buf, byteLevelStrings[s[i]]...)
	}
	return string(buf)
}

// byteLevelToBytes maps byte-level text back to raw bytes. ok is false when some code point is
// not in the byte-level alphabet.
func byteLevelToBytes(s string) (out []byte, ok bool) {
	out = make([]byte, 0, len(s))
	for _, r := range s {
		b, found := byteLevelDecode[r]
		if !found {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}
