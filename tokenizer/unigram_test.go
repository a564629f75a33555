package tokenizer

import (
	"encoding/base64"
	"encoding/binary"
	"sort"
	"strings"
	"testing"
)

// buildCharsmap lays out a precompiled_charsmap for keys and their
// replacements: a double array with a block of 256 units for the root and
// for each node below it (the layout is valid, if far from compact), then
// the replacement strings.
func buildCharsmap(repl map[string]string) string {
	type node struct {
		kids  map[byte]*node
		value int // offset of the replacement, -1 if no key ends here
	}
	newNode := func() *node { return &node{kids: map[byte]*node{}, value: -1} }
	root := newNode()
	var strs []byte
	keys := make([]string, 0, len(repl))
	for k := range repl {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		n := root
		for i := 0; i < len(k); i++ {
			c, ok := n.kids[k[i]]
			if !ok {
				c = newNode()
				n.kids[k[i]] = c
			}
			n = c
		}
		n.value = len(strs)
		strs = append(append(strs, repl[k]...), 0)
	}
	// Block b (from 1) holds the children of the b-th node laid out, at
	// 256*b XOR their byte, and at 256*b its value.
	units := make([]uint32, 256)
	units[0] = 256 << 10
	type placed struct {
		n    *node
		base uint32
	}
	queue := []placed{{root, 256}}
	units = append(units, make([]uint32, 256)...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p.n.value >= 0 {
			units[p.base] = uint32(p.n.value)
		}
		labels := make([]int, 0, len(p.n.kids))
		for c := range p.n.kids {
			labels = append(labels, int(c))
		}
		sort.Ints(labels)
		for _, c := range labels {
			kid := p.n.kids[byte(c)]
			pos := p.base ^ uint32(c)
			base := uint32(len(units))
			units = append(units, make([]uint32, 256)...)
			u := uint32(c) | (pos^base)<<10
			if kid.value >= 0 {
				u |= 1 << 8
			}
			units[pos] = u
			queue = append(queue, placed{kid, base})
		}
	}
	b := binary.LittleEndian.AppendUint32(nil, uint32(4*len(units)))
	for _, u := range units {
		b = binary.LittleEndian.AppendUint32(b, u)
	}
	return base64.StdEncoding.EncodeToString(append(b, strs...))
}

// tinyCharsmap folds full-width letters, drops a control character and
// replaces "ab" whole.
var tinyCharsmap = buildCharsmap(map[string]string{
	"Ａ": "A", "ａ": "a", "ｂ": "b", "\x01": "", "\t": " ", "ab": "X",
})

// tinyUnigram is a small XLM-RoBERTa-style tokenizer.json, the way
// transformers' converter writes one; the tests below break one part of
// it at a time.
var tinyUnigram = `{
  "added_tokens": [{"id": 0, "content": "<s>", "special": true, "normalized": false},
                   {"id": 2, "content": "</s>", "special": true, "normalized": false}],
  "normalizer": {"type": "Sequence", "normalizers": [
    {"type": "Precompiled", "precompiled_charsmap": "` + tinyCharsmap + `"},
    {"type": "Strip", "strip_left": false, "strip_right": true},
    {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "▁"}]},
  "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
             {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}, "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
  "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
  "model": {"type": "Unigram", "unk_id": 3, "vocab": [["<s>", 0.0], ["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0],
    ["▁", -2.0], ["a", -3.0], ["b", -3.0], ["ab", -2.5], ["▁ab", -4.0], ["c", -1.0], ["d", -1.0], ["cd", -2.0],
    ["A", -3.0], ["X", -3.0], ["<0x41>", -3.5], ["q", 9.5], ["xq", -4.0]], "byte_fallback": false}
}`

func TestTinyUnigram(t *testing.T) {
	tk, err := Parse([]byte(tinyUnigram))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		text string
		want []int32
	}{
		// ▁ab (-4) beats ▁ ab (-4.5) and ▁ a b (-8).
		{"ab", []int32{0, 8, 2}},
		// Unknown characters score the lowest score less 10, each, and
		// come out as one token.
		{"xyc", []int32{0, 4, 3, 9, 2}},
		// x alone is unknown, but xq is a piece: xq (-4) beats unknown x
		// and q (-14 + 9.5).
		{"xq", []int32{0, 4, 16, 2}},
		// c d and cd score the same: the cutting found first, cd, wins.
		{"cd", []int32{0, 4, 11, 2}},
		// The charsmap folds each full-width letter, a cluster of its own;
		// its key "ab" never applies, a and b being two clusters. Then ab
		// (-2.5) beats a b (-6).
		{"Ａａｂ", []int32{0, 4, 12, 7, 2}},
		// It drops \x01 and turns the tab into a space.
		{"\x01c\td", []int32{0, 4, 9, 4, 10, 2}},
		// The text of a byte token is that token.
		{"<0x41>", []int32{0, 4, 14, 2}},
		{"", []int32{0, 2}},
	} {
		if got := tk.Encode(c.text, true); !equalIDs(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
	}
	ids, types := tk.EncodePair("ab", "c", true)
	if !equalIDs(ids, []int32{0, 8, 2, 2, 4, 9, 2}) || !equalIDs(types, make([]int32, 7)) {
		t.Errorf("EncodePair = %v %v", ids, types)
	}
	if s := tk.Decode([]int32{0, 8, 4, 3, 9, 2}, true); s != "ab <unk>c" {
		t.Errorf("Decode = %q", s)
	}
	u := tk.model.(*unigram)
	if u.unkScore != -14 {
		t.Errorf("unknown score %v, want -14", u.unkScore)
	}
}

