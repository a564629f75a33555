package nn

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// Model is what every generated architecture's *Model offers: enough to run
// any supported checkpoint without knowing its architecture when compiling.
type Model interface {
	// Forward runs tokens [B, L] (integers) through the model, attending
	// over and extending caches (one per layer, from NewCaches), and
	// returns the logits [B, L, vocab]. The ids must lie in [0, vocab):
	// the embedding lookup does not check them (generate.Tokens and
	// archrun do, before they reach it).
	Forward(g *mlx.Graph, tokens *mlx.Array, caches []kv.Cache) *mlx.Array
	// Hidden is Forward without the head: the hidden states [B, L, hidden]
	// the final norm gives, before the output projection and whatever the
	// head does to its logits (scale, divisor, soft cap). Forward is the
	// head applied to it, so the two agree to the bit. Embeddings pool it.
	Hidden(g *mlx.Graph, tokens *mlx.Array, caches []kv.Cache) *mlx.Array
	// NewCaches makes the empty per-layer caches a sequence starts with,
	// as mlx-lm's make_cache does.
	NewCaches() []kv.Cache
	// NewCachesWith is NewCaches with options: a bound on every cache,
	// quantized keys and values.
	NewCachesWith(opts kv.Options) ([]kv.Cache, error)
	// Info is the model's facts.
	Info() Info
	// Free releases the weights.
	Free()
}

// Scorer is an encoder with a classifier head (a cross-encoder): Score
// turns the hidden states Hidden gives, [B, L, hidden], whose row r holds
// lengths[r] tokens before its padding (nil: every row is whole), into each
// row's scores, [B, labels] in float32. A checkpoint without the head fails
// g.
type Scorer interface {
	Score(g *mlx.Graph, hidden *mlx.Array, lengths []int) *mlx.Array
	// Labels is the head's score count per input (0: no head).
	Labels() int
}

// Variant is one of an architecture's variants: configs for which When
// holds run on the architecture named Runs.
type Variant struct {
	Runs string
	When func(cfg any) bool
}

// variant is the architecture that runs the config data of a's
// model_type, with data's model_type set to its name: a's own (and data as
// it is) unless one of a's variants claims it. A config a refuses is
// left to a, whose Load reports it.
func (c *Catalog) variant(a *Arch, data []byte) (*Arch, []byte, error) {
	if len(a.Variants) == 0 {
		return a, data, nil
	}
	cfg, err := a.Config(data)
	if err != nil {
		return a, data, nil
	}
	for _, v := range a.Variants {
		if !v.When(cfg) {
			continue
		}
		b, err := c.Lookup(v.Runs)
		if err != nil {
			return nil, nil, err
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, nil, err
		}
		m["model_type"], _ = json.Marshal(v.Runs)
		out, err := json.Marshal(m)
		return b, out, err
	}
	return a, data, nil
}

// Info is what a caller may want to know of a loaded model.
type Info struct {
	ModelType string    // config.json's model_type
	Arch      string    // the descriptor it runs on
	VocabSize int       // logits per position
	Layers    int       // decoder layers (and caches)
	Hidden    int       // width of the residual stream
	Dtype     mlx.Dtype // the compute dtype: the embedding's rows' and the logits'
	Nbytes    int       // size of the weights
	// CacheDtype is what NewCaches holds keys and values in: the
	// checkpoint's half-precision dtype under float32 compute (see
	// Params.CacheDtype), 0 where they are held as computed.
	CacheDtype mlx.Dtype
	// Encoder: the model reads its whole input at once, every position
	// attending to every other (structure.encoder): it embeds (and, with
	// a classifier, scores), it does not generate. Pooling is how its
	// embeddings pool when the checkpoint does not say ("mean", "cls" or
	// "last"); empty for a decoder.
	Encoder bool
	Pooling string
	// MaxInput is the longest input an encoder's learned position table
	// takes (its rows, less RoBERTa's offset); 0 where nothing bounds it.
	MaxInput int
}

