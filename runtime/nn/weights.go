package nn

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// Options are a caller's choices when loading a model.
type Options struct {
	// Dtype is the compute dtype. The zero value is DefaultDtype of the
	// stream's device: float32 on the CPU. CheckpointDtype keeps each
	// tensor's own dtype and computes as mlx-lm does, in the checkpoint's
	// dtype. A float dtype casts every floating-point tensor to it, except
	// that under float32 a half-precision matrix (a dense weight, an
	// embedding table, a quantized matrix's scales and biases) stays as
	// stored: the products read it at its own width and widen it exactly,
	// so the arithmetic is float32 on the checkpoint's own values at the
	// checkpoint's size in memory.
	Dtype mlx.Dtype
	// Stream is the stream weights load on; nil is mlx.DefaultStream().
	Stream *mlx.Stream
	// Config and Tensors, when set, stand for the directory's config.json
	// and its safetensors files: a checkpoint read some other way (a GGUF
	// file, say) then loads through the same checks, the directory naming
	// it in errors. Loading takes the tensors over: those the model uses
	// become its weights, the others are freed.
	Config  []byte
	Tensors map[string]*mlx.Array
	// Progress, when set, is told how many bytes of weights have been read
	// of how many, as loading reads them (in pieces of about 64 MiB).
	Progress func(done, total int64)
	// MemoryLimit, when set, refuses a model whose weights (in the
	// compute dtype) take more bytes, before any is read.
	MemoryLimit uint64
	// Group, when it has more than one process, loads this process's
	// share of the model by Shard (Catalog.Load takes the architecture's
	// plan when Shard is nil): each sharded tensor's block is read from
	// its file alone.
	Group *mlx.Group
	Shard *ShardPlan
	// Rename, when set, gives each checkpoint tensor the name the model
	// asks for, or false to drop it (a wrapper's prefixes and towers).
	Rename func(name string) (string, bool)
}

// CheckpointDtype, as Options.Dtype, computes in the checkpoint's own
// dtypes: every tensor as stored, and mlx-lm's arithmetic to the bit (for
// a bfloat16 checkpoint, what mlx-lm computes in bfloat16).
const CheckpointDtype mlx.Dtype = 254

// ParseDtype reads a compute dtype as a command line gives it: float32,
// bfloat16, float16, or checkpoint (CheckpointDtype).
func ParseDtype(name string) (mlx.Dtype, error) {
	if name == "checkpoint" {
		return CheckpointDtype, nil
	}
	dt, err := mlx.ParseDtype(name)
	if err != nil || !dt.IsFloat() || dt == mlx.Float64 {
		return 0, fmt.Errorf("dtype %q: want float32, bfloat16, float16 or checkpoint", name)
	}
	return dt, nil
}

// DefaultDtype is the compute dtype a zero Options.Dtype means on a
// device: float32 on the CPU, where libmlx's half-precision arithmetic
// rounds after every operation and runs several times slower than its
// float32 (the products then read half-precision weights as stored);
// CheckpointDtype elsewhere.
func DefaultDtype(d mlx.DeviceType) mlx.Dtype {
	if d == mlx.CPU {
		return mlx.Float32
	}
	return CheckpointDtype
}

// computeDtype is the dtype o computes in on stream s: a float dtype, or
// CheckpointDtype.
func (o Options) computeDtype(s *mlx.Stream) mlx.Dtype {
	if o.Dtype == CheckpointDtype || o.Dtype.IsFloat() {
		return o.Dtype
	}
	return DefaultDtype(s.Device().Type)
}

// TensorSpec is one tensor a model asks for: its checkpoint name and its
// logical shape. A quantized weight ([out, in] here) is stored as Name
// (packed uint32), and Name's scales and biases beside it.
type TensorSpec struct {
	Name  string
	Shape []int
	Quant *QuantParams
	// Scale marks a norm's weight, which multiplies: it is centred on one.
	Scale bool
}

// Weights hands out a checkpoint's tensors as typed modules, under a name
// prefix, checking each against the shape the model expects. Problems are
// recorded, named by tensor, and reported together by Finish.
type Weights struct {
	l             *loader
	prefix, label string
}