func TestUnigramByteFallback(t *testing.T) {
	src := strings.Replace(tinyUnigram, `"byte_fallback": false`, `"byte_fallback": true`, 1)
	src = strings.Replace(src, `["<0x41>", -3.5]`, `["<0x41>", -3.5], ["<0xE2>", -9], ["<0x98>", -9], ["<0x83>", -9]`, 1)
	tk, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	// ☃ is E2 98 83: its bytes; ☄ (E2 98 84) lacks one, so the run is unknown.
	for text, want := range map[string][]int32{
		"☃c":  {4, 15, 16, 17, 9},
		"☄c":  {4, 3, 9},
		"☃☄c": {4, 3, 9},
	} {
		if got := tk.Encode(text, false); !equalIDs(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", text, got, want)
		}
	}
}

func TestParseUnigramErrorsNameTheKey(t *testing.T) {
	for _, c := range []struct {
		name, old, new, want string
	}{
		{"Unigram without vocab", `"vocab": [["<s>"`, `"vocabulary": [["<s>"`, "model.vocab is missing"},
		{"vocab null", `"vocab": [["<s>", 0.0],`, `"vocab": null, "x": [["<s>", 0.0],`, "model.vocab is missing"},
		{"vocab not a list", `"vocab": [["<s>", 0.0],`, `"vocab": {"<s>": 0}, "x": [["<s>", 0.0],`,
			`model.vocab: want a list of [piece, score] pairs, got {"<s>": 0}`},
		{"entry not a pair", `["<pad>", 0.0]`, `["<pad>"]`, `model.vocab[1]: want a [piece, score] pair, got ["<pad>"]`},
		{"entry of three", `["<pad>", 0.0]`, `["<pad>", 0.0, 1]`, `model.vocab[1]: want a [piece, score] pair, got ["<pad>", 0.0, 1]`},
		{"score not a number", `["<pad>", 0.0]`, `["<pad>", "0"]`, `model.vocab[1]: want a [piece, score] pair, got ["<pad>", "0"]`},
		{"piece not a string", `["<pad>", 0.0]`, `[7, 0.0]`, `model.vocab[1]: want a [piece, score] pair, got [7, 0.0]`},
		{"no unk_id", `"unk_id": 3, `, ``, "model.unk_id is missing: the tokenizers library reads a Unigram model without one, but fails on the first character the vocab lacks"},
		{"unk_id null", `"unk_id": 3`, `"unk_id": null`, "model.unk_id is missing: the tokenizers library reads a Unigram model without one, but fails on the first character the vocab lacks"},
		{"unk_id out of range", `"unk_id": 3`, `"unk_id": 17`, "model.unk_id: 17 is not an id of model.vocab, which holds 17 pieces"},
		{"unk_id negative", `"unk_id": 3`, `"unk_id": -1`, "model.unk_id: want a non-negative integer, got -1"},
		{"unk_id not a number", `"unk_id": 3`, `"unk_id": "3"`, `model.unk_id: want a non-negative integer, got "3"`},
		{"empty vocab", `"vocab": [["<s>", 0.0],`, `"vocab": [], "x": [["<s>", 0.0],`, "model.unk_id: 3 is not an id of model.vocab, which holds 0 pieces"},
		{"byte_fallback not a bool", `"byte_fallback": false`, `"byte_fallback": "no"`, `model.byte_fallback: want true or false, got "no"`},
		{"byte_fallback null", `"byte_fallback": false`, `"byte_fallback": null`, "model.byte_fallback is missing"},
		{"no byte_fallback", `, "byte_fallback": false`, ``, ""},
		{"model without a type", `"type": "Unigram", `, ``, ""},
		{"Precompiled without its charsmap", `"precompiled_charsmap": "`, `"charsmap": "`,
			"normalizer.normalizers[0].precompiled_charsmap is missing"},
		{"charsmap not a string", `"precompiled_charsmap": "` + tinyCharsmap + `"`, `"precompiled_charsmap": 5`,
			"normalizer.normalizers[0].precompiled_charsmap: want a string, got 5"},
		{"charsmap not base64", `"precompiled_charsmap": "`, `"precompiled_charsmap": "%`,
			"normalizer.normalizers[0].precompiled_charsmap: not base64: illegal base64 data at input byte 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(tinyUnigram, c.old, c.new, 1)
			if src == tinyUnigram {
				t.Fatalf("the test does not change the file (%q not found)", c.old)
			}
			_, err := Parse([]byte(src))
			if c.want == "" {
				if err != nil {
					t.Errorf("unexpected error %v", err)
				}
				return
			}
			if err == nil || err.Error() != c.want {
				t.Errorf("got error %v, want %q", err, c.want)
			}
		})
	}
}

