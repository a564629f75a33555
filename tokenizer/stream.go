package tokenizer

import "strings"

// Stream decodes ids one at a time, as a model generates them. Each Step
// returns the text that became complete with that id: never part of a
// UTF-8 character, so an emoji spread over four byte tokens comes out whole
// with the fourth. Spaces that depend on what came before (the leading
// space a sentencepiece decoder strips from the first token only) come out
// as Decode of the whole sequence has them.
//
// The concatenation of all chunks equals Decode of all ids, except where
// ids that are not valid UTF-8 together rewrite text already returned
// (byte tokens that first spell "A" and then, with the next byte, an
// invalid sequence, which Decode turns into one U+FFFD per byte); then Step
// returns the new ids decoded on their own. A Stream is not safe for
// concurrent use.
type Stream struct {
	t           *Tokenizer
	skipSpecial bool
	// ids is a window onto the sequence: context ids ids[:ctx], kept so the
	// next ones are not decoded as if they came first, and the ids after.
	ids []int32
	ctx int
	// prev is Decode of the context ids alone, which decoding the window
	// starts with.
	prev string
}

// NewStream returns a Stream that decodes as Decode(ids, skipSpecial).
func (t *Tokenizer) NewStream(skipSpecial bool) *Stream {
	return &Stream{t: t, skipSpecial: skipSpecial}
}

// Step adds id and returns the text it completes, "" if none.
func (s *Stream) Step(id int32) string {
	s.ids = append(s.ids, id)
	text, incomplete := s.t.decode(s.ids, s.skipSpecial)
	if incomplete || len(text) <= len(s.prev) && strings.HasPrefix(s.prev, text) {
		return ""
	}
	var chunk string
	if strings.HasPrefix(text, s.prev) {
		chunk = text[len(s.prev):]
	} else {
		// Decoded together, the new ids rewrite text already returned;
		// return them decoded on their own.
		chunk, _ = s.t.decode(s.ids[s.ctx:], s.skipSpecial)
	}
	// The ids of this chunk become the context if they decode alone to the
	// chunk: then nothing a decoder does at the start of a text (strip a
	// space, drop a ▁) can reach the ids after them. Otherwise the window
	// keeps growing.
	if alone, _ := s.t.decode(s.ids[s.ctx:], s.skipSpecial); alone == chunk {
		s.ids = append(s.ids[:0], s.ids[s.ctx:]...)
		s.prev = chunk
	} else {
		s.prev = text
	}
	s.ctx = len(s.ids)
	return chunk
}

// Flush returns whatever text the ids held back spell (U+FFFD for a
// character cut short) and resets the stream.
func (s *Stream) Flush() string {
	text, _ := s.t.decode(s.ids, s.skipSpecial)
	chunk := strings.TrimPrefix(text, s.prev)
	if !strings.HasPrefix(text, s.prev) {
		chunk, _ = s.t.decode(s.ids[s.ctx:], s.skipSpecial)
	}
	s.ids, s.prev, s.ctx = s.ids[:0], "", 0
	return chunk
}
