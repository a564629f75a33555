package nn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
)

// ShardRole is how a linear layer is split over the processes of a group
// in tensor parallelism, as mlx's sharded layers split it.
type ShardRole int

const (
	// Replicated: every process holds the whole layer.
	Replicated ShardRole = iota
	// AllToSharded: each process holds a block of the output rows (and of
	// the bias): a whole input in, its part of the output out.
	AllToSharded
	// ShardedToAll: each process holds a block of the input columns; the
	// partial products are summed over the group (all_sum), then the whole
	// bias is added: a part of the input in, the whole output out.
	ShardedToAll
)

func (r ShardRole) String() string {
	switch r {
	case Replicated:
		return "replicated"
	case AllToSharded:
		return "all-to-sharded"
	case ShardedToAll:
		return "sharded-to-all"
	}
	return fmt.Sprintf("ShardRole(%d)", int(r))
}

// ShardPlan is an architecture's tensor-parallel plan: what a model loaded
// with a group of N processes splits. It is data only, so a generated
// architecture states it beside its Arch:
//
//   - Linears maps the names the architecture passes to Weights.Linear
//     within a scope ("self_attn.q_proj", "mlp.down_proj") to their roles;
//     a linear not listed is replicated, and so are embeddings and norms.
//   - Counts are config.json keys (the JSON names of the parsed config's
//     integer fields) that N divides once the config is parsed: head
//     counts, KV head counts, intermediate sizes. The model is then built
//     on the divided config, so every shape it asks for is its own share.
//   - Parts names the fused linears whose split axis holds equal parts.
//
// A sharded linear asks for its local shape: an all-to-sharded one
// [out/N, in], a sharded-to-all one [out, in/N]; the loader reads that
// block of the checkpoint's [out, in] tensor.
type ShardPlan struct {
	Linears map[string]ShardRole
	Counts  []string
	// Parts are the fused linears among Linears, with the number of equal
	// parts along the split axis (2 for a gate_up projection): each part
	// is split on its own, as mlx's shard_linear splits its segments.
	Parts map[string]int
}

// ShardError is the refusal of a model that a group cannot share.
type ShardError struct {
	Size int
	Msg  string
}

func (e *ShardError) Error() string {
	return fmt.Sprintf("cannot shard over %d processes: %s", e.Size, e.Msg)
}

// sharding is whether opts ask for a model split over a group.
func (o Options) sharding() bool { return o.Group != nil && o.Group.Size() > 1 }

// divideCounts divides the plan's counts of the parsed config c (a pointer
// to a struct with JSON-tagged fields) by the group size, or refuses the
// config, naming every count that does not divide.
func divideCounts(c any, plan *ShardPlan, n int) error {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("nn: a shard plan needs the config as a struct pointer, got %T", c)
	}
	v = v.Elem()
	fields := map[string]reflect.Value{}
	for i := 0; i < v.NumField(); i++ {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = v.Field(i)
		}
	}
	var bad []string
	var targets []reflect.Value
	for _, key := range plan.Counts {
		f, ok := fields[key]
		if !ok || f.Kind() != reflect.Int {
			return fmt.Errorf("nn: the shard plan divides %q, which the config has no integer field for", key)
		}
		if f.Int()%int64(n) != 0 || f.Int() < int64(n) {
			bad = append(bad, fmt.Sprintf("%s = %d", key, f.Int()))
		}
		targets = append(targets, f)
	}
	if len(bad) > 0 {
		return &ShardError{Size: n, Msg: fmt.Sprintf("%s: the group size must divide each (into at least one per process)", strings.Join(bad, ", "))}
	}
	for _, f := range targets {
		f.SetInt(f.Int() / int64(n))
	}
	return nil
}

// role is the plan's role for the linear name of scope w.
func (w *Weights) role(name string) ShardRole {
	l := w.l
	if l.record || !l.opts.sharding() || l.opts.Shard == nil {
		return Replicated
	}
	return l.opts.Shard.Linears[name]
}

// shardedLinear is Linear for a layer the plan splits: out and in are this
// process's share; the checkpoint holds the whole [out*N, in] or
// [out, in*N] matrix, of which it reads its block.
func (w *Weights) shardedLinear(name string, out, in int, bias bool, role ShardRole) *Linear {
	grp := w.l.opts.Group
	n, r := grp.Size(), grp.Rank()
	full := [2]int{out, in}
	axis := 0
	if role == ShardedToAll {
		axis = 1
	}
	full[axis] *= n
	parts := w.l.opts.Shard.Parts[name]
	l := &Linear{}
	q := w.quantFor(name, full[1])
	switch {
	case q == badQuant:
	case q != nil && mlx.IsBlockMode(q.Mode):
		w.badQuant(name, "%s: %s: block-quantized layers split over a group are not supported", w.local(name), q.Mode)
	case q != nil:
		if full[1]%q.GroupSize != 0 {
			w.badQuant(name, "%s: %d columns do not split into groups of %d", w.local(name), full[1], q.GroupSize)
			break
		}
		if groups := full[1] / q.GroupSize; axis == 1 && groups%(n*max(parts, 1)) != 0 {
			w.badQuant(name, "%s: %v", w.local(name), &ShardError{Size: n, Msg: fmt.Sprintf(
				"its %d input columns make %d quantization groups of %d, which do not divide evenly", full[1], groups, q.GroupSize)})
			break
		}
		w.markScales(name, q)
		weight := w.block(name+".weight", []int{full[0], q.PackedDims(full[1])}, axis, n, r, parts, true)
		scales := w.block(name+".scales", []int{full[0], full[1] / q.GroupSize}, axis, n, r, parts, false)
		var biases *mlx.Array
		if q.affine() {
			biases = w.block(name+".biases", []int{full[0], full[1] / q.GroupSize}, axis, n, r, parts, false)
		}
		if weight != nil && scales != nil && (biases != nil || !q.affine()) {
			l.Q = &mlx.Quantized{Weight: weight, Scales: scales, Biases: biases, GroupSize: q.GroupSize, Bits: q.Bits, Mode: q.Mode}
		}
	default:
		l.Weight = w.block(name+".weight", full[:], axis, n, r, parts, false)
	}
	if bias {
		if role == AllToSharded {
			l.Bias = w.block(name+".bias", []int{full[0]}, 0, n, r, parts, false)
		} else {
			l.Bias = w.param(name+".bias", []int{out}, false)
		}
	}
	if role == ShardedToAll {
		l.Sum = grp
	}
	return l
}

