package generate

import (
	"errors"
	"fmt"
)

// Constraint limits which tokens a generation may draw next (constrained
// decoding): a JSON schema or a grammar, say (package constrain's Matcher).
// Before each draw the decode loop asks for the mask and sets the logits of
// the tokens outside it to -inf; after the draw it tells the constraint
// which token was drawn.
type Constraint interface {
	// Mask sets, in allowed (one bit per token id: bit t%32 of word t/32,
	// zeroed by the caller), the tokens that may come next; bits of ids
	// past len(allowed)*32 are left out. Once the constraint is complete
	// only the stop tokens are allowed.
	Mask(allowed []uint32) error
	// Accept moves the constraint past the drawn token.
	Accept(t int32) error
	// Done reports that nothing but a stop token may follow.
	Done() bool
	// Free releases what the constraint holds.
	Free()
}

// ErrNoTokenAllowed is the error of a generation whose Constraint allows
// no token next (a grammar that can neither go on nor end).
var ErrNoTokenAllowed = errors.New("constraint: no token is allowed next")

// Mask is a constraint's mask as a decode loop applies it to logits: one
// bool a token id. Its buffers are kept from one step to the next.
type Mask struct {
	words []uint32
	allow []bool
}

// Allowed asks c for the tokens it allows next among the first n ids (the
// logits' width): ErrNoTokenAllowed when none is, c's own error as
// "constraint: ...". The slice is the Mask's until its next call.
func (k *Mask) Allowed(c Constraint, n int) ([]bool, error) {
	if len(k.allow) != n {
		k.words = make([]uint32, (n+31)/32)
		k.allow = make([]bool, n)
	} else {
		clear(k.words)
	}
	if err := c.Mask(k.words); err != nil {
		return nil, fmt.Errorf("constraint: %w", err)
	}
	some := false
	for w, bits := range k.words {
		row := k.allow[w*32 : min(w*32+32, n)]
		if bits == 0 {
			clear(row)
			continue
		}
		for b := range row {
			row[b] = bits&(1<<b) != 0
			some = some || row[b]
		}
	}
	if !some {
		return nil, ErrNoTokenAllowed
	}
	return k.allow, nil
}
