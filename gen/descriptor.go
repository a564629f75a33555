package gen

// The descriptor language as written: every leaf an F (value, whether it
// was set, where), decoded strictly from descriptors/<model_type>.yaml. See
// descriptors/README.md for what each key means.

// Descriptor is one descriptors/<model_type>.yaml.
type Descriptor struct {
	ModelType F[string]   `yaml:"model_type"`
	Doc       F[string]   `yaml:"doc"`
	Tier      F[Tier]     `yaml:"tier"`
	Extends   F[string]   `yaml:"extends"`
	Include   F[[]string] `yaml:"include"`
	Aliases   F[[]string] `yaml:"aliases"`
	Fragment  F[string]   `yaml:"fragment"` // only in descriptors/fragments/
	Config    ConfigDesc  `yaml:"config"`
	Structure Structure   `yaml:"structure"`
	Weights   WeightsDesc `yaml:"weights"`
	GGUF      GGUFDesc    `yaml:"gguf"`
	Wrapper   WrapperDesc `yaml:"wrapper"`
	// Variants run a config on another descriptor when its condition
	// holds (variant.go); never inherited.
	Variants   List[VariantRule] `yaml:"variants"`
	TestConfig OMap[Raw]         `yaml:"test_config"`

	file string
}

// Tier says how far an architecture is proven.
type Tier string

func (Tier) values() []string { return []string{"smoke", "parity"} }

// ConfigDesc is what the architecture reads from config.json.
type ConfigDesc struct {
	Keys    OMap[KeySpec]     `yaml:"keys"`
	Derived OMap[DerivedSpec] `yaml:"derived"`
	Checks  OMap[CheckSpec]   `yaml:"checks"`
	Ignore  F[[]string]       `yaml:"ignore"`
}

// KeySpec is one config.json key: its type and exactly one of required,
// default (a literal), derive (an expression, used when the key is absent)
// and optional (absent reads as the zero value).
type KeySpec struct {
	Type     F[Type]    `yaml:"type"`
	Required F[bool]    `yaml:"required"`
	Default  F[Literal] `yaml:"default"`
	Derive   F[Expr]    `yaml:"derive"`
	Optional F[bool]    `yaml:"optional"`
	// Null is the value of a key the config holds as null, where that
	// differs from its default (mlx-lm's dataclass takes None over the
	// default: DeepSeek-V3's q_lora_rank).
	Null     F[Literal]  `yaml:"null"`
	Fallback F[[]string] `yaml:"fallback"`
	// Prefer are places (dotted paths into nested objects) read before the
	// key itself: the first present wins (rope_parameters.rope_theta over
	// rope_theta, as some mlx-lm modules read it).
	Prefer F[[]string] `yaml:"prefer"`
	// Auto: the string "auto" reads as absent, so that derive gives the
	// value (Hugging Face's time_step_rank: "auto").
	Auto   F[bool]    `yaml:"auto"`
	Min    F[float64] `yaml:"min"`
	Length F[Expr]    `yaml:"length"`
	Doc    F[string]  `yaml:"doc"`
}

// DerivedSpec is a value computed from the config, never read from it.
type DerivedSpec struct {
	Type F[Type]    `yaml:"type"`
	Expr F[Expr]    `yaml:"expr"`
	Min  F[float64] `yaml:"min"`
	Doc  F[string]  `yaml:"doc"`
}

// CheckSpec is a condition a config must meet, reported against a key.
type CheckSpec struct {
	Expr    F[Expr]   `yaml:"expr"`
	Key     F[string] `yaml:"key"`
	Message F[string] `yaml:"message"`
}

