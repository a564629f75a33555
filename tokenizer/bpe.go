package tokenizer

import (
	"fmt"
	"sync"
	"unicode/utf8"
)

// bpe is the byte-pair-encoding model of tokenizer.json ("model": {"type":
// "BPE"}): a vocabulary, a ranked list of merges, and the options that say
// what happens to characters the vocabulary lacks.
type bpe struct {
	vocab  map[string]int32
	tokens []string // id -> token; "" where an id has no model token

	// merges maps the pair (left id, right id) to its rank and the id of the
	// merged token.
	merges map[uint64]merge

	unk          int32 // -1 without an unk_token
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string     // continuing_subword_prefix
	suffix       string     // end_of_word_suffix
	byteTokens   [256]int32 // the id of "<0xXX>", -1 where the vocabulary lacks it

	cacheMu sync.RWMutex
	cache   map[string][]int32
}

type merge struct {
	rank int32
	id   int32
}

const bpeCacheSize = 10000

// tokensByID inverts a vocabulary: the token of each id, "" where an id
// has none.
func tokensByID(vocab map[string]int32) ([]string, error) {
	maxID := int32(-1)
	for tok, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("model.vocab: token %q has negative id %d", tok, id)
		}
		maxID = max(maxID, id)
	}
	tokens := make([]string, maxID+1)
	for tok, id := range vocab {
		tokens[id] = tok
	}
	return tokens, nil
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func newBPE(vocab map[string]int32, merges [][2]string, unk string, fuseUnk, byteFallback, ignoreMerges bool, prefix, suffix string) (*bpe, error) {
	m := &bpe{
		vocab:        vocab,
		merges:       make(map[uint64]merge, len(merges)),
		unk:          -1,
		fuseUnk:      fuseUnk,
		byteFallback: byteFallback,
		ignoreMerges: ignoreMerges,
		prefix:       prefix,
		suffix:       suffix,
		cache:        make(map[string][]int32),
	}
	var err error
	if m.tokens, err = tokensByID(vocab); err != nil {
		return nil, err
	}
	if unk != "" {
		id, ok := vocab[unk]
		if !ok {
			return nil, fmt.Errorf("model.unk_token %q is not in model.vocab", unk)
		}
		m.unk = id
	}
	for b := range 256 {
		m.byteTokens[b] = -1
		if id, ok := vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteTokens[b] = id
		}
	}
	for rank, p := range merges {
		a, ok := vocab[p[0]]
		if !ok {
			return nil, fmt.Errorf("model.merges[%d]: %q is not in model.vocab", rank, p[0])
		}
		b, ok := vocab[p[1]]
		if !ok {
			return nil, fmt.Errorf("model.merges[%d]: %q is not in model.vocab", rank, p[1])
		}
		right := p[1]
		if len(prefix) > 0 && len(right) >= len(prefix) {
			right = right[len(prefix):]
		}
		id, ok := vocab[p[0]+right]
		if !ok {
			return nil, fmt.Errorf("model.merges[%d]: the merged token %q is not in model.vocab", rank, p[0]+right)
		}
		// A pair listed twice keeps its last rank, as a map built in order does.
		m.merges[pairKey(a, b)] = merge{rank: int32(rank), id: id}
	}
	return m, nil
}

// tokenize appends the ids of one pre-tokenized piece to dst.
func (m *bpe) tokenize(dst []int32, piece string) []int32 {
	if piece == "" {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[piece]; ok {
			return append(dst, id)
		}
	}
	m.cacheMu.RLock()
	ids, ok := m.cache[piece]
	m.cacheMu.RUnlock()
	if ok {
		return append(dst, ids...)
	}
	ids = m.word(piece)
	if len(piece) < 256 {
		m.cacheMu.Lock()
		if len(m.cache) < bpeCacheSize {
			m.cache[piece] = ids
		}
		m.cacheMu.Unlock()
	}
	return append(dst, ids...)
}

// symbol is one entry of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32
	gone       bool
}

// word splits piece into characters (byte tokens or unk where the
// vocabulary lacks one) and applies merges, lowest rank first and leftmost
// first among equal ranks, until none applies.
func (m *bpe) word(piece string) []int32 {
	syms := make([]symbol, 0, len(piece))
	add := func(id int32) {
		n := int32(len(syms))
		syms = append(syms, symbol{id: id, prev: n - 1, next: n + 1})
	}
	pendingUnk := false
	flushUnk := func() {
		if pendingUnk {
			add(m.unk)
			pendingUnk = false
		}
	}
	first := true
	for i, r := range piece {
		end := i + utf8.RuneLen(r)
		s := piece[i:end]
		if !first && m.prefix != "" {
			s = m.prefix + s
		}
		if end == len(piece) && m.suffix != "" {
			s += m.suffix
		}
		first = false
		if id, ok := m.vocab[s]; ok {
			flushUnk()
			add(id)
			continue
		}
		if m.byteFallback && m.allBytes(s) {
			flushUnk()
			for j := 0; j < len(s); j++ {
				add(m.byteTokens[s[j]])
			}
			continue
		}
		if m.unk >= 0 {
			if pendingUnk && !m.fuseUnk {
				add(m.unk)
			}
			pendingUnk = true
		}
	}
	flushUnk()
	if len(syms) == 0 {
		return nil
	}
	syms[len(syms)-1].next = -1

	var h mergeHeap
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(queued{pos: int32(i), rank: mg.rank, id: mg.id})
		}
	}
	for h.len() > 0 {
		top := h.pop()
		cur := &syms[top.pos]
		if cur.gone || cur.next < 0 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		mg, ok := m.merges[pairKey(cur.id, right.id)]
		if !ok || mg.id != top.id {
			continue // a stale entry: one side merged since it was queued
		}
		cur.id = top.id
		cur.next = right.next
		syms[nextPos].gone = true
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if mg, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				h.push(queued{pos: cur.prev, rank: mg.rank, id: mg.id})
			}
		}
		if cur.next >= 0 {
			if mg, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				h.push(queued{pos: top.pos, rank: mg.rank, id: mg.id})
			}
		}
	}
	out := make([]int32, 0, len(syms))
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}

// allBytes reports whether every byte of s has a byte token.
func (m *bpe) allBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if m.byteTokens[s[i]] < 0 {
			return false
		}
	}
	return true
}

// queued is a merge waiting in the heap: merge the symbol at pos with its
// right neighbour into id.
type queued struct {
	pos, rank, id int32
}

// mergeHeap is a binary min-heap of queued merges ordered by rank, then
// position.
type mergeHeap struct{ q []queued }

func (h *mergeHeap) len() int { return len(h.q) }

func less(a, b queued) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

func (h *mergeHeap) push(x queued) {
	h.q = append(h.q, x)
	i := len(h.q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(h.q[i], h.q[p]) {
			break
		}
		h.q[i], h.q[p] = h.q[p], h.q[i]
		i = p
	}
}

func (h *mergeHeap) pop() queued {
	top := h.q[0]
	last := len(h.q) - 1
	h.q[0] = h.q[last]
	h.q = h.q[:last]
	i := 0
	for {
		l, r := 2*i+1, 2*i+2
		small := i
		if l < len(h.q) && less(h.q[l], h.q[small]) {
			small = l
		}
		if r < len(h.q) && less(h.q[r], h.q[small]) {
			small = r
		}
		if small == i {
			break
		}
		h.q[i], h.q[small] = h.q[small], h.q[i]
		i = small
	}
	return top
}