type loader struct {
	record   bool
	tensors  map[string]*mlx.Array // the checkpoint's, owned until Finish
	used     map[string]bool
	fpScales map[string]bool // the .scales of modules in a floating-point mode: uint8, kept as they are
	dropped  map[string]bool
	folded   map[string]bool // tensors a multiplier was folded into (ScaleTensors, ScaleRows)
	// flipped are per-head matrices a rewrite stored as [heads, in, out]
	// (SplitLatentKV's key rows), by module: MultiLinear reads them so
	flipped   map[string]bool
	quant     *Quantization
	opts      Options
	routes    bool         // a layer routes tokens to experts (Routes)
	g         *mlx.Graph   // casts and derived weights
	scratch   []*mlx.Array // casts that feed derived weights; freed by Finish
	params    *Params
	specs     []TensorSpec
	errs      []error
	scopes    map[string]string     // prefix -> label, to name unexpected tensors
	files     map[string]fileTensor // tensor -> where it is stored, when sharding
	openFiles []*mlx.SafetensorsFile
}

// OpenWeights opens the checkpoint in dir: model.safetensors, or the
// shards model.safetensors.index.json lists, or else every
// model*.safetensors file (as mlx-lm globs them). config is the directory's
// config.json, whose quantization block says which modules are quantized.
func OpenWeights(dir string, config []byte, opts Options) (*Weights, error) {
	q, err := ParseQuantization(config)
	if err != nil {
		opts.freeTensors()
		return nil, fmt.Errorf("%s: %w", opts.configName(dir), err)
	}
	if opts.Tensors != nil {
		l := newLoader(q, opts)
		for name, a := range opts.Tensors {
			if name, keep := opts.rename(name); keep {
				l.tensors[name] = a
			} else {
				a.Free()
			}
		}
		return &Weights{l: l}, nil
	}
	files, err := checkpointFiles(dir)
	if err != nil {
		return nil, err
	}
	l := newLoader(q, opts)
	from := map[string]string{}
	for _, f := range files {
		arrays, _, err := mlx.LoadSafetensors(f, opts.Stream)
		if err != nil {
			l.freeTensors()
			l.closeFiles()
			return nil, err
		}
		if opts.sharding() {
			sf, err := mlx.OpenSafetensors(f)
			if err != nil {
				for _, a := range arrays {
					a.Free()
				}
				l.freeTensors()
				l.closeFiles()
				return nil, err
			}
			l.openFiles = append(l.openFiles, sf)
		}
		for stored, a := range arrays {
			name, keep := opts.rename(stored)
			if !keep {
				a.Free()
				continue
			}
			if sf := l.lastFile(); opts.sharding() {
				l.files[name] = fileTensor{sf, stored}
			}
			if prev, dup := from[name]; dup {
				a.Free()
				l.errs = append(l.errs, fmt.Errorf("tensor %s is in both %s and %s", name, filepath.Base(prev), filepath.Base(f)))
				continue
			}
			from[name] = f
			l.tensors[name] = a
		}
	}
	if err := l.dequantFP8(); err != nil {
		l.freeTensors()
		l.closeFiles()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if q != nil && q.Packed {
		if err := l.unpackInt4(); err != nil {
			l.freeTensors()
			l.closeFiles()
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
	}
	return &Weights{l: l}, nil
}

// RecordWeights is a Weights without a checkpoint: each request succeeds
// with empty modules and is listed by Specs, quantized as config's
// quantization block would have mlx-lm's convert quantize it.
func RecordWeights(config []byte) (*Weights, error) {
	q, err := ParseQuantization(config)
	if err != nil {
		return nil, err
	}
	l := newLoader(q, Options{})
	l.record = true
	return &Weights{l: l}, nil
}

// rename applies Rename.
func (o Options) rename(name string) (string, bool) {
	if o.Rename == nil {
		return name, true
	}
	return o.Rename(name)
}

func newLoader(q *Quantization, opts Options) *loader {
	if opts.Stream == nil {
		opts.Stream = mlx.DefaultStream()
	}
	opts.Dtype = opts.computeDtype(opts.Stream)
	return &loader{
		tensors: map[string]*mlx.Array{},
		used:    map[string]bool{},
		dropped: map[string]bool{},
		quant:   q,
		opts:    opts,
		g:       mlx.NewGraph(opts.Stream),
		params:  &Params{},
		scopes:  map[string]string{},
		files:   map[string]fileTensor{},
	}
}

// checkpointFiles lists the safetensors files of dir.
func checkpointFiles(dir string) ([]string, error) {
	index := filepath.Join(dir, "model.safetensors.index.json")
	if data, err := os.ReadFile(index); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(data, &idx); err != nil || idx.WeightMap == nil {
			return nil, fmt.Errorf("%s: want an object with a weight_map", index)
		}
		seen := map[string]bool{}
		var files []string
		for _, f := range idx.WeightMap {
			if !seen[f] {
				seen[f] = true
				files = append(files, filepath.Join(dir, f))
			}
		}
		sort.Strings(files)
		for _, f := range files {
			if _, err := os.Stat(f); err != nil {
				return nil, fmt.Errorf("%s names %s: %w", index, filepath.Base(f), err)
			}
		}
		return files, nil
	}
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(single); err == nil {
		return []string{single}, nil
	}
	files, _ := filepath.Glob(filepath.Join(dir, "model*.safetensors"))
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no model.safetensors, model.safetensors.index.json or model*.safetensors", dir)
	}
	sort.Strings(files)
	return files, nil
}