// TestPrecompiledErrors breaks a charsmap in each way parsePrecompiled
// refuses: truncated, sizes and offsets out of range, replacement strings
// that are not UTF-8.
func TestPrecompiledErrors(t *testing.T) {
	units, repl := oneKey()
	const value = 256 ^ 'a' ^ 768 // where the value of "a" sits
	raw := func(units []uint32, repl string) []byte {
		b, _ := base64.StdEncoding.DecodeString(charsmap(units, repl))
		return b
	}
	enc := base64.StdEncoding.EncodeToString
	good := raw(units, repl)
	with := func(i int, u uint32) []byte {
		v := append([]uint32(nil), units...)
		v[i] = u
		return raw(v, repl)
	}
	for _, c := range []struct {
		name string
		b64  string
		want string
	}{
		{"empty", "", "0 bytes, too few for the trie size that starts it (4 bytes)"},
		{"three bytes", enc(good[:3]), "3 bytes, too few for the trie size that starts it (4 bytes)"},
		{"truncated trie", enc(good[:100]), "the trie size is 3072 bytes, but 96 bytes follow it"},
		{"trie size not of units", enc(append([]byte{2, 0, 0, 0}, good[4:]...)), "the trie size 2 is not a whole number of 4-byte units"},
		{"empty trie", enc(append([]byte{0, 0, 0, 0}, "b\x00"...)), "the trie is empty"},
		{"replacements not UTF-8", enc(raw(units, "\xff\x00")), "the replacement strings after the trie are not valid UTF-8"},
		{"root's children past the end", enc(with(0, 1024<<10)), "trie unit 0 puts its children at 1024, past the trie's 768 units"},
		{"children past the end", enc(with(256^'a', 'a'|1<<8|(256^'a'^2048)<<10)), "trie unit 353 puts its value at 2048, past the trie's 768 units"},
		{"value past the strings", enc(with(value, 9)), "trie unit 353 points at byte 9 of the replacement strings, which hold 2"},
		{"value inside a character", enc(raw(append(units[:value:value], append([]uint32{1}, units[value+1:]...)...), "é\x00")),
			"trie unit 353 points at byte 1 of the replacement strings, inside a character"},
		{"line break", enc(good)[:8] + "\n" + enc(good)[8:], "not base64: it holds a line break"},
		{"padding left out", strings.TrimRight(enc(append(good, 'x')), "="), "not base64: illegal base64 data at input byte 4104"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parsePrecompiled(c.b64, "normalizer.precompiled_charsmap")
			want := "normalizer.precompiled_charsmap: " + c.want
			if err == nil || err.Error() != want {
				t.Errorf("got error %v, want %q", err, want)
			}
		})
	}
	if _, err := parsePrecompiled(enc(good), "x"); err != nil {
		t.Errorf("the unbroken charsmap: %v", err)
	}
}

// TestScanPairs checks the quick reader of a vocab against the entry by
// entry one, on the forms JSON allows.
func TestScanPairs(t *testing.T) {
	for _, v := range []string{
		`[]`, ` [ ] `,
		`[["a", -1.5], ["b", 0]]`,
		"[\n  [\n    \"\\u2581x\",\n    -3.25e-05\n  ],\n  [\"q\\\"\\\\\\n\", 1E+2], [\"\xff\", -0.0]\n]",
		`[["é", 12345678901234567890], ["", -1e-320]]`,
	} {
		p1, s1, ok := scanPairs([]byte(v))
		p2, s2, err := readPairs([]byte(v), "vocab")
		if !ok || err != nil {
			t.Errorf("%q: scanPairs ok %v, readPairs %v", v, ok, err)
			continue
		}
		if strings.Join(p1, "|") != strings.Join(p2, "|") || len(s1) != len(s2) {
			t.Errorf("%q: pieces %q and %q", v, p1, p2)
			continue
		}
		for i := range s1 {
			if s1[i] != s2[i] {
				t.Errorf("%q: score %d is %v and %v", v, i, s1[i], s2[i])
			}
		}
	}
	// What scanPairs does not read, readPairs does (or refuses).
	for _, v := range []string{`{"a": 1}`, `[["a", 1, 2]]`, `[["a", "1"]]`, `[[1, 1]]`, `[["a", 1e400]]`, `[["a" , 1 ] , ]`} {
		if _, _, ok := scanPairs([]byte(v)); ok {
			t.Errorf("scanPairs read %s", v)
		}
	}
}
