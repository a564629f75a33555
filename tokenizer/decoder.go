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
// st.incomplete is set by the steps that turn bytes into text when the
// bytes of the last token end in an unfinished UTF-8 character, one more
// tokens could complete; the stream decoder waits for them. With st.raw
// those steps keep the bytes as they are, valid UTF-8 or not, where text
// would get U+FFFD.
type decoder interface {
	decode(toks []string, st *decodeState) []string
}

type decodeState struct {
	incomplete bool
	raw        bool
}

type decSequence []decoder

func (q decSequence) decode(toks []string, st *decodeState) []string {
	for _, d := range q {
		toks = d.decode(toks, st)
	}
	return toks
}

// byteLevelDec reverses the byte-level alphabet over all tokens at once. A
// token with a character outside the alphabet (an added token, say) stands
// for its own UTF-8 bytes.
type byteLevelDec struct{}

func (byteLevelDec) decode(toks []string, st *decodeState) []string {
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
	if st.raw {
		return []string{string(buf)}
	}
	s, tail := lossyUTF8(buf)
	st.incomplete = tail
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

func (byteFallbackDec) decode(toks []string, st *decodeState) []string {
	out := make([]string, 0, len(toks))
	var run []byte
	flush := func(last bool) {
		if len(run) == 0 {
			return
		}
		if st.raw || utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			if last && incompleteTail(run) {
				st.incomplete = true
			}
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	st.incomplete = false
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

func (fuseDec) decode(toks []string, _ *decodeState) []string {
	return []string{strings.Join(toks, "")}
}

type replaceDec struct {
	pat     pattern
	content string
}

func (r replaceDec) decode(toks []string, _ *decodeState) []string {
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

func (d stripDec) decode(toks []string, _ *decodeState) []string {
	// Byte-wise, so that bytes that are not valid UTF-8 (TokenBytes) stay.
	c := string(d.content)
	out := make([]string, len(toks))
	for i, t := range toks {
		for k := 0; k < d.start && strings.HasPrefix(t, c); k++ {
			t = t[len(c):]
		}
		for k := 0; k < d.stop && strings.HasSuffix(t, c); k++ {
			t = t[:len(t)-len(c)]
		}
		out[i] = t
	}
	return out
}

// metaspaceDec turns the replacement character back into spaces; in the
// first token, unless the scheme is never, it drops them.
type metaspaceDec struct {
	repl   rune
	scheme prependScheme
}

func (d metaspaceDec) decode(toks []string, _ *decodeState) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		var b strings.Builder
		for j := 0; j < len(t); {
			// Bytes that are not valid UTF-8 (TokenBytes) are kept as they are.
			r, n := utf8.DecodeRuneInString(t[j:])
			switch {
			case r != d.repl:
				b.WriteString(t[j : j+n])
			case i == 0 && d.scheme != prependNever:
			default:
				b.WriteByte(' ')
			}
			j += n
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
	case "WordPiece":
		f, err := objectFields(data, where)
		if err != nil {
			return nil, err
		}
		var d wordPieceDec
		if d.prefix, err = f.str("prefix"); err != nil {
			return nil, err
		}
		if d.cleanup, err = f.boolean("cleanup"); err != nil {
			return nil, err
		}
		return d, nil
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
