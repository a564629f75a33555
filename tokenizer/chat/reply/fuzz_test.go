package reply

import (
	"encoding/json"
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParser pushes a reply, whole and cut at random places, to a parser
// of every format, with tools or without, starting in reasoning or not
// (the seed picks which). None may panic; the trace accounts for the reply in order (content, reasoning,
// each call's text, dropped markers and whitespace), so a call that does
// not parse loses nothing; every call's arguments are a JSON object; and
// the pieces give what the whole reply gives.
func FuzzParser(f *testing.F) {
	for _, name := range FormatNames() {
		c := formatCases[name]
		f.Add("Let me check.\n"+c.calls, int64(0))
		f.Add("<think>\nhmm\n</think>\nSure. "+c.one, int64(1))
		f.Add(c.one[:len(c.one)/2], int64(3))
	}
	f.Add("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b<|return|>", int64(4))
	f.Fuzz(func(t *testing.T, reply string, seed int64) {
		reply = strings.ToValidUTF8(reply, "\uFFFD")
		pieces := cutAt(reply, seed)
		o := fuzzOptions[uint64(seed)%uint64(len(fuzzOptions))]
		for _, name := range FormatNames() {
			s := formatCases[name].spec(t, name)
			whole := parse(t, s, o, []string{reply})
			require.Equal(t, whole, parse(t, s, o, pieces), "format %s, tools %v", name, o.Tools != nil)
			for _, c := range whole.Calls {
				require.True(t, validName(c.Name), "call name %q", c.Name)
				require.True(t, json.Valid([]byte(c.Arguments)) && jsonKind(json.RawMessage(c.Arguments)) == "object",
					"format %s: arguments %q", name, c.Arguments)
			}
			if o.Tools == nil {
				require.Empty(t, whole.Calls)
			}
		}
		// Without markers everything is content.
		require.Equal(t, Delta{Content: reply}, parse(t, Spec{}, ParserOptions{Tools: testTools}, pieces))
	})
}

var fuzzOptions = []ParserOptions{{Tools: testTools}, {Tools: testTools, InReasoning: true}, {}}

// cutAt cuts s into pieces of whole characters at places a seed picks.
func cutAt(s string, seed int64) []string {
	rng := rand.New(rand.NewSource(seed))
	var pieces []string
	rest := []rune(s)
	for len(rest) > 0 {
		k := 1 + rng.Intn(min(len(rest), 16))
		pieces = append(pieces, string(rest[:k]))
		rest = rest[k:]
	}
	return pieces
}
