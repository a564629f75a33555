package gen

import (
	"slices"

	"github.com/dave/jennifer/jen"
)

// The encoder (structure.encoder): a network that reads its whole input
// at once, every position attending to every other, as BERT and the
// embedding and reranking models built on it do. Its layers keep no
// caches (kv.Encoding stands in: each row's padding is masked, and it
// carries the tokens' types), its embeddings may add a row per token type
// before their norm, its final norm is optional, and in place of a token
// head it may hold a classifier over the first token (a cross-encoder's
// scores). Its Forward fails: it does not generate.

// EncoderDesc is structure.encoder: absent (a decoder) unless pooling is
// set.
type EncoderDesc struct {
	// Pooling is how the embeddings pool when the checkpoint's folder does
	// not say: mean, cls or last.
	Pooling F[string] `yaml:"pooling"`
	// TokenTypes is the row count of a table of token types
	// (weights.names.token_types) whose row for each token's type is
	// added with the positions, before the embeddings' norm; null: none.
	TokenTypes F[Expr] `yaml:"token_types"`
	// FinalNorm: a norm after the last layer (default true).
	FinalNorm F[bool] `yaml:"final_norm"`
	// PositionsPad counts the learned positions as RoBERTa does, from the
	// token ids: pad+1, pad+2, ... for the tokens that are not this id,
	// pad for those that are (null: 0, 1, 2, ... as BERT counts them).
	PositionsPad F[Expr]        `yaml:"positions_pad"`
	Classifier   ClassifierDesc `yaml:"classifier"`
}

// ClassifierDesc is the encoder's scoring head, loaded when the checkpoint
// holds out's weight: each input's states pooled (pooling: a string
// expression, cls or mean; default cls), through dense (optional, with a
// bias unless dense_bias says otherwise), its activation and norm (of the
// architecture's norm kind; optional), then out to one score per label.
// All are names of their own, under no prefix (BERT's pooler is
// bert.pooler.dense, XLM-R's head classifier.dense and
// classifier.out_proj, ModernBERT's head.dense, head.norm and classifier).
type ClassifierDesc struct {
	Pooling    F[Expr]   `yaml:"pooling"`
	Dense      F[string] `yaml:"dense"`
	DenseBias  F[Expr]   `yaml:"dense_bias"`
	Activation F[string] `yaml:"activation"`
	Norm       F[string] `yaml:"norm"`
	Out        F[string] `yaml:"out"`
}

// Encoder is structure.encoder, resolved.
type Encoder struct {
	none
	Pooling   string
	FinalNorm bool
	// types is the token-type table's row count (nil: none), typesField
	// the table.
	types      *Value
	typesPath  string
	typesField *field
	// The classifier's checkpoint names ("" out: none), its pooling and
	// dense bias (nil: cls, true), the architecture's norm its norm is
	// loaded as, and its field.
	dense, act, norm, out string
	pool, denseBias       *Value
	normKind              *Norm
	cls                   *field
	// posPad is structure.encoder.positions_pad (nil: none), padField the
	// model's copy of it.
	posPad   *Value
	padField *field
	// positions is the learned position table's rows (nil: none).
	positions *Value
}

var (
	poolingKinds   = []string{"mean", "cls", "last"}
	classifierActs = []string{"tanh", "gelu"}
)

