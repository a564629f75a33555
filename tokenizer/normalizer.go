package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before it is split: tokenizer.json's
// "normalizer".
type normalizer interface {
	normalize(s string) string
}

type normSequence []normalizer

func (q normSequence) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

type unicodeForm struct{ f norm.Form }

func (u unicodeForm) normalize(s string) string { return u.f.String(s) }

// lowercase maps each character to lower case on its own, with the full
// Unicode mappings (İ becomes i and a combining dot; a capital sigma is σ
// wherever it stands), of the Unicode version the tokenizers library has:
// the mappings Go's tables lack are in lowercaseNewer (bertchars.go).
type lowercase struct{}

func (lowercase) normalize(s string) string {
	if !strings.ContainsRune(s, 0x130) {
		return strings.Map(toLower, s)
	}
	var b strings.Builder
	for _, r := range s {
		if r == 0x130 {
			b.WriteString("i\u0307")
		} else {
			b.WriteRune(toLower(r))
		}
	}
	return b.String()
}

func toLower(r rune) rune {
	if r >= lowercaseNewerFrom {
		if l, ok := lowercaseNewer[r]; ok {
			return l
		}
	}
	return unicode.ToLower(r)
}

// prepend puts a string in front of non-empty text.
type prepend struct{ s string }

func (p prepend) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.s + s
}

// replace substitutes every match of a pattern.
type replace struct {
	pat     pattern
	content string
}

func (r replace) normalize(s string) string {
	var b strings.Builder
	for _, m := range r.pat.find(s) {
		if m.match {
			b.WriteString(r.content)
		} else {
			b.WriteString(s[m.start:m.end])
		}
	}
	return b.String()
}

type strip struct{ left, right bool }

func (t strip) normalize(s string) string {
	if t.left {
		s = s[leadingSpaceLen(s):]
	}
	if t.right {
		s = s[:trimRightSpaceIndex(s)]
	}
	return s
}

type rawNormalizer struct {
	Type        string            `json:"type"`
	Normalizers []json.RawMessage `json:"normalizers"`
	Prepend     string            `json:"prepend"`
	Pattern     *rawPattern       `json:"pattern"`
	Content     string            `json:"content"`
	StripLeft   bool              `json:"strip_left"`
	StripRight  bool              `json:"strip_right"`
}

func parseNormalizer(data json.RawMessage, where string) (normalizer, error) {
	if isNull(data) {
		return nil, nil
	}
	var r rawNormalizer
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	switch r.Type {
	case "Sequence":
		var q normSequence
		for i, d := range r.Normalizers {
			n, err := parseNormalizer(d, fmt.Sprintf("%s.normalizers[%d]", where, i))
			if err != nil {
				return nil, err
			}
			if n != nil {
				q = append(q, n)
			}
		}
		return q, nil
	case "NFC":
		return unicodeForm{norm.NFC}, nil
	case "NFD":
		return unicodeForm{norm.NFD}, nil
	case "NFKC":
		return unicodeForm{norm.NFKC}, nil
	case "NFKD":
		return unicodeForm{norm.NFKD}, nil
	case "Lowercase":
		return lowercase{}, nil
	case "LlamaCppWordPiece":
		f, err := objectFields(data, where)
		if err != nil {
			return nil, err
		}
		return parseLlamaCppWordPiece(f)
	case "Prepend":
		return prepend{r.Prepend}, nil
	case "Replace":
		p, err := r.Pattern.compile(where + ".pattern")
		if err != nil {
			return nil, err
		}
		return replace{p, r.Content}, nil
	case "Strip":
		return strip{r.StripLeft, r.StripRight}, nil
	case "Precompiled":
		f, err := objectFields(data, where)
		if err != nil {
			return nil, err
		}
		b64, err := f.str("precompiled_charsmap")
		if err != nil {
			return nil, err
		}
		return parsePrecompiled(b64, f.key("precompiled_charsmap"))
	case "BertNormalizer":
		f, err := objectFields(data, where)
		if err != nil {
			return nil, err
		}
		return parseBertNormalizer(f)
	}
	return nil, fmt.Errorf("%s: normalizer type %q is not supported", where, r.Type)
}

// rawPattern is tokenizer.json's {"String": "..."} or {"Regex": "..."}.
type rawPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func (p *rawPattern) compile(where string) (pattern, error) {
	switch {
	case p == nil:
		return pattern{}, fmt.Errorf("%s is missing", where)
	case p.String != nil:
		return pattern{lit: *p.String, isLit: true}, nil
	case p.Regex != nil:
		re, err := compileRegex(*p.Regex)
		if err != nil {
			return pattern{}, fmt.Errorf("%s: regex %q: %v", where, *p.Regex, err)
		}
		return pattern{re: re}, nil
	}
	return pattern{}, fmt.Errorf("%s: neither String nor Regex is set", where)
}

func compileRegex(expr string) (*regexp2.Regexp, error) {
	return regexp2.Compile(expr, regexp2.None)
}

func isNull(d json.RawMessage) bool {
	s := strings.TrimSpace(string(d))
	return s == "" || s == "null"
}
