package gen

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/dave/jennifer/jen"
)

// The token-mixer slot. A layer mixes tokens with attention unless a kind
// registered here claims it: structure.mixers.<kind> is a section of that
// kind's options, and its `layers` option (a per-layer bool) says which
// layers it mixes; attention (structure.attention) takes the others. The
// choice is made at load, once per layer, as the MoE's sparse layers are:
// build stores the chosen module's forward in the layer, so every forward
// pass stays straight-line. Each kind lives in its own mixer_<kind>.go and
// brings a generated type of its own, with its fields, its load lines and
// its forward method.

// mixerKind is a registered kind of token mixer.
type mixerKind struct {
	name string
	// options are what its section may set, in order; `layers` is every
	// kind's and is not listed.
	options []mixerOption
	// resolve makes the mixer from its compiled options.
	resolve func(o *mixerOptions, a *Arch) (mixer, error)
}

// mixerOption is one key of a kind's section: an expression of type typ,
// or, when words is set, one of those words, or, when name is set, a
// checkpoint module name (the mixer's own, under the layer).
type mixerOption struct {
	key   string
	typ   Type
	words []string
	name  bool
	// perLayer: an expression of typ (a bool where typ is unset) that
	// may read i, decided for each layer at load (as layers is).
	perLayer bool
	def      string // the default's text; "" when the key is required
	// like names an earlier option whose value is this one's default.
	like string
}

// mixerKinds are the registered kinds, by name (mixer_*.go register theirs
// in init).
var mixerKinds = map[string]*mixerKind{}

func registerMixer(k *mixerKind) { mixerKinds[k.name] = k }

