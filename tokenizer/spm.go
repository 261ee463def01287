package tokenizer

// llama.cpp's SentencePiece BPE (llm_tokenizer_spm_session): the text (spaces already replaced
// by "▁") is cut into UTF-8 characters by their lead byte alone, then the adjacent pair whose
// concatenation is a token with the highest score is merged, leftmost first on ties, until no
// pair forms a token. Symbols that are not tokens are emitted as <0xXX> byte tokens.

type spmSym struct {
	start, end int32
	prev, next int32
}

type spmItem struct {
	score       float32
	left, right int32
	size        int32
}

// precedes orders SentencePiece merge candidates: highest score first, then leftmost.
func (a spmItem) precedes(b spmItem) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.left < b.left
}

// spmQueue holds candidate merges, best first.
type spmQueue = mergeQueue[spmItem]

// utf8Len is llama.cpp's unicode_len_utf8: the sequence length announced by a lead byte.
func utf8Len(b byte) int {
	switch b >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

// encodeSPM tokenizes one fragment. When no token has a "▁" after another character
// (t.spmWordBound, true for Llama/Mistral vocabularies), no merge can cross the point before a
// "▁" that follows another character, so the fragment is processed word by word: the result is
// identical to llama.cpp's single pass over the whole fragment, but the queue stays small.
func (t *Tokenizer) encodeSPM(out []int32, text string, w *encodeWork) []int32 {
	if !t.spmWordBound {
		return t.encodeSPMSegment(out, text, w)
	}
	const space = "▁"
	start, prevSpace := 0, false
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		isSpace := n == len(space) && text[off:off+n] == space
		if isSpace && !prevSpace && off > start {
			out = t.encodeSPMCached(out, text[start:off], w)
			start = off
		}
		prevSpace = isSpace
		off += n
	}
	return t.encodeSPMCached(out, text[start:], w)
}

// encodeSPMCached memoizes independent segments in the word cache.
func (t *Tokenizer) encodeSPMCached(out []int32, seg string, w *encodeWork) []int32 {
	if len(seg) > wordCacheMaxLen {
		return t.encodeSPMSegment(out, seg, w)
	}
	if ids, ok := t.cache.get(seg); ok {
		return append(out, ids...)
	}
	n := len(out)
	out = t.encodeSPMSegment(out, seg, w)
	t.cache.put(seg, append([]int32(nil), out[n:]...))
	return out
}

func (t *Tokenizer) encodeSPMSegment(out []int32, text string, w *encodeWork) []int32 {
	if text == "" {
		return out
	}
	syms := w.spmSyms[:0]
	defer func() { w.spmSyms = syms[:0] }()
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		i := int32(len(syms))
		syms = append(syms, spmSym{start: int32(off), end: int32(off + n), prev: i - 1, next: i + 1})
		off += n
	}
	syms[len(syms)-1].next = -1
	q := w.spmQ[:0]
	defer func() { w.spmQ = q[:0] }()
	tryAdd := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		s := text[syms[l].start:syms[r].end]
		id, ok := t.tokenID[s]
		if !ok {
			return
		}
		q.push(spmItem{score: t.scores[id], left: l, right: r, size: int32(len(s))})
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		tryAdd(i-1, i)
	}
	for len(q) > 0 {
		it := q.pop()
		l, r := &syms[it.left], &syms[it.right]
		if l.start == l.end || r.start == r.end || (l.end-l.start)+(r.end-r.start) != it.size {
			continue
		}
		l.end = r.end
		r.start = r.end
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = it.left
		}
		tryAdd(l.prev, it.left)
		tryAdd(it.left, l.next)
	}
	for i := int32(0); i != -1; i = syms[i].next {
		s := text[syms[i].start:syms[i].end]
		if id, ok := t.tokenID[s]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(s); j++ {
			out = t.spmByte(out, s[j])
		}
	}
	return out
}

// spmByte emits the token of one byte: <0xXX>, else the one-byte string, else UNK (llama.cpp
// throws in that case).
func (t *Tokenizer) spmByte(out []int32, b byte) []int32 {
	if id := t.byteToken[b]; id >= 0 {
		return append(out, id)
	}
	if id, ok := t.tokenID[string([]byte{b})]; ok {
		return append(out, id)
	}
	if t.unk >= 0 {
		return append(out, t.unk)
	}
	return out
}
