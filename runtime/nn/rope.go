package nn

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// Rope rotates the last axis of queries or keys [B, H, L, D] by their
// positions, offset .. offset+L-1.
type Rope interface {
	Apply(g *mlx.Graph, x *mlx.Array, offset int) *mlx.Array
}

// RopeKind is how an architecture builds its rotary embedding.
type RopeKind int

const (
	// RopePlain is mlx's nn.RoPE from the base alone; rope_scaling is not
	// read (gemma, glm4, starcoder2).
	RopePlain RopeKind = iota
	// RopeScaled is mlx-lm's rope_utils.initialize_rope: default and
	// linear, dynamic (NTK), llama3, yarn, longrope, proportional, mrope.
	RopeScaled
	// RopeSu is phi3's choice: su and longrope scale with SuScaledRoPE,
	// linear divides positions by the factor, and any other type turns
	// scaling off.
	RopeSu
	// RopeSuMscale is SuScaledRoPE whatever the type, given its mscales:
	// long_factor's frequencies, the input scaled by long_mscale (where it
	// is set and not 0, else as RopeSu scales it); the scaling object must
	// hold short_factor, long_factor, short_mscale and long_mscale.
	RopeSuMscale
)

// RopeScaling is a config's rope_scaling object. Keys it does not name are
// kept in the raw object only; absent numbers are nil.
type RopeScaling struct {
	Type     string // the "type" key ("" when absent)
	RopeType string // the "rope_type" key ("" when absent)

	Factor                        *float64
	LowFreqFactor                 *float64
	HighFreqFactor                *float64
	OriginalMaxPositionEmbeddings *float64
	BetaFast, BetaSlow            *float64
	Mscale, MscaleAllDim          *float64
	ShortMscale, LongMscale       *float64
	PartialRotaryFactor           *float64
	RopeTheta                     *float64

	ShortFactor, LongFactor []float64 // a single number reads as one entry
	MropeSection            []int

	raw json.RawMessage
}

// MarshalJSON writes the object as the config gave it.
func (r *RopeScaling) MarshalJSON() ([]byte, error) { return r.raw, nil }

// Kind is the variant initialize_rope picks: "type", else "rope_type",
// else "default".
func (r *RopeScaling) Kind() string {
	if r.Type != "" {
		return r.Type
	}
	if r.RopeType != "" {
		return r.RopeType
	}
	return "default"
}

