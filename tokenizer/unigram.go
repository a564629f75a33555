package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// unigram is the Unigram model of sentencepiece tokenizers (XLM-RoBERTa
// and its multilingual kin, T5, ALBERT; tokenizer.json's "model": {"type":
// "Unigram"}): a vocabulary of pieces, each with a score (its log
// probability). A pre-tokenized piece of text is cut into the pieces whose
// scores sum highest (Viterbi over the ways to spell it), as the
// tokenizers library does:
//
//   - the cuts fall between characters; a character no piece of its own
//     spells may still be covered by a longer piece, and otherwise is
//     unknown, scored as the lowest score of the vocabulary less 10;
//   - among cuttings of equal score, the one found first wins: the
//     library walks the text from its start and, at each position, the
//     pieces from the shortest;
//   - runs of unknown characters are fused into one token: the unknown
//     piece, or with byte_fallback the <0xXX> pieces of its bytes where the
//     vocabulary has all of them.
type unigram struct {
	vocab        map[string]int32 // a piece listed twice has its last id
	tokens       []string
	scores       []float64
	trie         pieceTrie
	unk          int32
	unkScore     float64
	byteFallback bool
	byteTokens   [256]int32 // the id of "<0xXX>", -1 where the vocabulary lacks it

	cacheMu sync.RWMutex
	cache   map[string][]int32
}

// withUnknown is u with the unknown piece at id unk (an id of its
// vocabulary) and no byte fallback, as a tokenizer class that rebuilds the
// model from the file's pieces makes it: the pieces, scores and trie
// shared, a cache of its own.
func (u *unigram) withUnknown(unk int32) *unigram {
	return &unigram{vocab: u.vocab, tokens: u.tokens, scores: u.scores, trie: u.trie, unk: unk,
		unkScore: u.unkScore, byteTokens: u.byteTokens, cache: make(map[string][]int32)}
}

// unkPenalty is how much lower than the lowest piece score the tokenizers
// library scores an unknown character.
const unkPenalty = 10.0

// parseUnigram reads a Unigram model. The tokenizers library requires
// vocab and reads unk_id and byte_fallback where they are set; a model
// without an unk_id, which the library loads but cannot encode a character
// its vocab lacks with, is refused.
func parseUnigram(f fields) (*unigram, error) {
	v, ok := f.m["vocab"]
	if !ok || isNull(v) {
		return nil, f.missing("vocab")
	}
	m := &unigram{unk: -1, cache: make(map[string][]int32)}
	if m.tokens, m.scores, ok = scanPairs(v); !ok {
		var err error
		if m.tokens, m.scores, err = readPairs(v, f.key("vocab")); err != nil {
			return nil, err
		}
	}
	if len(m.tokens) > math.MaxInt32 {
		return nil, fmt.Errorf("%s: %d pieces, more than int32 ids hold", f.key("vocab"), len(m.tokens))
	}
	m.vocab = make(map[string]int32, len(m.tokens))
	minScore := math.Inf(1)
	for i, tok := range m.tokens {
		m.vocab[tok] = int32(i)
		minScore = min(minScore, m.scores[i])
	}
	m.unkScore = minScore - unkPenalty

	if u, has := f.m["unk_id"]; !has || isNull(u) {
		return nil, fmt.Errorf("%s is missing: the tokenizers library reads a Unigram model without one, but fails on the first character the vocab lacks", f.key("unk_id"))
	}
	unk, err := f.count("unk_id")
	if err != nil {
		return nil, err
	}
	if unk >= len(m.tokens) {
		return nil, fmt.Errorf("%s: %d is not an id of model.vocab, which holds %d pieces", f.key("unk_id"), unk, len(m.tokens))
	}
	m.unk = int32(unk)
	if f.has("byte_fallback") {
		if m.byteFallback, err = f.boolean("byte_fallback"); err != nil {
			return nil, err
		}
	}
	for b := range 256 {
		m.byteTokens[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteTokens[b] = id
		}
	}
	m.trie = newPieceTrie(m.vocab)
	return m, nil
}

