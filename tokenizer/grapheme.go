package tokenizer

import (
	"sort"
	"unicode/utf8"
)

// graphemeCat is a code point's part in the rules of extended grapheme
// clusters (Unicode Standard Annex #29): its Grapheme_Cluster_Break value,
// or, where that is Other, Extended_Pictographic or an Indic conjunct
// consonant.
type graphemeCat uint8

const (
	gcAny graphemeCat = iota
	gcCR
	gcLF
	gcControl
	gcExtend
	gcZWJ
	gcRegional
	gcPrepend
	gcSpacingMark
	gcL
	gcV
	gcT
	gcLV
	gcLVT
	gcPictographic
	gcConsonant
)

type graphemeRange struct {
	lo, hi rune
	cat    graphemeCat
}

// graphemeCategory returns the category of r (graphemetables.go).
func graphemeCategory(r rune) graphemeCat {
	switch {
	case r >= 0x20 && r < 0x7F:
		return gcAny
	case r >= 0xAC00 && r <= 0xD7A3:
		// Hangul syllables: every 28th, from the first, has no final
		// consonant.
		if (r-0xAC00)%28 == 0 {
			return gcLV
		}
		return gcLVT
	}
	i := sort.Search(len(graphemeRanges), func(i int) bool { return graphemeRanges[i].hi >= r })
	if i < len(graphemeRanges) && graphemeRanges[i].lo <= r {
		return graphemeRanges[i].cat
	}
	return gcAny
}

func isConjunctLinker(r rune) bool {
	for _, l := range conjunctLinkers {
		if l == r {
			return true
		}
	}
	return false
}

func isConjunctExtend(r rune) bool {
	i := sort.Search(len(conjunctExtendRanges), func(i int) bool { return conjunctExtendRanges[i][1] >= r })
	return i < len(conjunctExtendRanges) && conjunctExtendRanges[i][0] <= r
}

// graphemeState is what the rules that look further back than one code
// point need to know of the text so far.
type graphemeState struct {
	prev graphemeCat
	// regional counts the regional indicators the text ends in.
	regional int
	// emoji is 1 where the text ends in an extended pictographic character
	// and Extend characters after it, 2 where a ZWJ follows those.
	emoji int8
	// conjunct is 1 where the text ends in an Indic conjunct consonant
	// followed by conjunct Extend characters, 2 where at least one conjunct
	// linker is among them.
	conjunct int8
}

// push records r, of category c, as the last code point of the text.
func (st *graphemeState) push(r rune, c graphemeCat) {
	st.prev = c
	if c == gcRegional {
		st.regional++
	} else {
		st.regional = 0
	}
	switch {
	case c == gcPictographic:
		st.emoji = 1
	case c == gcExtend && st.emoji == 1:
	case c == gcZWJ && st.emoji == 1:
		st.emoji = 2
	default:
		st.emoji = 0
	}
	switch {
	case isConjunctLinker(r):
		if st.conjunct > 0 {
			st.conjunct = 2
		}
	case isConjunctExtend(r):
	case c == gcConsonant:
		st.conjunct = 1
	default:
		st.conjunct = 0
	}
}

// breaks reports whether a grapheme boundary falls between the text so
// far and a code point of category c.
func (st *graphemeState) breaks(c graphemeCat) bool {
	p := st.prev
	switch {
	case p == gcCR && c == gcLF: // GB3
		return false
	case p == gcControl || p == gcCR || p == gcLF: // GB4
		return true
	case c == gcControl || c == gcCR || c == gcLF: // GB5
		return true
	case p == gcL && (c == gcL || c == gcV || c == gcLV || c == gcLVT): // GB6
		return false
	case (p == gcLV || p == gcV) && (c == gcV || c == gcT): // GB7
		return false
	case (p == gcLVT || p == gcT) && c == gcT: // GB8
		return false
	case c == gcExtend || c == gcZWJ || c == gcSpacingMark: // GB9, GB9a
		return false
	case p == gcPrepend: // GB9b
		return false
	case c == gcConsonant: // GB9c
		return st.conjunct != 2
	case p == gcZWJ && c == gcPictographic: // GB11
		return st.emoji != 2
	case p == gcRegional && c == gcRegional: // GB12, GB13
		return st.regional%2 == 0
	}
	return true // GB999
}

// nextGrapheme returns the length in bytes of the extended grapheme
// cluster s starts with (0 for an empty s). s must be valid UTF-8.
func nextGrapheme(s string) int {
	if s == "" {
		return 0
	}
	r, n := utf8.DecodeRuneInString(s)
	var st graphemeState
	st.push(r, graphemeCategory(r))
	for n < len(s) {
		r, size := utf8.DecodeRuneInString(s[n:])
		c := graphemeCategory(r)
		if st.breaks(c) {
			break
		}
		st.push(r, c)
		n += size
	}
	return n
}