// mixerKindNames are the registered kinds' names, sorted.
func mixerKindNames() []string {
	var names []string
	for n := range mixerKinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// mixerOptions are a section's options, compiled.
type mixerOptions struct {
	path   string // structure.mixers.<kind>
	pos    Pos
	layers *Value
	vals   map[string]*Value
	words  map[string]string
	at     map[string]Pos
}

// value is an expression option.
func (o *mixerOptions) value(key string) *Value { return o.vals[key] }

// word is a word option.
func (o *mixerOptions) word(key string) string { return o.words[key] }

// errAt is a problem with one of the section's options.
func (o *mixerOptions) errAt(key, format string, args ...any) error {
	pos := o.at[key]
	if pos.File == "" {
		pos = o.pos
	}
	return errAt(pos, o.path+"."+key, format, args...)
}

// mixer is a resolved token mixer of a registered kind: a component (its
// fields, hyperparameters and literal entries are those of its own
// generated type, its build lines go in the branch of the layers it mixes)
// with a forward method of its own.
type mixer interface {
	component
	// typeName is its generated type; field is the Layer's pointer to it.
	typeName() goType
	field() *field
	recv() string // its receiver in build and forward
	typeDoc() string
	// states is the number of state slots its cache keeps (kv.States).
	states() int
	// besideAttention: its layers attend too, beside it, their outputs
	// summed and their caches a list (the kind's first).
	besideAttention() bool
	emitForward(f *jen.File)
	shard(p *ShardPlan, a *Arch)
}

// Mixers is the slot, resolved: attention on the layers no kind claims,
// and each kind's mixer on the layers it claims.
type Mixers struct {
	Kinds  []mixer
	Layers []*Value // the layers each kind mixes, by Kinds' order
	// Blocks are each kind's own block kind ("": the architecture's).
	Blocks []BlockKind
	attn   *Attention
	arch   *Arch

	mix, attnLayer *field
	// feedForward, in a single block, are the layers whose sublayer is the
	// MLP (nil: none); mlp is that MLP (block_single.go).
	feedForward *Value
	mlp         *MLP
}

// resolveMixers resolves structure.mixers: every section names a
// registered kind and sets only its options.
func (b *builder) resolveMixers(sc *scope) error {
	s := &b.d.Structure.Mixers
	if len(s.Entries) == 0 {
		if b.a.MLP.shifted() {
			return b.shiftedMLPErr("no token mixer keeps a state cache")
		}
		return nil
	}
	a := b.a
	m := &Mixers{arch: a, attn: a.Attn,
		mix:       newField("mix", mixFuncType, "the layer's token mixer, chosen at load"),
		attnLayer: newField("attnLayer", intType, "the first attention layer, whose cache makes the mask (-1: none)"),
	}
	for _, e := range s.Entries {
		path := "structure.mixers." + e.Key
		k, ok := mixerKinds[e.Key]
		if !ok {
			return errAt(e.Pos, path, "unknown mixer kind (want one of %s)", strings.Join(mixerKindNames(), ", "))
		}
		o, err := b.mixerOptions(k, e.Val, path, e.Pos, sc)
		if err != nil {
			return err
		}
		x, err := k.resolve(o, a)
		if err != nil {
			return err
		}
		m.Kinds = append(m.Kinds, x)
		m.Layers = append(m.Layers, o.layers)
		var blk BlockKind
		if w := o.word("block"); w != "same" {
			blk = BlockKind(w)
		}
		m.Blocks = append(m.Blocks, blk)
	}
	if sl := a.Attn.Sliding; sl != nil {
		if m.residual() {
			return errAt(b.d.Structure.Attention.Sliding.Pos, "structure.attention.sliding", "sliding-window layers beside a mixer kind that attends too (with_attention) are not supported")
		}
		sl.beside = true
	}
	if a.MLP.shifted() {
		ff, ok := m.Kinds[0].(feedForwardSlots)
		if len(m.Kinds) != 1 || !m.Layers[0].IsTrue() || !ok {
			return b.shiftedMLPErr("every layer must be mixed by one kind that keeps a slot for it (wkv7, layers: \"true\")")
		}
		a.MLP.slots, _ = ff.feedForwardSlots()
	}
	if m.residual() {
		m.mix.typ = mixResidualFuncType
		m.mix.doc = "the layer's token mixers, chosen at load, their outputs added to the residual stream"
	}
	a.Mixers = m
	return nil
}

// feedForwardSlots is a mixer kind whose layer cache keeps a shifted
// feed-forward block's previous token in its last slot: the slot count,
// and whether the MLP kind took it.
type feedForwardSlots interface {
	feedForwardSlots() (int, bool)
}

// shiftedMLPErr refuses a token-shifted MLP whose layers keep no slot for
// its previous token.
func (b *builder) shiftedMLPErr(why string) error {
	k := b.d.Structure.MLP.Kind
	return errAt(k.Pos, "structure.mlp.kind", "a %s MLP keeps the previous token in its layer's state cache: %s", k.V, why)
}

// mixerOptions compiles a section against its kind's options: layers (a
// per-layer bool, required), then each option, its default where unset.
func (b *builder) mixerOptions(k *mixerKind, sec OMap[F[Expr]], path string, pos Pos, sc *scope) (*mixerOptions, error) {
	o := &mixerOptions{path: path, pos: pos, vals: map[string]*Value{}, words: map[string]string{}, at: map[string]Pos{}}
	known := []string{"layers", "block"}
	for _, opt := range k.options {
		known = append(known, opt.key)
	}
	set := map[string]F[Expr]{}
	for _, e := range sec.Entries {
		if !slices.Contains(known, e.Key) {
			sorted := slices.Clone(known)
			sort.Strings(sorted)
			return nil, errAt(e.Pos, path+"."+e.Key, "unknown key of a %s mixer (want one of %s)", k.name, strings.Join(sorted, ", "))
		}
		set[e.Key] = e.Val
		o.at[e.Key] = e.Val.Pos
	}
	l := b.leaves(sc)
	lf, ok := set["layers"]
	if !ok || !lf.IsSet() {
		return nil, errAt(pos, path+".layers", "missing: which layers the %s mixer mixes (a per-layer bool; attention takes the others)", k.name)
	}
	o.layers = l.perLayer(lf, path+".layers")
	o.words["block"] = "same"
	if bf, ok := set["block"]; ok && bf.IsSet() {
		w := strings.TrimSpace(bf.V.Text)
		if !slices.Contains(variantWords, w) {
			return nil, errAt(bf.Pos, path+".block", "unknown %q (want one of %s)", w, strings.Join(variantWords, ", "))
		}
		o.words["block"] = w
	}
	for _, opt := range k.options {
		f, ok := set[opt.key]
		if (!ok || !f.IsSet()) && opt.like != "" {
			o.vals[opt.key] = o.vals[opt.like]
			continue
		}
		if !ok || !f.IsSet() {
			if opt.def == "" {
				return nil, errAt(pos, path+"."+opt.key, "missing (a %s mixer needs it)", k.name)
			}
			// a default reads as written at the section: errors point there
			f = F[Expr]{V: Expr{Text: opt.def, Pos: pos}, Set: true, Pos: pos, Origin: FromDefault}
		}
		if opt.name {
			w := strings.TrimSpace(f.V.Text)
			if !moduleName.MatchString(w) {
				return nil, errAt(f.Pos, path+"."+opt.key, "%q is not a module name (dotted lower-case words)", w)
			}
			o.words[opt.key] = w
			continue
		}
		if opt.words != nil {
			w := strings.TrimSpace(f.V.Text)
			if !slices.Contains(opt.words, w) {
				return nil, errAt(f.Pos, path+"."+opt.key, "unknown %q (want one of %s)", w, strings.Join(opt.words, ", "))
			}
			o.words[opt.key] = w
			continue
		}
		if opt.perLayer {
			t := opt.typ
			if t == "" {
				t = TBool
			}
			o.vals[opt.key] = l.mustLayer(f, path+"."+opt.key, t)
			continue
		}
		o.vals[opt.key] = l.must(f, path+"."+opt.key, opt.typ)
	}
	return o, l.err
}

// moduleName is a checkpoint module's name: words of lower-case letters,
// digits and underscores, joined by dots.
var moduleName = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$`)

// tensorPath is a checkpoint module's path, which may pass through a
// layer's index (layers.0.pre_norm).
var tensorPath = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_]+)*$`)

