// Package constrain limits what a model may generate to a formal language
// (constrained decoding, "structured outputs"): a JSON schema, any JSON
// object, a regular expression, a context-free grammar in llguidance's Lark
// dialect, or one in llama.cpp's GBNF. Before each draw a Matcher tells
// which tokens keep the text inside the language (a bit mask over the
// vocabulary), and after the draw it moves past the token drawn; the
// decode loop sets every other token's logit to -inf.
//
// The matching is llguidance's (a Rust library, linked statically from
// .deps/llguidance, which `make setup-llguidance` builds). It works on the
// vocabulary's bytes: each token id is given the bytes it decodes to, so a
// grammar constrains text, whatever tokens spell it. Special tokens (the
// tokenizer's added tokens marked special, and the stop tokens) are never
// text a grammar can produce; added tokens that are not special (Qwen's
// <tool_call>, say) are text like any other. Where the grammar may end,
// every stop token is allowed, and once it must end, only they are.
//
// Three levels, each made once and used many times:
//
//	v, err := constrain.NewVocab(tok, stopTokens) // per model: the token bytes, indexed
//	g, err := v.JSONSchema(schema)                // per grammar: compiled, immutable
//	m, err := g.NewMatcher()                      // per generation: its position in the grammar
//	defer m.Free()
//	for {
//		clear(words)
//		err = m.Mask(words)     // the tokens allowed next
//		t := draw(logits, words)
//		err = m.Accept(t)
//	}
//
// A Vocab and a Grammar may be used from several goroutines at once; a
// Matcher belongs to one generation. Free each when done: a Vocab after the
// grammars and matchers made from it. Compile errors carry llguidance's own
// explanation; nothing here panics or aborts (llguidance catches its own
// panics at its C boundary and reports them as errors).
package constrain

/*
#cgo CFLAGS: -I${SRCDIR}/../.deps/llguidance/include
#cgo LDFLAGS: -L${SRCDIR}/../.deps/llguidance/lib -larchgen_llg -ldl -lpthread -lm
#include <stdlib.h>
#include <string.h>
#include "llguidance.h"

// constrain_new_matcher compiles a grammar of the kind given (llguidance's
// constraint types: "json", "regex", "lark") on tok, quietly: no log goes
// to stderr, and errors name the problem without the parser's state (the
// tokens so far, the grammar).
static LlgMatcher *constrain_new_matcher(const LlgTokenizer *tok, const char *kind, const char *data) {
	LlgConstraintInit init;
	memset(&init, 0, sizeof init);
	llg_constraint_init_set_defaults(&init, tok);
	init.log_buffer_level = 0;
	init.log_stderr_level = 0;
	init.limits.verbose_errors = false;
	return llg_new_matcher(&init, kind, data);
}

static LlgTokenizer *constrain_new_tokenizer(uint32_t vocab, const uint32_t *lens, const uint8_t *bytes,
		const uint32_t *eos, uint32_t neos, char *err, size_t errlen) {
	LlgTokenizerInitV2 init;
	memset(&init, 0, sizeof init);
	init.struct_size = sizeof init;
	init.vocab_size = vocab;
	init.tok_eos = eos[0];
	init.tok_eos_extra = neos > 1 ? eos + 1 : NULL;
	init.tok_eos_extra_count = neos - 1;
	init.token_lens = lens;
	init.token_bytes = bytes;
	init.use_approximate_greedy_tokenize_fn = true;
	return llg_new_tokenizer_v2(&init, err, errlen);
}
*/
import "C"

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/archgen/archgen/tokenizer"
)

// specialMarker starts the bytes llguidance is given for a special token:
// no text is valid UTF-8 with it, so no grammar produces one as text.
const specialMarker = 0xff

// Vocab is a model's tokenizer as the matcher sees it: each token id's
// bytes, and the stop tokens. It is built once per model and is safe for
// concurrent use.
type Vocab struct {
	mu    sync.RWMutex // Free against the rest
	tok   *C.LlgTokenizer
	size  int // token ids, 0 to size-1
	stops []int32
}