// Structure is the shape of the network.
type Structure struct {
	Layers        F[Expr]      `yaml:"layers"`
	Hidden        F[Expr]      `yaml:"hidden"`
	Vocab         F[Expr]      `yaml:"vocab"`
	Block         F[BlockKind] `yaml:"block"`
	Norm          NormDesc     `yaml:"norm"`
	EmbedScale    F[Expr]      `yaml:"embed_scale"`
	ResidualScale F[Expr]      `yaml:"residual_scale"`
	ClipResidual  F[bool]      `yaml:"clip_residual"`
	// PerLayerInputs gives each layer a vector of its own per token
	// (per_layer_inputs.go); unset: none.
	PerLayerInputs PerLayerInputsDesc `yaml:"per_layer_inputs"`
	// LayerScale names a learned [1] tensor of each layer (relative to
	// it) that multiplies the layer's output, residual stream and all.
	LayerScale F[string] `yaml:"layer_scale"`
	Attention  AttnDesc  `yaml:"attention"`
	// EmbedNorm names a norm applied to the embeddings before the first
	// layer (embed.go): a checkpoint name under the model's prefix.
	EmbedNorm F[string] `yaml:"embed_norm"`
	// Positions is the row count of a learned table of absolute positions
	// (GPT-2's wpe, weights.names.positions) whose row for each token's
	// position is added to its embedding (embed.go); null: none.
	Positions F[Expr] `yaml:"positions"`
	// Mixers are the token mixers other than attention, by kind (mixer.go):
	// each section's layers say which layers it mixes.
	Mixers OMap[OMap[F[Expr]]] `yaml:"mixers"`
	// FeedForward, in a single block, is a per-layer bool: the layers
	// whose one sublayer is the feed-forward block (block_single.go).
	FeedForward F[Expr]  `yaml:"feed_forward"`
	Rope        RopeDesc `yaml:"rope"`
	MLP         MLPDesc  `yaml:"mlp"`
	MoE         MoEDesc  `yaml:"moe"`
	Head        HeadDesc `yaml:"head"`
	// Encoder makes the network an encoder (encoder.go): absent (a
	// decoder) unless its pooling is set.
	Encoder EncoderDesc `yaml:"encoder"`
}

// PerLayerInputsDesc sizes the per-layer inputs: their width per layer
// (0 at load: none) and the rows of their table.
type PerLayerInputsDesc struct {
	Width F[Expr] `yaml:"width"`
	Vocab F[Expr] `yaml:"vocab"`
}

// NormDesc is the norm of every layer (and the final one).
type NormDesc struct {
	Kind F[NormKind] `yaml:"kind"`
	Eps  F[Expr]     `yaml:"eps"`

	Bias F[Expr] `yaml:"bias"` // a layer_norm's bias, decided at load
	// FinalEps is the final norm's eps where it differs from the layers'
	// (Mamba2's block norms keep 1e-5, its final norm the config's).
	FinalEps F[Expr] `yaml:"final_eps"`
	// Offsets are constants added to an rms norm's weight, by slot.
	Offsets NormOffsetsDesc `yaml:"offsets"`
	// Absent are per-layer bools, by slot: the layers where the slot's
	// norm is not there (ModernBERT's first layer reads its input as it
	// is). final is not a slot here.
	Absent NormOffsetsDesc `yaml:"absent"`
}

// NormOffsetsDesc adds a constant to the weights of the norms in each
// block slot and of the final norm: x / rms(x) * (w + offset).
type NormOffsetsDesc struct {
	AttnIn  F[Expr] `yaml:"attn_in"`
	AttnOut F[Expr] `yaml:"attn_out"`
	MLPIn   F[Expr] `yaml:"mlp_in"`
	MLPOut  F[Expr] `yaml:"mlp_out"`
	Final   F[Expr] `yaml:"final"`
}

