package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// AddedToken is one entry of tokenizer.json's "added_tokens": a string the
// tokenizer matches whole, before the model sees the text.
type AddedToken struct {
	ID      int32  `json:"id"`
	Content string `json:"content"`
	// SingleWord matches the token only where no word character touches it.
	SingleWord bool `json:"single_word"`
	// LStrip and RStrip make a match swallow the whitespace on its left or
	// right.
	LStrip bool `json:"lstrip"`
	RStrip bool `json:"rstrip"`
	// Normalized tokens are matched in the normalized text, the others in
	// the raw input.
	Normalized bool `json:"normalized"`
	// Special tokens are the ones Decode drops when asked to skip them.
	Special bool `json:"special"`
}

// trie matches a set of strings leftmost-longest, byte by byte.
type trie struct {
	nodes []trieNode
}

type trieNode struct {
	next  map[byte]int32
	token int32 // index into the added tokens, -1 if no token ends here
}

func newTrie() *trie { return &trie{nodes: []trieNode{{token: -1}}} }

func (t *trie) insert(s string, token int32) {
	n := int32(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		nx, ok := t.nodes[n].next[c]
		if !ok {
			if t.nodes[n].next == nil {
				t.nodes[n].next = make(map[byte]int32)
			}
			nx = int32(len(t.nodes))
			t.nodes = append(t.nodes, trieNode{token: -1})
			t.nodes[n].next[c] = nx
		}
		n = nx
	}
	t.nodes[n].token = token
}

// longest returns the token of the longest string in t that s starts with,
// and its length; token -1 if none.
func (t *trie) longest(s string) (token int32, n int) {
	token, node := -1, int32(0)
	for i := 0; i < len(s); i++ {
		nx, ok := t.nodes[node].next[s[i]]
		if !ok {
			break
		}
		node = nx
		if tk := t.nodes[node].token; tk >= 0 {
			token, n = tk, i+1
		}
	}
	return token, n
}

// addedVocab holds the added tokens and the two tries they are matched with.
type addedVocab struct {
	tokens     []AddedToken
	byID       map[int32]int // id -> index into tokens
	byContent  map[string]int32
	special    map[string]bool
	decodeText map[int32]string // what Decode reads for a normalized token
	raw        *trie            // tokens with normalized false
	normalized *trie            // tokens with normalized true, in normalized form
	// encodeSpecial turns the matching of special tokens off, so their text
	// is tokenized like any other.
	encodeSpecial bool
}

func newAddedVocab(tokens []AddedToken, norm normalizer) *addedVocab {
	v := &addedVocab{
		byID:       make(map[int32]int),
		byContent:  make(map[string]int32),
		special:    make(map[string]bool),
		decodeText: make(map[int32]string),
	}
	for _, tk := range tokens {
		if tk.Content == "" {
			continue
		}
		if i, ok := v.byID[tk.ID]; ok {
			v.tokens[i] = tk // a later entry for the same id wins
		} else {
			v.byID[tk.ID] = len(v.tokens)
			v.tokens = append(v.tokens, tk)
		}
		v.byContent[tk.Content] = tk.ID
		if tk.Special {
			v.special[tk.Content] = true
		}
	}
	for i, tk := range v.tokens {
		if !tk.Normalized {
			if v.raw == nil {
				v.raw = newTrie()
			}
			v.raw.insert(tk.Content, int32(i))
			continue
		}
		pattern := tk.Content
		if norm != nil {
			pattern = norm.normalize(tk.Content)
			if pattern != tk.Content {
				v.decodeText[tk.ID] = pattern
			}
		}
		if v.normalized == nil {
			v.normalized = newTrie()
		}
		v.normalized.insert(pattern, int32(i))
	}
	return v
}

// span is a piece of the input: either an added token (token >= 0) or text
// for the rest of the pipeline.
type span struct {
	start, end int
	token      int32 // index into addedVocab.tokens, -1 for plain text
}

// split finds the added tokens of t in s, leftmost-longest and without
// overlaps, and returns s cut into token and text spans that cover it.
func (v *addedVocab) split(s string, t *trie) []span {
	if t == nil || s == "" {
		return []span{{0, len(s), -1}}
	}
	var out []span
	last := 0
	for i := 0; i < len(s); {
		tok, n := t.longest(s[i:])
		if tok < 0 {
			i++
			continue
		}
		start, stop := i, i+n
		i = stop
		at := v.tokens[tok]
		if v.encodeSpecial && at.Special {
			continue
		}
		if at.SingleWord {
			startOK := start == 0 || !endsWithWord(s[:start])
			stopOK := stop == len(s) || !startsWithWord(s[stop:])
			if !startOK || !stopOK {
				continue
			}
		}
		if at.LStrip {
			start = max(trimRightSpaceIndex(s[:start]), last)
		}
		if at.RStrip {
			stop += leadingSpaceLen(s[stop:])
			i = stop
		}
		if last < start {
			out = append(out, span{last, start, -1})
		}
		out = append(out, span{start, stop, tok})
		last = stop
	}
	if last != len(s) {
		out = append(out, span{last, len(s), -1})
	}
	return out
}

// isWordRune is the \w class of Unicode regular expressions: alphabetic,
// marks, decimal digits, connector punctuation and the joiners.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.In(r, unicode.Nl, unicode.Other_Alphabetic, unicode.M, unicode.Nd, unicode.Pc) ||
		r == 0x200C || r == 0x200D
}

func isSpace(r rune) bool { return unicode.Is(unicode.White_Space, r) }

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordRune(r)
}

// trimRightSpaceIndex returns where the whitespace that ends s begins.
func trimRightSpaceIndex(s string) int {
	for len(s) > 0 {
		r, n := utf8.DecodeLastRuneInString(s)
		if !isSpace(r) {
			break
		}
		s = s[:len(s)-n]
	}
	return len(s)
}

// leadingSpaceLen returns the length of the whitespace that starts s.
func leadingSpaceLen(s string) int {
	n := 0
	for n < len(s) {
		r, size := utf8.DecodeRuneInString(s[n:])
		if !isSpace(r) {
			break
		}
		n += size
	}
	return n
}