// residual: some kind attends beside itself, so the layers' mixers add
// their outputs to the residual stream themselves, in mlx-lm's order
// ((x + first) + second); attention alone then adds its own too.
func (m *Mixers) residual() bool {
	for _, x := range m.Kinds {
		if x.besideAttention() {
			return true
		}
	}
	return false
}

// mixResidualFuncType is the mix field's type where the mixers add to the
// residual stream: (g, x, x normed, mask, c) -> the new stream.
func mixResidualFuncType() *jen.Statement {
	return jen.Func().Params(jen.Op("*").Qual(mlxPkg, "Graph"), jen.Op("*").Qual(mlxPkg, "Array"), jen.Op("*").Qual(mlxPkg, "Array"), jen.Qual(mlxPkg, "AttentionMask"), jen.Qual(kvPkg, "Cache")).Op("*").Qual(mlxPkg, "Array")
}

// forwardResidual spells the layer's mixing of normed, added to x.
func (m *Mixers) forwardResidual(x, normed jen.Code) *jen.Statement {
	return m.mix.of(rLayer).Call(g(), x, normed, jen.Id("mask"), jen.Id("c"))
}

// mixFuncType is the type of a layer's mix field: a mixer's forward.
func mixFuncType() *jen.Statement {
	return jen.Func().Params(jen.Op("*").Qual(mlxPkg, "Graph"), jen.Op("*").Qual(mlxPkg, "Array"), jen.Qual(mlxPkg, "AttentionMask"), jen.Qual(kvPkg, "Cache")).Op("*").Qual(mlxPkg, "Array")
}

// The slot is the component that stands for attention in a's list: it
// answers for attention's type and each kind's, and puts their build
// lines in the branches of the layers each mixes.

func (m *Mixers) fields(t goType) []jen.Code {
	out := m.attn.fields(t)
	if t == tLayer {
		for _, x := range m.Kinds {
			out = append(out, x.field().decl())
		}
		out = append(out, m.mix.decl())
	}
	for _, x := range m.Kinds {
		out = append(out, x.fields(t)...)
	}
	return out
}