// AttnDesc is self-attention.
type AttnDesc struct {
	Heads    F[Expr] `yaml:"heads"`
	KVHeads  F[Expr] `yaml:"kv_heads"`
	HeadDim  F[Expr] `yaml:"head_dim"`
	Scale    F[Expr] `yaml:"scale"`
	FusedQKV F[bool] `yaml:"fused_qkv"`
	// FusedQKVPerHead: the fused projection's output holds, for each key
	// and value head, its query heads, its key and its value side by side
	// ([kv_heads, heads/kv_heads + 2, head_dim]: GPT-NeoX's, InternLM2's),
	// not all q, then all k, then all v.
	FusedQKVPerHead F[bool]   `yaml:"fused_qkv_per_head"`
	Float32         F[bool]   `yaml:"float32"`
	Bias            BiasDesc  `yaml:"bias"`
	QKNorm          F[QKNorm] `yaml:"qk_norm"`
	Softcap         F[Expr]   `yaml:"softcap"`
	Sliding         F[Expr]   `yaml:"sliding"`
	Window          F[Expr]   `yaml:"window"`

	QKNormWhen       F[Expr]        `yaml:"qk_norm_when"`       // q and k norms only where this holds
	QKNormEps        F[Expr]        `yaml:"qk_norm_eps"`        // the q and k norms' eps, where it is not the norm's
	KVConv           F[Expr]        `yaml:"kv_conv"`            // keys and values convolved over this many steps
	Float32IfFloat16 F[bool]        `yaml:"float32_if_float16"` // float16 attends in float32
	QueryScale       QueryScaleDesc `yaml:"query_scale"`
	Sinks            F[bool]        `yaml:"sinks"` // a learned logit per head in each softmax
	// OutputGate: q's projection gives each head its queries and a gate;
	// the output is multiplied by sigmoid(gate) before o.
	OutputGate F[bool] `yaml:"output_gate"`
	// ValuesFromKeys is a per-layer bool: the layers with no v projection,
	// whose values are the keys' projection before the k norm and rope.
	ValuesFromKeys F[Expr] `yaml:"values_from_keys"`
	// HeadGate is a linear from the layer's input to one logit per head;
	// each head's output is multiplied by its sigmoid (taken in float32)
	// before o. Unset: none.
	HeadGate HeadGateDesc `yaml:"head_gate"`
	// KVFrom is a per-layer int: the earlier layer whose keys and values
	// a layer attends over (it has no k and v of its own and keeps no
	// cache); -1 or the layer's own index: its own.
	KVFrom F[Expr] `yaml:"kv_from"`
	// VNorm is the norm on each value head: null (none) or unweighted
	// (x / rms(x) over head_dim, at the q and k norms' eps).
	VNorm F[string] `yaml:"v_norm"`
	// KVTiled: the key-value heads are tiled across the query heads
	// (query head h reads key-value head h mod kv_heads), not grouped
	// (h // (heads / kv_heads)).
	KVTiled F[bool] `yaml:"kv_tiled"`
}

// HeadGateDesc is attention's per-head output gate: its checkpoint name
// under the attention and whether it has a bias.
type HeadGateDesc struct {
	Name F[string] `yaml:"name"`
	Bias F[Expr]   `yaml:"bias"`
	// Act is the gate's function of its logit: sigmoid (default) or
	// softplus.
	Act F[string] `yaml:"act"`
	// When (a bool expression, decided at load) says whether the layers
	// have the gate at all; default true.
	When F[Expr] `yaml:"when"`
}

// QueryScaleDesc scales each query by its position p after the rope:
// 1 + beta * log(1 + floor(p / positions)).
type QueryScaleDesc struct {
	Beta      F[Expr] `yaml:"beta"`
	Positions F[Expr] `yaml:"positions"`
}

// BiasDesc says which projections carry a bias.
type BiasDesc struct {
	Q F[Expr] `yaml:"q"`
	K F[Expr] `yaml:"k"`
	V F[Expr] `yaml:"v"`
	O F[Expr] `yaml:"o"`
}

// RopeDesc is the rotary embedding.
type RopeDesc struct {
	Kind                 F[RopeKind]     `yaml:"kind"`
	Dims                 F[Expr]         `yaml:"dims"`
	Base                 F[Expr]         `yaml:"base"`
	Traditional          F[Expr]         `yaml:"traditional"`
	Scaling              F[Expr]         `yaml:"scaling"`
	MaxPositions         F[Expr]         `yaml:"max_positions"`
	OriginalMaxPositions F[Expr]         `yaml:"original_max_positions"`
	Layers               F[Expr]         `yaml:"layers"`
	Sliding              RopeSlidingDesc `yaml:"sliding"`
	// Negate turns the rotation the other way (negative frequencies).
	Negate F[bool] `yaml:"negate"`
	// Unscaled are rope types the architecture reads as an unscaled rope
	// (its scaling's factor and other fields unread).
	Unscaled F[[]string] `yaml:"unscaled"`
}

