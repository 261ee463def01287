package tokenizer

// mergeQueue is a binary heap of merge candidates, the one that precedes all others on top.
// BPE (lowest rank first) and SentencePiece (highest score first) share it.
type mergeQueue[T interface{ precedes(T) bool }] []T

func (q *mergeQueue[T]) push(it T) {
	*q = append(*q, it)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].precedes(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *mergeQueue[T]) pop() T {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].precedes(h[m]) {
			m = l
		}
		if r < len(h) && h[r].precedes(h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}