// NewVocab indexes tok's vocabulary for matching. stopTokens end a
// generation (every one is allowed where a grammar may end); none given,
// the tokenizer's EOS is the one.
func NewVocab(tok *tokenizer.Pretrained, stopTokens []int32) (*Vocab, error) {
	if tok == nil || tok.Tokenizer == nil {
		return nil, errors.New("constrain: no tokenizer")
	}
	n := tok.VocabSize()
	if n <= 0 {
		return nil, errors.New("constrain: the tokenizer has no tokens")
	}
	var stops []int32
	seen := map[int32]bool{}
	for _, t := range stopTokens {
		if t < 0 || int(t) >= n {
			return nil, fmt.Errorf("constrain: stop token %d is outside the vocabulary of %d", t, n)
		}
		if !seen[t] {
			seen[t] = true
			stops = append(stops, t)
		}
	}
	if len(stops) == 0 {
		if tok.EOS < 0 || int(tok.EOS) >= n {
			return nil, errors.New("constrain: no stop token: the tokenizer has no EOS and none was given")
		}
		stops = []int32{tok.EOS}
		seen[tok.EOS] = true
	}

	lens := make([]uint32, n)
	var all []byte
	ref := plainReference(tok.Tokenizer)
	for id := range int32(n) {
		b := tokenText(tok.Tokenizer, id, seen[id], ref)
		lens[id] = uint32(len(b))
		all = append(all, b...)
	}
	if len(all) == 0 {
		all = []byte{0} // a valid pointer for C; no length refers to it
	}
	eos := make([]uint32, len(stops))
	for i, t := range stops {
		eos[i] = uint32(t)
	}
	// C copies of the arrays: llguidance reads them during the call only.
	cl := C.CBytes(unsafe.Slice((*byte)(unsafe.Pointer(&lens[0])), 4*len(lens)))
	defer C.free(cl)
	cb := C.CBytes(all)
	defer C.free(cb)
	ce := C.CBytes(unsafe.Slice((*byte)(unsafe.Pointer(&eos[0])), 4*len(eos)))
	defer C.free(ce)
	const errLen = 1024
	cerr := (*C.char)(C.calloc(errLen, 1))
	defer C.free(unsafe.Pointer(cerr))
	t := C.constrain_new_tokenizer(C.uint32_t(n), (*C.uint32_t)(cl), (*C.uint8_t)(cb),
		(*C.uint32_t)(ce), C.uint32_t(len(eos)), cerr, errLen)
	if t == nil {
		return nil, fmt.Errorf("constrain: indexing the vocabulary: %s", C.GoString(cerr))
	}
	return &Vocab{tok: t, size: n, stops: stops}, nil
}

// reference is a token whose text alone is plain (no space a decoder
// strips or adds), decoded before another token to read that token's text
// as it reads inside a sequence.
type reference struct {
	id   int32
	text string
}

// plainReference finds a reference token: one of a few single letters
// that decode to themselves, alone and twice over; nil when none does.
func plainReference(tok *tokenizer.Tokenizer) *reference {
	for _, s := range []string{"a", "x", "e", "0"} {
		id, ok := tok.TokenToID(s)
		if ok && tok.Decode([]int32{id}, false) == s && tok.Decode([]int32{id, id}, false) == s+s {
			return &reference{id, s}
		}
	}
	return nil
}

// tokenText is the bytes llguidance is given for token id: the marker and
// the token's name for a special (or stop) token; otherwise the bytes the
// token stands for inside a text. A sentencepiece decoder drops the space
// of a sequence's first token ("▁Hello" alone decodes to "Hello"), so
// a token whose bytes are whole characters is decoded after the reference
// token, whose text is then cut off.
func tokenText(tok *tokenizer.Tokenizer, id int32, stop bool, ref *reference) []byte {
	if stop || tok.IsSpecial(id) {
		name, ok := tok.IDToToken(id)
		if !ok || name == "" {
			name = fmt.Sprintf("<[%d]>", id)
		}
		return append([]byte{specialMarker}, name...)
	}
	b := tok.TokenBytes(id)
	if ref == nil || len(b) == 0 || !utf8.Valid(b) {
		return b
	}
	s := tok.Decode([]int32{ref.id, id}, false)
	if rest, ok := strings.CutPrefix(s, ref.text); ok && rest != string(b) && strings.HasSuffix(rest, string(b)) {
		return []byte(rest)
	}
	return b
}

// Size is the number of token ids the vocabulary has: a mask's bits.
func (v *Vocab) Size() int { return v.size }

// StopTokens are the tokens that end a generation.
func (v *Vocab) StopTokens() []int32 { return append([]int32(nil), v.stops...) }

// Free releases the vocabulary. Grammars and matchers made from it must be
// freed first.
func (v *Vocab) Free() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.tok != nil {
		C.llg_free_tokenizer(v.tok)
		v.tok = nil
	}
}