// RopeSlidingDesc is the rope of the layers that attend within a window,
// where it differs from the others': what it sets replaces the rope's.
type RopeSlidingDesc struct {
	Kind F[RopeKind] `yaml:"kind"`
	Base F[Expr]     `yaml:"base"`
	Dims F[Expr]     `yaml:"dims"`
	// Scaling names the sliding layers' own rope_scaling key (a scaled
	// kind's); unset: the rope's.
	Scaling F[Expr] `yaml:"scaling"`
}

// MLPDesc is the feed-forward block.
type MLPDesc struct {
	Kind   F[MLPKind] `yaml:"kind"`
	Hidden F[Expr]    `yaml:"hidden"`
	Bias   F[Expr]    `yaml:"bias"`
}

// HeadDesc is the output projection.
type HeadDesc struct {
	Tied F[Expr] `yaml:"tied"`
	// TiedWhenMissing ties the head exactly when the checkpoint holds no
	// head weight of its own.
	TiedWhenMissing F[bool] `yaml:"tied_when_missing"`
	Divide          F[Expr] `yaml:"divide"`
	Softcap         F[Expr] `yaml:"softcap"`
	// DivideInput divides the final hidden states before the head
	// (MiniCPM's muP head), where Divide divides the logits after it.
	DivideInput F[Expr] `yaml:"divide_input"`

	Bias  F[Expr] `yaml:"bias"`  // the untied head's bias
	Scale F[Expr] `yaml:"scale"` // logits times this
}

// WeightsDesc is how the checkpoint names things, and what loading drops.
type WeightsDesc struct {
	Names Names          `yaml:"names"`
	Drop  List[DropRule] `yaml:"drop"`
	// Experts names the sparse block's parts (mlp_moe.go).
	Experts ExpertNames `yaml:"experts"`
	// NormShift adds a constant to some norms of checkpoints in one form
	// (norm_shift.go).
	NormShift NormShiftDesc `yaml:"norm_shift"`
	// Rename rewrites tensor names before anything asks for them
	// (weights_rename.go).
	Rename List[RenameRule] `yaml:"rename"`
	// UnitRows are tensors whose rows loading scales to unit length
	// (weights_unit_rows.go).
	UnitRows List[UnitRowsRule] `yaml:"unit_rows"`
	// Fold folds multipliers into the weights of checkpoints of one form
	// (weights_fold.go).
	Fold FoldDesc `yaml:"fold"`
	// Bare, when set, reads a checkpoint whose names lack the model's
	// prefix (Hugging Face's GPT-2 files) under it, with the tensors whose
	// names end with one of these transposed (Conv1D weights stored [in,
	// out]), as mlx-lm's sanitize does (weights_bare.go).
	Bare F[[]string] `yaml:"bare"`
}

// UnitRowsRule is one of weights.unit_rows: a tensor whose rows loading
// scales to unit length.
type UnitRowsRule struct {
	Name F[string] `yaml:"name"`
	Eps  F[Expr]   `yaml:"eps"`
	// Over: "rows" (each row over its columns, the default) or "columns"
	// (each column over the rows).
	Over F[string] `yaml:"over"`
	// When: a bool expression; the tensor is scaled only where it holds.
	When F[Expr] `yaml:"when"`
	Pos  Pos     `yaml:"-"`
}

// RenameRule replaces From with To in every tensor name holding it.
type RenameRule struct {
	From F[string] `yaml:"from"`
	To   F[string] `yaml:"to"`
	Pos  Pos       `yaml:"-"`
}

