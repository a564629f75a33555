package reply

import (
	"errors"
	"strings"
)

var (
	errNoCall   = errors.New("no call")
	errTrailing = errors.New("text after the calls")
)

// Parser splits one reply, pushed piece by piece, into content, reasoning
// and tool calls. It is not safe for concurrent use.
type Parser struct {
	f     *format // nil: tool calls are not parsed
	tools toolSet
	st    state
	// The markers that end text in each state, in order of precedence
	// among markers of the same length.
	markers [3][]marker
	// held is text whose meaning is not decided yet: it may begin a
	// marker.
	held string
	// pending is the trailing whitespace of the text so far, held back:
	// whitespace next to a marker is dropped.
	pending string
	// trim drops the whitespace that follows a marker.
	trim bool
	// fresh: content has not begun, so a format's leading call may open.
	fresh bool
	// The call being read: its start marker, the text after it, and the
	// whitespace dropped before it (given back if the call fails).
	open   string
	body   strings.Builder
	callWS string
	// callTrim is trim as it was where the call opened.
	callTrim bool

	out Delta
	// trace, when set, sees every piece of the reply as the parser files
	// it: "content", "reasoning", "call" (a call's text, markers
	// included), "marker" (a dropped marker) or "space" (dropped
	// whitespace). The pieces, in order, are the reply.
	trace func(kind, text string)
}

type state int

const (
	inContent state = iota
	inReasoning
	inCall
)

// marker is a string that changes the parser's state.
type marker struct {
	text string
	kind markerKind
}

type markerKind int

const (
	reasoningStart markerKind = iota
	reasoningEnd
	frame
	callStart
	callEnd
)

// NewParser returns a parser for one reply.
func (s Spec) NewParser(o ParserOptions) *Parser {
	p := &Parser{}
	var frames []string
	if s.Tools != nil && s.Tools.def != nil {
		frames = s.Tools.def.frames
		if len(o.Tools) > 0 {
			p.f = s.Tools.def
			p.tools = newToolSet(o.Tools)
		}
	}
	add := func(st state, text string, k markerKind) {
		if text == "" {
			return
		}
		for _, m := range p.markers[st] {
			if m.text == text {
				return
			}
		}
		p.markers[st] = append(p.markers[st], marker{text, k})
	}
	if r := s.Reasoning; r != nil {
		add(inContent, r.Start, reasoningStart)
		add(inReasoning, r.End, reasoningEnd)
	}
	for _, f := range frames {
		add(inContent, f, frame)
		add(inReasoning, f, frame)
	}
	if p.f != nil {
		for _, m := range p.f.starts {
			add(inContent, m, callStart)
		}
		add(inCall, p.f.end, callEnd)
		for _, m := range p.f.starts {
			add(inCall, m, callStart)
		}
	}
	if o.InReasoning && s.Reasoning != nil {
		p.st = inReasoning
		p.trim = true
	} else {
		p.fresh = true
	}
	return p
}

// Push takes the next piece of the reply (whole characters) and returns
// what is now certain. Text that may begin a marker is held back until it
// is decided.
func (p *Parser) Push(text string) Delta {
	p.held += text
	p.run(false)
	return p.take()
}

// Finish returns what was held back at the end of the reply. A call that
// is not closed is read as far as it goes; one that does not parse comes
// back as content, unchanged.
func (p *Parser) Finish() Delta {
	p.run(true)
	if p.st == inCall {
		p.closeCall("")
	}
	if p.pending != "" {
		p.write(p.pending)
		p.pending = ""
	}
	return p.take()
}

func (p *Parser) take() Delta {
	d := p.out
	p.out = Delta{}
	return d
}

// run files the held text. At the end of the reply (final) nothing is
// held: a marker's beginning is text.
func (p *Parser) run(final bool) {
	for p.held != "" {
		if p.st == inContent && p.fresh && p.f != nil && p.f.leading {
			t := strings.TrimLeft(p.held, spaces)
			switch {
			case t == "" && !final:
				return
			case strings.HasPrefix(t, "{"):
				p.callWS = p.pending + p.held[:len(p.held)-len(t)]
				p.pending = ""
				p.held = t
				p.openCall("")
				continue
			default:
				p.fresh = false
			}
		}
		i, m, ok := scan(p.held, p.markers[p.st], final)
		if i < 0 {
			p.file(p.held)
			p.held = ""
			return
		}
		p.file(p.held[:i])
		if !ok {
			p.held = p.held[i:]
			return
		}
		p.held = p.held[i+len(m.text):]
		p.at(m)
	}
}