// ParseRopeScaling reads a rope_scaling object. An empty object reads as
// none (nil), as it does in mlx-lm, where {} is falsy or means "default".
func ParseRopeScaling(raw json.RawMessage) (*RopeScaling, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil || keys == nil {
		return nil, fmt.Errorf("want an object, got %s", clip(raw))
	}
	if len(keys) == 0 {
		return nil, nil
	}
	r := &RopeScaling{raw: append(json.RawMessage(nil), raw...)}
	var errs []string
	str := func(key string, dst *string) {
		if v, ok := keys[key]; ok && string(v) != "null" {
			if err := json.Unmarshal(v, dst); err != nil {
				errs = append(errs, fmt.Sprintf("%s: want a string, got %s", key, clip(v)))
			}
		}
	}
	num := func(key string, dst **float64) {
		if v, ok := keys[key]; ok && string(v) != "null" {
			var f float64
			if err := json.Unmarshal(v, &f); err != nil {
				errs = append(errs, fmt.Sprintf("%s: want a number, got %s", key, clip(v)))
				return
			}
			*dst = &f
		}
	}
	nums := func(key string, dst *[]float64) {
		if v, ok := keys[key]; ok && string(v) != "null" {
			var f float64
			if json.Unmarshal(v, &f) == nil {
				*dst = []float64{f}
				return
			}
			if err := json.Unmarshal(v, dst); err != nil {
				errs = append(errs, fmt.Sprintf("%s: want a number or a list of numbers, got %s", key, clip(v)))
			}
		}
	}
	str("type", &r.Type)
	str("rope_type", &r.RopeType)
	num("factor", &r.Factor)
	num("low_freq_factor", &r.LowFreqFactor)
	num("high_freq_factor", &r.HighFreqFactor)
	num("original_max_position_embeddings", &r.OriginalMaxPositionEmbeddings)
	num("beta_fast", &r.BetaFast)
	num("beta_slow", &r.BetaSlow)
	num("mscale", &r.Mscale)
	num("mscale_all_dim", &r.MscaleAllDim)
	num("short_mscale", &r.ShortMscale)
	num("long_mscale", &r.LongMscale)
	num("partial_rotary_factor", &r.PartialRotaryFactor)
	num("rope_theta", &r.RopeTheta)
	nums("short_factor", &r.ShortFactor)
	nums("long_factor", &r.LongFactor)
	if v, ok := keys["mrope_section"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &r.MropeSection); err != nil {
			errs = append(errs, fmt.Sprintf("mrope_section: want a list of integers, got %s", clip(v)))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return r, nil
}

// clip shortens a raw JSON value for a message.
func clip(v json.RawMessage) string {
	s := string(v)
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}

// initializeKinds are the rope types initialize_rope accepts.
var initializeKinds = []string{"default", "linear", "dynamic", "llama3", "yarn", "deepseek_yarn",
	"telechat3-yarn", "longrope", "proportional", "mrope"}

// CheckRopeScaling validates rope_scaling for kind the way the
// architecture's mlx-lm code would accept or reject it, and returns the
// scaling the model uses: phi3 turns unsupported types off (nil), plain
// ropes ignore it. maxPositions is max_position_embeddings (0 when the
// config has none).
func CheckRopeScaling(kind RopeKind, r *RopeScaling, maxPositions int) (*RopeScaling, error) {
	if r == nil {
		return nil, nil
	}
	need := func(what string, ok bool) error {
		if !ok {
			return fmt.Errorf("type %q needs %s", r.Kind(), what)
		}
		return nil
	}
	switch kind {
	case RopePlain:
		return nil, nil
	case RopeSu:
		if r.Type == "" || r.LongFactor == nil {
			return nil, fmt.Errorf("must contain the keys long_factor and type")
		}
		switch r.Type {
		case "su", "longrope":
			return r, need("short_factor", r.ShortFactor != nil)
		case "linear":
			return r, need("factor", r.Factor != nil)
		}
		return nil, nil
	case RopeSuMscale:
		return r, r.needKeys("short_factor", "long_factor", "short_mscale", "long_mscale")
	}
	k := r.Kind()
	if !slices.Contains(initializeKinds, k) {
		return nil, fmt.Errorf("unsupported type %q (want one of %s)", k, strings.Join(initializeKinds, ", "))
	}
	var err error
	switch k {
	case "linear", "llama3", "yarn", "deepseek_yarn", "telechat3-yarn":
		err = need("factor", r.Factor != nil)
	case "dynamic":
		if err = need("factor", r.Factor != nil); err == nil {
			err = need("max_position_embeddings in the config", maxPositions > 0)
		}
	case "longrope":
		switch {
		case r.OriginalMaxPositionEmbeddings == nil:
			err = need("original_max_position_embeddings", false)
		case r.ShortFactor == nil || r.LongFactor == nil:
			err = need("short_factor and long_factor", false)
		default:
			err = need("max_position_embeddings in the config", maxPositions > 0)
		}
	case "mrope":
		if len(r.MropeSection) != 3 {
			err = fmt.Errorf("type \"mrope\" needs an mrope_section of 3 entries, got %d", len(r.MropeSection))
		}
	}
	return r, err
}

// RopeSpec is everything NewRope needs: the architecture's kind and the
// config's values.
type RopeSpec struct {
	Kind        RopeKind
	Dims        int // features rotated, from the start of the last axis
	Base        float64
	Traditional bool // rotate interleaved pairs instead of halves
	Scaling     *RopeScaling
	// MaxPositions is max_position_embeddings, 0 when the config has none.
	MaxPositions int
	// OriginalMaxPositions is phi3's top-level original_max_position_embeddings.
	OriginalMaxPositions int
	// Negate turns a plain rope the other way: its frequencies negated,
	// -exp(j * ln(base) / (dims/2)) for pair j, each product in float32.
	Negate bool
	// Unscaled are the rope types an architecture reads as an unscaled
	// rope: a Scaling of one of them is not applied.
	Unscaled []string
}

// NewRope builds the rope spec asks for, computing any frequency table on
// stream s (nil: the default stream). The caller frees it with FreeRope.
func NewRope(spec RopeSpec, s *mlx.Stream) (Rope, error) {
	if spec.Dims <= 0 || spec.Dims%2 != 0 {
		return nil, fmt.Errorf("rope: %d dimensions; want a positive even number", spec.Dims)
	}
	r := spec.Scaling
	if r != nil && slices.Contains(spec.Unscaled, r.Kind()) {
		r = nil
	}
	plain := &plainRope{mlx.RoPE{Dims: spec.Dims, Traditional: spec.Traditional, Base: float32(spec.Base), Scale: 1}}
	if spec.Negate && spec.Kind != RopePlain {
		return nil, fmt.Errorf("rope: only a plain rope turns the other way")
	}
	if !spec.Negate && (spec.Kind == RopePlain || r == nil) {
		return plain, nil
	}
	g := mlx.NewGraph(s)
	defer g.Close()
	var fr *freqRope
	k := "" // a negated plain rope has no scaling
	if r != nil {
		k = r.Kind()
	}
	switch {
	case spec.Negate:
		fr = negatedRope(g, spec)
	case spec.Kind == RopeSu && r.Type == "linear", spec.Kind == RopeScaled && k == "linear":
		plain.r.Scale = float32(1 / *r.Factor)
		return plain, nil
	case spec.Kind == RopeSuMscale:
		fr = suMscaleRope(g, spec, r)
	case spec.Kind == RopeSu:
		fr = suRope(g, spec.Dims, spec.Base, spec.MaxPositions, spec.OriginalMaxPositions, r.LongFactor)
	case k == "default", k == "mrope":
		return plain, nil
	case k == "dynamic":
		return &dynamicRope{dims: spec.Dims, maxPositions: spec.MaxPositions, traditional: spec.Traditional,
			base: spec.Base, factor: *r.Factor}, nil
	case k == "llama3":
		fr = llama3Rope(g, spec.Dims, spec.Base, spec.Traditional, r)
	case k == "yarn", k == "deepseek_yarn", k == "telechat3-yarn":
		fr = yarnRope(g, spec.Dims, spec.Base, spec.Traditional, r)
	case k == "longrope":
		fr = suRope(g, spec.Dims, spec.Base, spec.MaxPositions, int(*r.OriginalMaxPositionEmbeddings), r.LongFactor)
	case k == "proportional":
		if or(r.PartialRotaryFactor, 1) > 1 {
			return nil, fmt.Errorf("rope_scaling: partial_rotary_factor %v rotates more than the %d dimensions", *r.PartialRotaryFactor, spec.Dims)
		}
		fr = proportionalRope(g, spec.Dims, spec.Base, spec.Traditional, r)
	default:
		return nil, fmt.Errorf("rope_scaling: unsupported type %q", k)
	}
	if fr == nil {
		return nil, fmt.Errorf("rope_scaling: long_factor has %d entries; want 1 or %d (half the rotated dimensions)", len(r.LongFactor), spec.Dims/2)
	}
	if err := g.Eval(fr.r.Freqs); err != nil {
		return nil, fmt.Errorf("rope frequencies: %w", err)
	}
	g.Keep(fr.r.Freqs)
	return fr, nil
}

// negatedRope is a plain rope turning the other way: a table of negated
// frequencies, -exp(j * ln(base) / (dims/2)), made as mlx's float32
// products.
func negatedRope(g *mlx.Graph, spec RopeSpec) *freqRope {
	half := spec.Dims / 2
	step := g.MultiplyScalar(g.Arange(0, float64(half), 1, mlx.Float32), math.Log(spec.Base)/float64(half))
	return &freqRope{r: mlx.RoPE{Dims: spec.Dims, Traditional: spec.Traditional, Scale: 1, Freqs: g.Negative(g.Exp(step))}, mscale: 1}
}

// FreeRope releases the arrays r holds, if any.
func FreeRope(r Rope) {
	if fr, ok := r.(*freqRope); ok {
		fr.r.Freqs.Free()
	}
}

// RotateQK is r applied to a layer's queries and keys, q and k [B, heads, L,
// head_dim] at the same positions: one op for both where r's kind has
// it (the rope of a base, and the scaled ropes of a frequency table), two
// Applies otherwise. The values are those of the two Applies.
func RotateQK(g *mlx.Graph, r Rope, q, k *mlx.Array, offset int) (*mlx.Array, *mlx.Array) {
	if b, ok := r.(bothRope); ok {
		return b.both(g, q, k, offset)
	}
	return r.Apply(g, q, offset), r.Apply(g, k, offset)
}

// bothRope is a rope that rotates queries and keys in one op.
type bothRope interface {
	both(g *mlx.Graph, q, k *mlx.Array, offset int) (*mlx.Array, *mlx.Array)
}

// ropes is RoPEs of q and k, at the rows' own offsets in a batch.
func ropes(g *mlx.Graph, r *mlx.RoPE, q, k *mlx.Array, offset int) (*mlx.Array, *mlx.Array) {
	var ys []*mlx.Array
	if at := rowOffsets(g, q, offset); at != nil {
		ys = g.RoPEsAt([]*mlx.Array{q, k}, r, at)
	} else {
		ys = g.RoPEs([]*mlx.Array{q, k}, r, offset)
	}
	return ys[0], ys[1]
}

// NoRope leaves x as it is: the rope of a layer without positions (NoPE).
type NoRope struct{}

func (NoRope) Apply(g *mlx.Graph, x *mlx.Array, offset int) *mlx.Array { return x }

// RopeOrNone is r where use holds and NoRope elsewhere: how a per-layer
// table of NoPE layers is built at load.
func RopeOrNone(use bool, r Rope) Rope {
	if use {
		return r
	}
	return NoRope{}
}

// plainRope is mlx's nn.RoPE: fast.rope from a base and a position scale.
type plainRope struct{ r mlx.RoPE }

func (p *plainRope) Apply(g *mlx.Graph, x *mlx.Array, offset int) *mlx.Array {
	if at := rowOffsets(g, x, offset); at != nil {
		return g.RoPEAt(x, &p.r, at)
	}
	return g.RoPE(x, &p.r, offset)
}

func (p *plainRope) both(g *mlx.Graph, q, k *mlx.Array, offset int) (*mlx.Array, *mlx.Array) {
	return ropes(g, &p.r, q, k, offset)
}

// rowOffsets is the per-row offsets [B] of a batch that g steps (see
// kv.RowOffsets), when they are not all offset; nil otherwise.
func rowOffsets(g *mlx.Graph, x *mlx.Array, offset int) *mlx.Array {
	rows := kv.RowOffsets(g)
	if rows == nil {
		return nil
	}
	if x.Ndim() != 4 || x.Dim(0) != len(rows) {
		g.Failf("nn: rope of %s in a step of a batch of %d rows", x, len(rows))
		return nil
	}
	same := true
	at := make([]int32, len(rows))
	for i, r := range rows {
		at[i] = int32(r)
		same = same && r == offset
	}
	if same {
		return nil
	}
	return mlx.FromSlice(g, at, len(at))
}

// freqRope is fast.rope from a frequency table, after multiplying the
// rotated features by mscale (yarn's and SuScaledRoPE's input scale).
type freqRope struct {
	r      mlx.RoPE
	mscale float64
}

func (f *freqRope) Apply(g *mlx.Graph, x *mlx.Array, offset int) *mlx.Array {
	if f.mscale != 1 {
		x = scaleLeading(g, x, f.r.Dims, f.mscale)
	}
	if at := rowOffsets(g, x, offset); at != nil {
		return g.RoPEAt(x, &f.r, at)
	}
	return g.RoPE(x, &f.r, offset)
}

func (f *freqRope) both(g *mlx.Graph, q, k *mlx.Array, offset int) (*mlx.Array, *mlx.Array) {
	if f.mscale != 1 {
		q, k = scaleLeading(g, q, f.r.Dims, f.mscale), scaleLeading(g, k, f.r.Dims, f.mscale)
	}
	return ropes(g, &f.r, q, k, offset)
}

// scaleLeading multiplies the first dims features of x's last axis by s
// (mlx's x.at[..., :dims].multiply(s)).
func scaleLeading(g *mlx.Graph, x *mlx.Array, dims int, s float64) *mlx.Array {
	shape := x.Shape()
	if len(shape) == 0 || shape[len(shape)-1] == dims {
		return g.MultiplyScalar(x, s)
	}
	start := make([]int, len(shape))
	stop := slices.Clone(shape)
	stop[len(stop)-1] = dims
	head := g.MultiplyScalar(g.Slice(x, start, stop), s)
	return g.SliceUpdate(x, head, start, stop)
}

// dynamicRope is NTK-aware scaling: the base grows with the sequence once
// it passes max_position_embeddings (DynamicNTKScalingRoPE).
type dynamicRope struct {
	dims, maxPositions int
	traditional        bool
	base, factor       float64
}

func (d *dynamicRope) Apply(g *mlx.Graph, x *mlx.Array, offset int) *mlx.Array {
	if rows := kv.RowOffsets(g); rows != nil && rowOffsets(g, x, offset) != nil {
		// Each row's base depends on its own length: one row at a time.
		parts := make([]*mlx.Array, len(rows))
		for i, r := range rows {
			sh := x.Shape()
			start, stop := make([]int, len(sh)), slices.Clone(sh)
			start[0], stop[0] = i, i+1
			parts[i] = d.apply(g, g.Slice(x, start, stop), r)
		}
		return g.Concatenate(0, parts...)
	}
	return d.apply(g, x, offset)
}

func (d *dynamicRope) apply(g *mlx.Graph, x *mlx.Array, offset int) *mlx.Array {
	seq := max(x.Dim(-2)+offset, d.maxPositions)
	base := d.base * math.Pow(d.factor*float64(seq)/float64(d.maxPositions)-(d.factor-1),
		float64(d.dims)/float64(d.dims-2))
	return g.RoPE(x, &mlx.RoPE{Dims: d.dims, Traditional: d.traditional, Base: float32(base), Scale: 1}, offset)
}

// inverseFrequencies is base ** (arange(0, dims, 2) / dims) in float32,
// the table every frequency rope starts from (as wavelengths over 2 pi).
func inverseFrequencies(g *mlx.Graph, rotated, dims int, base float64) *mlx.Array {
	e := g.DivideScalar(g.Arange(0, float64(rotated), 2, mlx.Float32), float64(dims))
	return g.ScalarBinary(mlx.OpPower, base, e)
}

func or(p *float64, def float64) float64 {
	if p == nil {
		return def
	}
	return *p
}

// llama3Rope is Llama3RoPE: low frequencies divided by factor, high ones
// kept, and a smooth blend between.
func llama3Rope(g *mlx.Graph, dims int, base float64, traditional bool, r *RopeScaling) *freqRope {
	factor := *r.Factor
	low := or(r.LowFreqFactor, 1)
	high := or(r.HighFreqFactor, 4)
	oldLen := or(r.OriginalMaxPositionEmbeddings, 8192)
	lowWavelen := oldLen / low
	highWavelen := oldLen / high

	freqs := g.DivideScalar(g.Arange(0, float64(dims), 2, mlx.Int32), float64(dims))
	freqs = g.ScalarBinary(mlx.OpPower, base, freqs)
	wavelens := g.ScalarBinary(mlx.OpMultiply, 2*math.Pi, freqs)
	freqs = g.Where(g.BinaryScalar(mlx.OpGreater, wavelens, lowWavelen), g.MultiplyScalar(freqs, factor), freqs)
	medium := g.LogicalAnd(g.BinaryScalar(mlx.OpGreater, wavelens, highWavelen), g.BinaryScalar(mlx.OpLess, wavelens, lowWavelen))
	smooth := g.DivideScalar(g.SubtractScalar(g.ScalarBinary(mlx.OpDivide, oldLen, wavelens), low), high-low)
	smoothFreqs := g.Divide(freqs, g.Add(g.DivideScalar(g.ScalarBinary(mlx.OpSubtract, 1, smooth), factor), smooth))
	return &freqRope{r: mlx.RoPE{Dims: dims, Traditional: traditional, Scale: 1, Freqs: g.Where(medium, smoothFreqs, freqs)}, mscale: 1}
}

// yarnRope is YarnRoPE: frequencies blended between interpolation and
// extrapolation over a ramp, and an mscale on the rotated features.
func yarnRope(g *mlx.Graph, dims int, base float64, traditional bool, r *RopeScaling) *freqRope {
	factor := *r.Factor
	orig := or(r.OriginalMaxPositionEmbeddings, 4096)
	betaFast := or(r.BetaFast, 32)
	betaSlow := or(r.BetaSlow, 1)
	correction := func(rotations float64) float64 {
		return float64(dims) * math.Log(orig/(rotations*2*math.Pi)) / (2 * math.Log(base))
	}
	low := max(math.Floor(correction(betaFast)), 0)
	high := min(math.Ceil(correction(betaSlow)), float64(dims-1))
	mscale := func(m float64) float64 {
		if factor <= 1 {
			return 1
		}
		return 0.1*m*math.Log(factor) + 1
	}
	if low == high {
		high += 0.001
	}
	freqExtra := inverseFrequencies(g, dims, dims, base)
	freqInter := g.ScalarBinary(mlx.OpMultiply, factor, freqExtra)
	ramp := g.Clip(g.DivideScalar(g.SubtractScalar(g.Arange(0, float64(dims/2), 1, mlx.Float32), low), high-low), 0, 1)
	mask := g.ScalarBinary(mlx.OpSubtract, 1, ramp)
	freqs := g.Divide(g.Multiply(freqInter, freqExtra),
		g.Add(g.Multiply(freqInter, mask), g.Multiply(freqExtra, g.ScalarBinary(mlx.OpSubtract, 1, mask))))
	return &freqRope{r: mlx.RoPE{Dims: dims, Traditional: traditional, Scale: 1, Freqs: freqs},
		mscale: mscale(or(r.Mscale, 1)) / mscale(or(r.MscaleAllDim, 0))}
}

// suRope is SuScaledRoPE: frequencies times long_factor and the rotated
// features scaled by sqrt(1 + ln(f) / ln(original)), f = max / original.
// It is nil when long_factor fits neither one entry nor dims/2.
func suRope(g *mlx.Graph, dims int, base float64, maxPositions, orig int, longFactor []float64) *freqRope {
	if len(longFactor) != 1 && len(longFactor) != dims/2 {
		return nil
	}
	lf := make([]float32, len(longFactor))
	for i, v := range longFactor {
		lf[i] = float32(v)
	}
	freqs := g.Multiply(mlx.FromSlice(g, lf, len(lf)), inverseFrequencies(g, dims, dims, base))
	scale := 1.0
	if f := float64(maxPositions) / float64(orig); f > 1 {
		scale = math.Sqrt(1 + math.Log(f)/math.Log(float64(orig)))
	}
	return &freqRope{r: mlx.RoPE{Dims: dims, Scale: 1, Freqs: freqs}, mscale: scale}
}

// proportionalRope rotates the first partial_rotary_factor of dims with
// base frequencies times factor and leaves the rest still (infinite
// wavelength).
func proportionalRope(g *mlx.Graph, dims int, base float64, traditional bool, r *RopeScaling) *freqRope {
	rotated := int(float64(dims) * or(r.PartialRotaryFactor, 1))
	freqs := g.ScalarBinary(mlx.OpMultiply, or(r.Factor, 1), inverseFrequencies(g, rotated, dims, base))
	if rest := (dims - rotated) / 2; rest > 0 {
		freqs = g.Concatenate(0, freqs, g.Full([]int{rest}, math.Inf(1), mlx.Float32))
	}
	return &freqRope{r: mlx.RoPE{Dims: dims, Traditional: traditional, Scale: 1, Freqs: freqs}, mscale: 1}
}

// RopeIf is a where cond holds and b elsewhere: how a layer picks the rope
// of its attention kind (the sliding layers' own, say) at load.
func RopeIf(cond bool, a, b Rope) Rope {
	if cond {
		return a
	}
	return b
}