// Names are the checkpoint's names of the modules, by role.
type Names struct {
	Model     F[string] `yaml:"model"`
	Embed     F[string] `yaml:"embed"`
	Layers    F[string] `yaml:"layers"`
	Norm      F[string] `yaml:"norm"`
	LMHead    F[string] `yaml:"lm_head"`
	Positions F[string] `yaml:"positions"`
	// TokenTypes is an encoder's table of token types
	// (structure.encoder.token_types).
	TokenTypes F[string] `yaml:"token_types"`
	Attention  F[string] `yaml:"attention"`
	MLP        F[string] `yaml:"mlp"`
	Q          F[string] `yaml:"q"`
	K          F[string] `yaml:"k"`
	V          F[string] `yaml:"v"`
	O          F[string] `yaml:"o"`
	QKV        F[string] `yaml:"qkv"`
	QNorm      F[string] `yaml:"q_norm"`
	KNorm      F[string] `yaml:"k_norm"`
	Gate       F[string] `yaml:"gate"`
	Up         F[string] `yaml:"up"`
	Down       F[string] `yaml:"down"`
	GateUp     F[string] `yaml:"gate_up"`
	FC         F[string] `yaml:"fc"`
	Proj       F[string] `yaml:"proj"`
	AttnIn     F[string] `yaml:"attn_in_norm"`
	AttnOut    F[string] `yaml:"attn_out_norm"`
	MLPIn      F[string] `yaml:"mlp_in_norm"`
	MLPOut     F[string] `yaml:"mlp_out_norm"`
	Pos        Pos       `yaml:"-"`
}

// DropRule is a tensor loading drops (mlx-lm's sanitize): by exact name or
// by a substring, optionally only when a condition holds.
type DropRule struct {
	Name     F[string] `yaml:"name"`
	Contains F[string] `yaml:"contains"`
	// Layer drops every tensor of one layer of the stack, by its index (a
	// multi-token-prediction layer stored after the last).
	Layer F[Expr] `yaml:"layer"`
	When  F[Expr] `yaml:"when"`
	Pos   Pos     `yaml:"-"`
}

// GGUFDesc is how llama.cpp's GGUF files of the architecture read. It is
// never inherited: a GGUF architecture name belongs to one model_type.
type GGUFDesc struct {
	Arch          F[string]         `yaml:"arch"`
	Class         F[string]         `yaml:"class"`
	Requires      F[string]         `yaml:"requires"`
	Aliases       F[[]string]       `yaml:"aliases"`
	PermuteQK     F[bool]           `yaml:"permute_qk"`
	QKVByHead     F[bool]           `yaml:"qkv_by_head"`
	AlwaysHeadDim F[bool]           `yaml:"always_head_dim"`
	NormShift     F[float64]        `yaml:"norm_shift"`
	RopeFraction  F[string]         `yaml:"rope_fraction"`
	ExtraLayers   F[string]         `yaml:"extra_layers"`
	WidthPerHead  GGUFWidthRule     `yaml:"width_per_head"`
	SlidingLayers GGUFLayerRule     `yaml:"sliding_layers"`
	KVLayers      GGUFKVLayers      `yaml:"kv_layers"`
	FinalNorm     F[string]         `yaml:"final_norm"`
	RopeScaling   F[string]         `yaml:"rope_scaling"`
	YarnLogTenth  F[bool]           `yaml:"yarn_log_tenth"`
	NoAttention   F[bool]           `yaml:"no_attention"`
	Flatten       F[[]string]       `yaml:"flatten"`
	Join          OMap[F[[]string]] `yaml:"join"`
	Split         OMap[F[[]string]] `yaml:"split"`
	SplitGroups   OMap[F[string]]   `yaml:"split_groups"`
	JoinGroups    OMap[F[string]]   `yaml:"join_groups"`
	AliasConfig   OMap[Raw]         `yaml:"alias_config"`
	Lacking       OMap[F[[]string]] `yaml:"lacking"`
	WindowRope    F[string]         `yaml:"window_rope"`
	KVWindow      F[string]         `yaml:"kv_window"`
	DoubleWidth   F[string]         `yaml:"double_width"`
	SparseLayers  F[string]         `yaml:"sparse_layers"`
	Enums         OMap[GGUFEnum]    `yaml:"enums"`
	UnreadInLast  GGUFUnread        `yaml:"unread_in_last"`
	Computed      OMap[F[string]]   `yaml:"computed"`
	Config        OMap[Raw]         `yaml:"config"`
	Keys          OMap[F[string]]   `yaml:"keys"`
	Copy          OMap[F[string]]   `yaml:"copy"`
	StoredAs      OMap[F[string]]   `yaml:"stored_as"`
	TrailingAxis  F[[]string]       `yaml:"trailing_axis"`
	Flags         OMap[F[string]]   `yaml:"flags"`
	LayerValues   OMap[F[string]]   `yaml:"layer_values"`
	Tensors       OMap[F[string]]   `yaml:"tensors"`
	Pos           Pos               `yaml:"-"`
}