func (m *Mixers) params(t goType) []jen.Code {
	out := m.attn.params(t)
	if t == tModel && m.attn.Sliding == nil {
		out = append(out, m.attnLayer.decl())
	}
	for _, x := range m.Kinds {
		out = append(out, x.params(t)...)
	}
	return out
}

func (m *Mixers) inits(t goType) []kvPair {
	out := m.attn.inits(t)
	if t == tModel && m.attn.Sliding == nil {
		out = append(out, kvPair{m.attnLayer.key(), jen.Lit(-1)})
	}
	for _, x := range m.Kinds {
		out = append(out, x.inits(t)...)
	}
	return out
}

// build, in the loop over layers, is the choice:
//
//	if <the kind's layers> {
//		l.LinearAttn = &GatedDelta{...}
//		d := l.LinearAttn
//		d.InProj = lw.Linear(...) // its modules
//		l.mix = d.forward
//		m.caches[i].States = 2
//	} else {
//		l.SelfAttn = &Attention{...}
//		a := l.SelfAttn
//		... // attention's modules
//		l.mix = a.forward
//		m.attnLayer = nn.FirstLayer(m.attnLayer, i)
//	}
func (m *Mixers) build(s stage) []jen.Code {
	if s != sLayer {
		out := m.attn.build(s)
		for _, x := range m.Kinds {
			out = append(out, x.build(s)...)
		}
		return out
	}
	a := m.arch
	// attention's module and its loads, then (in attention's own layers)
	// its norms and the layer's mixing
	attnBuild := []jen.Code{
		m.attn.Field.of(rLayer).Op("=").Op("&").Id("Attention").Values(fieldsOf(a.initsOf(tAttention))...),
		jen.Id(rAttn).Op(":=").Add(m.attn.Field.of(rLayer)),
	}
	attnBuild = append(attnBuild, m.attn.build(sLayer)...)
	var firstAttn jen.Code = m.attnLayer.of(rModel).Op("=").Qual(nnPkg, "FirstLayer").Call(m.attnLayer.of(rModel), jen.Id("i"))
	if sl := m.attn.Sliding; sl != nil {
		// the mask layers of each kind, and the sliding ones' windows
		firstAttn = sl.attentionLayer()
	}
	var attnMix jen.Code = jen.Id(rAttn).Dot("forward")
	if m.residual() {
		attnMix = jen.Qual(nnPkg, "Residual").Call(attnMix)
	}
	attn := append(slices.Clone(attnBuild), a.Block.branch(nil)...)
	attn = append(attn, m.mix.of(rLayer).Op("=").Add(attnMix), firstAttn)
	var chain *jen.Statement
	if m.mlp != nil && m.feedForward != nil {
		// A single block's feed-forward layer: the MLP is its sublayer,
		// and it keeps no cache.
		ff := []jen.Code{
			m.mlp.Field.of(rLayer).Op("=").Op("&").Id("MLP").Values(),
			jen.Id(rMLP).Op(":=").Add(m.mlp.Field.of(rLayer)),
		}
		ff = append(ff, m.mlp.layerBuild()...)
		ff = append(ff,
			m.mix.of(rLayer).Op("=").Qual(nnPkg, "FeedForward").Call(jen.Id(rMLP).Dot("forward")),
			fCaches.of(rModel).Index(jen.Id("i")).Dot("None").Op("=").True(),
		)
		chain = jen.If(m.feedForward.Code()).Block(ff...)
	}
	for i, x := range m.Kinds {
		body := []jen.Code{
			x.field().of(rLayer).Op("=").Op("&").Id(string(x.typeName())).Values(fieldsOf(a.initsOf(x.typeName()))...),
			jen.Id(x.recv()).Op(":=").Add(x.field().of(rLayer)),
		}
		body = append(body, x.build(sLayer)...)
		body = append(body, a.Block.branch(x)...)
		if x.besideAttention() && !m.attn.Absent {
			// the layer attends too: both outputs summed, and its cache a
			// list of the kind's state and attention's keys and values
			body = append(body, attnBuild...)
			body = append(body,
				m.mix.of(rLayer).Op("=").Qual(nnPkg, "Beside").Call(jen.Id(x.recv()).Dot("forward"), jen.Id(rAttn).Dot("forward")),
				firstAttn,
				fCaches.of(rModel).Index(jen.Id("i")).Dot("Parts").Op("=").Index().Qual(nnPkg, "CacheSpec").Values(
					jen.Values(jen.Id("States").Op(":").Lit(x.states())), jen.Values()),
			)
		} else {
			var mix jen.Code = jen.Id(x.recv()).Dot("forward")
			if m.residual() {
				mix = jen.Qual(nnPkg, "Residual").Call(mix)
			}
			body = append(body, m.mix.of(rLayer).Op("=").Add(mix))
			if attending(x) {
				body = append(body, firstAttn)
			}
			if n := x.states(); n > 0 {
				body = append(body, fCaches.of(rModel).Index(jen.Id("i")).Dot("States").Op("=").Lit(n))
			}
		}
		if chain == nil && len(m.Kinds) == 1 && m.Layers[i].IsTrue() {
			return body // the one kind mixes every layer: no choice to make
		}
		if chain == nil {
			chain = jen.If(m.Layers[i].Code()).Block(body...)
		} else {
			chain = chain.Else().If(m.Layers[i].Code()).Block(body...)
		}
	}
	if !m.attn.Absent {
		chain = chain.Else().Block(attn...)
	}
	out := []jen.Code{}
	if len(m.Kinds) > 1 {
		// Two kinds claiming one layer is the config's mistake, not a
		// choice between them.
		var claims []jen.Code
		var names []string
		for i, x := range m.Kinds {
			claims = append(claims, m.Layers[i].Code())
			names = append(names, string(x.typeName()))
		}
		out = append(out, jen.Id("w").Dot("Fail").Call(jen.Qual(nnPkg, "OneMixer").Call(jen.Id("i"), jen.Lit(strings.Join(names, ", ")), jen.Index().Bool().Values(claims...))))
	}
	return append(out, chain)
}