// Scope is w with prefix appended to the names it asks for; label (when not
// empty) replaces the prefix in messages.
func (w *Weights) Scope(prefix, label string) *Weights {
	s := &Weights{l: w.l, prefix: w.prefix + prefix, label: label}
	if label != "" {
		w.l.scopes[s.prefix] = label
	}
	return s
}

// Layer is the scope of layer i of a stack: base.i., labeled "layer i".
func (w *Weights) Layer(base string, i int) *Weights {
	return w.Scope(fmt.Sprintf("%s.%d.", base, i), fmt.Sprintf("layer %d", i))
}

// Drop forgets tensors by exact name before anything asks for them, as
// mlx-lm's sanitize pops them.
func (w *Weights) Drop(names ...string) {
	for _, n := range names {
		w.l.drop(func(name string) bool { return name == w.prefix+n })
	}
}

// DropLayer forgets every tensor of layer i of the stack base (base.i.*),
// as mlx-lm's sanitize drops a multi-token-prediction layer stored after
// the last.
func (w *Weights) DropLayer(base string, i int) {
	prefix := fmt.Sprintf("%s%s.%d.", w.prefix, base, i)
	w.l.drop(func(name string) bool { return strings.HasPrefix(name, prefix) })
}

// DropModule forgets every tensor of the module name (name.weight,
// name.bias, name.scales, ...) under w's prefix: the weights a checkpoint
// holds for a part of a layer that does not run (the keys and values of a
// layer that reads an earlier layer's).
func (w *Weights) DropModule(name string) {
	prefix := w.prefix + name + "."
	w.l.drop(func(n string) bool { return strings.HasPrefix(n, prefix) })
}

// DropContaining forgets every tensor whose name contains sub.
func (w *Weights) DropContaining(sub string) {
	w.l.drop(func(name string) bool { return strings.Contains(name, sub) })
}

func (l *loader) drop(match func(string) bool) {
	for name, a := range l.tensors {
		if match(name) {
			a.Free()
			delete(l.tensors, name)
			l.dropped[name] = true
		}
	}
}

// Fail records a problem found while building the model.
func (w *Weights) Fail(err error) {
	if err != nil {
		w.l.errs = append(w.l.errs, w.named(err.Error()))
	}
}

func (w *Weights) named(msg string) error {
	if w.label != "" {
		return errors.New(w.label + ": " + msg)
	}
	return errors.New(msg)
}

func (w *Weights) failf(format string, args ...any) {
	w.l.errs = append(w.l.errs, w.named(fmt.Sprintf(format, args...)))
}

// local is name as messages show it: relative to a labeled scope.
func (w *Weights) local(name string) string {
	if w.label != "" {
		return name
	}
	return w.prefix + name
}

// param is take's tensor, made one of the model's parameters.
func (w *Weights) param(name string, shape []int, packed bool) *mlx.Array {
	if a := w.take(name, shape, packed); a != nil {
		return w.keep(a)
	}
	return nil
}

// take is the tensor prefix+name, checked to have shape and a float dtype
// (or uint32 when packed), cast to the compute dtype; nil when missing.
func (w *Weights) take(name string, shape []int, packed bool) *mlx.Array {
	a := w.lookup(name, shape, packed)
	if a == nil || packed || a.Dtype() == mlx.Uint8 {
		return a
	}
	return w.cast(a)
}

// blocks is the uint8 tensor prefix+name of rows of llama.cpp's blocks,
// checked to have shape; nil, with the problem recorded, when it is
// missing or wrong.
func (w *Weights) blocks(name string, shape []int) *mlx.Array {
	a := w.claim(name)
	if a == nil {
		return nil
	}
	if dt := a.Dtype(); dt != mlx.Uint8 {
		w.failf("%s: dtype %s, want uint8 (rows of block-quantized values)", w.local(name), dt)
		return nil
	}
	if !w.shaped(name, a, shape) {
		return nil
	}
	return w.keep(a)
}

// claim is the tensor prefix+name, marked used; nil, with the problem
// recorded, when it is missing.
func (w *Weights) claim(name string) *mlx.Array {
	full := w.prefix + name
	a, ok := w.l.tensors[full]
	if !ok {
		w.failf("missing %s", w.local(name))
		return nil
	}
	w.l.used[full] = true
	return a
}

