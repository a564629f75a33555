package gen

// slidingRope resolves structure.rope.sliding: the rope of the layers that
// attend within a window, where its kind or base differs from the rest's.
func (b *builder) slidingRope(sliding *Value, sc *scope) error {
	d := &b.d.Structure.Rope.Sliding
	if !d.Kind.IsSet() && !d.Base.IsSet() {
		return nil
	}
	at := d.Kind.Pos
	if !d.Kind.IsSet() {
		at = d.Base.Pos
	}
	r := b.a.Rope
	switch {
	case sliding == nil:
		return errAt(at, "structure.rope.sliding", "there are no sliding layers (structure.attention.sliding) to give a rope of their own")
	case !r.Rotates():
		return errAt(at, "structure.rope.sliding", "a rope of kind none has no sliding variant")
	}
	v := &SlidingRope{Kind: r.Kind, Base: r.Base, Layers: sliding}
	if d.Kind.IsSet() {
		v.Kind = d.Kind.V
		probe := &Rope{Kind: v.Kind}
		switch {
		case !probe.Rotates():
			return errAt(d.Kind.Pos, "structure.rope.sliding.kind", "none: layers without positions are structure.rope.layers")
		case probe.readsScaling() && r.Scaling == nil:
			return errAt(d.Kind.Pos, "structure.rope.sliding.kind", "a %s rope needs structure.rope.scaling, which the %s rope does not read", v.Kind, r.Kind)
		case v.Kind == "su", v.Kind == "su_mscale":
			return errAt(d.Kind.Pos, "structure.rope.sliding.kind", "an su rope is one architecture's whole rope, not a sliding variant")
		}
	}
	if d.Base.IsSet() {
		base, err := b.value(d.Base, "structure.rope.sliding.base", TFloat, sc)
		if err != nil {
			return err
		}
		v.Base = base
	}
	r.Sliding = v
	return nil
}
