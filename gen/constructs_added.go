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
	return b.checkAddedAttention(sc)
}

// checkAddedAttention resolves and checks attention's added constructs.
func (b *builder) checkAddedAttention(sc *scope) error {
	at, a := &b.d.Structure.Attention, b.a
	if at.QKNormWhen.IsSet() {
		if a.Attn.QKNorm == "none" {
			return errAt(at.QKNormWhen.Pos, "structure.attention.qk_norm_when", "there are no q and k norms (qk_norm is none)")
		}
		v, err := b.value(at.QKNormWhen, "structure.attention.qk_norm_when", TBool, sc)
		if err != nil {
			return err
		}
		a.Attn.QKNormWhen = v
	}
	if a.Attn.QKNorm == eachHead && a.Norm.Kind != "layer_norm" {
		return errAt(at.QKNorm.Pos, "structure.attention.qk_norm", "each_head norms are LayerNorms; the norm kind is %s", a.Norm.Kind)
	}
	if at.Float32IfHalf.IsSet() && at.Float32IfHalf.V {
		switch {
		case a.Attn.Float32:
			return errAt(at.Float32IfHalf.Pos, "structure.attention.float32_if_float16", "float32 already casts every dtype; set one of the two")
		case a.Scalars.Get(AttnSoftcap) != nil:
			return errAt(at.Float32IfHalf.Pos, "structure.attention.float32_if_float16", "soft-capped attention is written out in the model's dtype; float32 does not apply")
		}
		a.Attn.Float32IfHalf = true
	}
	if err := b.checkSinks(); err != nil {
		return err
	}
	qs := &at.QueryScale
	if qs.Beta.IsSet() != qs.Positions.IsSet() {
		pos := qs.Beta.Pos
		if !qs.Beta.IsSet() {
			pos = qs.Positions.Pos
		}
		return errAt(pos, "structure.attention.query_scale", "beta and positions go together")
	}
	if qs.Beta.IsSet() {
		beta, err := b.value(qs.Beta, "structure.attention.query_scale.beta", TFloat, sc)
		if err != nil {
			return err
		}
		pos, err := b.value(qs.Positions, "structure.attention.query_scale.positions", TInt, sc)
		if err != nil {
			return err
		}
		a.Attn.QueryScale = newQueryScale(beta, pos)
	}
	return nil
}