// shaped reports whether a has shape, recording the problem when not.
func (w *Weights) shaped(name string, a *mlx.Array, shape []int) bool {
	if got := a.Shape(); !slices.Equal(got, shape) {
		w.failf("%s: shape %v, want %v", w.local(name), got, shape)
		return false
	}
	return true
}

// matrix is param for a tensor the products read (a dense weight, an
// embedding table, a quantized matrix's scales and biases): under a
// float32 compute dtype a half-precision one stays as stored.
func (w *Weights) matrix(name string, shape []int) *mlx.Array {
	a := w.lookup(name, shape, false)
	if a == nil {
		return nil
	}
	if a.Dtype() != mlx.Uint8 && !w.l.storedMatrix(a) {
		a = w.cast(a)
	}
	return w.keep(a)
}

// storedMatrix reports whether a, a matrix the products read, stays in its
// stored dtype: a half-precision one under float32 compute.
func (l *loader) storedMatrix(a *mlx.Array) bool {
	dt := a.Dtype()
	return l.opts.Dtype == mlx.Float32 && (dt == mlx.BFloat16 || dt == mlx.Float16)
}

// lookup is the tensor prefix+name, marked used and checked to have shape
// and a float dtype (or uint32 when packed); nil, with the problem
// recorded, when it is missing or wrong.
func (w *Weights) lookup(name string, shape []int, packed bool) *mlx.Array {
	l := w.l
	full := w.prefix + name
	a := w.claim(name)
	if a == nil {
		return nil
	}
	dt := a.Dtype()
	switch {
	case packed && dt != mlx.Uint32:
		w.failf("%s: dtype %s, want uint32 (packed quantized weights)", w.local(name), dt)
		return nil
	case !packed && dt == mlx.Uint8 && l.fpScales[full]:
	case !packed && !dt.IsFloat():
		hint := ""
		if dt == mlx.Uint32 {
			hint = " (a quantized tensor, but config.json's quantization block does not quantize this module)"
		}
		w.failf("%s: dtype %s, want a float dtype%s", w.local(name), dt, hint)
		return nil
	}
	if len(shape) == 2 && shape[0] == 1 && slices.Equal(a.Shape(), shape[1:]) {
		// a matrix of one row stored as its vector: GGUF files keep a
		// tensor's dimensions up to its last one above 1 (ggml's count)
		r := l.g.Reshape(a, shape...)
		l.g.Keep(r)
		l.scratch = append(l.scratch, r)
		return r
	}
	if !w.shaped(name, a, shape) {
		return nil
	}
	return a
}

// cast is a in the compute dtype, when one is set and a has another.
func (w *Weights) cast(a *mlx.Array) *mlx.Array {
	l := w.l
	if want := l.opts.Dtype; want.IsFloat() && want != a.Dtype() {
		c := l.g.AsType(a, want)
		l.g.Keep(c)
		l.scratch = append(l.scratch, c)
		return c
	}
	return a
}

// keep makes a one of the model's parameters.
func (w *Weights) keep(a *mlx.Array) *mlx.Array {
	w.l.params.arrays = append(w.l.params.arrays, a)
	return a
}

func (w *Weights) spec(name string, shape []int, q *QuantParams, scale bool) {
	w.l.specs = append(w.l.specs, TensorSpec{Name: w.prefix + name, Shape: shape, Quant: q, Scale: scale})
}

// quantFor is how the module at prefix+name, whose rows have in entries, is
// stored: nil for dense. mlx-lm's rule: a per-module entry of the
// quantization block decides; otherwise the module is quantized when its
// .scales tensor exists, with the group size and bits its shapes imply.
func (w *Weights) quantFor(name string, in int) *QuantParams {
	l := w.l
	if l.quant == nil {
		return nil
	}
	path := w.prefix + name
	if m, ok := l.quant.Modules[path]; ok {
		switch {
		case m.Off:
			return nil
		case m.Params != nil:
			return m.Params
		}
		return &l.quant.Default
	}
	if l.record {
		if in%l.quant.Default.GroupSize != 0 {
			return nil
		}
		return &l.quant.Default
	}
	scales, ok := l.tensors[path+".scales"]
	weight, wok := l.tensors[path+".weight"]
	if !ok && wok && weight.Dtype() == mlx.Uint8 && weight.Ndim() >= 2 {
		if _, block := l.quant.Default.block(); block {
			// rows of blocks, of the default block type
			return &l.quant.Default
		}
	}
	if !ok || !wok {
		return nil
	}
	groups, packed := scales.Dim(-1), weight.Dim(-1)
	if groups == 0 || in%groups != 0 || (packed*32)%in != 0 {
		w.badQuant(name, "%s: scales %v and weight %v do not fit rows of %d", w.local(name), scales.Shape(), weight.Shape(), in)
		return badQuant
	}
	p := QuantParams{GroupSize: in / groups, Bits: packed * 32 / in, Mode: "affine"}
	if scales.Dtype() == mlx.Uint8 {
		// a floating-point mode, known by its bits and group as mlx-lm
		// knows it: of those, mxfp4 (4 bits, groups of 32) runs here
		if p.Bits != 4 || p.GroupSize != 32 {
			w.badQuant(name, "%s: quantized in a floating-point mode (uint8 scales) at %d bits in groups of %d; of those only mxfp4 (4 bits, groups of 32) is supported", w.local(name), p.Bits, p.GroupSize)
			return badQuant
		}
		p.Mode = "mxfp4"
	}
	if err := p.check(); err != nil {
		w.badQuant(name, "%s: %v", w.local(name), err)
		return badQuant
	}
	return &p
}