// jsonWhitespace bounds the whitespace a JSON schema's text may have
// between two of its tokens: llguidance's default allows any run, which a
// model can fill until its token budget ends. 24 characters hold a newline
// and the indentation of ten levels in two spaces.
const jsonWhitespace = `{"whitespace_pattern":"[\\x20\\x0A\\x0D\\x09]{1,24}"}`

// JSONSchema compiles a JSON schema: the text must be one JSON value that
// the schema accepts. Every keyword is enforced or refused: a keyword
// llguidance does not implement (uniqueItems, say) is an error, never
// ignored. A schema under OpenAI's strict mode (every property required,
// no additional properties) means what it says here, and so does any
// other. An "x-guidance" key at the top holds llguidance's JSON options;
// without one, whitespace between tokens is bounded (jsonWhitespace).
func (v *Vocab) JSONSchema(schema []byte) (*Grammar, error) {
	schema = bytes.TrimSpace(schema)
	if !json.Valid(schema) {
		var x any
		err := json.Unmarshal(schema, &x)
		return nil, fmt.Errorf("constrain: JSON schema: not JSON: %v", err)
	}
	switch schema[0] {
	case '{':
		var top map[string]json.RawMessage
		if err := json.Unmarshal(schema, &top); err != nil {
			return nil, fmt.Errorf("constrain: JSON schema: %v", err)
		}
		if _, ok := top["x-guidance"]; !ok {
			// Inserted as text, so that the properties keep their order
			// (llguidance writes them in the order given).
			var b bytes.Buffer
			b.WriteString(`{"x-guidance":`)
			b.WriteString(jsonWhitespace)
			if len(top) > 0 {
				b.WriteByte(',')
			}
			b.Write(schema[1:])
			schema = b.Bytes()
		}
	case 't', 'f':
		// true and false are schemas too: any value, or none
	default:
		return nil, fmt.Errorf("constrain: JSON schema: want an object (or true or false), got %s", limit(string(schema), 40))
	}
	return v.compile("json", "JSON schema", string(schema))
}

// JSONObject compiles the language of any JSON object (OpenAI's
// response_format json_object).
func (v *Vocab) JSONObject() (*Grammar, error) {
	return v.compile("json", "JSON object", `{"x-guidance":`+jsonWhitespace+`,"type":"object"}`)
}

// Regex compiles a regular expression (Rust's regex syntax) that the whole
// text must match.
func (v *Vocab) Regex(re string) (*Grammar, error) {
	return v.compile("regex", "regex", re)
}

// Lark compiles a grammar in llguidance's Lark dialect: lower-case rules,
// upper-case terminals, "strings", /regexes/, start as the start rule, and
// %json{...} for a JSON schema inside.
func (v *Vocab) Lark(src string) (*Grammar, error) {
	return v.compile("lark", "Lark grammar", src)
}

// GBNF compiles a grammar in llama.cpp's GBNF, translated to the Lark
// dialect (see TranslateGBNF).
func (v *Vocab) GBNF(src string) (*Grammar, error) {
	lark, err := TranslateGBNF(src)
	if err != nil {
		return nil, err
	}
	return v.compile("lark", "GBNF grammar", lark)
}

// compile builds the grammar's first matcher, which NewMatcher copies.
func (v *Vocab) compile(kind, what, data string) (*Grammar, error) {
	if strings.IndexByte(data, 0) >= 0 {
		return nil, fmt.Errorf("constrain: %s: holds a NUL byte", what)
	}
	if !utf8.ValidString(data) {
		return nil, fmt.Errorf("constrain: %s: not valid UTF-8", what)
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.tok == nil {
		return nil, errors.New("constrain: the vocabulary was freed")
	}
	ck := C.CString(kind)
	defer C.free(unsafe.Pointer(ck))
	cd := C.CString(data)
	defer C.free(unsafe.Pointer(cd))
	m := C.constrain_new_matcher(v.tok, ck, cd)
	if m == nil {
		return nil, fmt.Errorf("constrain: %s: llguidance made no matcher", what)
	}
	if msg := C.llg_matcher_get_error(m); msg != nil {
		err := fmt.Errorf("constrain: %s: %s", what, message(msg))
		C.llg_free_matcher(m)
		return nil, err
	}
	return &Grammar{v: v, what: what, m: m, words: int(C.llg_matcher_get_mask_byte_size(m)) / 4}, nil
}

// message is an error of llguidance's, bounded: it may quote the whole
// grammar, or the parser's state, which a message need not carry whole.
// Each line is cut at 200 bytes, the whole at 20 lines.
func message(c *C.char) string {
	msg := strings.TrimSpace(strings.ReplaceAll(C.GoString(c), "<non-verbose/>", ""))
	lines := strings.Split(msg, "\n")
	if len(lines) > 20 {
		lines = append(lines[:20], "…")
	}
	for i, l := range lines {
		lines[i] = limit(l, 200)
	}
	return strings.Join(lines, "\n")
}

// limit cuts s to n bytes, at a character's start, marking the cut.
func limit(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Grammar is a compiled grammar: immutable, reusable by any number of
// generations at once, each with a Matcher of its own.
type Grammar struct {
	v     *Vocab
	what  string
	mu    sync.Mutex // copies of m, and Free
	m     *C.LlgMatcher
	words int
}

// NewMatcher starts a generation at the grammar's beginning.
func (g *Grammar) NewMatcher() (*Matcher, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		return nil, fmt.Errorf("constrain: %s: the grammar was freed", g.what)
	}
	m := C.llg_clone_matcher(g.m)
	if m == nil {
		return nil, fmt.Errorf("constrain: %s: llguidance made no matcher", g.what)
	}
	if msg := C.llg_matcher_get_error(m); msg != nil {
		err := fmt.Errorf("constrain: %s: %s", g.what, message(msg))
		C.llg_free_matcher(m)
		return nil, err
	}
	return &Matcher{m: m, what: g.what, words: g.words, stops: g.v.stops}, nil
}

// Free releases the grammar; its matchers live on.
func (g *Grammar) Free() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m != nil {
		C.llg_free_matcher(g.m)
		g.m = nil
	}
}

