package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// decoder turns tokens back into text: tokenizer.json's "decoder". Each
// step maps a list of token strings to another; Decode joins the last.
//
// incomplete is set by the steps that turn bytes into text when the bytes
// of the last token end in an unfinished UTF-8 character, one more tokens
// could complete; the stream decoder waits for them.
type decoder interface {
	decode(toks []string, incomplete *bool) []string
}

type decSequence []decoder

func (q decSequence) decode(toks []string, inc *bool) []string {
	for _, d := range q {
		toks = d.decode(toks, inc)
	}
	return toks
}

// byteLevelDec reverses the byte-level alphabet over all tokens at once. A
// token with a character outside the alphabet (an added token, say) stands
// for its own UTF-8 bytes.
type byteLevelDec struct{}

func (byteLevelDec) decode(toks []string, inc *bool) []string {
	var buf []byte
	for _, t := range toks {
		start := len(buf)
		ok := true
		for _, r := range t {
			b, in := runeToByte[r]
			if !in {
				ok = false
				break
			}
			buf = append(buf, b)
		}
		if !ok {
			buf = append(buf[:start], t...)
		}
	}
	s, tail := lossyUTF8(buf)
	*inc = tail
	return []string{s}
}

// byteFallbackDec turns runs of <0xXX> tokens into the text their bytes
// spell; a run that is not valid UTF-8 becomes one U+FFFD per token.
type byteFallbackDec struct{}

func byteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(t[3])
	lo, ok2 := hexDigit(t[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func (byteFallbackDec) decode(toks []string, inc *bool) []string {
	out := make([]string, 0, len(toks))
	var run []byte
	flush := func(last bool) {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			if last && incompleteTail(run) {
				*inc = true
			}
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	*inc = false
	for _, t := range toks {
		if b, ok := byteToken(t); ok {
			run = append(run, b)
			continue
		}
		flush(false)
		out = append(out, t)
	}
	flush(true)
	return out
}

type fuseDec struct{}

func (fuseDec) decode(toks []string, _ *bool) []string {
	return []string{strings.Join(toks, "")}
}

type replaceDec struct {
	pat     pattern
	content string
}

func (r replaceDec) decode(toks []string, _ *bool) []string {
	n := replace(r)
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = n.normalize(t)
	}
	return out
}

// stripDec removes up to start copies of content from the front of each
// token and up to stop from its end.
type stripDec struct {
	content     rune
	start, stop int
}

func (d stripDec) decode(toks []string, _ *bool) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		rs := []rune(t)
		a := 0
		for a < d.start && a < len(rs) && rs[a] == d.content {
			a++
		}
		b := len(rs)
		for k := 0; k < d.stop && b > a && rs[b-1] == d.content; k++ {
			b--
		}
		out[i] = string(rs[a:b])
	}
	return out
}

// metaspaceDec turns the replacement character back into spaces; in the
// first token, unless the scheme is never, it drops them.
type metaspaceDec struct {
	repl   rune
	scheme prependScheme
}

func (d metaspaceDec) decode(toks []string, _ *bool) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		var b strings.Builder
		for _, r := range t {
			switch {
			case r != d.repl:
				b.WriteRune(r)
			case i == 0 && d.scheme != prependNever:
			default:
				b.WriteByte(' ')
			}
		}
		out[i] = b.String()
	}
	return out
}

type rawDecoder struct {
	Type          string            `json:"type"`
	Decoders      []json.RawMessage `json:"decoders"`
	Pattern       *rawPattern       `json:"pattern"`
	Content       string            `json:"content"`
	Start         int               `json:"start"`
	Stop          int               `json:"stop"`
	Replacement   string            `json:"replacement"`
	PrependScheme string            `json:"prepend_scheme"`
	AddPrefix     *bool             `json:"add_prefix_space"`
}

func parseDecoder(data json.RawMessage, where string) (decoder, error) {
	if isNull(data) {
		return nil, nil
	}
	var r rawDecoder
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	oneRune := func(s, key string, def rune) (rune, error) {
		if s == "" {
			return def, nil
		}
		c, n := utf8.DecodeRuneInString(s)
		if n != len(s) {
			return 0, fmt.Errorf("%s.%s: %q is not one character", where, key, s)
		}
		return c, nil
	}
	switch r.Type {
	case "Sequence":
		var q decSequence
		for i, d := range r.Decoders {
			dd, err := parseDecoder(d, fmt.Sprintf("%s.decoders[%d]", where, i))
			if err != nil {
				return nil, err
			}
			if dd != nil {
				q = append(q, dd)
			}
		}
		return q, nil
	case "ByteLevel":
		return byteLevelDec{}, nil
	case "ByteFallback":
		return byteFallbackDec{}, nil
	case "Fuse":
		return fuseDec{}, nil
	case "Replace":
		p, err := r.Pattern.compile(where + ".pattern")
		if err != nil {
			return nil, err
		}
		return replaceDec{p, r.Content}, nil
	case "Strip":
		c, err := oneRune(r.Content, "content", ' ')
		if err != nil {
			return nil, err
		}
		if r.Start < 0 || r.Stop < 0 {
			return nil, fmt.Errorf("%s: start and stop must not be negative", where)
		}
		return stripDec{c, r.Start, r.Stop}, nil
	case "Metaspace":
		c, err := oneRune(r.Replacement, "replacement", '▁')
		if err != nil {
			return nil, err
		}
		s, err := parsePrependScheme(r.PrependScheme, where+".prepend_scheme")
		if err != nil {
			return nil, err
		}
		if r.AddPrefix != nil && !*r.AddPrefix {
			s = prependNever
		}
		return metaspaceDec{c, s}, nil
	}
	return nil, fmt.Errorf("%s: decoder type %q is not supported", where, r.Type)
}

// seqLen returns the length of the UTF-8 sequence b[0] starts and how many
// of b's first bytes are a valid start of one (up to that length).
func seqLen(b []byte) (want, valid int) {
	c := b[0]
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c < 0x80:
		return 1, 1
	case c >= 0xC2 && c <= 0xDF:
		want = 2
	case c == 0xE0:
		want, lo = 3, 0xA0
	case c == 0xED:
		want, hi = 3, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		want = 3
	case c == 0xF0:
		want, lo = 4, 0x90
	case c == 0xF4:
		want, hi = 4, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		want = 4
	default:
		return 1, 0
	}
	valid = 1
	for valid < want && valid < len(b) {
		x := b[valid]
		if valid > 1 {
			lo, hi = 0x80, 0xBF
		}
		if x < lo || x > hi {
			break
		}
		valid++
	}
	return want, valid
}

// lossyUTF8 converts b to text, replacing each maximal invalid subpart by
// one U+FFFD, and reports whether b ends in a character cut short.
func lossyUTF8(b []byte) (string, bool) {
	if utf8.Valid(b) {
		return string(b), false
	}
	var sb strings.Builder
	tail := false
	for i := 0; i < len(b); {
		want, valid := seqLen(b[i:])
		if valid == want {
			sb.Write(b[i : i+want])
			i += want
			continue
		}
		sb.WriteString("\uFFFD")
		if valid == 0 {
			i++
			continue
		}
		if i+valid == len(b) {
			tail = true
		}
		i += valid
	}
	return sb.String(), tail
}

// incompleteTail reports whether b is valid UTF-8 up to a last character
// that more bytes could complete.
func incompleteTail(b []byte) bool {
	for i := 0; i < len(b); {
		want, valid := seqLen(b[i:])
		switch {
		case valid == want:
			i += want
		case valid > 0 && i+valid == len(b):
			return true
		default:
			return false
		}
	}
	return false
}