// scan finds the first place in s where a marker begins: i is its offset
// and m the longest marker there, or ok is false where s ends with what
// may still become a marker. i is -1 where there is neither.
func scan(s string, ms []marker, final bool) (i int, m marker, ok bool) {
	if len(ms) == 0 {
		return -1, marker{}, false
	}
	for i = 0; i < len(s); i++ {
		c := s[i]
		var best marker
		more := false
		for _, mk := range ms {
			if mk.text[0] != c {
				continue
			}
			switch {
			case strings.HasPrefix(s[i:], mk.text):
				if len(mk.text) > len(best.text) {
					best = mk
				}
			case !final && strings.HasPrefix(mk.text, s[i:]):
				more = true
			}
		}
		if more {
			return i, marker{}, false
		}
		if best.text != "" {
			return i, best, true
		}
	}
	return -1, marker{}, false
}

// file puts text in the current state's place.
func (p *Parser) file(s string) {
	if s == "" {
		return
	}
	if p.st == inCall {
		p.body.WriteString(s)
		return
	}
	if p.trim {
		t := strings.TrimLeft(s, spaces)
		p.note("space", s[:len(s)-len(t)])
		s = t
		if s == "" {
			return
		}
		p.trim = false
	}
	body := strings.TrimRight(s, spaces)
	if body == "" {
		p.pending += s
		return
	}
	p.write(p.pending + body)
	p.pending = s[len(body):]
}

// write adds text to the current state's output.
func (p *Parser) write(s string) {
	if p.st == inReasoning {
		p.out.Reasoning += s
		p.note("reasoning", s)
		return
	}
	p.out.Content += s
	p.note("content", s)
	if !isSpace(s) {
		p.fresh = false
	}
}

func (p *Parser) note(kind, s string) {
	if p.trace != nil && s != "" {
		p.trace(kind, s)
	}
}

// dropSpace drops the whitespace held before a marker.
func (p *Parser) dropSpace() {
	p.note("space", p.pending)
	p.pending = ""
}

// at takes a marker.
func (p *Parser) at(m marker) {
	switch m.kind {
	case reasoningStart, reasoningEnd, frame:
		p.dropSpace()
		p.note("marker", m.text)
		p.trim = true
		switch m.kind {
		case reasoningStart:
			p.st = inReasoning
		case reasoningEnd:
			p.st = inContent
			p.fresh = true
		}
	case callStart:
		if p.st == inCall {
			p.closeCall("")
		}
		p.callWS = p.pending
		p.pending = ""
		p.openCall(m.text)
	case callEnd:
		p.closeCall(m.text)
	}
}

func (p *Parser) openCall(start string) {
	p.callTrim = p.trim
	p.st = inCall
	p.open = start
	p.body.Reset()
	p.fresh = false
}

// closeCall reads the call now ended (by end, or by what came after it
// where end is "") and goes back to content.
func (p *Parser) closeCall(end string) {
	body := p.body.String()
	p.body.Reset()
	p.st = inContent
	calls, rest, err := p.f.parse(body, p.tools)
	if err == nil && len(calls) == 0 {
		err = errNoCall
	}
	if err == nil && p.f.end != "" && !isSpace(rest) {
		err = errTrailing
	}
	if err != nil {
		// Not a call: the text is content, as the model wrote it.
		p.trim = p.callTrim
		p.file(p.callWS)
		p.callWS = ""
		p.file(p.open + body + end)
		return
	}
	p.note("space", p.callWS)
	p.callWS = ""
	if p.f.end != "" || end != "" {
		p.note("call", p.open+body+end)
		rest = ""
	} else {
		p.note("call", p.open+body[:len(body)-len(rest)])
	}
	for i := range calls {
		calls[i].ID = ""
	}
	p.out.Calls = append(p.out.Calls, calls...)
	p.trim = true
	p.file(rest)
}