// badQuant is what quantFor returns for a module whose quantized tensors
// are wrong; the problem is recorded already.
var badQuant = &QuantParams{}

// badQuant records a problem with the quantized module name and claims
// its tensors, which are then not reported again as unexpected.
func (w *Weights) badQuant(name, format string, args ...any) {
	w.failf(format, args...)
	for _, suffix := range []string{".weight", ".scales", ".biases"} {
		if _, ok := w.l.tensors[w.prefix+name+suffix]; ok {
			w.l.used[w.prefix+name+suffix] = true
		}
	}
}

// quantized takes the packed triple of a quantized [rows, in] matrix.
func (w *Weights) quantized(name string, rows, in int, p *QuantParams) *mlx.Quantized {
	if in%p.GroupSize != 0 {
		w.badQuant(name, "%s: %d columns do not split into groups of %d", w.local(name), in, p.GroupSize)
		return nil
	}
	if _, ok := p.block(); ok {
		weight := w.blocks(name+".weight", []int{rows, p.PackedDims(in)})
		if weight == nil {
			return nil
		}
		return &mlx.Quantized{Weight: weight, GroupSize: p.GroupSize, Bits: p.Bits, Mode: p.Mode}
	}
	w.markScales(name, p)
	weight := w.param(name+".weight", []int{rows, p.PackedDims(in)}, true)
	scales := w.matrix(name+".scales", []int{rows, in / p.GroupSize})
	if !p.affine() {
		if weight == nil || scales == nil {
			return nil
		}
		return &mlx.Quantized{Weight: weight, Scales: scales, GroupSize: p.GroupSize, Bits: p.Bits, Mode: p.Mode}
	}
	biases := w.matrix(name+".biases", []int{rows, in / p.GroupSize})
	if weight == nil || scales == nil || biases == nil {
		return nil
	}
	return &mlx.Quantized{Weight: weight, Scales: scales, Biases: biases, GroupSize: p.GroupSize, Bits: p.Bits}
}

// Linear is the layer name: weight [out, in], dense or quantized, and a
// bias [out] when bias is set.
//
// When the model is loaded over a group (Options.Group) and the shard plan
// gives name a role, out and in are this process's share (see ShardPlan).
func (w *Weights) Linear(name string, out, in int, bias bool) *Linear {
	if role := w.role(name); role != Replicated {
		return w.shardedLinear(name, out, in, bias, role)
	}
	if m := w.partsOf(name); m.Parts > 0 && !w.l.record {
		return w.partsLinear(name, out, in, bias, m)
	}
	l := &Linear{}
	q := w.quantFor(name, in)
	if w.l.record {
		w.spec(name+".weight", []int{out, in}, q, false)
		if bias {
			w.spec(name+".bias", []int{out}, nil, false)
		}
		return l
	}
	switch {
	case q == badQuant:
	case q != nil:
		l.Q = w.quantized(name, out, in, q)
	default:
		l.Weight = w.matrix(name+".weight", []int{out, in})
	}
	if bias {
		l.Bias = w.param(name+".bias", []int{out}, false)
	}
	return l
}

// partsOf is the quantization block's entry for name where it says the
// module is held as parts (ModuleQuant.Parts); the zero entry otherwise.
func (w *Weights) partsOf(name string) ModuleQuant {
	if w.l.quant == nil {
		return ModuleQuant{}
	}
	return w.l.quant.Modules[w.prefix+name]
}

