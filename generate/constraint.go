package generate

// Constraint limits which tokens a generation may draw next (constrained
// decoding): a JSON schema or a grammar, say (package constrain's Matcher).
// Before each draw the decode loop asks for the mask and sets the logits of
// the tokens outside it to -inf; after the draw it tells the constraint
// which token was drawn.
type Constraint interface {
	// Mask sets, in allowed (one bit per token id: bit t%32 of word t/32;
	// len(allowed) >= (vocab+31)/32, zeroed by the caller), the tokens
	// that may come next. Once the constraint is complete only the stop
	// tokens are allowed.
	Mask(allowed []uint32) error
	// Accept moves the constraint past the drawn token.
	Accept(t int32) error
	// Done reports that nothing but a stop token may follow.
	Done() bool
	// Free releases what the constraint holds.
	Free()
}
