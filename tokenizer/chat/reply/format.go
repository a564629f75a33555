package reply

import "strings"

// format is one tool-call format: its markers, how a call's text parses,
// how a grammar spells it, and how a model's files show it.
type format struct {
	name string
	// starts open a call (or a section of calls); end closes it. A format
	// without an end marker runs to the next start marker or the end of
	// the reply.
	starts []string
	end    string
	// leading: a call may also open with "{" where content begins, with
	// no marker (Llama 3's JSON calls).
	leading bool
	// frames are markers that are neither content nor reasoning (the
	// headers between harmony's messages): the parser drops them whenever
	// a Spec has this format, with or without tools in the request.
	frames []string
	// parse reads the text between a call's markers into calls. rest is
	// text after the calls that is not part of them; a format with an end
	// marker allows only whitespace there.
	parse func(body string, ts toolSet) (calls []ToolCall, rest string, err error)
	// grammar adds the rule "calls", a reply's calls in this format, and
	// the rules it uses (see grammar.go); nil where the format cannot be
	// expressed.
	grammar func(g *grammar, calls callShape) error
	// detect reports whether a model's chat template shows this format;
	// vocab whether its vocabulary does, where no template did.
	detect, vocab func(in Inputs) bool
	// variant picks a spelling for grammars from the template ("" for the
	// default).
	variant func(template string) string
}

// formats are the known formats, in the order Detect tries their
// templates' rules: markers that contain another format's come first.
var formats = []*format{
	minimaxM2,
	gemma4,
	functionGemma,
	longcat,
	glm47,
	pythonic,
	qwen3Coder,
	kimiK2,
	minicpm5,
	mistral,
	museSpark,
	harmony,
	deepseekV32,
	deepseekV3,
	deepseekV31,
	jsonTools,
	llama3JSON,
	kimiK3,
	laguna,
}

// vocabFormats are the formats Detect then tries by their vocabulary
// rules, in order.
var vocabFormats = []*format{kimiK3, pythonic}

// byName indexes formats by name.
var byName = func() map[string]*format {
	m := make(map[string]*format, len(formats))
	for _, f := range formats {
		m[f.name] = f
	}
	return m
}()

// templateHas reports whether a template's source holds every string.
func templateHas(in Inputs, subs ...string) bool {
	if in.Template == "" {
		return false
	}
	for _, s := range subs {
		if !strings.Contains(in.Template, s) {
			return false
		}
	}
	return true
}

// vocabHas reports whether the vocabulary has every string as one token;
// false where the vocabulary is unknown.
func vocabHas(in Inputs, toks ...string) bool {
	if in.HasToken == nil {
		return false
	}
	for _, t := range toks {
		if !in.HasToken(t) {
			return false
		}
	}
	return true
}

// thinkPairs are the reasoning markers that are one token each, in the
// order Detect tries them.
var thinkPairs = []Reasoning{
	{"<think>", "</think>"},
	{"<longcat_think>", "</longcat_think>"},
	{"<|think:start|>", "<|think:end|>"},
}

// Reasoning blocks whose markers span several tokens, each known by the
// tokens that show it.
var (
	harmonyAnalysis = Reasoning{"<|channel|>analysis<|message|>", "<|end|>"}
	gemmaThought    = Reasoning{"<|channel>thought", "<channel|>"}
	xtmlThink       = Reasoning{"<|open|>think<|sep|>", "<|close|>think<|sep|>"}
)

// xtmlTokens are the tokens of the "xtml" markup (Kimi K3).
var xtmlTokens = []string{"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"}

// harmonyTokens are the tokens of gpt-oss's harmony format.
var harmonyTokens = []string{"<|channel|>", "<|message|>", "<|start|>", "<|end|>"}

// detectReasoning reads a model's reasoning markers from its vocabulary,
// or from its template where the vocabulary is unknown.
func detectReasoning(in Inputs) *Reasoning {
	known := in.HasToken != nil
	has := func(toks ...string) bool {
		if known {
			return vocabHas(in, toks...)
		}
		return templateHas(in, toks...)
	}
	if has(harmonyTokens...) && (known || templateHas(in, "analysis")) {
		r := harmonyAnalysis
		return &r
	}
	for _, p := range thinkPairs {
		if has(p.Start, p.End) {
			r := p
			return &r
		}
	}
	if has("<|channel>", "<channel|>") {
		r := gemmaThought
		return &r
	}
	if has(xtmlTokens...) {
		r := xtmlThink
		return &r
	}
	return nil
}