// resolveEncoder resolves structure.encoder, after the names.
func (b *builder) resolveEncoder(sc *scope) error {
	d := &b.d.Structure.Encoder
	if !d.Pooling.IsSet() {
		for _, f := range []struct {
			set  bool
			pos  Pos
			path string
		}{
			{d.TokenTypes.IsSet(), d.TokenTypes.Pos, "token_types"},
			{d.FinalNorm.Set, d.FinalNorm.Pos, "final_norm"},
			{d.Classifier.Out.IsSet(), d.Classifier.Out.Pos, "classifier"},
			{d.Classifier.Dense.IsSet(), d.Classifier.Dense.Pos, "classifier"},
			{d.Classifier.Pooling.IsSet(), d.Classifier.Pooling.Pos, "classifier"},
			{d.Classifier.Norm.IsSet(), d.Classifier.Norm.Pos, "classifier"},
			{d.PositionsPad.IsSet(), d.PositionsPad.Pos, "positions_pad"},
		} {
			if f.set {
				return errAt(f.pos, "structure.encoder."+f.path, "belongs to an encoder, which says how its embeddings pool (structure.encoder.pooling: mean, cls or last)")
			}
		}
		return nil
	}
	s, a := &b.d.Structure, b.a
	if !slices.Contains(poolingKinds, d.Pooling.V) {
		return errAt(d.Pooling.Pos, "structure.encoder.pooling", "unknown %q (mean, cls or last)", d.Pooling.V)
	}
	switch {
	case a.Mixers != nil:
		return errAt(d.Pooling.Pos, "structure.encoder", "an encoder's layers attend; token mixers that keep a state read their input in order")
	case a.MLP.Sparse != nil:
		return errAt(d.Pooling.Pos, "structure.encoder", "an encoder with a mixture of experts is not supported")
	case s.Block.V == singleBlock:
		return errAt(s.Block.Pos, "structure.block", "an encoder's layers hold attention and the MLP; a single block is a decoder's")
	}
	e := &Encoder{Pooling: d.Pooling.V, FinalNorm: !d.FinalNorm.Set || d.FinalNorm.V}
	types, err := b.optValue(d.TokenTypes, "structure.encoder.token_types", TInt, sc)
	if err != nil {
		return err
	}
	e.types = types
	if e.posPad, err = b.optValue(d.PositionsPad, "structure.encoder.positions_pad", TInt, sc); err != nil {
		return err
	}
	if e.positions, err = b.optValue(s.Positions, "structure.positions", TInt, sc); err != nil {
		return err
	}
	if e.posPad != nil {
		if e.positions == nil {
			return errAt(d.PositionsPad.Pos, "structure.encoder.positions_pad", "counts the learned positions, and structure.positions gives none")
		}
		e.padField = newField("positionsPad", intType, "the id whose tokens take position "+d.PositionsPad.V.Text+"; the others count from one past it")
	}
	if err := b.resolveClassifier(e, sc); err != nil {
		return err
	}
	if e.types != nil {
		e.typesPath = a.path(a.Names.TokenTypes)
		e.typesField = newField(goName(a.Names.TokenTypes), nnType("Embedding"), e.typesPath+": a row for each token type")
	}
	a.Encoder = e
	return nil
}

// resolveClassifier resolves structure.encoder.classifier into e.
func (b *builder) resolveClassifier(e *Encoder, sc *scope) error {
	c := &b.d.Structure.Encoder.Classifier
	const at = "structure.encoder.classifier."
	switch {
	case c.Out.IsSet():
		if !checkpointName.MatchString(c.Out.V) {
			return errAt(c.Out.Pos, at+"out", "%q is not a checkpoint name (dotted names of letters, digits and _)", c.Out.V)
		}
		e.out = c.Out.V
	default:
		for _, f := range []struct {
			set bool
			pos Pos
		}{{c.Dense.IsSet(), c.Dense.Pos}, {c.Activation.IsSet(), c.Activation.Pos}, {c.Norm.IsSet(), c.Norm.Pos},
			{c.Pooling.IsSet(), c.Pooling.Pos}, {c.DenseBias.IsSet(), c.DenseBias.Pos}} {
			if f.set {
				return errAt(f.pos, at+"out", "a classifier needs its output layer's name")
			}
		}
		return nil
	}
	for _, n := range []struct {
		f    F[string]
		key  string
		into *string
	}{{c.Dense, "dense", &e.dense}, {c.Norm, "norm", &e.norm}} {
		if !n.f.IsSet() {
			continue
		}
		if !checkpointName.MatchString(n.f.V) {
			return errAt(n.f.Pos, at+n.key, "%q is not a checkpoint name (dotted names of letters, digits and _)", n.f.V)
		}
		*n.into = n.f.V
	}
	if c.Activation.IsSet() {
		if e.dense == "" {
			return errAt(c.Activation.Pos, at+"activation", "activates the dense layer, and classifier.dense names none")
		}
		if !slices.Contains(classifierActs, c.Activation.V) {
			return errAt(c.Activation.Pos, at+"activation", "unknown %q (tanh or gelu)", c.Activation.V)
		}
		e.act = c.Activation.V
	}
	if c.DenseBias.IsSet() && e.dense == "" {
		return errAt(c.DenseBias.Pos, at+"dense_bias", "is the dense layer's bias, and classifier.dense names none")
	}
	var err error
	if e.pool, err = b.optValue(c.Pooling, at+"pooling", TString, sc); err != nil {
		return err
	}
	if e.denseBias, err = b.optValue(c.DenseBias, at+"dense_bias", TBool, sc); err != nil {
		return err
	}
	e.normKind = b.a.Norm
	e.cls = newField("Classifier", nnType("Classifier"), e.out+": the scoring head; nil when the checkpoint has none")
	return nil
}

func (e *Encoder) fields(t goType) []jen.Code {
	if t != tModel {
		return nil
	}
	var out []jen.Code
	if e.typesField != nil {
		out = append(out, e.typesField.decl())
	}
	if e.cls != nil {
		out = append(out, e.cls.decl())
	}
	return out
}

// maxInputField holds the longest input the position table takes.
var maxInputField = newField("maxInput", intType, "the longest input the position table takes")

func (e *Encoder) params(t goType) []jen.Code {
	var out []jen.Code
	if t == tModel && e.positions != nil {
		out = append(out, maxInputField.decl())
	}
	if t == tModel && e.padField != nil {
		out = append(out, e.padField.decl())
	}
	return out
}

