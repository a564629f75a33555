package generate

import (
	"context"
	"strings"
)

// Detokenizer turns token ids, one at a time, into text, giving back only
// text that is complete (never part of a UTF-8 character), as
// *tokenizer.Stream does.
type Detokenizer interface {
	// Step takes the next token and returns the text it completes.
	Step(id int32) string
	// Flush returns what is left once generation ends.
	Flush() string
}

// TextOptions are Options plus what concerns text.
type TextOptions struct {
	Options
	// StopStrings end generation where one appears; the text stops before
	// it.
	StopStrings []string
	// OnText receives the text as it comes, in pieces that never split a
	// character or end inside a possible stop string. It may return
	// ErrStopped to end generation.
	OnText func(string) error
}

// Text generates after prompt and returns the text, decoded by d.
func Text(ctx context.Context, m Model, prompt []int32, d Detokenizer, opts TextOptions) (string, Stats, error) {
	var out strings.Builder
	sw := stopWatcher{stops: opts.StopStrings}
	emit := func(s string) error {
		out.WriteString(s)
		if opts.OnText != nil && s != "" {
			return opts.OnText(s)
		}
		return nil
	}
	stopped := false
	st, err := Tokens(ctx, m, prompt, opts.Options, func(id int32) error {
		ready, hit := sw.push(d.Step(id))
		if err := emit(ready); err != nil {
			return err
		}
		if hit {
			stopped = true
			return ErrStopped
		}
		return nil
	})
	if err != nil {
		return out.String(), st, err
	}
	if !stopped {
		ready, hit := sw.push(d.Flush())
		if hit {
			st.Finish = FinishStop
		}
		if err := emit(ready + sw.rest()); err != nil && err != ErrStopped {
			return out.String(), st, err
		}
	}
	return out.String(), st, nil
}

// stopWatcher holds back text that could be the start of a stop string.
type stopWatcher struct {
	stops   []string
	pending string
	done    bool
	found   string // the stop string that ended the text
}

// push adds text and returns what can be passed on, and whether a stop
// string was found (then nothing after it is passed on, ever).
func (w *stopWatcher) push(s string) (string, bool) {
	if w.done {
		return "", true
	}
	w.pending += s
	if len(w.stops) == 0 {
		out := w.pending
		w.pending = ""
		return out, false
	}
	cut := -1
	for _, stop := range w.stops {
		if stop == "" {
			continue
		}
		if i := strings.Index(w.pending, stop); i >= 0 && (cut < 0 || i < cut) {
			cut, w.found = i, stop
		}
	}
	if cut >= 0 {
		out := w.pending[:cut]
		w.pending = ""
		w.done = true
		return out, true
	}
	// Keep the longest tail that begins some stop string.
	keep := 0
	for _, stop := range w.stops {
		for n := min(len(stop)-1, len(w.pending)); n > keep; n-- {
			if strings.HasSuffix(w.pending, stop[:n]) {
				keep = n
				break
			}
		}
	}
	out := w.pending[:len(w.pending)-keep]
	w.pending = w.pending[len(w.pending)-keep:]
	return out, false
}

// rest is the held-back text once no more comes.
func (w *stopWatcher) rest() string {
	if w.done {
		return ""
	}
	out := w.pending
	w.pending = ""
	return out
}

// StopText holds back streamed text that could be the start of a stop
// string, as Text does, for a decode loop of the caller's own (a server
// reading a batch's tokens, say).
type StopText struct{ w stopWatcher }

// NewStopText watches for stops (empty strings are ignored).
func NewStopText(stops []string) *StopText { return &StopText{w: stopWatcher{stops: stops}} }

// Push adds the next piece of text and returns what can be passed on, and
// whether a stop string was found: the text then ends before it, and every
// later Push returns nothing.
func (s *StopText) Push(text string) (ready string, stopped bool) { return s.w.push(text) }

// Rest is the text held back, once no more comes (nothing after a stop).
func (s *StopText) Rest() string { return s.w.rest() }

// Found is the stop string that ended the text ("" while none has): the
// one that begins earliest, the first given where two begin at one place.
func (s *StopText) Found() string { return s.w.found }
