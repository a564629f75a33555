package kv

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
)

// The kinds of cache a file names, as mlx-lm's classes are named.
// quantizedRotatingClass has no counterpart in mlx-lm.
const (
	plainClass             = "KVCache"
	quantizedClass         = "QuantizedKVCache"
	rotatingClass          = "RotatingKVCache"
	quantizedRotatingClass = "QuantizedRotatingKVCache"
	statesClass            = "ArraysCache"
	listClass              = "CacheList"
)

// pendingKey is the reserved metadata key that records a dense cache's
// pending switch to quantized (layer i: pendingKey + "i").
const pendingKey = "kv_quantize_"

// statesOffsetKey is the reserved metadata key that records a States
// cache's Offset (layer i: statesOffsetKey + "i"), which mlx-lm's
// ArraysCache does not keep; a file without it loads with Offset 0.
const statesOffsetKey = "kv_offset_"

// Save writes the state of caches (one per layer, of any kinds) and
// metadata to the safetensors file at path, in the layout described in the
// package documentation, with a checksum of its tensors in its metadata.
// The file is written beside path and renamed to it once whole: a reader
// never sees part of one. Metadata keys must not start with
// "kv_quantize_" or "kv_offset_", nor be "kv_crc32c".
func Save(path string, caches []Cache, metadata map[string]string) error {
	g := mlx.NewGraph(nil)
	defer g.Close()
	w := &stateWriter{g: g, arrays: map[string]*mlx.Array{}, meta: map[string]string{"2.0": ""}}
	for k, v := range metadata {
		if strings.HasPrefix(k, pendingKey) || strings.HasPrefix(k, statesOffsetKey) || k == checksumKey {
			return fmt.Errorf("%s: metadata key %q is reserved", path, k)
		}
		w.meta["0."+k] = v
	}
	for i, c := range caches {
		if err := w.cache(i, c); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := g.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	sum, err := tensorsChecksum(w.arrays)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	w.meta["0."+checksumKey] = sum
	return writeAtomically(path, func(tmp string) error { return mlx.SaveSafetensors(tmp, w.arrays, w.meta) })
}

type stateWriter struct {
	g       *mlx.Graph
	arrays  map[string]*mlx.Array
	meta    map[string]string
	scalars int
}

// cache writes layer i's cache: its state under "i." and its class in the
// metadata.
func (w *stateWriter) cache(i int, c Cache) error {
	key := strconv.Itoa(i)
	class, err := w.state(key+".", key, c)
	if err != nil {
		return fmt.Errorf("layer %d: %w", i, err)
	}
	w.meta["1."+key] = class
	return nil
}

// state writes c's state items under prefix p and returns its class; key
// names its entries in the metadata (a pending quantization, a token
// count): the layer's index, or "i.k" for part k of a list.
func (w *stateWriter) state(p, key string, c Cache) (string, error) {
	var s *store
	var arrs []*mlx.Array
	var q Quantization
	var class string
	switch c := c.(type) {
	case *Plain:
		s, q = &c.s, c.quant
		if !s.empty() {
			arrs = c.filled(w.g)
		}
		class = pick(s, plainClass, quantizedClass)
		w.kv(p, s, arrs)
		w.int(p+"2", c.offset)
		if s.quantized() {
			w.int(p+"3", s.group)
			w.int(p+"4", s.bits)
		}
	case *Rotating:
		if c.bad != nil {
			return "", c.bad
		}
		s, q, arrs = &c.s, c.quant, c.s.arrs
		class = pick(s, rotatingClass, quantizedRotatingClass)
		w.kv(p, s, arrs)
		w.int(p+"2", c.offset)
		w.int(p+"3", c.keep)
		w.int(p+"4", c.maxSize)
		w.int(p+"5", c.idx)
		if s.quantized() {
			w.int(p+"6", s.group)
			w.int(p+"7", s.bits)
		}
	case *States:
		// mlx-lm's ArraysCache state: (slots, left_padding, lengths).
		for j, a := range c.slots {
			name := p + "0." + strconv.Itoa(j)
			if a == nil {
				w.none(name)
			} else {
				w.arrays[name] = a
			}
		}
		w.none(p + "1")
		w.none(p + "2")
		w.meta["0."+statesOffsetKey+key] = strconv.Itoa(c.offset)
		return statesClass, nil
	case *List:
		// mlx-lm's CacheList state: a (state, class name) pair a part.
		for k, part := range c.parts {
			pk := p + strconv.Itoa(k) + "."
			cls, err := w.state(pk+"0.", key+"."+strconv.Itoa(k), part)
			if err != nil {
				return "", fmt.Errorf("part %d: %w", k, err)
			}
			w.str(pk+"1", cls)
		}
		return listClass, nil
	default:
		return "", fmt.Errorf("cannot save a %T", c)
	}
	if s.broken != nil {
		return "", fmt.Errorf("the cache is unusable after a failed step: %v", s.broken)
	}
	if q.Bits > 0 && !s.quantized() {
		w.meta["0."+pendingKey+key] = fmt.Sprintf("bits=%d group=%d start=%d", q.Bits, q.group(), q.Start)
	}
	return class, nil
}

// pick is a store's class: dense, or quantized.
func pick(s *store, dense, quantized string) string {
	if s.quantized() {
		return quantized
	}
	return dense
}

// kv writes keys and values as items 0 and 1 of layer prefix p: arrays
// dense, triples quantized, and None (an empty array) for an empty cache.
func (w *stateWriter) kv(p string, s *store, arrs []*mlx.Array) {
	if arrs == nil {
		w.none(p + "0")
		w.none(p + "1")
		return
	}
	if !s.quantized() {
		w.arrays[p+"0"], w.arrays[p+"1"] = arrs[0], arrs[1]
		return
	}
	for j := range 3 {
		w.arrays[fmt.Sprintf("%s0.%d", p, j)] = arrs[j]
		w.arrays[fmt.Sprintf("%s1.%d", p, j)] = arrs[3+j]
	}
}

// special records that the array at name stands for a Python value.
func (w *stateWriter) special(name, kind string) {
	w.scalars++
	k := "2." + strconv.Itoa(w.scalars)
	w.meta[k+".0"] = name
	w.meta[k+".1"] = kind
}

func (w *stateWriter) int(name string, v int) {
	w.arrays[name] = mlx.FromSlice(w.g, []int32{int32(v)})
	w.special(name, "scalar")
}

// str writes a string as mlx-lm does: its characters' codes, marked.
func (w *stateWriter) str(name, v string) {
	codes := make([]int32, 0, len(v))
	for _, r := range v {
		codes = append(codes, int32(r))
	}
	w.arrays[name] = mlx.FromSlice(w.g, codes, len(codes))
	w.special(name, "string")
}

func (w *stateWriter) none(name string) {
	w.arrays[name] = mlx.FromSlice(w.g, []float32{}, 0)
	w.special(name, "none")
}

// Load reads the caches and metadata of a file written by Save, or by
// mlx-lm's save_prompt_cache when it holds only KVCache, QuantizedKVCache
// and RotatingKVCache layers. Errors name the file, the layer and the
// tensor.
func Load(path string) ([]Cache, map[string]string, error) {
	arrays, meta, err := mlx.LoadSafetensors(path, nil)
	if err != nil {
		return nil, nil, err
	}
	r := &stateReader{path: path, arrays: arrays, special: map[string]string{}, taken: map[string]bool{}}
	defer r.freeRest()
	if want, ok := meta["0."+checksumKey]; ok {
		got, err := tensorsChecksum(arrays)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if got != want {
			return nil, nil, fmt.Errorf("%s: its tensors do not match the checksum in its metadata (CRC-32C %s, recorded %s): the file was altered or damaged", path, got, want)
		}
		delete(meta, "0."+checksumKey)
	}
	caches, user, err := r.read(meta)
	if err != nil {
		for _, c := range caches {
			c.Free()
		}
		return nil, nil, err
	}
	return caches, user, nil
}

type stateReader struct {
	path    string
	arrays  map[string]*mlx.Array
	special map[string]string // tensor name -> "scalar", "none", ...
	taken   map[string]bool   // arrays now owned by a cache
	where   string            // the layer (and part) being read, for errors
	// pending and offsets are the metadata's pending quantizations and
	// token counts, by layer ("i") or list part ("i.k"); each is removed
	// once applied.
	pending map[string]string
	offsets map[string]int
}

func (r *stateReader) read(meta map[string]string) ([]Cache, map[string]string, error) {
	user := map[string]string{}
	classes := map[int]string{}
	r.pending, r.offsets = map[string]string{}, map[string]int{}
	for k, v := range meta {
		head, rest, _ := strings.Cut(k, ".")
		switch head {
		case "0":
			if key, ok := strings.CutPrefix(rest, statesOffsetKey); ok {
				n, err := strconv.Atoi(v)
				if !layerKey(key) || err != nil || n < 0 {
					return nil, nil, fmt.Errorf("%s: metadata %q = %q: not a layer's token count", r.path, k, v)
				}
				r.offsets[key] = n
				continue
			}
			if key, ok := strings.CutPrefix(rest, pendingKey); ok {
				if !layerKey(key) {
					return nil, nil, fmt.Errorf("%s: metadata %q: bad layer number", r.path, k)
				}
				r.pending[key] = v
				continue
			}
			user[rest] = v
		case "1":
			i, err := strconv.Atoi(rest)
			if err != nil || i < 0 {
				return nil, nil, fmt.Errorf("%s: metadata %q: not a layer's cache class", r.path, k)
			}
			classes[i] = v
		case "2":
			n, field, ok := strings.Cut(rest, ".")
			if !ok || field != "0" {
				continue
			}
			if _, err := strconv.Atoi(n); err != nil {
				return nil, nil, fmt.Errorf("%s: metadata %q: bad scalar entry", r.path, k)
			}
			kind, ok := meta["2."+n+".1"]
			if !ok {
				return nil, nil, fmt.Errorf("%s: metadata %q has no type (2.%s.1)", r.path, k, n)
			}
			r.special[v] = kind
		}
	}
	if len(classes) == 0 {
		return nil, nil, fmt.Errorf("%s: not a prompt cache file: no cache classes in its metadata (keys 1.<layer>)", r.path)
	}
	caches := make([]Cache, 0, len(classes))
	// The layers' state caches whose token count the metadata does not
	// give (mlx-lm's files, whose ArraysCache keeps none): every layer saw
	// the same tokens, so they take the count of the file's other caches.
	var uncounted []*States
	defer func() {
		most := 0
		for _, c := range caches {
			most = max(most, c.Offset())
		}
		for _, st := range uncounted {
			st.offset = most
		}
	}()
	for i := range len(classes) {
		class, ok := classes[i]
		if !ok {
			return caches, nil, fmt.Errorf("%s: metadata names caches for %d layers but not for layer %d", r.path, len(classes), i)
		}
		key := strconv.Itoa(i)
		r.where = fmt.Sprintf("layer %d (%s)", i, class)
		_, counted := r.offsets[key]
		c, err := r.part(key+".", key, class)
		if err != nil {
			return caches, nil, err
		}
		if st, ok := c.(*States); ok && !counted {
			uncounted = append(uncounted, st)
		}
		caches = append(caches, c)
	}
	for key := range r.pending {
		return caches, nil, fmt.Errorf("%s: metadata %q: no layer %s", r.path, pendingKey+key, key)
	}
	for key := range r.offsets {
		return caches, nil, fmt.Errorf("%s: metadata %q: no layer %s", r.path, "0."+statesOffsetKey+key, key)
	}
	return caches, user, nil
}

// layerKey: a layer's index, or a list part's ("i.k", "i.k.j", ...).
func layerKey(key string) bool {
	for _, f := range strings.Split(key, ".") {
		if n, err := strconv.Atoi(f); err != nil || n < 0 {
			return false
		}
	}
	return true
}

// part reads the cache of class whose state items lie under prefix p, and
// applies the metadata's entries for key to it.
func (r *stateReader) part(p, key, class string) (Cache, error) {
	c, err := r.cache(p, class)
	if err != nil {
		return nil, err
	}
	if n, ok := r.offsets[key]; ok {
		delete(r.offsets, key)
		st, isStates := c.(*States)
		if !isStates {
			c.Free()
			return nil, fmt.Errorf("%s: metadata %q: layer %s is a %s, not an %s", r.path, "0."+statesOffsetKey+key, key, class, statesClass)
		}
		st.offset = n
	}
	if spec, ok := r.pending[key]; ok {
		delete(r.pending, key)
		var q Quantization
		if _, err := fmt.Sscanf(spec, "bits=%d group=%d start=%d", &q.Bits, &q.GroupSize, &q.Start); err != nil || q.Check() != nil {
			c.Free()
			return nil, fmt.Errorf("%s: metadata %q = %q: not a KV quantization", r.path, "0."+pendingKey+key, spec)
		}
		switch c := c.(type) {
		case *Plain:
			c.quant = q
		case *Rotating:
			c.quant = q
		}
	}
	return c, nil
}

// list reads a CacheList's parts: part k's state under p + "k.0.", its
// class, a string, at p + "k.1".
func (r *stateReader) list(p, key string) (Cache, error) {
	l := &List{}
	where := r.where
	for k := 0; ; k++ {
		pk := p + strconv.Itoa(k) + "."
		if _, ok := r.arrays[pk+"1"]; !ok {
			break
		}
		class, err := r.str(pk + "1")
		if err != nil {
			l.Free()
			return nil, err
		}
		r.where = fmt.Sprintf("%s part %d (%s)", where, k, class)
		c, err := r.part(pk+"0.", key+"."+strconv.Itoa(k), class)
		r.where = where
		if err != nil {
			l.Free()
			return nil, err
		}
		l.parts = append(l.parts, c)
	}
	if len(l.parts) == 0 {
		return nil, r.errf("no parts (tensors %q, ...)", p+"0.1")
	}
	return l, nil
}

func (r *stateReader) errf(format string, args ...any) error {
	return fmt.Errorf("%s: %s: %s", r.path, r.where, fmt.Sprintf(format, args...))
}

// cache builds a cache of class from its state items under prefix p.
func (r *stateReader) cache(p, class string) (Cache, error) {
	switch class {
	case plainClass, quantizedClass:
		c := NewPlain()
		var err error
		if c.offset, err = r.int(p + "2"); err != nil {
			return nil, err
		}
		if class == quantizedClass {
			if c.s.group, err = r.int(p + "3"); err != nil {
				return nil, err
			}
			if c.s.bits, err = r.int(p + "4"); err != nil {
				return nil, err
			}
		}
		if err := r.kv(p, &c.s); err != nil {
			return nil, err
		}
		c.quant = Quantization{Bits: c.s.bits, GroupSize: c.s.group}
		if c.offset < 0 || c.offset > c.s.length() || (c.s.empty() && c.offset != 0) {
			err := r.errf("offset %d outside the %d positions held", c.offset, c.s.length())
			c.Free()
			return nil, err
		}
		return c, nil
	case rotatingClass, quantizedRotatingClass:
		var vals [4]int // offset, keep, max_size, idx
		for j := range vals {
			v, err := r.int(p + strconv.Itoa(2+j))
			if err != nil {
				return nil, err
			}
			vals[j] = v
		}
		c := NewRotating(vals[2], vals[1])
		if c.bad != nil {
			return nil, r.errf("%v", c.bad)
		}
		c.offset, c.idx = vals[0], vals[3]
		if class == quantizedRotatingClass {
			var err error
			if c.s.group, err = r.int(p + "6"); err != nil {
				return nil, err
			}
			if c.s.bits, err = r.int(p + "7"); err != nil {
				return nil, err
			}
		}
		if err := r.kv(p, &c.s); err != nil {
			return nil, err
		}
		c.quant = Quantization{Bits: c.s.bits, GroupSize: c.s.group}
		if c.offset < 0 || c.idx < 0 || c.idx > c.s.length() || (c.s.empty() && c.offset != 0) {
			err := r.errf("offset %d and write slot %d do not fit the %d slots held", c.offset, c.idx, c.s.length())
			c.Free()
			return nil, err
		}
		return c, nil
	case statesClass:
		return r.states(p)
	case listClass:
		return r.list(p, strings.TrimSuffix(p, "."))
	}
	return nil, r.errf("unknown cache class (this package reads %s, %s, %s, %s, %s and %s)",
		plainClass, quantizedClass, rotatingClass, quantizedRotatingClass, statesClass, listClass)
}

// states reads an ArraysCache layer: its slots p0.0, p0.1, ... (arrays, or
// None for an empty slot), then left_padding (p1) and lengths (p2), which
// a cache saved between batched steps holds and this package does not
// take.
func (r *stateReader) states(p string) (Cache, error) {
	for _, item := range []string{"1", "2"} {
		if _, ok := r.arrays[p+item]; ok && r.special[p+item] != "none" {
			return nil, r.errf("tensor %q: an %s saved in the middle of a batched prompt (with left_padding or lengths) is not taken; save it after the prompt", p+item, statesClass)
		}
	}
	var slots []*mlx.Array
	for j := 0; ; j++ {
		name := p + "0." + strconv.Itoa(j)
		a, ok := r.arrays[name]
		if !ok {
			break
		}
		if r.special[name] == "none" {
			slots = append(slots, nil)
			continue
		}
		if a.Ndim() < 1 {
			return nil, r.errf("tensor %q: shape %v, not [B, ...]", name, a.Shape())
		}
		if len(slots) > 0 && slots[0] != nil && a.Dim(0) != slots[0].Dim(0) {
			return nil, r.errf("tensor %q: %d rows beside %d in slot 0", name, a.Dim(0), slots[0].Dim(0))
		}
		slots = append(slots, a)
	}
	if len(slots) == 0 {
		return nil, r.errf("no slots (tensors %q, ...)", p+"0.0")
	}
	c := NewStates(len(slots))
	for j, a := range slots {
		if a == nil {
			continue
		}
		if err := mlx.Eval(a); err != nil {
			return nil, r.errf("reading slot %d: %v", j, err)
		}
		r.taken[p+"0."+strconv.Itoa(j)] = true
		c.slots[j] = a
	}
	return c, nil
}

// kv reads items 0 (keys) and 1 (values) of layer prefix p into s, whose
// bits and group say whether to expect dense arrays or quantized triples.
func (r *stateReader) kv(p string, s *store) error {
	if s.bits != 0 {
		if err := checkQuantization(s.bits, s.group); err != nil {
			return r.errf("%v", err)
		}
	}
	if r.special[p+"0"] == "none" || r.special[p+"1"] == "none" {
		if r.special[p+"0"] != r.special[p+"1"] {
			return r.errf("keys and values must both be present or both be None")
		}
		return nil
	}
	var names []string
	if s.bits == 0 {
		names = []string{p + "0", p + "1"}
	} else {
		for _, side := range []string{"0", "1"} {
			for j := range 3 {
				names = append(names, p+side+"."+strconv.Itoa(j))
			}
		}
	}
	arrs := make([]*mlx.Array, len(names))
	for i, name := range names {
		a, ok := r.arrays[name]
		if !ok {
			return r.errf("missing tensor %q", name)
		}
		if a.Ndim() != 4 {
			return r.errf("tensor %q: shape %v, not [B, Hkv, N, D]", name, a.Shape())
		}
		if packed := s.bits != 0 && i%3 == 0; !packed && !cacheDtype(a.Dtype()) {
			return r.errf("tensor %q: dtype %s, want float32, bfloat16 or float16", name, a.Dtype())
		}
		if a0 := arrs[0]; i > 0 && (a.Dim(0) != a0.Dim(0) || a.Dim(1) != a0.Dim(1) || a.Dim(2) != a0.Dim(2)) {
			return r.errf("tensor %q: shape %v disagrees with %q's %v", name, a.Shape(), names[0], a0.Shape())
		}
		arrs[i] = a
	}
	if err := mlx.Eval(arrs...); err != nil {
		return r.errf("reading keys and values: %v", err)
	}
	s.batch, s.heads = arrs[0].Dim(0), arrs[0].Dim(1)
	if s.bits == 0 {
		s.kdim, s.vdim = arrs[0].Dim(3), arrs[1].Dim(3)
	} else {
		dims := [2]int{}
		for side := range 2 {
			w, sc, b := arrs[3*side], arrs[3*side+1], arrs[3*side+2]
			if w.Dtype() != mlx.Uint32 {
				return r.errf("tensor %q: a packed weight must be uint32, not %s", names[3*side], w.Dtype())
			}
			d := w.Dim(3) * 32 / s.bits
			if w.Dim(3)*32%s.bits != 0 || sc.Dim(3)*s.group != d || b.Dim(3) != sc.Dim(3) {
				return r.errf("tensors %q: %v packed at %d bits does not match scales %v and biases %v in groups of %d",
					names[3*side], w.Shape(), s.bits, sc.Shape(), b.Shape(), s.group)
			}
			dims[side] = d
		}
		s.kdim, s.vdim = dims[0], dims[1]
	}
	for _, name := range names {
		r.taken[name] = true
	}
	s.arrs = arrs
	// Later steps are held as the file holds its keys and values (a
	// quantized store's scales).
	s.dtype = arrs[min(s.bits, 1)].Dtype()
	return nil
}

// int reads a scalar item.
func (r *stateReader) int(name string) (int, error) {
	a, ok := r.arrays[name]
	if !ok {
		return 0, r.errf("missing scalar %q", name)
	}
	if kind := r.special[name]; kind != "scalar" {
		return 0, r.errf("tensor %q is not marked as a scalar in the metadata", name)
	}
	v, err := a.Item()
	if err != nil {
		return 0, r.errf("scalar %q: %v", name, err)
	}
	if v != math.Trunc(v) || math.Abs(v) > math.MaxInt32 {
		return 0, r.errf("scalar %q = %v is not an integer", name, v)
	}
	return int(v), nil
}

// str reads a string item (its characters' codes, marked "string").
func (r *stateReader) str(name string) (string, error) {
	a, ok := r.arrays[name]
	if !ok {
		return "", r.errf("missing string %q", name)
	}
	if kind := r.special[name]; kind != "string" {
		return "", r.errf("tensor %q is not marked as a string in the metadata", name)
	}
	if a.Ndim() != 1 {
		return "", r.errf("string %q: shape %v, not a list of character codes", name, a.Shape())
	}
	if a.Dim(0) == 0 {
		return "", nil
	}
	codes, err := a.Int32s()
	if err != nil {
		return "", r.errf("string %q: %v", name, err)
	}
	out := make([]rune, len(codes))
	for i, c := range codes {
		out[i] = rune(c)
	}
	return string(out), nil
}

// freeRest releases the arrays no cache took.
func (r *stateReader) freeRest() {
	for name, a := range r.arrays {
		if !r.taken[name] {
			a.Free()
		}
	}
}