// readPairs reads a vocab of [piece, score] pairs entry by entry, to name
// the entry at fault.
func readPairs(v json.RawMessage, where string) ([]string, []float64, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(v, &raw); err != nil || raw == nil {
		return nil, nil, fmt.Errorf("%s: want a list of [piece, score] pairs, got %.60s", where, v)
	}
	pieces, scores := make([]string, len(raw)), make([]float64, len(raw))
	for i, e := range raw {
		var pair []json.RawMessage
		if err := json.Unmarshal(e, &pair); err != nil || len(pair) != 2 ||
			json.Unmarshal(pair[0], &pieces[i]) != nil || json.Unmarshal(pair[1], &scores[i]) != nil ||
			isNull(pair[0]) || isNull(pair[1]) {
			return nil, nil, fmt.Errorf("%s[%d]: want a [piece, score] pair, got %.60s", where, i, e)
		}
	}
	return pieces, scores, nil
}

// scanPairs reads a vocab of [piece, score] pairs quickly, in the form
// tokenizer.json files have it (v is valid JSON: Parse has read the whole
// file); ok is false for anything else, which readPairs then reads.
func scanPairs(v []byte) (pieces []string, scores []float64, ok bool) {
	i := 0
	ws := func() {
		for i < len(v) && (v[i] == ' ' || v[i] == '\n' || v[i] == '\t' || v[i] == '\r') {
			i++
		}
	}
	expect := func(c byte) bool {
		ws()
		if i < len(v) && v[i] == c {
			i++
			return true
		}
		return false
	}
	if !expect('[') {
		return nil, nil, false
	}
	n := bytes.Count(v, []byte("],")) + 1
	pieces, scores = make([]string, 0, n), make([]float64, 0, n)
	if expect(']') {
		return pieces, scores, true
	}
	for {
		if !expect('[') || !expect('"') {
			return nil, nil, false
		}
		start := i - 1
		plain := true
		for i < len(v) && v[i] != '"' {
			if v[i] == '\\' || v[i] < 0x20 {
				plain = false
				i++ // an escape: the byte after it is never the end
			}
			i++
		}
		if i >= len(v) {
			return nil, nil, false
		}
		i++
		var piece string
		if body := v[start+1 : i-1]; plain && utf8.Valid(body) {
			piece = string(body)
		} else if json.Unmarshal(v[start:i], &piece) != nil {
			return nil, nil, false
		}
		if !expect(',') {
			return nil, nil, false
		}
		ws()
		start = i
		for i < len(v) && (v[i] >= '0' && v[i] <= '9' || v[i] == '-' || v[i] == '+' || v[i] == '.' || v[i] == 'e' || v[i] == 'E') {
			i++
		}
		score, err := strconv.ParseFloat(string(v[start:i]), 64)
		if err != nil || !expect(']') {
			return nil, nil, false
		}
		pieces, scores = append(pieces, piece), append(scores, score)
		if expect(']') {
			ws()
			return pieces, scores, i == len(v)
		}
		if !expect(',') {
			return nil, nil, false
		}
	}
}

// tokenize appends the ids of one pre-tokenized piece to dst.
func (m *unigram) tokenize(dst []int32, piece string) []int32 {
	if piece == "" {
		return dst
	}
	m.cacheMu.RLock()
	ids, ok := m.cache[piece]
	m.cacheMu.RUnlock()
	if ok {
		return append(dst, ids...)
	}
	ids = m.encode(piece)
	if len(piece) < 256 {
		m.cacheMu.Lock()
		if len(m.cache) < bpeCacheSize {
			m.cache[piece] = ids
		}
		m.cacheMu.Unlock()
	}
	return append(dst, ids...)
}

// bestPath is the best cutting of the text up to one position: its score,
// where its last piece starts (-1 before any is found) and that piece's id.
type bestPath struct {
	score float64
	start int32
	id    int32
}

