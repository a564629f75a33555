package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// piece is a stretch of normalized text on its way to the model.
type piece struct {
	s string
	// atStart is whether the piece begins where the input began, which the
	// Metaspace pre-tokenizer's "first" scheme asks.
	atStart bool
}

// preTokenizer splits pieces further: tokenizer.json's "pre_tokenizer".
// Empty pieces are dropped.
type preTokenizer interface {
	preTokenize(in []piece) []piece
}

type behavior int

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

func parseBehavior(s, where string) (behavior, error) {
	switch s {
	case "Removed":
		return removed, nil
	case "Isolated":
		return isolated, nil
	case "MergedWithPrevious":
		return mergedWithPrevious, nil
	case "MergedWithNext":
		return mergedWithNext, nil
	case "Contiguous":
		return contiguous, nil
	}
	return 0, fmt.Errorf("%s: split behavior %q is not supported", where, s)
}

// splitPiece cuts p at the segments found in it, treating matches as the
// behavior says, and appends the non-empty parts to dst.
func splitPiece(dst []piece, p piece, segs []segment, b behavior, invert bool) []piece {
	if invert {
		for i := range segs {
			segs[i].match = !segs[i].match
		}
	}
	type part struct {
		start, end int
		drop       bool
	}
	var parts []part
	switch b {
	case isolated:
		for _, s := range segs {
			parts = append(parts, part{s.start, s.end, false})
		}
	case removed:
		for _, s := range segs {
			parts = append(parts, part{s.start, s.end, s.match})
		}
	case contiguous:
		prevMatch := false
		for i, s := range segs {
			if i > 0 && s.match == prevMatch {
				parts[len(parts)-1].end = s.end
			} else {
				parts = append(parts, part{s.start, s.end, false})
			}
			prevMatch = s.match
		}
	case mergedWithPrevious:
		prevMatch := false
		for i, s := range segs {
			if i > 0 && s.match && !prevMatch {
				parts[len(parts)-1].end = s.end
			} else {
				parts = append(parts, part{s.start, s.end, false})
			}
			prevMatch = s.match
		}
	case mergedWithNext:
		prevMatch := false
		for i := len(segs) - 1; i >= 0; i-- {
			s := segs[i]
			if i < len(segs)-1 && s.match && !prevMatch {
				parts[len(parts)-1].start = s.start
			} else {
				parts = append(parts, part{s.start, s.end, false})
			}
			prevMatch = s.match
		}
		for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
			parts[i], parts[j] = parts[j], parts[i]
		}
	}
	for _, q := range parts {
		if q.drop || q.start == q.end {
			continue
		}
		dst = append(dst, piece{s: p.s[q.start:q.end], atStart: p.atStart && q.start == 0})
	}
	return dst
}

type preSequence []preTokenizer

func (q preSequence) preTokenize(in []piece) []piece {
	for _, p := range q {
		in = p.preTokenize(in)
	}
	return in
}

type splitPre struct {
	pat    pattern
	b      behavior
	invert bool
}

func (s splitPre) preTokenize(in []piece) []piece {
	out := make([]piece, 0, len(in))
	for _, p := range in {
		if p.s == "" {
			continue
		}
		out = splitPiece(out, p, s.pat.find(p.s), s.b, s.invert)
	}
	return out
}

// gpt2Regex is the split the ByteLevel pre-tokenizer makes when use_regex
// is set.
const gpt2Regex = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// byteLevel maps every byte to a printable character (GPT-2's alphabet),
// after an optional split with gpt2Regex.
type byteLevel struct {
	addPrefixSpace bool
	split          *pattern
}

func (b byteLevel) preTokenize(in []piece) []piece {
	out := make([]piece, 0, len(in))
	for _, p := range in {
		if p.s == "" {
			continue
		}
		if b.addPrefixSpace && !strings.HasPrefix(p.s, " ") {
			p.s = " " + p.s
		}
		if b.split != nil {
			out = splitPiece(out, p, b.split.find(p.s), isolated, false)
		} else {
			out = append(out, p)
		}
	}
	for i := range out {
		out[i].s = toByteLevel(out[i].s)
	}
	return out
}

func toByteLevel(s string) string {
	var sb strings.Builder
	sb.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		sb.WriteRune(byteToRune[s[i]])
	}
	return sb.String()
}

type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// metaspace turns spaces into a replacement character (▁), puts one in
// front of a piece as its scheme says, and splits before each.
type metaspace struct {
	repl   rune
	scheme prependScheme
	split  bool
}