// Arch is one generated architecture as a registry lists it.
type Arch struct {
	Name    string   // its model_type, the descriptor's name
	Tier    string   // how far it is proven (see descriptors/README.md)
	Aliases []string // other model_types that run on it (mlx-lm's MODEL_REMAPPING)
	Doc     string   // one line
	Load    func(dir string, opts Options) (Model, error)
	// Tensors lists the tensors a checkpoint with config.json data holds.
	Tensors func(config []byte) ([]TensorSpec, error)
	// Config parses a config.json into the architecture's *Config.
	Config func(config []byte) (any, error)
	// Derived are the keys computed from others when a config lacks them.
	Derived []string
	// Ignored are config keys of published checkpoints it does not read.
	Ignored []string
	// Shard is its tensor-parallel plan; nil when it runs in one process
	// only, and NoShard then says why.
	Shard   *ShardPlan
	NoShard string
	// Variants run some configs of the model_type on other architectures:
	// the first whose When holds of the parsed config (Config's result)
	// runs it. EmbeddingGemma's gemma3_text configs with
	// use_bidirectional_attention run as an encoder.
	Variants []Variant
	// Encoder: the architecture is an encoder (structure.encoder): it
	// embeds and scores, and its reference is mlx-embeddings' module, not
	// mlx-lm's logits.
	Encoder bool
	// GGUF is how llama.cpp's GGUF files of it read, from its descriptor's
	// gguf section; nil when it has none.
	GGUF *GGUF
	// UnitRows are the tensors whose rows loading scales to unit length
	// when they are stored unquantized (Weights.UnitRows).
	UnitRows []string
	// Wrapper, when set, makes the model_type a wrapper around a text
	// model that another architecture runs; Load, Tensors and Config are
	// then nil.
	Wrapper *Wrapper
}

// GGUFEnum is a config key and the word each number of a metadata key
// sets it to.
type GGUFEnum struct {
	Key   string
	Words map[int]string
}

