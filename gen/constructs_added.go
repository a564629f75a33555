package gen

// Checks and resolution of the constructs the parallel block brought with
// it: the head's bias and scale, a LayerNorm's bias decided by the config,
// q and k norms present by a condition, each head's own q and k norm
// weights, float32 attention at float16 only, and position-scaled queries.

// checkAdded resolves and checks those constructs, once the components are
// made.
func (b *builder) checkAdded() error {
	s := &b.d.Structure
	a := b.a
	sc := b.scope("load")
	if !a.Head.Bias.IsFalse() && a.Head.Tied.IsTrue() {
		return errAt(s.Head.Bias.Pos, "structure.head.bias", "a tied head is the embedding table, which has no bias")
	}
	if s.Norm.Bias.IsSet() {
		if a.Norm.Kind != "layer_norm" {
			return errAt(s.Norm.Bias.Pos, "structure.norm.bias", "a %s norm has no bias to leave out (only layer_norm has)", a.Norm.Kind)
		}
		v, err := b.value(s.Norm.Bias, "structure.norm.bias", TBool, sc)
		if err != nil {
			return err
		}
		a.Norm.Bias = v
	}
	return nil
}