func (m metaspace) preTokenize(in []piece) []piece {
	rs := string(m.repl)
	out := make([]piece, 0, len(in))
	for _, p := range in {
		if p.s == "" {
			continue
		}
		p.s = strings.ReplaceAll(p.s, " ", rs)
		if !strings.HasPrefix(p.s, rs) && (m.scheme == prependAlways || (m.scheme == prependFirst && p.atStart)) {
			p.s = rs + p.s
		}
		if m.split {
			out = splitPiece(out, p, pattern{lit: rs, isLit: true}.find(p.s), mergedWithNext, false)
		} else {
			out = append(out, p)
		}
	}
	return out
}

func parsePrependScheme(s, where string) (prependScheme, error) {
	switch s {
	case "", "always":
		return prependAlways, nil
	case "first":
		return prependFirst, nil
	case "never":
		return prependNever, nil
	}
	return 0, fmt.Errorf("%s: prepend_scheme %q is not supported", where, s)
}

type rawPreTokenizer struct {
	Type             string            `json:"type"`
	PreTokenizers    []json.RawMessage `json:"pretokenizers"`
	Pattern          *rawPattern       `json:"pattern"`
	Behavior         string            `json:"behavior"`
	Invert           bool              `json:"invert"`
	AddPrefixSpace   *bool             `json:"add_prefix_space"`
	UseRegex         *bool             `json:"use_regex"`
	Replacement      string            `json:"replacement"`
	PrependScheme    string            `json:"prepend_scheme"`
	Split            *bool             `json:"split"`
	IndividualDigits bool              `json:"individual_digits"`
}

func parsePreTokenizer(data json.RawMessage, where string) (preTokenizer, error) {
	if isNull(data) {
		return nil, nil
	}
	var r rawPreTokenizer
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	switch r.Type {
	case "Sequence":
		var q preSequence
		for i, d := range r.PreTokenizers {
			p, err := parsePreTokenizer(d, fmt.Sprintf("%s.pretokenizers[%d]", where, i))
			if err != nil {
				return nil, err
			}
			if p != nil {
				q = append(q, p)
			}
		}
		return q, nil
	case "Split":
		p, err := r.Pattern.compile(where + ".pattern")
		if err != nil {
			return nil, err
		}
		b, err := parseBehavior(r.Behavior, where+".behavior")
		if err != nil {
			return nil, err
		}
		return splitPre{p, b, r.Invert}, nil
	case "ByteLevel":
		b := byteLevel{addPrefixSpace: r.AddPrefixSpace == nil || *r.AddPrefixSpace}
		if r.UseRegex == nil || *r.UseRegex {
			re, err := compileRegex(gpt2Regex)
			if err != nil {
				return nil, err
			}
			b.split = &pattern{re: re}
		}
		return b, nil
	case "Metaspace":
		m := metaspace{repl: '▁', split: r.Split == nil || *r.Split}
		if r.Replacement != "" {
			rr, n := utf8.DecodeRuneInString(r.Replacement)
			if n != len(r.Replacement) {
				return nil, fmt.Errorf("%s.replacement: %q is not one character", where, r.Replacement)
			}
			m.repl = rr
		}
		s, err := parsePrependScheme(r.PrependScheme, where+".prepend_scheme")
		if err != nil {
			return nil, err
		}
		if r.AddPrefixSpace != nil && !*r.AddPrefixSpace {
			s = prependNever
		}
		m.scheme = s
		return m, nil
	case "Digits":
		b := contiguous
		if r.IndividualDigits {
			b = isolated
		}
		return splitPre{pattern{fn: unicode.IsNumber}, b, false}, nil
	case "WhitespaceSplit":
		return splitPre{pattern{fn: isSpace}, removed, false}, nil
	case "BertPreTokenizer":
		return bertPre{}, nil
	case "Whitespace":
		re, err := compileRegex(`\w+|[^\w\s]+`)
		if err != nil {
			return nil, err
		}
		return splitPre{pattern{re: re}, removed, true}, nil
	}
	return nil, fmt.Errorf("%s: pre-tokenizer type %q is not supported", where, r.Type)
}

// byteToRune is GPT-2's byte-level alphabet: printable bytes stand for
// themselves, the rest map to code points from U+0100 on, in order.
var byteToRune, runeToByte = byteLevelAlphabet()

func byteLevelAlphabet() ([256]rune, map[rune]byte) {
	var fwd [256]rune
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	for b := range 256 {
		if printable(b) {
			fwd[b] = rune(b)
		} else {
			fwd[b] = rune(256 + n)
			n++
		}
	}
	back := make(map[rune]byte, 256)
	for b, r := range fwd {
		back[r] = byte(b)
	}
	return fwd, back
}