// GGUFWidthRule sets a config key to hidden_size / num_attention_heads
// (integer division) on files of the listed layer counts: llama.cpp's rule
// for the query scale of its 27B Gemmas, which the files do not record.
type GGUFWidthRule struct {
	Key    F[string]  `yaml:"key"`
	Layers F[Literal] `yaml:"layers"`
	Pos    Pos        `yaml:"-"`
}

// GGUFLayerRule spells the file's per-layer sliding-window pattern
// (attention.sliding_window_pattern: a bool a layer, or every n-th layer
// full) as a config key: form letters, a string of L (sliding) and G
// (full) a layer; form types, a list of sliding_attention and
// full_attention.
type GGUFLayerRule struct {
	Key  F[string] `yaml:"key"`
	Form F[string] `yaml:"form"`
	Pos  Pos       `yaml:"-"`
}

// GGUFEnum spells a metadata key's number as a word of a config key
// (llama.cpp's expert_gating_func 2 as score_function "sigmoid").
type GGUFEnum struct {
	Key   F[string]       `yaml:"key"`
	Words OMap[F[string]] `yaml:"words"`
	Pos   Pos             `yaml:"-"`
}

// GGUFUnread names tensors the last Count layers of a file hold and the
// model does not run (Gemma 4's key and value projections on the layers
// that share earlier layers' keys and values).
type GGUFUnread struct {
	Count   F[string]   `yaml:"count"`
	Tensors F[[]string] `yaml:"tensors"`
	Pos     Pos         `yaml:"-"`
}

// GGUFKVLayers spells a file's key/value head count a layer
// (attention.head_count_kv as a list, 0 on the layers without attention)
// as a config key: a list of words, attention on the layers with heads,
// other on the others; with ffn, the layers without heads whose
// feed-forward width (feed_forward_length as a list) is not 0 are ffn,
// or experts where they hold a router (ffn_gate_inp). Form letters joins
// the words (one letter each) into one string.
type GGUFKVLayers struct {
	Key       F[string] `yaml:"key"`
	Attention F[string] `yaml:"attention"`
	Other     F[string] `yaml:"other"`
	FFN       F[string] `yaml:"ffn"`
	Experts   F[string] `yaml:"experts"`
	Form      F[string] `yaml:"form"`
	Pos       Pos       `yaml:"-"`
}

// WrapperDesc makes a descriptor a wrapper: its checkpoints hold a text
// model (in a section of the config, under prefixes of the tensor names,
// beside towers it drops) that another descriptor's architecture runs.
type WrapperDesc struct {
	Section  F[string]   `yaml:"section"`
	Optional F[bool]     `yaml:"section_optional"`
	TopWins  F[[]string] `yaml:"top_wins"`
	Defaults OMap[Raw]   `yaml:"defaults"`
	// TopDefaults are top-level values where the top level lacks them,
	// before top_wins copies them into the section.
	TopDefaults OMap[Raw]        `yaml:"top_defaults"`
	Set         OMap[Raw]        `yaml:"set"`
	Runs        F[string]        `yaml:"runs"`
	Dispatch    OMap[F[string]]  `yaml:"dispatch"`
	Prefixes    List[PrefixDesc] `yaml:"prefixes"`
	Drop        F[[]string]      `yaml:"drop"`
	Refuse      F[[]string]      `yaml:"refuse"`
	Pos         Pos              `yaml:"-"`
}

// PrefixDesc rewrites checkpoint names starting with from to start with to.
type PrefixDesc struct {
	From F[string] `yaml:"from"`
	To   F[string] `yaml:"to"`
	Pos  Pos       `yaml:"-"`
}

// Registry is descriptors/registry.yaml: the model_types refused by name.
type Registry struct {
	Remapped OMap[F[string]] `yaml:"remapped"`
	Drafters F[[]string]     `yaml:"drafters"`
}