// Matcher is one generation's place in a grammar. It implements
// generate.Constraint; it is not safe for concurrent use.
type Matcher struct {
	m     *C.LlgMatcher
	what  string
	words int // the mask's 32-bit words, for the whole vocabulary
	stops []int32
	buf   []uint32 // the mask when the caller's is shorter than the vocabulary's
}

// Mask sets in allowed (one bit per token id: bit t%32 of word t/32; the
// caller zeroes it) the tokens that may come next. Once the grammar is
// complete only the stop tokens are. Bits of tokens past len(allowed)*32
// (the vocabulary may be longer than a model's logits) are left out.
func (m *Matcher) Mask(allowed []uint32) error {
	if m.m == nil {
		return fmt.Errorf("constrain: %s: the matcher was freed", m.what)
	}
	dst := allowed
	if len(allowed) < m.words {
		if m.buf == nil {
			m.buf = make([]uint32, m.words)
		}
		dst = m.buf
	}
	if m.words > 0 {
		if C.llg_matcher_compute_mask_into(m.m, (*C.uint32_t)(unsafe.Pointer(&dst[0])), C.size_t(4*m.words)) != 0 {
			return m.err("computing the mask")
		}
	}
	// Where one stop token may end the text, any may.
	for _, t := range m.stops {
		if dst[t/32]&(1<<(t%32)) != 0 {
			for _, u := range m.stops {
				dst[u/32] |= 1 << (u % 32)
			}
			break
		}
	}
	if len(allowed) < m.words {
		copy(allowed, dst)
	}
	return nil
}

// Accept moves the matcher past token t.
func (m *Matcher) Accept(t int32) error {
	if m.m == nil {
		return fmt.Errorf("constrain: %s: the matcher was freed", m.what)
	}
	if t < 0 {
		return fmt.Errorf("constrain: %s: token %d is outside the vocabulary", m.what, t)
	}
	if m.Done() && slices.Contains(m.stops, t) {
		return nil // the stop token that ends a complete text
	}
	if C.llg_matcher_consume_token(m.m, C.uint32_t(t)) != 0 {
		return m.err(fmt.Sprintf("token %d", t))
	}
	return nil
}

// Done reports that the grammar is complete: only a stop token may follow.
func (m *Matcher) Done() bool {
	return m.m != nil && !bool(C.llg_matcher_is_error(m.m)) && bool(C.llg_matcher_is_stopped(m.m))
}

// Accepting reports whether the text so far is a whole sentence of the
// grammar (a stop token may come next).
func (m *Matcher) Accepting() bool {
	return m.m != nil && bool(C.llg_matcher_is_accepting(m.m))
}

// Free releases the matcher; it may be called more than once.
func (m *Matcher) Free() {
	if m.m != nil {
		C.llg_free_matcher(m.m)
		m.m = nil
	}
}

func (m *Matcher) err(doing string) error {
	msg := "unknown error"
	if c := C.llg_matcher_get_error(m.m); c != nil {
		msg = message(c)
	}
	return fmt.Errorf("constrain: %s: %s: %s", m.what, doing, msg)
}
