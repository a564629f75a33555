package constrain

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// TranslateGBNF rewrites a grammar in llama.cpp's GBNF as one in
// llguidance's Lark dialect, with the same language:
//
//	root   ::= item ("," ws item)*   # rules; root is where the text starts
//	item   ::= "a" | [b-d]+ | "\x65"{2,3} | ( "x" | . )?
//	ws     ::= [ \t\n]*
//
// It reads rules (name ::= alternatives, a name of letters, digits and
// dashes), alternation, groups, the postfixes ?, *, +, {m}, {m,}, {m,n}
// and {,n}, "literals" and [character classes] (ranges, ^ to negate) with
// the escapes \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH, . for any
// character, and # comments. As in llama.cpp, a rule ends at the end of its
// line, except inside parentheses and after ::= or |. What it cannot
// translate (a token reference <...>, an unknown escape, a rule used but
// never defined, a rule defined twice, no root) is an error that names the
// line.
//
// GBNF describes text a character at a time, and llguidance would parse
// such a grammar a character at a time too, which is slow over a large
// vocabulary and soon past its parser's limits. So the translation gives
// llguidance lexemes: a rule that is regular (it refers, directly or not,
// to no rule that refers back to itself) becomes a Lark terminal, one
// regular expression (its name in upper case, dashes as underscores), and
// within the other rules (lower case) each run of regular items in a
// sequence becomes one terminal too (SEQ_1, SEQ_2, ...). start names root.
//
// llguidance lexes greedily: a lexeme that could go on takes the next
// character even where a parse that stopped it would also succeed ("a"*
// followed by a rule that starts with "a"). Grammars whose lexemes end
// where the next begins (a quote, a bracket, a separator), as llama.cpp's
// own do, mean the same under both.
func TranslateGBNF(src string) (string, error) {
	p := &gbnfParser{src: src, line: 1}
	rules, err := p.grammar()
	if err != nil {
		return "", err
	}
	return emitLark(rules)
}

// The grammar as read.
type (
	gbnfRule struct {
		name string
		line int
		body gbnfAlt
	}
	gbnfAlt  []gbnfSeq
	gbnfSeq  []gbnfItem
	gbnfItem struct {
		atom     gbnfAtom
		min, max int // repetitions; max -1 for no bound
	}
	gbnfAtom struct {
		kind   atomKind
		text   string    // literal
		negate bool      // class
		ranges [][2]rune // class
		group  gbnfAlt   // group
		name   string    // rule reference
		line   int       // rule reference
	}
	atomKind int
)

const (
	atomLiteral atomKind = iota
	atomClass
	atomAny
	atomGroup
	atomRef
)

type gbnfParser struct {
	src  string
	pos  int
	line int
}

func (p *gbnfParser) errorf(format string, args ...any) error {
	return fmt.Errorf("constrain: GBNF grammar: line %d: %s", p.line, fmt.Sprintf(format, args...))
}