// GGUF is what reading an architecture's GGUF checkpoints needs to know:
// the name llama.cpp gives it, its tensors' names, and what the file does
// not record. The gguf package reads files with it and knows no
// architecture itself.
type GGUF struct {
	Arch  string // general.architecture in the file's metadata
	Class string // config.json's "architectures" entry
	// Requires: a metadata key within the architecture's namespace that a
	// file must hold, non-zero, to be read as this architecture (Mixtral's
	// files are llama's with expert_count), or "key == N": a key whose
	// number must be N (DeepSeek-V3's files are deepseek2 files with
	// expert_gating_func 2, sigmoid); an architecture without one reads
	// the name's other files.
	Requires string
	// Aliases are other general.architecture names read the same way (a
	// vision-language model's text layers: Qwen2-VL's qwen2vl files).
	Aliases []string
	// PermuteQK: llama.cpp's converter reordered the rows of attn_q and
	// attn_k for its interleaved rope; reading puts them back.
	PermuteQK bool
	// QKVByHead: the checkpoint's fused qkv holds each head's q, k and v
	// rows together (GPT-NeoX's), which llama.cpp's converter regrouped
	// as all q, all k, all v; reading groups them back by head.
	QKVByHead bool
	// AlwaysHeadDim: config.json always carries head_dim (else only
	// where it differs from hidden_size / num_attention_heads).
	AlwaysHeadDim bool
	// NormShift: llama.cpp's converter added it to every norm weight (the
	// tensors whose checkpoint names end in norm.weight), for a norm that
	// scales by (shift + weight) in the checkpoint's form; reading takes it
	// off again.
	NormShift float64
	// RopeFraction is the config key rope.dimension_count / head_dim sets
	// (the rotated fraction of each head: phi3's partial_rotary_factor).
	RopeFraction string
	// ExtraLayers is the metadata key (within the architecture's
	// namespace) counting trailing blocks that block_count includes and
	// the checkpoint does not run: multi-token prediction layers
	// (nextn_predict_layers). They come off num_hidden_layers, and their
	// tensors are not read.
	ExtraLayers string
	// WidthKey, on a file of one of WidthLayers layers, is set to
	// hidden_size / num_attention_heads (integer division): llama.cpp's
	// query scale for its 27B Gemmas, which the file does not record.
	WidthKey    string
	WidthLayers []int
	// SlidingKey is the config key the file's sliding-window pattern
	// (attention.sliding_window_pattern: a bool a layer, true where it
	// slides, or n: every n-th layer full) becomes: SlidingForm "letters",
	// a string of L (sliding) and G (full) a layer; "types", a list of
	// sliding_attention and full_attention.
	SlidingKey, SlidingForm string
	// KVLayersKey is the config key a per-layer key/value head count
	// (attention.head_count_kv as a list, 0 on the layers without
	// attention: LFM2's convolution layers) becomes, a list of
	// KVLayersWords[0] (layers with heads) and KVLayersWords[1]; the
	// count itself becomes num_key_value_heads. Files of an architecture
	// without one hold a single count.
	KVLayersKey   string
	KVLayersWords [2]string
	// KVLayersFFN, where set, is the word of the layers without heads
	// whose feed-forward width (feed_forward_length as a list, a width a
	// layer) is not 0, and KVLayersExperts that of those holding a router
	// (ffn_gate_inp): Nemotron-H's MLP and expert layers beside its
	// state-space ones. KVLayersLetters joins the words (a letter each)
	// into one string.
	KVLayersFFN, KVLayersExperts string
	KVLayersLetters              bool
	// RopeScalingKey is the config key the file's rope scaling (a map of
	// type, factor, ...) goes under where it is not rope_scaling
	// (Ministral 3's rope_parameters).
	RopeScalingKey string
	// YarnLogTenth: the file holds rope.scaling.yarn_log_multiplier as a
	// tenth of the YaRN's mscale_all_dim, and its mscale is mscale_all_dim
	// (llama.cpp's reading of its DeepSeek-V2-style files; elsewhere the
	// multiplier is mscale_all_dim and mscale 1).
	YarnLogTenth bool
	// NoAttention: the file's attention.head_count and
	// feed_forward_length are 0 (a state-space model's, which has
	// neither): they, the key/value heads and head_dim are not read.
	NoAttention bool
	// Flatten lists llama.cpp's names of a layer's tensors that the
	// checkpoint holds 1-D where the file has more axes (an SSM's A and D
	// as [heads, 1], a grouped norm's weight as [groups, width / groups]).
	Flatten []string
	// Join maps a checkpoint module within a layer to the modules (names
	// Tensors maps to) whose weights' rows, one after another, are its
	// weight: a projection llama.cpp's converter split (a shared expert's
	// fused gate and up). The parts must be stored alike.
	Join map[string][]string
	// Split maps a module (a name Tensors maps to) to the modules its
	// weight's rows are, in equal parts one after another: a projection
	// llama.cpp's converter fused (Gemma 4's experts' gate and up, stacked:
	// the rows of each expert).
	Split map[string][]string
	// SplitGroups maps a Split module to the config key counting the
	// groups its rows come in, each group holding every part's rows in
	// turn (Qwen3-Next's fused beta and alpha projections, grouped by key
	// head): each part takes its rows of every group.
	SplitGroups map[string]string
	// JoinGroups maps a Join module to the config key counting the groups
	// its rows come in, each group holding every part's rows in turn
	// (InternLM2's fused qkv: a key/value head's queries, its key, its
	// value): each part gives its rows of every group.
	JoinGroups map[string]string
	// AliasConfig holds config values by the alias a file's
	// general.architecture is, set after Config (files of one alias laid
	// out otherwise than the name's own).
	AliasConfig map[string]map[string]any
	// Lacking maps config keys to two of llama.cpp's tensor names within a
	// layer: true where a layer holds the first and not the second (Gemma
	// 4's full-attention layers whose values are their keys: attn_k
	// without attn_v).
	Lacking map[string][]string
	// WindowRope is the config key (rope_parameters) the file's two ropes
	// go under: the full-attention layers' (full_attention, at
	// rope.freq_base: proportional where the file has rope_freqs, its
	// rotated fraction the pairs at 1, the unrotated ones holding 1e30;
	// else the file's rope scaling, or plain) and the sliding layers'
	// (sliding_attention: plain, at rope.freq_base_swa).
	WindowRope string
	// KVWindow is the config key the full-attention layers' key/value head
	// count is where the file holds a count a layer (attention.head_count_kv
	// as a list): the sliding layers' count is num_key_value_heads.
	KVWindow string
	// DoubleWidth is the config key that is true where the file's
	// feed-forward widths a layer are the narrowest and twice it (Gemma
	// 4's double-wide MLPs on the layers sharing keys and values), false
	// where they are one width.
	DoubleWidth string
	// Enums maps metadata keys within the architecture's namespace whose
	// numbers stand for words (llama.cpp's expert_gating_func: 1 softmax,
	// 2 sigmoid) to the config key the word is; a number without a word is
	// an error naming the key.
	Enums map[string]GGUFEnum
	// SparseLayers is the config key, a bool a layer, that the file's
	// leading_dense_block_count sets: false on that many first layers,
	// true on the others (EXAONE MoE's is_moe_layer).
	SparseLayers string
	// UnreadCount is the config key counting the last layers whose
	// tensors named in UnreadTensors (llama.cpp's names within a block)
	// the model does not run: they are not read (Gemma 4's key and value
	// projections on the layers that share earlier layers' keys and
	// values, which its converter writes from Hugging Face's checkpoints).
	UnreadCount   string
	UnreadTensors []string
	// Computed sets config keys to the sum, difference, product or exact
	// quotient of two metadata keys within the architecture's namespace
	// ("attention.key_length_mla - rope.dimension_count"), the second of
	// which may be taken as its square root ("residual_scale *
	// sqrt(block_count)"), where the file holds both.
	Computed map[string]string
	// FinalNorm is llama.cpp's name of the final norm where it is not
	// output_norm (LFM2's token_embd_norm).
	FinalNorm string
	// Config are config.json values every checkpoint has and the file does
	// not record.
	Config map[string]any
	// Keys maps metadata keys within the architecture's namespace
	// (attention.scale, for ARCH.attention.scale) to the config.json keys
	// their numbers are, where the file has them.
	Keys map[string]string
	// Copy sets config keys to another config key's value, after Keys
	// (GPT-2's n_ctx, which is n_positions: the file has one
	// context_length for both).
	Copy map[string]string
	// StoredAs maps llama.cpp's names of a layer's tensors (keys of
	// Tensors) to the form the file holds their values in, which reading
	// undoes: negative_exp, -exp(x) of the checkpoint's x (a state-space
	// layer's A from its A_log).
	StoredAs map[string]string
	// TrailingAxis lists llama.cpp's names of a layer's tensors that the
	// checkpoint holds with a trailing unit axis the file drops (a
	// depthwise convolution's [channels, taps, 1]).
	TrailingAxis []string
	// Flags are config keys set true where a layer holds the tensor named
	// (llama.cpp's name within a block: attn_q.bias), false where none
	// does: what the file records only by the tensors it has.
	Flags map[string]string
	// LayerValues maps metadata keys (whole, outside the architecture's
	// namespace) holding a number a layer (Apertus's xielu.alpha_n) to the
	// tensor within each layer the number is (mlp.act_fn.alpha_n, shape
	// [1]).
	LayerValues map[string]string
	// Tensors maps llama.cpp's name of a layer's module (between blk.N.
	// and .weight) to its checkpoint name within the layer.
	Tensors map[string]string
	// Layers, Embed, Norm and Head are the checkpoint names of the layer
	// stack and of token_embd, output_norm and output.
	Layers, Embed, Norm, Head string
	// Top maps llama.cpp's other names outside the blocks (an encoder's
	// token_types and token_embd_norm, a learned position_embd) to the
	// checkpoint's modules.
	Top map[string]string
}

