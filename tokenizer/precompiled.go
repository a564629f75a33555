package tokenizer

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"
)

// precompiled is the Precompiled normalizer: sentencepiece's compiled
// normalization rules (nmt_nfkc and the like), which tokenizer.json keeps
// as precompiled_charsmap, base64 of
//
//	trie size in bytes (uint32, little-endian)
//	the trie: a double array of uint32 units (Darts-clone's layout)
//	the replacement strings, each ended by a NUL byte
//
// The trie maps a key (the bytes of one or more characters) to the offset
// of its replacement among the strings.
//
// The tokenizers library applies it one extended grapheme cluster at a
// time: a cluster of fewer than 6 bytes that starts with a key is replaced
// whole by the replacement of the shortest key it starts with (so Ａ and a
// combining acute accent become A: the accent is lost); any other cluster
// is rewritten character by character, each character that is a key
// replaced and the others kept.
type precompiled struct {
	units []uint32
	repl  string
}

// Fields of a double-array unit.
func unitHasLeaf(u uint32) bool  { return u>>8&1 == 1 }
func unitValue(u uint32) uint32  { return u & (1<<31 - 1) }
func unitLabel(u uint32) uint32  { return u & (1<<31 | 0xFF) }
func unitOffset(u uint32) uint32 { return u >> 10 << (u & (1 << 9) >> 6) }

// parsePrecompiled decodes and checks a precompiled_charsmap: every node
// the trie can reach must keep its children and value within the trie,
// and every value must point at the start of a character of the
// replacement strings, so that lookups never leave the data.
func parsePrecompiled(b64, where string) (*precompiled, error) {
	if strings.ContainsAny(b64, "\r\n") {
		return nil, fmt.Errorf("%s: not base64: it holds a line break", where)
	}
	blob, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("%s: not base64: %v", where, err)
	}
	if len(blob) < 4 {
		return nil, fmt.Errorf("%s: %d bytes, too few for the trie size that starts it (4 bytes)", where, len(blob))
	}
	size := binary.LittleEndian.Uint32(blob)
	rest := blob[4:]
	switch {
	case uint64(size) > uint64(len(rest)):
		return nil, fmt.Errorf("%s: the trie size is %d bytes, but %d bytes follow it", where, size, len(rest))
	case size%4 != 0:
		return nil, fmt.Errorf("%s: the trie size %d is not a whole number of 4-byte units", where, size)
	case size == 0:
		return nil, fmt.Errorf("%s: the trie is empty", where)
	}
	p := &precompiled{units: make([]uint32, size/4), repl: string(rest[size:])}
	for i := range p.units {
		p.units[i] = binary.LittleEndian.Uint32(rest[4*i:])
	}
	if !utf8.ValidString(p.repl) {
		return nil, fmt.Errorf("%s: the replacement strings after the trie are not valid UTF-8", where)
	}
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	return p, nil
}

// check walks every node reachable from the root.
func (p *precompiled) check() error {
	n := uint32(len(p.units))
	seen := make([]bool, n)
	stack := []uint32{0}
	seen[0] = true
	for len(stack) > 0 {
		pos := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		base := pos ^ unitOffset(p.units[pos])
		// A child's position is base XOR its label byte: all must fit.
		if base|0xFF >= n {
			return fmt.Errorf("trie unit %d puts its children at %d, past the trie's %d units", pos, base, n)
		}
		for c := uint32(1); c < 256; c++ {
			child := base ^ c
			u := p.units[child]
			if unitLabel(u) != c {
				continue
			}
			if unitHasLeaf(u) {
				vpos := child ^ unitOffset(u)
				if vpos >= n {
					return fmt.Errorf("trie unit %d puts its value at %d, past the trie's %d units", child, vpos, n)
				}
				v := unitValue(p.units[vpos])
				if v > uint32(len(p.repl)) {
					return fmt.Errorf("trie unit %d points at byte %d of the replacement strings, which hold %d", child, v, len(p.repl))
				}
				if v < uint32(len(p.repl)) && !utf8.RuneStart(p.repl[v]) {
					return fmt.Errorf("trie unit %d points at byte %d of the replacement strings, inside a character", child, v)
				}
			}
			if !seen[child] {
				seen[child] = true
				stack = append(stack, child)
			}
		}
	}
	return nil
}

// lookup returns the replacement of the shortest key that s starts with.
// The search stops at a NUL byte, which no key holds.
func (p *precompiled) lookup(s string) (string, bool) {
	n := uint32(len(p.units))
	pos := unitOffset(p.units[0])
	for i := 0; i < len(s) && s[i] != 0; i++ {
		c := uint32(s[i])
		pos ^= c
		if pos >= n {
			return "", false
		}
		u := p.units[pos]
		if unitLabel(u) != c {
			return "", false
		}
		pos ^= unitOffset(u)
		if unitHasLeaf(u) {
			if pos >= n {
				return "", false
			}
			v := unitValue(p.units[pos])
			if v > uint32(len(p.repl)) {
				return "", false
			}
			r := p.repl[v:]
			if end := strings.IndexByte(r, 0); end >= 0 {
				r = r[:end]
			}
			return r, true
		}
	}
	return "", false
}

func (p *precompiled) normalize(s string) string {
	var b strings.Builder
	changed := false
	done := 0 // s[:done] is in b, rewritten
	replace := func(start, end int, r string) {
		if !changed {
			b.Grow(len(s) + 8)
			changed = true
		}
		b.WriteString(s[done:start])
		b.WriteString(r)
		done = end
	}
	for i := 0; i < len(s); {
		n := nextGrapheme(s[i:])
		g := s[i : i+n]
		if n < 6 {
			if r, ok := p.lookup(g); ok {
				replace(i, i+n, r)
				i += n
				continue
			}
			if _, size := utf8.DecodeRuneInString(g); size == n {
				i += n
				continue // one character, and no key
			}
		}
		for j := 0; j < n; {
			_, size := utf8.DecodeRuneInString(g[j:])
			if r, ok := p.lookup(g[j : j+size]); ok {
				replace(i+j, i+j+size, r)
			}
			j += size
		}
		i += n
	}
	if !changed {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}
