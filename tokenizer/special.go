package tokenizer

import (
	"sort"
	"strings"
	"unicode"
)

// addedToken is a token matched as a whole string before pre-tokenization (HF "added tokens";
// in GGUF vocabularies every CONTROL, USER_DEFINED and UNKNOWN token).
type addedToken struct {
	id         int32
	text       string
	special    bool // HF "special" / llama.cpp CONTROL or UNKNOWN: matched only with ParseSpecial
	lstrip     bool
	rstrip     bool
	singleWord bool // HF only
	normalized bool // HF only: matched on normalized text
}

// trie is a byte trie over added-token texts.
type trie struct {
	nodes []trieNode
	first [256]bool
}

type trieNode struct {
	keys []byte
	kids []int32
	tok  int32 // index into the added-token list, -1 if no token ends here
}

func newTrie() *trie { return &trie{nodes: []trieNode{{tok: -1}}} }

func (t *trie) insert(s string, tok int32) {
	if s == "" {
		return
	}
	t.first[s[0]] = true
	n := int32(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		next := int32(-1)
		for k, key := range t.nodes[n].keys {
			if key == c {
				next = t.nodes[n].kids[k]
				break
			}
		}
		if next == -1 {
			next = int32(len(t.nodes))
			t.nodes = append(t.nodes, trieNode{tok: -1})
			t.nodes[n].keys = append(t.nodes[n].keys, c)
			t.nodes[n].kids = append(t.nodes[n].kids, next)
		}
		n = next
	}
	if t.nodes[n].tok == -1 { // first inserted wins for duplicate texts
		t.nodes[n].tok = tok
	}
}

// longest returns the added-token index and length of the longest token that is a prefix of
// s[i:], or (-1, 0).
func (t *trie) longest(s string, i int) (int32, int) {
	best, bestLen := int32(-1), 0
	n := int32(0)
	for j := i; j < len(s); j++ {
		c := s[j]
		next := int32(-1)
		node := &t.nodes[n]
		for k, key := range node.keys {
			if key == c {
				next = node.kids[k]
				break
			}
		}
		if next == -1 {
			break
		}
		n = next
		if t.nodes[n].tok >= 0 {
			best, bestLen = t.nodes[n].tok, j-i+1
		}
	}
	return best, bestLen
}

// fragment is either raw text (tok == -1) or one token.
type fragment struct {
	text string
	tok  int32
}

// specialSet holds the added tokens of a tokenizer and the structures to find them.
type specialSet struct {
	list []addedToken
	// llama.cpp order: by text length, longest first (ties by id, where llama.cpp's
	// unstable sort leaves the order unspecified).
	order []int32
	all   *trie // every added token
	raw   *trie // HF: tokens with normalized == false
	norm  *trie // HF: tokens with normalized == true
}

func newSpecialSet(list []addedToken) *specialSet {
	s := &specialSet{list: list, all: newTrie(), raw: newTrie(), norm: newTrie()}
	s.order = make([]int32, len(list))
	for i := range list {
		s.order[i] = int32(i)
		s.all.insert(list[i].text, int32(i))
		if list[i].normalized {
			s.norm.insert(list[i].text, int32(i))
		} else {
			s.raw.insert(list[i].text, int32(i))
		}
	}
	sort.SliceStable(s.order, func(a, b int) bool {
		ta, tb := list[s.order[a]], list[s.order[b]]
		if len(ta.text) != len(tb.text) {
			return len(ta.text) > len(tb.text)
		}
		return ta.id < tb.id
	})
	return s
}

// isCSpace is C isspace() in the "C" locale, used by llama.cpp's lstrip/rstrip.
func isCSpace(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }

// partitionLlama splits text the way llama.cpp's tokenizer_st_partition does: for every
// special token, longest first, every occurrence inside the still-unsplit text fragments is
// cut out. CONTROL and UNKNOWN tokens take part only when parseSpecial is set.
func (s *specialSet) partitionLlama(text string, parseSpecial bool, dst []fragment) []fragment {
	if text == "" {
		return dst[:0]
	}
	dst = append(dst[:0], fragment{text: text, tok: -1})
	if len(s.list) == 0 {
		return dst
	}
	// One pass with the trie finds which tokens occur at all; usually none do.
	present := make(map[int32]bool)
	for i := 0; i < len(text); i++ {
		if !s.all.first[text[i]] {
			continue
		}
		n := int32(0)
		for j := i; j < len(text); j++ {
			next := int32(-1)
			node := &s.all.nodes[n]
			for k, key := range node.keys {
				if key == text[j] {
					next = node.kids[k]
					break
				}
			}
			if next == -1 {
				break
			}
			n = next
			if s.all.nodes[n].tok >= 0 {
				present[s.all.nodes[n].tok] = true
			}
		}
	}
	if len(present) == 0 {
		return dst
	}
	// Duplicate texts map to the first token in the trie; llama.cpp would process each
	// duplicate but only the first in its order can match, so this is equivalent.
	for _, idx := range s.order {
		if !present[idx] {
			continue
		}
		tok := &s.list[idx]
		if tok.special && !parseSpecial {
			continue
		}
		var out []fragment
		changed := false
		for _, f := range dst {
			if f.tok >= 0 || !strings.Contains(f.text, tok.text) {
				out = append(out, f)
				continue
			}
			changed = true
			rest := f.text
			for {
				m := strings.Index(rest, tok.text)
				if m < 0 {
					if rest != "" {
						out = append(out, fragment{text: rest, tok: -1})
					}
					break
				}
				left := rest[:m]
				if tok.lstrip {
					for len(left) > 0 && isCSpace(left[len(left)-1]) {
						left = left[:len(left)-1]
					}
				}
				if left != "" {
					out = append(out, fragment{text: left, tok: -1})
				}
				out = append(out, fragment{tok: tok.id})
				rest = rest[m+len(tok.text):]
				if tok.rstrip {
					for len(rest) > 0 && isCSpace(rest[0]) {
						rest = rest[1:]
					}
				}
			}
		}
		if changed {
			dst = out
		}
	}
	return dst
}

// isWordChar is the character class HF uses for single_word tokens (alphanumeric or '_').
func isWordChar(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsNumber(r)
}

// partitionHF splits text the way Hugging Face tokenizers' AddedVocabulary does with trie t:
// leftmost-longest matches over all its tokens; matches of special tokens are dropped when
// parseSpecial is false, matches of single_word tokens touching a word character are dropped;
// lstrip/rstrip absorb the neighbouring white space into the token.
func (s *specialSet) partitionHF(t *trie, text string, parseSpecial bool, dst []fragment) []fragment {
	start := 0 // start of pending text
	for i := 0; i < len(text); {
		if !t.first[text[i]] {
			i++
			continue
		}
		idx, l := t.longest(text, i)
		if idx < 0 {
			i++
			continue
		}
		tok := &s.list[idx]
		ms, me := i, i+l
		if tok.special && !parseSpecial {
			i = me
			continue
		}
		if tok.singleWord {
			before := ms > 0 && isWordChar(lastRune(text[:ms]))
			after := me < len(text) && isWordChar(firstRune(text[me:]))
			if before || after {
				i = me
				continue
			}
		}
		if tok.lstrip {
			ns := len(strings.TrimRightFunc(text[:ms], unicode.IsSpace))
			ms = max(ns, start)
		}
		if tok.rstrip {
			me = len(text) - len(strings.TrimLeftFunc(text[me:], unicode.IsSpace))
		}
		if start < ms {
			dst = append(dst, fragment{text: text[start:ms], tok: -1})
		}
		dst = append(dst, fragment{tok: tok.id})
		start = me
		i = me
	}
	if start < len(text) {
		dst = append(dst, fragment{text: text[start:], tok: -1})
	}
	return dst
}

func lastRune(s string) rune {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] < 0x80 || s[i] >= 0xC0 {
			r, _ := decodeRune(s, i)
			return r
		}
	}
	return 0xFFFD
}

func firstRune(s string) rune {
	r, _ := decodeRune(s, 0)
	return r
}