// partsLinear is the layer name held as m.Parts layers name.parts.<j>,
// each as it is stored, their rows (read from each part's weight) adding
// up to out; the bias, where set, is name's own.
func (w *Weights) partsLinear(name string, out, in int, bias bool, m ModuleQuant) *Linear {
	l := &Linear{PartGroups: m.PartGroups}
	rows, uneven := 0, false
	for j := range m.Parts {
		part := fmt.Sprintf("%s.parts.%d", name, j)
		weight, ok := w.l.tensors[w.prefix+part+".weight"]
		if !ok || weight.Ndim() != 2 {
			w.failf("%s: the quantization block holds it as %d parts, and part %d has no weight matrix (%s.weight)", w.local(name), m.Parts, j, w.local(part))
			return l
		}
		r := weight.Dim(0)
		l.Parts = append(l.Parts, w.Linear(part, r, in, false))
		if r%m.PartGroups != 0 && !uneven {
			w.failf("%s: part %d's %d rows do not split into %d groups", w.local(name), j, r, m.PartGroups)
			uneven = true
		}
		rows += r
	}
	if uneven {
		return l
	}
	if rows != out {
		w.failf("%s: its %d parts hold %d rows, want %d", w.local(name), m.Parts, rows, out)
		return l
	}
	if bias {
		l.Bias = w.param(name+".bias", []int{out}, false)
	}
	return l
}

// Embedding is the table name: [n, dims], dense or quantized.
func (w *Weights) Embedding(name string, n, dims int) *Embedding {
	e := &Embedding{}
	q := w.quantFor(name, dims)
	if w.l.record {
		w.spec(name+".weight", []int{n, dims}, q, false)
		return e
	}
	switch {
	case q == badQuant:
	case q != nil:
		e.Q = w.quantized(name, n, dims, q)
	default:
		e.Weight = w.matrix(name+".weight", []int{n, dims})
	}
	if dt := w.l.opts.Dtype; dt.IsFloat() {
		e.Out = dt // the rows come out in the compute dtype
	}
	return e
}

// RMSNorm is the norm name: weight [dims].
func (w *Weights) RMSNorm(name string, dims int, eps float64) *RMSNorm {
	if w.l.record {
		w.spec(name+".weight", []int{dims}, nil, true)
		return &RMSNorm{Eps: float32(eps)}
	}
	return &RMSNorm{Weight: w.param(name+".weight", []int{dims}, false), Eps: float32(eps)}
}

// RMSNormOnePlus is gemma's norm name, x / rms(x) * (1 + weight): the
// RMSNorm whose weight is 1 + the checkpoint's, in the compute dtype.
func (w *Weights) RMSNormOnePlus(name string, dims int, eps float64) *RMSNorm {
	return w.RMSNormPlus(name, dims, eps, 1)
}

// RMSNormPlus is the norm name whose weight is the checkpoint's plus add,
// in the compute dtype: x / rms(x) * (w + add).
func (w *Weights) RMSNormPlus(name string, dims int, eps, add float64) *RMSNorm {
	if w.l.record {
		w.spec(name+".weight", []int{dims}, nil, false)
		return &RMSNorm{Eps: float32(eps)}
	}
	n := &RMSNorm{Eps: float32(eps)}
	if raw := w.take(name+".weight", []int{dims}, false); raw != nil {
		sum := w.l.g.AddScalar(raw, add)
		w.l.g.Keep(sum)
		n.Weight = w.keep(sum)
	}
	return n
}

// LayerNorm is the norm name: weight and bias [dims].
func (w *Weights) LayerNorm(name string, dims int, eps float64) *LayerNorm {
	if w.l.record {
		w.spec(name+".weight", []int{dims}, nil, true)
		w.spec(name+".bias", []int{dims}, nil, false)
		return &LayerNorm{Eps: float32(eps)}
	}
	return &LayerNorm{
		Weight: w.param(name+".weight", []int{dims}, false),
		Bias:   w.param(name+".bias", []int{dims}, false),
		Eps:    float32(eps),
	}
}

// Rope is NewRope(spec) on the loading stream, owned by the parameters.
func (w *Weights) Rope(spec RopeSpec) Rope {
	r, err := NewRope(spec, w.l.opts.Stream)
	if err != nil {
		w.Fail(err)
		return NoRope{}
	}
	w.l.params.ropes = append(w.l.params.ropes, r)
	return r
}

// Specs lists what a RecordWeights was asked for, in order.
func (w *Weights) Specs() []TensorSpec { return w.l.specs }

// maxErrors is how many problems Finish spells out.
const maxErrors = 20

