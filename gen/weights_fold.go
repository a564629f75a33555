package gen

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"
)

// weights.fold: multipliers a checkpoint of one form leaves to the model
// and the other folds into its weights (Falcon-H1's muP multipliers:
// Hugging Face's files keep them apart, mlx-lm's saved ones hold them
// folded). When the convolution weight when_unmoved names is still in
// Hugging Face's [channels, 1, taps] order (its last axis longer than its
// second), every tensor ending in a scale rule's suffix is multiplied by
// its factor in its own dtype, and a rows rule multiplies each row block
// of its tensor by that block's factor (as a vector in the tensor's
// dtype) times by, as mlx-lm's sanitize does.

// FoldDesc is weights.fold.
type FoldDesc struct {
	WhenUnmoved F[string]           `yaml:"when_unmoved"`
	Scale       List[FoldScaleDesc] `yaml:"scale"`
	Rows        List[FoldRowsDesc]  `yaml:"rows"`
	Pos         Pos                 `yaml:"-"`
}

// FoldScaleDesc multiplies the tensors ending in Suffix by By.
type FoldScaleDesc struct {
	Suffix F[string] `yaml:"suffix"`
	By     F[Expr]   `yaml:"by"`
	Pos    Pos       `yaml:"-"`
}

// FoldRowsDesc multiplies the tensors ending in Suffix by By times a
// factor per block of rows: Segments' counts and factors, in order.
type FoldRowsDesc struct {
	Suffix   F[string]             `yaml:"suffix"`
	By       F[Expr]               `yaml:"by"`
	Segments List[FoldSegmentDesc] `yaml:"segments"`
	Pos      Pos                   `yaml:"-"`
}

// FoldSegmentDesc is Count rows multiplied by By.
type FoldSegmentDesc struct {
	Count F[Expr] `yaml:"count"`
	By    F[Expr] `yaml:"by"`
	Pos   Pos     `yaml:"-"`
}

// Fold is weights.fold, resolved.
type Fold struct {
	When  string
	Scale []FoldScale
	Rows  []FoldRows
}

// FoldScale is one scale rule.
type FoldScale struct {
	Suffix string
	By     *Value
}

// FoldRows is one rows rule.
type FoldRows struct {
	Suffix          string
	By              *Value
	Counts, Factors []*Value
}

// resolveFold compiles weights.fold: when_unmoved with at least one rule,
// each rule's suffix and factors.
func (b *builder) resolveFold() error {
	s := &b.d.Weights.Fold
	if !s.WhenUnmoved.IsSet() && len(s.Scale.Items) == 0 && len(s.Rows.Items) == 0 {
		return nil
	}
	if !s.WhenUnmoved.IsSet() || s.WhenUnmoved.V == "" || strings.ContainsAny(s.WhenUnmoved.V, " \t") {
		return errAt(s.Pos, "weights.fold.when_unmoved", "missing or not a checkpoint name: the convolution weight whose order tells the checkpoint's form")
	}
	if len(s.Scale.Items) == 0 && len(s.Rows.Items) == 0 {
		return errAt(s.Pos, "weights.fold", "no scale or rows rule")
	}
	sc := b.scope("load")
	l := b.leaves(sc)
	f := &Fold{When: s.WhenUnmoved.V}
	suffix := func(v F[string], at Pos, path string) error {
		if !v.IsSet() || v.V == "" || strings.ContainsAny(v.V, " \t") {
			if v.Pos.File != "" {
				at = v.Pos
			}
			return errAt(at, path+".suffix", "missing or not the end of a checkpoint name")
		}
		return nil
	}
	for i, r := range s.Scale.Items {
		path := fmt.Sprintf("weights.fold.scale[%d]", i)
		if err := suffix(r.Suffix, r.Pos, path); err != nil {
			return err
		}
		f.Scale = append(f.Scale, FoldScale{Suffix: r.Suffix.V, By: l.must(r.By, path+".by", TFloat)})
	}
	for i, r := range s.Rows.Items {
		path := fmt.Sprintf("weights.fold.rows[%d]", i)
		if err := suffix(r.Suffix, r.Pos, path); err != nil {
			return err
		}
		if len(r.Segments.Items) == 0 {
			return errAt(r.Pos, path+".segments", "missing: the blocks of rows and their factors")
		}
		rows := FoldRows{Suffix: r.Suffix.V, By: l.must(r.By, path+".by", TFloat)}
		for k, seg := range r.Segments.Items {
			sp := fmt.Sprintf("%s.segments[%d]", path, k)
			rows.Counts = append(rows.Counts, l.must(seg.Count, sp+".count", TInt))
			rows.Factors = append(rows.Factors, l.must(seg.By, sp+".by", TFloat))
		}
		f.Rows = append(f.Rows, rows)
	}
	if l.err != nil {
		return l.err
	}
	b.a.Fold = f
	return nil
}

// lines are build's lines that fold the multipliers:
//
//	if w.Unmoved("model.layers.0.mamba.conv1d.weight") {
//		w.ScaleTensors("embed_tokens.weight", c.EmbeddingMultiplier)
//		w.ScaleRows("in_proj.weight", c.SsmInMultiplier, []int{...}, []float64{...})
//	}
func (f *Fold) lines() []jen.Code {
	if f == nil {
		return nil
	}
	var body []jen.Code
	for _, s := range f.Scale {
		body = append(body, jen.Id("w").Dot("ScaleTensors").Call(jen.Lit(s.Suffix), s.By.Code()))
	}
	for _, r := range f.Rows {
		var counts, factors []jen.Code
		for i := range r.Counts {
			counts = append(counts, r.Counts[i].Code())
			factors = append(factors, r.Factors[i].Code())
		}
		body = append(body, jen.Id("w").Dot("ScaleRows").Call(jen.Lit(r.Suffix), r.By.Code(),
			jen.Index().Int().Values(counts...), jen.Index().Float64().Values(factors...)))
	}
	return []jen.Code{jen.If(jen.Id("w").Dot("Unmoved").Call(jen.Lit(f.When))).Block(body...)}
}