// attendingMixer is a kind whose layers attend in a way of their own
// (latent attention): they keep attention caches (its states are 0) and
// read the mask, which the first of them makes (as an array where
// wantsMaskArray).
type attendingMixer interface {
	attends() bool
	wantsMaskArray() bool
}

// attending reports whether x is an attending kind.
func attending(x mixer) bool {
	a, ok := x.(attendingMixer)
	return ok && a.attends()
}

// maskArray: some kind attends, and reads its mask as an array.
func (m *Mixers) maskArray() bool {
	if m == nil {
		return false
	}
	for _, x := range m.Kinds {
		if a, ok := x.(attendingMixer); ok && a.attends() && a.wantsMaskArray() {
			return true
		}
	}
	return false
}

// forward spells the layer's token mixing of x: through the mixer build
// chose.
func (m *Mixers) forward(x jen.Code) *jen.Statement {
	return m.mix.of(rLayer).Call(g(), x, jen.Id("mask"), jen.Id("c"))
}

// mask is the line of Model.Forward that makes the attention layers' mask,
// from the first attention layer's cache (none where no layer attends).
func (m *Mixers) mask(maskArray bool) jen.Code {
	return jen.Id("mask").Op(":=").Qual(nnPkg, "LayerMask").Call(g(), jen.Id("caches"), m.attnLayer.of(rModel), jen.Id("L"), jen.Lit(maskArray))
}

// shard: attention's plan, and each kind's.
func (m *Mixers) shard(p *ShardPlan, a *Arch) {
	m.attn.shard(p, a)
	for _, x := range m.Kinds {
		x.shard(p, a)
	}
}

// types are the generated types of the kinds, in order.
func (m *Mixers) types() []mixer {
	if m == nil {
		return nil
	}
	return m.Kinds
}

// layerMixer is what the block calls to mix a layer's tokens: attention
// itself, or the slot's choice.
type layerMixer interface {
	forward(x jen.Code) *jen.Statement
}

// mixerDoc is a kind's type doc.
func mixerDoc(x mixer, name string) string {
	return fmt.Sprintf("%s is a layer's %s (%s), with its hyperparameters.", x.typeName(), x.typeDoc(), name)
}