// Finish reports every problem recorded, then every tensor of the
// checkpoint nobody asked for. Without problems it evaluates the
// parameters, releases the rest and returns them; with problems it releases
// everything.
func (w *Weights) Finish() (*Params, error) {
	l := w.l
	defer l.g.Close()
	defer l.closeFiles()
	errs := l.errs
	var extra []string
	for name := range l.tensors {
		if !l.used[name] {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		errs = append(errs, l.unexpected(name))
	}
	if len(errs) == 0 && !l.record && l.opts.MemoryLimit > 0 {
		if n := l.params.Nbytes(); uint64(n) > l.opts.MemoryLimit {
			errs = append(errs, fmt.Errorf("the weights take %d bytes, more than the memory limit of %d bytes", n, l.opts.MemoryLimit))
		}
	}
	if len(errs) == 0 && !l.record {
		if err := l.read(); err != nil {
			errs = append(errs, fmt.Errorf("reading the weights: %w", err))
		}
	}
	if len(errs) > 0 {
		kept := map[*mlx.Array]bool{}
		for _, a := range l.params.arrays {
			kept[a] = true
		}
		l.freeScratch(kept)
		l.params.Free()
		l.freeTensors()
		if len(errs) > maxErrors {
			errs = append(errs[:maxErrors:maxErrors], fmt.Errorf("... and %d more", len(errs)-maxErrors))
		}
		return nil, errors.Join(errs...)
	}
	kept := map[*mlx.Array]bool{}
	for _, a := range l.params.arrays {
		kept[a] = true
	}
	for name, a := range l.tensors {
		if !kept[a] {
			a.Free()
		}
		delete(l.tensors, name)
	}
	l.freeScratch(kept)
	if l.opts.Dtype == mlx.Float32 && !l.routes {
		l.params.cacheDtype = halfDtype(l.params.arrays)
	}
	return l.params, nil
}

// halfDtype is the half-precision dtype that holds most of arrays' bytes
// (bfloat16 on a tie), or 0 when none is half precision.
func halfDtype(arrays []*mlx.Array) mlx.Dtype {
	var bf, f int
	for _, a := range arrays {
		switch a.Dtype() {
		case mlx.BFloat16:
			bf += a.Nbytes()
		case mlx.Float16:
			f += a.Nbytes()
		}
	}
	switch {
	case bf == 0 && f == 0:
		return 0
	case f > bf:
		return mlx.Float16
	}
	return mlx.BFloat16
}

// unexpected names an unused tensor by the labeled scope it falls in.
// read evaluates the weights, in pieces when a Progress wants to hear of
// them.
func (l *loader) read() error {
	arrays := l.params.arrays
	if l.opts.Progress == nil {
		return mlx.Eval(arrays...)
	}
	var total, done int64
	for _, a := range arrays {
		total += int64(a.Nbytes())
	}
	const piece = 64 << 20
	l.opts.Progress(0, total)
	for i := 0; i < len(arrays); {
		j, n := i, int64(0)
		for j < len(arrays) && (j == i || n < piece) {
			n += int64(arrays[j].Nbytes())
			j++
		}
		if err := mlx.Eval(arrays[i:j]...); err != nil {
			return err
		}
		done += n
		l.opts.Progress(done, total)
		i = j
	}
	return nil
}

func (l *loader) unexpected(name string) error {
	best := ""
	for p := range l.scopes {
		if strings.HasPrefix(name, p) && len(p) > len(best) {
			best = p
		}
	}
	hint := ""
	if l.quant == nil && (strings.HasSuffix(name, ".scales") || strings.HasSuffix(name, ".biases")) {
		hint = " (config.json has no quantization block)"
	}
	if best != "" {
		return fmt.Errorf("%s: unexpected %s%s", l.scopes[best], strings.TrimPrefix(name, best), hint)
	}
	return fmt.Errorf("unexpected tensor %s%s", name, hint)
}

func (l *loader) freeScratch(kept map[*mlx.Array]bool) {
	for _, a := range l.scratch {
		if !kept[a] {
			a.Free()
		}
	}
	l.scratch = nil
}

func (l *loader) freeTensors() {
	for name, a := range l.tensors {
		a.Free()
		delete(l.tensors, name)
	}
}

func (l *loader) closeFiles() {
	for _, f := range l.openFiles {
		f.Close()
	}
	l.openFiles, l.files = nil, nil
}

// Params owns a loaded model's arrays.
type Params struct {
	arrays []*mlx.Array
	// views are arrays over the buffers of arrays (a stack's slices, made
	// at load): freed with them, not counted in Nbytes.
	views []*mlx.Array
	ropes []Rope
	// cacheDtype is the checkpoint's half-precision dtype under float32
	// compute, 0 otherwise.
	cacheDtype mlx.Dtype
}

// CacheDtype is the dtype the model's caches hold keys and values in by
// default: under float32 compute, the half-precision dtype the
// checkpoint's weights (or a quantized checkpoint's scales) are stored in,
// as the checkpoint's own arithmetic would hold them, at half the bytes;
// 0 (as computed) when the model computes in its checkpoint's dtypes, the
// checkpoint holds no half-precision tensor, or the model routes tokens to
// experts (Weights.Routes). A router's choice is discontinuous: where two
// experts nearly tie, rounding the keys and values moves the hidden state
// enough to pick the other, and the output then differs by far more than
// the rounding (measured on the parity matrix's mixtures: 23 of their
// quantized and bfloat16 levels went from within mlx-lm's own distance of
// its float32 run to beyond it). A dense model's output moves with the
// rounding alone, within that distance.
func (p *Params) CacheDtype() mlx.Dtype {
	if p == nil {
		return 0
	}
	return p.cacheDtype
}

// CacheOptions is opts with the model's default cache dtype where opts
// leave it unset.
func (p *Params) CacheOptions(opts kv.Options) kv.Options {
	if opts.Dtype == 0 {
		opts.Dtype = p.CacheDtype()
	}
	return opts
}

// Free releases every array; the model is unusable afterwards.
func (p *Params) Free() {
	if p == nil {
		return
	}
	for _, a := range append(p.arrays, p.views...) {
		a.Free()
	}
	for _, r := range p.ropes {
		FreeRope(r)
	}
	p.arrays, p.views, p.ropes = nil, nil, nil
}

// Nbytes is the size of the weights.
func (p *Params) Nbytes() int {
	n := 0
	for _, a := range p.arrays {
		n += a.Nbytes()
	}
	return n
}

// fileTensor is where a tensor is stored: its file and its name there
// (which a wrapper's Rename may have changed).
type fileTensor struct {
	f    *mlx.SafetensorsFile
	name string
}

// lastFile is the file opened last for sharded reading.
func (l *loader) lastFile() *mlx.SafetensorsFile {
	if len(l.openFiles) == 0 {
		return nil
	}
	return l.openFiles[len(l.openFiles)-1]
}

// markScales lets the .scales of module name be uint8 when p is a
// floating-point mode (mxfp4's power-of-two scales), where every other
// parameter must be a float.
func (w *Weights) markScales(name string, p *QuantParams) {
	if p.affine() {
		return
	}
	if w.l.fpScales == nil {
		w.l.fpScales = map[string]bool{}
	}
	w.l.fpScales[w.prefix+name+".scales"] = true
}

// Holds reports whether the checkpoint has the tensor prefix+name (before
// anything asks for it): how an architecture whose head is tied exactly
// when the checkpoint has no head of its own decides. A listing
// (RecordWeights) holds every tensor, so it lists the untied head.
func (w *Weights) Holds(name string) bool {
	if w.l.record {
		return true
	}
	_, ok := w.l.tensors[w.prefix+name]
	return ok
}

// Matrix is a linear without bias whose weight [out, in] is a plain
// parameter, never quantized (a router mlx-lm keeps as a bare weight).
func (w *Weights) Matrix(name string, out, in int) *Linear {
	if w.l.record {
		w.spec(name+".weight", []int{out, in}, nil, false)
		return &Linear{}
	}
	return &Linear{Weight: w.param(name+".weight", []int{out, in}, false)}
}

// PreciseVector is the parameter name [n] in the wider of its stored
// dtype and the compute dtype: a float32 vector stays float32 (mlx-lm's
// convert keeps some so, A_log among them, and computes with them so),
// and a narrower one is widened only for float32 compute.
func (w *Weights) PreciseVector(name string, n int) *mlx.Array {
	if w.l.record {
		w.spec(name, []int{n}, nil, false)
		return nil
	}
	a := w.lookup(name, []int{n}, false)
	if a == nil {
		return nil
	}
	if want := w.l.opts.Dtype; want == mlx.Float32 && a.Dtype() != mlx.Float32 {
		a = w.cast(a)
	}
	return w.keep(a)
}

// Vector is the parameter name [n]. When the model is loaded over a
// group and the shard plan splits name (AllToSharded: a value per head,
// such as attention sinks), n is this process's share and it reads its
// block of the whole.
func (w *Weights) Vector(name string, n int) *mlx.Array {
	if w.l.record {
		w.spec(name, []int{n}, nil, false)
		return nil
	}
	if w.role(name) == AllToSharded {
		grp := w.l.opts.Group
		return w.block(name, []int{n * grp.Size()}, 0, grp.Size(), grp.Rank(), 1, false)
	}
	return w.param(name, []int{n}, false)
}