// encode cuts s into pieces and returns their ids.
func (m *unigram) encode(s string) []int32 {
	best := make([]bestPath, len(s)+1)
	for i := 1; i < len(best); i++ {
		best[i].start = -1
	}
	offer := func(start, end int, score float64, id int32) {
		if b := &best[end]; b.start < 0 || score > b.score {
			*b = bestPath{score: score, start: int32(start), id: id}
		}
	}
	for start := 0; start < len(s); {
		_, size := utf8.DecodeRuneInString(s[start:])
		base := best[start].score
		single := false
		node := int32(0)
		for i := start; i < len(s); i++ {
			if node = m.trie.child(node, s[i]); node < 0 {
				break
			}
			if id := m.trie.ids[node]; id >= 0 {
				offer(start, i+1, m.scores[id]+base, id)
				if i+1-start == size {
					single = true
				}
			}
		}
		if !single {
			offer(start, start+size, m.unkScore+base, m.unk)
		}
		start += size
	}

	// Walk back from the end, fusing runs of unknown pieces.
	var rev []int32
	runStart, runEnd := -1, -1
	flush := func() {
		if runStart >= 0 {
			rev = m.appendUnknown(rev, s[runStart:runEnd])
			runStart = -1
		}
	}
	for end := len(s); end > 0; {
		b := best[end]
		if b.id == m.unk {
			if runStart < 0 {
				runEnd = end
			}
			runStart = int(b.start)
		} else {
			flush()
			rev = append(rev, b.id)
		}
		end = int(b.start)
	}
	flush()
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// appendUnknown appends, in reverse, the ids of a run of unknown text: the
// piece that spells it if there is one, else its byte tokens (with
// byte_fallback, where the vocabulary has all of them), else the unknown
// piece.
func (m *unigram) appendUnknown(rev []int32, s string) []int32 {
	if id, ok := m.vocab[s]; ok {
		return append(rev, id)
	}
	if m.byteFallback {
		all := true
		for i := 0; i < len(s) && all; i++ {
			all = m.byteTokens[s[i]] >= 0
		}
		if all {
			for i := len(s) - 1; i >= 0; i-- {
				rev = append(rev, m.byteTokens[s[i]])
			}
			return rev
		}
	}
	return append(rev, m.unk)
}

// pieceTrie is a byte trie of the vocabulary's pieces, laid out breadth
// first so that the children of each node are consecutive and sorted by
// their byte.
type pieceTrie struct {
	labels []byte
	ids    []int32 // the id of the piece that ends at a node, or -1
	// The children of node k are nodes first[k] to first[k+1]-1.
	first []int32
	root  [256]int32 // the root's child for each byte, or -1
}

func newPieceTrie(vocab map[string]int32) pieceTrie {
	keys := make([]string, 0, len(vocab))
	for k := range vocab {
		if k != "" { // the library's trie never matches an empty piece
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	// One node for the root and one for each byte of a key past the prefix
	// it shares with the key before it.
	nodes := 1
	for i, k := range keys {
		shared := 0
		if i > 0 {
			p := keys[i-1]
			for shared < len(p) && shared < len(k) && p[shared] == k[shared] {
				shared++
			}
		}
		nodes += len(k) - shared
	}
	t := pieceTrie{
		labels: make([]byte, 1, nodes),
		ids:    make([]int32, 1, nodes),
		first:  make([]int32, 0, nodes+1),
	}
	t.ids[0] = -1
	// Each level of the trie in turn: the nodes of a level are numbered
	// consecutively, each spanning the keys that pass through it.
	type span struct{ lo, hi int32 }
	level := []span{{0, int32(len(keys))}}
	for depth := 0; len(level) > 0; depth++ {
		var next []span
		for _, sp := range level {
			node := len(t.first)
			lo := sp.lo
			if lo < sp.hi && len(keys[lo]) == depth {
				t.ids[node] = vocab[keys[lo]]
				lo++
			}
			t.first = append(t.first, int32(len(t.labels)))
			for lo < sp.hi {
				c := keys[lo][depth]
				hi := lo + 1
				for hi < sp.hi && keys[hi][depth] == c {
					hi++
				}
				next = append(next, span{lo, hi})
				t.labels = append(t.labels, c)
				t.ids = append(t.ids, -1)
				lo = hi
			}
		}
		level = next
	}
	t.first = append(t.first, int32(len(t.labels)))
	for i := range t.root {
		t.root[i] = -1
	}
	for k := t.first[0]; k < t.first[1]; k++ {
		t.root[t.labels[k]] = k
	}
	return t
}

// child returns node's child by byte c, or -1.
func (t *pieceTrie) child(node int32, c byte) int32 {
	if node == 0 {
		return t.root[c]
	}
	lo, hi := t.first[node], t.first[node+1]
	for lo < hi {
		mid := int32(uint32(lo+hi) >> 1)
		switch l := t.labels[mid]; {
		case l == c:
			return mid
		case l < c:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return -1
}

// unigramVocabIsList reports whether a model without a type has the
// Unigram model's vocab, a list of pairs, which the tokenizers library
// reads as one.
func unigramVocabIsList(v json.RawMessage) bool {
	return strings.HasPrefix(strings.TrimSpace(string(v)), "[")
}
