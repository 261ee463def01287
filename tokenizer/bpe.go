package tokenizer

import "sync"

// bpeModel is the merge table of a BPE vocabulary. Symbols are "pieces": every token text has
// the piece id equal to its token id, and merge parts or merge results that are not tokens get
// extra ids >= len(tokens) (llama.cpp accepts such merges; they can only produce pieces that
// are later emitted through the byte fallback).
type bpeModel struct {
	nTokens int
	extra   []string           // text of piece nTokens+i
	ranks   map[uint64]mergeTo // (left piece, right piece) -> rank and result piece
	// byteLevel: initial piece of every raw byte (its byte-level character), -1 if unknown.
	bytePiece [256]int32
}

type mergeTo struct {
	rank   int32
	result int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpeSym is one symbol of a word during merging.
type bpeSym struct {
	piece      int32 // -1: text has no piece (cannot merge)
	start, end int32 // byte span in the word (raw bytes for byte-level models)
	prev, next int32
}

// bpeItem is a candidate merge in the priority queue.
type bpeItem struct {
	rank        int32
	left, right int32 // symbol indexes
	result      int32
	leftPiece   int32
	rightPiece  int32
}

// precedes orders BPE merge candidates: lowest rank first, then leftmost.
func (a bpeItem) precedes(b bpeItem) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.left < b.left
}

// bpeQueue holds candidate merges, best first.
type bpeQueue = mergeQueue[bpeItem]

// bpeWork holds per-call scratch space.
type bpeWork struct {
	syms  []bpeSym
	queue bpeQueue
}

// linearLimit: words with at most this many symbols are merged by repeated scans (cheaper
// than a heap for the short words that dominate natural text); longer ones use a heap. Both
// pick the lowest rank, then the leftmost pair, so they give identical results.
const linearLimit = 48

// merge runs BPE over w.syms (linked list already set up) and leaves the result in w.syms.
func (m *bpeModel) merge(w *bpeWork) {
	syms := w.syms
	if len(syms) < 2 {
		return
	}
	if len(syms) <= linearLimit {
		for {
			best := int32(-1)
			var bestTo mergeTo
			for i := int32(0); i != -1; i = syms[i].next {
				j := syms[i].next
				if j == -1 {
					break
				}
				a, b := syms[i].piece, syms[j].piece
				if a < 0 || b < 0 {
					continue
				}
				if to, ok := m.ranks[pairKey(a, b)]; ok && (best == -1 || to.rank < bestTo.rank) {
					best, bestTo = i, to
				}
			}
			if best == -1 {
				return
			}
			j := syms[best].next
			syms[best].piece = bestTo.result
			syms[best].end = syms[j].end
			syms[best].next = syms[j].next
			if syms[j].next != -1 {
				syms[syms[j].next].prev = best
			}
			syms[j].start = syms[j].end // mark dead
		}
	}
	q := w.queue[:0]
	push := func(i, j int32) {
		if i < 0 || j < 0 {
			return
		}
		a, b := syms[i].piece, syms[j].piece
		if a < 0 || b < 0 {
			return
		}
		if to, ok := m.ranks[pairKey(a, b)]; ok {
			q.push(bpeItem{rank: to.rank, left: i, right: j, result: to.result, leftPiece: a, rightPiece: b})
		}
	}
	for i := int32(0); i+1 < int32(len(syms)); i++ {
		push(i, i+1)
	}
	for len(q) > 0 {
		it := q.pop()
		l, r := &syms[it.left], &syms[it.right]
		// Skip entries made stale by earlier merges: both symbols must still be alive,
		// adjacent and spell the same pieces as when the entry was queued.
		if l.start == l.end || r.start == r.end || l.next != it.right || l.piece != it.leftPiece || r.piece != it.rightPiece {
			continue
		}
		l.piece = it.result
		l.end = r.end
		l.next = r.next
		if r.next != -1 {
			syms[r.next].prev = it.left
		}
		r.start = r.end
		push(l.prev, it.left)
		push(it.left, l.next)
	}
	w.queue = q
}

// wordCache memoizes the token ids of pre-tokenized words.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

const (
	wordCacheMaxEntries = 1 << 17
	wordCacheMaxLen     = 128 // longer words are not cached
)

func (c *wordCache) get(w string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[w]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string][]int32)
	}
	if len(c.m) >= wordCacheMaxEntries {
		clear(c.m)
	}
	c.m[w] = ids
	c.mu.Unlock()
}
