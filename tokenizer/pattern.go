package tokenizer

import (
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// pattern is what Split and Replace look for: a literal string or a regular
// expression.
type pattern struct {
	lit   string
	isLit bool
	re    *regexp2.Regexp
	// fn, when set, matches single runes (the Digits pre-tokenizer).
	fn func(rune) bool
}

// segment is part of a string, a match of the pattern or the text between.
type segment struct {
	start, end int
	match      bool
}

// find cuts s into matches and the text between them, in order, covering s.
// Empty matches are ignored.
func (p pattern) find(s string) []segment {
	if s == "" {
		return []segment{{0, 0, false}}
	}
	var out []segment
	prev := 0
	add := func(start, end int) {
		if start == end {
			return
		}
		if prev != start {
			out = append(out, segment{prev, start, false})
		}
		out = append(out, segment{start, end, true})
		prev = end
	}
	switch {
	case p.fn != nil:
		for i, r := range s {
			if p.fn(r) {
				add(i, i+utf8.RuneLen(r))
			}
		}
	case p.isLit:
		if p.lit == "" {
			return []segment{{0, len(s), false}}
		}
		for i := 0; i < len(s); {
			j := strings.Index(s[i:], p.lit)
			if j < 0 {
				break
			}
			add(i+j, i+j+len(p.lit))
			i += j + len(p.lit)
		}
	default:
		runes := []rune(s)
		offs := make([]int, len(runes)+1)
		o := 0
		for i, r := range runes {
			offs[i] = o
			o += utf8.RuneLen(r)
		}
		offs[len(runes)] = o
		m, err := p.re.FindRunesMatch(runes)
		for err == nil && m != nil {
			add(offs[m.Index], offs[m.Index+m.Length])
			m, err = p.re.FindNextMatch(m)
		}
	}
	if prev != len(s) {
		out = append(out, segment{prev, len(s), false})
	}
	return out
}