func (p *gbnfParser) peek() byte {
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

func (p *gbnfParser) eof() bool { return p.pos >= len(p.src) }

// space skips blanks and comments, and newlines too when newlines is set.
func (p *gbnfParser) space(newlines bool) {
	for !p.eof() {
		switch c := p.peek(); {
		case c == ' ' || c == '\t':
			p.pos++
		case c == '#':
			for !p.eof() && p.peek() != '\n' && p.peek() != '\r' {
				p.pos++
			}
		case newlines && (c == '\n' || c == '\r'):
			if c == '\n' || p.pos+1 >= len(p.src) || p.src[p.pos+1] != '\n' {
				p.line++
			}
			p.pos++
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

func (p *gbnfParser) name() string {
	start := p.pos
	for !p.eof() && isNameByte(p.peek()) {
		p.pos++
	}
	return p.src[start:p.pos]
}

func (p *gbnfParser) grammar() ([]gbnfRule, error) {
	var rules []gbnfRule
	for {
		p.space(true)
		if p.eof() {
			return rules, nil
		}
		line := p.line
		name := p.name()
		if name == "" {
			return nil, p.errorf("want a rule name, got %s", p.near())
		}
		p.space(false)
		if !strings.HasPrefix(p.src[p.pos:], "::=") {
			return nil, p.errorf("want ::= after the rule name %q, got %s", name, p.near())
		}
		p.pos += 3
		p.space(true)
		body, err := p.alternatives(false)
		if err != nil {
			return nil, err
		}
		if c := p.peek(); !p.eof() && c != '\n' && c != '\r' {
			return nil, p.errorf("want the end of the line after rule %q, got %s", name, p.near())
		}
		rules = append(rules, gbnfRule{name: name, line: line, body: body})
	}
}

// near shows what is at the position, for an error.
func (p *gbnfParser) near() string {
	if p.eof() {
		return "the end of the grammar"
	}
	rest := p.src[p.pos:]
	if i := strings.IndexAny(rest, "\r\n"); i >= 0 {
		rest = rest[:i]
	}
	if rest == "" {
		return "the end of the line"
	}
	return strconv.Quote(limit(rest, 20))
}

func (p *gbnfParser) alternatives(nested bool) (gbnfAlt, error) {
	var alts gbnfAlt
	for {
		seq, err := p.sequence(nested)
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		if p.peek() != '|' {
			return alts, nil
		}
		p.pos++
		p.space(true)
	}
}

func (p *gbnfParser) sequence(nested bool) (gbnfSeq, error) {
	var seq gbnfSeq
	for !p.eof() {
		var a gbnfAtom
		switch c := p.peek(); {
		case c == '"':
			p.pos++
			s, err := p.literal()
			if err != nil {
				return nil, err
			}
			a = gbnfAtom{kind: atomLiteral, text: s}
		case c == '[':
			p.pos++
			var err error
			if a, err = p.class(); err != nil {
				return nil, err
			}
		case c == '.':
			p.pos++
			a = gbnfAtom{kind: atomAny}
		case c == '(':
			p.pos++
			p.space(true)
			inner, err := p.alternatives(true)
			if err != nil {
				return nil, err
			}
			if p.peek() != ')' {
				return nil, p.errorf("want ) to close the group, got %s", p.near())
			}
			p.pos++
			a = gbnfAtom{kind: atomGroup, group: inner}
		case c == '<' || c == '!':
			return nil, p.errorf("token references (%s) are not supported", p.near())
		case isNameByte(c):
			line := p.line
			a = gbnfAtom{kind: atomRef, name: p.name(), line: line}
		default:
			return seq, nil
		}
		lo, hi, err := p.postfix()
		if err != nil {
			return nil, err
		}
		if hi != 0 { // x{0} is nothing
			seq = append(seq, gbnfItem{atom: a, min: lo, max: hi})
		}
		p.space(nested)
	}
	return seq, nil
}

// postfix reads the repetition after an atom: at least lo, at most hi
// times (-1: no bound).
func (p *gbnfParser) postfix() (lo, hi int, err error) {
	switch p.peek() {
	case '*':
		p.pos++
		return 0, -1, nil
	case '+':
		p.pos++
		return 1, -1, nil
	case '?':
		p.pos++
		return 0, 1, nil
	case '{':
	default:
		return 1, 1, nil
	}
	p.pos++
	p.space(false)
	n, ok := p.number()
	lo, hi = n, -1
	p.space(false)
	if p.peek() == ',' {
		p.pos++
		p.space(false)
		if m, ok := p.number(); ok {
			hi = m
		}
	} else {
		if !ok {
			return 0, 0, p.errorf("want a count in {...}, got %s", p.near())
		}
		hi = lo
	}
	p.space(false)
	if p.peek() != '}' {
		return 0, 0, p.errorf("want } to close the repetition, got %s", p.near())
	}
	p.pos++
	if hi >= 0 && hi < lo {
		return 0, 0, p.errorf("repetition {%d,%d}: the most is below the least", lo, hi)
	}
	return lo, hi, nil
}

// maxCount bounds a repetition's counts: llguidance refuses grammars that
// large anyway, with its own message.
const maxCount = 1 << 20

func (p *gbnfParser) number() (int, bool) {
	start := p.pos
	for !p.eof() && p.peek() >= '0' && p.peek() <= '9' {
		p.pos++
	}
	if start == p.pos {
		return 0, false
	}
	n, err := strconv.Atoi(p.src[start:p.pos])
	if err != nil || n > maxCount {
		return maxCount, true
	}
	return n, true
}

// char reads one character of a literal or class, escapes decoded.
func (p *gbnfParser) char() (rune, error) {
	if p.eof() {
		return 0, p.errorf("unexpected end of the grammar")
	}
	c := p.peek()
	if c == '\n' || c == '\r' {
		return 0, p.errorf("unexpected end of the line inside a literal or class")
	}
	if c != '\\' {
		r, n := utf8.DecodeRuneInString(p.src[p.pos:])
		if r == utf8.RuneError && n <= 1 {
			return 0, p.errorf("not valid UTF-8")
		}
		p.pos += n
		return r, nil
	}
	p.pos++
	if p.eof() {
		return 0, p.errorf("unexpected end of the grammar after \\")
	}
	e := p.peek()
	p.pos++
	switch e {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '^':
		return rune(e), nil
	case 'x', 'u', 'U':
		digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
		if p.pos+digits > len(p.src) {
			return 0, p.errorf("\\%c wants %d hex digits", e, digits)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+digits], 16, 32)
		if err != nil {
			return 0, p.errorf("\\%c wants %d hex digits, got %q", e, digits, p.src[p.pos:p.pos+digits])
		}
		p.pos += digits
		if v > utf8.MaxRune || (v >= 0xd800 && v <= 0xdfff) {
			return 0, p.errorf("\\%c%0*X is not a character", e, digits, v)
		}
		return rune(v), nil
	}
	return 0, p.errorf("unknown escape \\%c", e)
}

// literal reads a "string" (the opening quote read), escapes decoded.
func (p *gbnfParser) literal() (string, error) {
	var b strings.Builder
	for p.peek() != '"' {
		r, err := p.char()
		if err != nil {
			return "", err
		}
		b.WriteRune(r)
	}
	p.pos++
	return b.String(), nil
}

// class reads a [character class] (the bracket read).
func (p *gbnfParser) class() (gbnfAtom, error) {
	a := gbnfAtom{kind: atomClass}
	if p.peek() == '^' {
		a.negate = true
		p.pos++
	}
	for p.peek() != ']' {
		lo, err := p.char()
		if err != nil {
			return a, err
		}
		hi := lo
		if p.peek() == '-' && p.pos+1 < len(p.src) && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return a, err
			}
			if hi < lo {
				return a, p.errorf("character range %q-%q runs backwards", lo, hi)
			}
		}
		a.ranges = append(a.ranges, [2]rune{lo, hi})
	}
	p.pos++
	if len(a.ranges) == 0 && !a.negate {
		return a, p.errorf("an empty character class [] matches nothing")
	}
	return a, nil
}

// larkWriter names the rules and terminals and writes the Lark.
type larkWriter struct {
	regular map[string]bool   // GBNF rule name -> it becomes a terminal
	names   map[string]string // GBNF rule name -> its Lark name
	taken   map[string]bool
	seqs    []string // the synthesized terminals' definitions
}

func emitLark(rules []gbnfRule) (string, error) {
	defined := map[string]*gbnfRule{}
	for i := range rules {
		r := &rules[i]
		if first, ok := defined[r.name]; ok {
			return "", fmt.Errorf("constrain: GBNF grammar: line %d: rule %q is defined twice (first at line %d)", r.line, r.name, first.line)
		}
		defined[r.name] = r
	}
	if _, ok := defined["root"]; !ok {
		return "", fmt.Errorf("constrain: GBNF grammar: no root rule (root ::= ... is where the text starts)")
	}
	for _, r := range rules {
		var err error
		walkRefs(r.body, func(a *gbnfAtom) {
			if _, ok := defined[a.name]; !ok && err == nil {
				err = fmt.Errorf("constrain: GBNF grammar: line %d: rule %q is used but never defined", a.line, a.name)
			}
		})
		if err != nil {
			return "", err
		}
	}
	w := &larkWriter{regular: regularRules(rules), names: map[string]string{}, taken: map[string]bool{"start": true}}
	names := make([]string, 0, len(defined))
	for n := range defined {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		base := strings.ReplaceAll(strings.ToLower(n), "-", "_")
		if w.regular[n] {
			base = strings.ToUpper(base)
		}
		if base[0] >= '0' && base[0] <= '9' {
			base = "r_" + base
			if w.regular[n] {
				base = "R_" + base[2:]
			}
		}
		w.names[n] = w.unique(base)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "start: %s\n", w.names["root"])
	var body strings.Builder
	for _, r := range rules {
		if w.regular[r.name] {
			fmt.Fprintf(&body, "%s: %s\n", w.names[r.name], w.alt(r.body, true))
		} else {
			fmt.Fprintf(&body, "%s: %s\n", w.names[r.name], w.alt(r.body, false))
		}
	}
	b.WriteString(body.String())
	for _, s := range w.seqs {
		b.WriteString(s)
	}
	return b.String(), nil
}

func (w *larkWriter) unique(base string) string {
	s := base
	for i := 2; w.taken[s]; i++ {
		s = fmt.Sprintf("%s_%d", base, i)
	}
	w.taken[s] = true
	return s
}

// walkRefs calls f on every rule reference in alt.
func walkRefs(alt gbnfAlt, f func(*gbnfAtom)) {
	for _, seq := range alt {
		for i := range seq {
			a := &seq[i].atom
			switch a.kind {
			case atomRef:
				f(a)
			case atomGroup:
				walkRefs(a.group, f)
			}
		}
	}
}

// regularRules finds the rules that refer, directly or not, to no rule on
// a cycle of references: the ones a regular expression can spell.
func regularRules(rules []gbnfRule) map[string]bool {
	body := map[string]gbnfAlt{}
	for _, r := range rules {
		body[r.name] = r.body
	}
	const (
		unseen = iota
		visiting
		regular
		irregular
	)
	state := map[string]int{}
	var visit func(string) bool
	visit = func(n string) bool {
		switch state[n] {
		case visiting:
			return false // a cycle
		case regular:
			return true
		case irregular:
			return false
		}
		state[n] = visiting
		ok := true
		walkRefs(body[n], func(a *gbnfAtom) {
			if !visit(a.name) {
				ok = false
			}
		})
		if ok {
			state[n] = regular
		} else {
			state[n] = irregular
		}
		return ok
	}
	out := map[string]bool{}
	for _, r := range rules {
		out[r.name] = visit(r.name) // settled by the first visit that reached it

	}
	return out
}

// isRegular reports whether an item can be part of a terminal.
func (w *larkWriter) isRegular(it gbnfItem) bool {
	switch it.atom.kind {
	case atomRef:
		return w.regular[it.atom.name]
	case atomGroup:
		for _, seq := range it.atom.group {
			for _, x := range seq {
				if !w.isRegular(x) {
					return false
				}
			}
		}
	}
	return true
}

// alt writes alternatives; in a terminal (lexeme) every item is regular,
// in a rule each run of regular items becomes a terminal of its own.
func (w *larkWriter) alt(alt gbnfAlt, lexeme bool) string {
	parts := make([]string, len(alt))
	for i, seq := range alt {
		parts[i] = w.seq(seq, lexeme)
	}
	return strings.Join(parts, " | ")
}

func (w *larkWriter) seq(seq gbnfSeq, lexeme bool) string {
	if len(seq) == 0 {
		return `""`
	}
	var out []string
	if lexeme {
		for _, it := range seq {
			out = append(out, w.item(it, true))
		}
		return strings.Join(out, " ")
	}
	for i := 0; i < len(seq); {
		if !w.isRegular(seq[i]) {
			out = append(out, w.item(seq[i], false))
			i++
			continue
		}
		j := i
		for j < len(seq) && w.isRegular(seq[j]) {
			j++
		}
		run := seq[i:j]
		if len(run) == 1 && run[0].min == 1 && run[0].max == 1 && run[0].atom.kind != atomGroup {
			out = append(out, w.item(run[0], true)) // a lexeme as it is
		} else {
			name := w.unique(fmt.Sprintf("SEQ_%d", len(w.seqs)+1))
			w.seqs = append(w.seqs, fmt.Sprintf("%s: %s\n", name, w.seq(run, true)))
			out = append(out, name)
		}
		i = j
	}
	return strings.Join(out, " ")
}

func (w *larkWriter) item(it gbnfItem, lexeme bool) string {
	return w.atom(it.atom, lexeme) + repeat(it.min, it.max)
}

func repeat(lo, hi int) string {
	switch {
	case lo == 1 && hi == 1:
		return ""
	case lo == 0 && hi == -1:
		return "*"
	case lo == 1 && hi == -1:
		return "+"
	case lo == 0 && hi == 1:
		return "?"
	case hi == -1:
		return fmt.Sprintf("{%d,}", lo)
	case lo == hi:
		return fmt.Sprintf("{%d}", lo)
	}
	return fmt.Sprintf("{%d,%d}", lo, hi)
}

func (w *larkWriter) atom(a gbnfAtom, lexeme bool) string {
	switch a.kind {
	case atomLiteral:
		return larkString(a.text)
	case atomClass:
		if len(a.ranges) == 0 { // [^]: any character
			return "/(?s:.)/"
		}
		var b strings.Builder
		b.WriteString("/[")
		if a.negate {
			b.WriteByte('^')
		}
		for _, r := range a.ranges {
			if r[0] == r[1] {
				fmt.Fprintf(&b, `\x{%x}`, r[0])
			} else {
				fmt.Fprintf(&b, `\x{%x}-\x{%x}`, r[0], r[1])
			}
		}
		b.WriteString("]/")
		return b.String()
	case atomAny:
		return "/(?s:.)/"
	case atomGroup:
		return "(" + w.alt(a.group, lexeme) + ")"
	}
	return w.names[a.name]
}

// larkString quotes s as a Lark string (JSON's escapes).
func larkString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