// block is this process's share along axis of the tensor name, whose
// whole shape is shape, made a parameter. The axis holds parts equal parts
// (a fused projection's), each split over the n processes: the share is
// block r of each part, in order. It is read from the tensor's file alone
// when the tensor comes from one, sliced from the tensor otherwise.
func (w *Weights) block(name string, shape []int, axis, n, r, parts int, packed bool) *mlx.Array {
	l := w.l
	full := w.prefix + name
	if parts < 1 {
		parts = 1
	}
	if shape[axis]%(n*parts) != 0 {
		what := fmt.Sprintf("shape %v does not split on axis %d", shape, axis)
		if parts > 1 {
			what = fmt.Sprintf("shape %v does not split on axis %d into %d parts of %d blocks", shape, axis, parts, n)
		}
		w.failf("%s: %v", w.local(name), &ShardError{Size: n, Msg: what})
		l.used[full] = true
		return nil
	}
	whole := w.lookup(name, shape, packed)
	if whole == nil {
		return nil
	}
	part := shape[axis] / parts
	size := part / n
	ft, fromFile := l.files[full]
	var pieces []*mlx.Array
	for p := 0; p < parts; p++ {
		lo := p*part + r*size
		if fromFile {
			a, err := ft.f.ReadSlice(ft.name, axis, lo, lo+size)
			if err != nil {
				w.Fail(err)
				for _, a := range pieces {
					a.Free()
				}
				return nil
			}
			pieces = append(pieces, a)
			continue
		}
		start, stop := make([]int, len(shape)), append([]int(nil), shape...)
		start[axis], stop[axis] = lo, lo+size
		pieces = append(pieces, l.g.Slice(whole, start, stop))
	}
	var a *mlx.Array
	switch {
	case fromFile && parts == 1:
		a = pieces[0]
	case fromFile:
		a = l.g.Concatenate(axis, pieces...)
		l.g.Keep(a)
		l.scratch = append(l.scratch, pieces...) // freed by Finish, once read
	case parts == 1:
		// A copy, so that the whole tensor is not kept alive by a view.
		a = l.g.Contiguous(pieces[0])
		l.g.Keep(a)
	default:
		a = l.g.Concatenate(axis, pieces...)
		l.g.Keep(a)
	}
	// mxfp4's uint8 scales stay as they are, and so does a half-precision
	// matrix under float32 compute (see Weights.matrix)
	if !packed && a.Dtype() != mlx.Uint8 && !(a.Ndim() == 2 && l.storedMatrix(a)) {
		if c := w.cast(a); c != a {
			l.scratch = append(l.scratch, a) // freed by Finish, once read
			a = c
		}
	}
	return w.keep(a)
}

// ParseShardPlan reads a plan written as JSON:
//
//	{"linears": {"self_attn.q_proj": "all-to-sharded", "self_attn.o_proj": "sharded-to-all"},
//	 "counts": ["num_attention_heads", "num_key_value_heads"], "parts": {"mlp.gate_up_proj": 2}}
//
// The roles are spelled as mlx's shard_linear spells them ("replicated"
// too). Errors name the key.
func ParseShardPlan(data []byte) (*ShardPlan, error) {
	var raw struct {
		Linears map[string]string `json:"linears"`
		Counts  []string          `json:"counts"`
		Parts   map[string]int    `json:"parts"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("want {\"linears\": {name: role}, \"counts\": [config key]}: %v", err)
	}
	p := &ShardPlan{Linears: map[string]ShardRole{}, Counts: raw.Counts, Parts: raw.Parts}
	for name, k := range raw.Parts {
		if _, ok := raw.Linears[name]; !ok || k < 1 {
			return nil, fmt.Errorf("parts.%s: want a count of at least 1 for a linear that linears lists", name)
		}
	}
	for name, role := range raw.Linears {
		r, ok := map[string]ShardRole{"replicated": Replicated, "all-to-sharded": AllToSharded, "sharded-to-all": ShardedToAll}[role]
		if !ok {
			return nil, fmt.Errorf("linears.%s: role %q, want all-to-sharded, sharded-to-all or replicated", name, role)
		}
		p.Linears[name] = r
	}
	return p, nil
}