func (e *Encoder) inits(t goType) []kvPair {
	if t != tModel || e.positions == nil {
		return nil
	}
	if e.padField == nil {
		return []kvPair{{maxInputField.key(), e.positions.Code()}}
	}
	return []kvPair{
		{maxInputField.key(), jen.Add(e.positions.Code()).Op("-").Add(e.posPad.Code()).Op("-").Lit(1)},
		{e.padField.key(), e.posPad.Code()},
	}
}

// info are the encoder's entries of Info: the longest input its position
// table takes (none without one).
func (e *Encoder) info() []kvPair {
	if e.positions == nil {
		return nil
	}
	return []kvPair{{"MaxInput", maxInputField.of(rModel)}}
}

// positionsForward is Hidden's line adding the learned positions, counted
// from the token ids past pad (RoBERTa's count); nil where they count from
// 0 as a decoder's do.
func (e *Encoder) positionsForward(table *field) []jen.Code {
	if e.padField == nil {
		return nil
	}
	return []jen.Code{jen.Id("h").Op("=").Qual(nnPkg, "AddPaddedPositions").Call(g(), jen.Id("h"), jen.Id("tokens"), table.of(rModel), e.padField.of(rModel)).Comment("+ the rows of the positions counted past the pad id")}
}

func (e *Encoder) build(s stage) []jen.Code {
	var out []jen.Code
	switch {
	case s == sBefore && e.typesField != nil:
		out = append(out, e.typesField.of(rModel).Op("=").Id("w").Dot("Embedding").Call(jen.Lit(e.typesPath), e.types.Code(), fHidden.of(rModel)))
	case s == sAfter && e.cls != nil:
		pool, bias := jen.Lit("cls"), jen.Lit(true)
		if e.pool != nil {
			pool = e.pool.Code()
		}
		if e.denseBias != nil {
			bias = e.denseBias.Code()
		}
		fields := jen.Dict{jen.Id("Pool"): pool, jen.Id("Out"): jen.Lit(e.out)}
		for k, v := range map[string]string{"Dense": e.dense, "Act": e.act, "Norm": e.norm} {
			if v != "" {
				fields[jen.Id(k)] = jen.Lit(v)
			}
		}
		if e.dense != "" {
			fields[jen.Id("DenseBias")] = bias
		}
		spec := jen.Qual(nnPkg, "ClassifierSpec").Values(fields)
		out = append(out, e.cls.of(rModel).Op("=").Id("w").Dot("Classifier").Call(spec, fHidden.of(rModel)))
		if e.norm != "" {
			out = append(out, jen.If(e.cls.of(rModel).Op("!=").Nil()).Block(
				e.cls.of(rModel).Dot("Norm").Op("=").Add(e.normKind.load("w", e.norm, fHidden.of(rModel))),
			))
		}
	}
	return out
}

// shard: an encoder has no tensor-parallel plan.
func (e *Encoder) shard(p *ShardPlan, a *Arch) {
	p.refuse("an encoder (structure.encoder) embeds and scores on one machine; tensor parallelism serves generation")
}

// typesForward is Hidden's line after the positions: each token's type's
// row added to h (kv.Encoding carries the types; none: type 0).
func (e *Encoder) typesForward() []jen.Code {
	if e.typesField == nil {
		return nil
	}
	return []jen.Code{jen.Id("h").Op("=").Qual(nnPkg, "AddTokenTypes").Call(g(), jen.Id("h"), e.typesField.of(rModel), jen.Id("caches").Index(jen.Lit(0))).Comment("+ the rows of the tokens' types")}
}

// emitScore writes Score and Labels, the classifier's (nn.Scorer), on an
// encoder that has one.
func (e *Encoder) emitScore(f *jen.File) {
	if e.cls == nil {
		return
	}
	f.Comment(comment("Score turns the hidden states Hidden gives, [B, L, hidden], whose row r holds lengths[r] tokens before its padding (nil: every row is whole), into each row's scores, [B, labels] in float32, with " + e.out + " (a cross-encoder's head). A checkpoint without the head fails g."))
	f.Func().Params(jen.Id(rModel).Op("*").Id("Model")).Id("Score").Params(graphParam(), jen.Id("h").Add(arrayType()), jen.Id("lengths").Index().Int()).Add(arrayType()).Block(
		jen.Return(e.cls.of(rModel).Dot("Apply").Call(g(), jen.Id("h"), jen.Id("lengths"))),
	)
	f.Line()
	f.Comment("Labels is the classifier's score count per input: 0 when the checkpoint has none.")
	f.Func().Params(jen.Id(rModel).Op("*").Id("Model")).Id("Labels").Params().Int().Block(
		jen.Return(e.cls.of(rModel).Dot("Count").Call()),
	)
	f.Line()
}
