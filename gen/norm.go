package gen

import "github.com/dave/jennifer/jen"

// Norms: the kind every norm of an architecture uses (the block's slots,
// the q and k norms, the final one), and how each is typed and loaded.

// NormKind is the norm every layer uses.
type NormKind string

// normKinds are the norm kinds: the runtime type of the module and the
// Weights method that loads it.
var normKinds = []struct {
	kind        NormKind
	typ, loader string
}{
	{"rms", "RMSNorm", "RMSNorm"},                            // x / rms(x) * w
	{"rms_one_plus", "RMSNorm", "RMSNormOnePlus"},            // x / rms(x) * (1 + w)
	{"layer_norm", "LayerNorm", "LayerNorm"},                 // with weight and bias
	{"layer_norm_one_plus", "LayerNorm", "LayerNormOnePlus"}, // scaled by 1 + w, with bias
	{"rms_unweighted", "PlainRMSNorm", ""},                   // x / rms(x), no weight
}

func (NormKind) values() []string {
	var out []string
	for _, k := range normKinds {
		out = append(out, string(k.kind))
	}
	return out
}

// Norm is the norm of an architecture, resolved.
type Norm struct {
	Kind NormKind
	Eps  *Value
	Bias *Value // a layer_norm's bias, decided at load; nil: always there
	// Offsets are added to the weights of the norms in each block slot
	// (by Slot) and of the final norm (offsetFinal); nil: none.
	Offsets [offsetFinal + 1]*Value
	// Absent are per-layer bools by Slot (nil: the norm is on every
	// layer): the layers that have no norm in that slot.
	Absent      [offsetFinal]*Value
	typ, loader string
}

// offsetFinal is the final norm's index in Norm.Offsets, after the four
// block slots'.
const offsetFinal = 4

func newNorm(kind NormKind, eps *Value) *Norm {
	n := &Norm{Kind: kind, Eps: eps}
	for _, k := range normKinds {
		if k.kind == kind {
			n.typ, n.loader = k.typ, k.loader
		}
	}
	return n
}

// goType is the Go type of a norm module.
func (n *Norm) goType() func() *jen.Statement { return nnType(n.typ) }

// field is a norm module's field, commented with its checkpoint name.
func (n *Norm) field(goName, name string) *field { return newField(goName, n.goType(), name) }

// load spells w.<loader>(name, dims, eps): loading one norm by checkpoint
// name.
func (n *Norm) load(w, name string, dims jen.Code) *jen.Statement {
	if n.loader == "" {
		// no weight to read: made in place
		return jen.Qual(nnPkg, "NewPlainRMSNorm").Call(n.Eps.Code(), jen.True())
	}
	if n.Bias != nil {
		return jen.Id(w).Dot("LayerNormBias").Call(jen.Lit(name), dims, n.Eps.Code(), n.Bias.Code())
	}
	return jen.Id(w).Dot(n.loader).Call(jen.Lit(name), dims, n.Eps.Code())
}

// loadAt is load for the norm in slot k of Offsets: with an offset there,
// w.RMSNormPlus(name, dims, eps, offset).
func (n *Norm) loadAt(w, name string, dims jen.Code, k int) *jen.Statement {
	if off := n.Offsets[k]; off != nil {
		return jen.Id(w).Dot("RMSNormPlus").Call(jen.Lit(name), dims, n.Eps.Code(), off.Code())
	}
	return n.load(w, name, dims)
}

// resolveNorm resolves structure.norm: its kind, eps, and a layer_norm's
// bias decided by the config.
func (b *builder) resolveNorm(sc *scope) error {
	s := &b.d.Structure.Norm
	l := b.leaves(sc)
	n := newNorm(s.Kind.V, l.must(s.Eps, "structure.norm.eps", TFloat))
	if l.err != nil {
		return l.err
	}
	if s.Bias.IsSet() {
		if n.Kind != "layer_norm" {
			return errAt(s.Bias.Pos, "structure.norm.bias", "a %s norm has no bias to leave out (only layer_norm has)", n.Kind)
		}
		if n.Bias = l.must(s.Bias, "structure.norm.bias", TBool); l.err != nil {
			return l.err
		}
	}
	o := &s.Offsets
	for k, f := range []F[Expr]{o.AttnIn, o.AttnOut, o.MLPIn, o.MLPOut, o.Final} {
		if !f.IsSet() {
			continue
		}
		key := "structure.norm.offsets." + [...]string{"attn_in", "attn_out", "mlp_in", "mlp_out", "final"}[k]
		if n.Kind != "rms" {
			return errAt(f.Pos, key, "a %s norm takes no offset (only rms does)", n.Kind)
		}
		if n.Offsets[k] = l.must(f, key, TFloat); l.err != nil {
			return l.err
		}
	}
	a := &s.Absent
	if a.Final.IsSet() {
		return errAt(a.Final.Pos, "structure.norm.absent.final", "the final norm is not a layer's: structure.encoder.final_norm leaves it out")
	}
	for k, f := range []F[Expr]{a.AttnIn, a.AttnOut, a.MLPIn, a.MLPOut} {
		if !f.IsSet() {
			continue
		}
		if n.Absent[k] = l.mustLayer(f, "structure.norm.absent."+[...]string{"attn_in", "attn_out", "mlp_in", "mlp_out"}[k], TBool); l.err != nil {
			return l.err
		}
	}
	b.a.Norm, b.a.FinalNorm = n, n
	if s.FinalEps.IsSet() {
		final := *n
		if final.Eps = l.must(s.FinalEps, "structure.norm.final_eps", TFloat); l.err != nil {
			return l.err
		}
		b.a.FinalNorm = &final
	}
	return nil
}

// normDefaults: RMSNorm with the config's rms_norm_eps.
func normDefaults(d *Descriptor) {
	setDefault(&d.Structure.Norm.Kind, NormKind("rms"), d.file)
	exprDefault(&d.Structure.Norm.Eps, "rms_norm_eps", d.file)
}