// Catalog maps model_types to architectures: their own names, their
// aliases, and the model_types it refuses with a reason.
type Catalog struct {
	archs    []Arch
	byType   map[string]int
	remapped map[string]string // alias -> an arch without a descriptor
	drafters map[string]bool
}

// NewCatalog indexes archs. remapped lists aliases (mlx-lm's
// MODEL_REMAPPING) whose target has no descriptor, drafters the
// speculative-decoding drafter types; both are refused by name.
func NewCatalog(archs []Arch, remapped map[string]string, drafters []string) *Catalog {
	c := &Catalog{archs: archs, byType: map[string]int{}, remapped: remapped, drafters: map[string]bool{}}
	for i, a := range archs {
		c.byType[a.Name] = i
		for _, al := range a.Aliases {
			c.byType[al] = i
		}
	}
	for _, d := range drafters {
		c.drafters[d] = true
	}
	return c
}

// Archs lists the architectures, sorted by name.
func (c *Catalog) Archs() []Arch {
	out := slices.Clone(c.archs)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// UnsupportedError is the refusal of a model_type.
type UnsupportedError struct {
	ModelType string
	Reason    string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("model_type %q %s", e.ModelType, e.Reason)
}

// Lookup is the architecture that runs modelType, or why none does.
func (c *Catalog) Lookup(modelType string) (*Arch, error) {
	if c.drafters[modelType] {
		return nil, &UnsupportedError{modelType, "is a speculative-decoding drafter, which runs beside a target model, not on its own"}
	}
	if i, ok := c.byType[modelType]; ok {
		return &c.archs[i], nil
	}
	if target, ok := c.remapped[modelType]; ok {
		return nil, &UnsupportedError{modelType, fmt.Sprintf("is an alias of %q, which archgen does not support", target)}
	}
	names := make([]string, 0, len(c.byType))
	for n := range c.byType {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, &UnsupportedError{modelType, "is not supported (supported: " + strings.Join(names, ", ") + ")"}
}

// ModelTypeOf reads the model_type of a config.json.
func ModelTypeOf(config []byte) (string, error) {
	var c struct {
		ModelType *string `json:"model_type"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		return "", fmt.Errorf("not a JSON object: %v", err)
	}
	if c.ModelType == nil {
		return "", &ConfigError{Key: "model_type", Msg: "missing (required)"}
	}
	return *c.ModelType, nil
}

// Load loads the model in dir (config.json and its safetensors, as mlx-lm
// saves them) with the architecture its model_type names.
func (c *Catalog) Load(dir string, opts Options) (Model, error) {
	data, err := opts.config(dir)
	if err != nil {
		opts.freeTensors()
		return nil, err
	}
	mt, err := ModelTypeOf(data)
	if err != nil {
		opts.freeTensors()
		return nil, fmt.Errorf("%s: %w", opts.configName(dir), err)
	}
	a, err := c.Lookup(mt)
	if err != nil {
		opts.freeTensors()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if a.Wrapper != nil {
		return c.loadWrapped(dir, a.Wrapper, data, opts)
	}
	if b, vdata, err := c.variant(a, data); err != nil {
		opts.freeTensors()
		return nil, fmt.Errorf("%s: %w", opts.configName(dir), err)
	} else if b != a {
		a, opts.Config = b, vdata
	}
	if err := a.plan(dir, &opts); err != nil {
		return nil, err
	}
	return a.Load(dir, opts)
}

// plan gives opts the architecture's shard plan when they name none, or
// refuses a group the architecture cannot be split over, saying why.
func (a *Arch) plan(dir string, opts *Options) error {
	if opts.Shard != nil {
		return nil
	}
	opts.Shard = a.Shard
	if a.Shard == nil && a.NoShard != "" && opts.sharding() {
		opts.freeTensors()
		return fmt.Errorf("%s: %w", opts.configName(dir),
			&ShardError{Size: opts.Group.Size(), Msg: fmt.Sprintf("%s has no tensor-parallel plan: %s", a.Name, a.NoShard)})
	}
	return nil
}

// config is Config, or else dir's config.json.
// configName is how errors name the config of the checkpoint at dir: its
// config.json, or dir itself when Config stands for a file that is no
// directory (a GGUF file's metadata).
func (o Options) configName(dir string) string {
	if o.Config != nil {
		if st, err := os.Stat(dir); err == nil && !st.IsDir() {
			return dir
		}
	}
	return filepath.Join(dir, "config.json")
}

func (o Options) config(dir string) ([]byte, error) {
	if o.Config != nil {
		return o.Config, nil
	}
	return ReadConfigFile(dir)
}

// freeTensors releases Tensors when loading fails before it takes them.
func (o Options) freeTensors() {
	for _, a := range o.Tensors {
		a.Free()
	}
}

// CheckModelType reports a config whose model_type is neither arch nor
// one of its aliases.
func CheckModelType(modelType, arch string, aliases []string) error {
	if modelType == arch || slices.Contains(aliases, modelType) {
		return nil
	}
	names := append([]string{arch}, aliases...)
	return &ConfigError{Key: "model_type", Msg: fmt.Sprintf("%q is not %s", modelType, strings.Join(names, " or "))}
}

// Dtype is the dtype the embedding's rows come out in.
func (e *Embedding) Dtype() mlx.Dtype {
	if e.Out.IsFloat() {
		return e.Out
	}
	if e.Q != nil && e.Q.Scales != nil {
		return e.Q.Scales.Dtype()
	}
	if e.Q != nil {
		return mlx.Float32 // llama.cpp's blocks decode to float32
	}
	return e.Weight.Dtype()
}

// LoadModel is a generated package's Load: it reads dir/config.json,
// checks that its model_type is name or one of aliases, parses it with
// parse, opens the checkpoint and builds the model with build. Errors name
// the file, key or tensor.
func LoadModel[C any, M interface{ Free() }](dir string, opts Options, name string, aliases []string,
	parse func([]byte) (*C, error), build func(*Weights, *C) (M, error)) (M, error) {
	var none M
	data, err := opts.config(dir)
	if err != nil {
		opts.freeTensors()
		return none, err
	}
	cfgPath := opts.configName(dir)
	mt, err := ModelTypeOf(data)
	if err == nil {
		err = CheckModelType(mt, name, aliases)
	}
	if err != nil {
		opts.freeTensors()
		return none, fmt.Errorf("%s: %w", cfgPath, err)
	}
	c, err := parse(data)
	if err == nil && opts.sharding() {
		if opts.Shard == nil {
			err = &ShardError{Size: opts.Group.Size(), Msg: fmt.Sprintf("%s has no tensor-parallel plan", name)}
		} else {
			err = divideCounts(c, opts.Shard, opts.Group.Size())
		}
	}
	if err != nil {
		opts.freeTensors()
		return none, fmt.Errorf("%s: %w", cfgPath, err)
	}
	w, err := OpenWeights(dir, data, opts)
	if err != nil {
		return none, err // it names the file
	}
	m, err := build(w, c)
	if err != nil {
		return none, fmt.Errorf("%s: %w", dir, err)
	}
	return m, nil
}

// ListTensors is a generated package's Tensors: the tensors build asks for
// on a config.json, recorded without a checkpoint.
func ListTensors[C any, M interface{ Free() }](config []byte,
	parse func([]byte) (*C, error), build func(*Weights, *C) (M, error)) ([]TensorSpec, error) {
	c, err := parse(config)
	if err != nil {
		return nil, err
	}
	w, err := RecordWeights(config)
	if err != nil {
		return nil, err
	}
	m, err := build(w, c)
	if err != nil {
		return nil, err
	}
	m.Free()
	return w.Specs(), nil
}
