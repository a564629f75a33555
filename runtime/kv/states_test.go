package kv

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// normal is a random float32 array of shape, kept past g's Close.
func normal(g *mlx.Graph, seed uint64, dt mlx.Dtype, shape ...int) *mlx.Array {
	a := g.AsType(g.Normal(shape, mlx.Float32, 0, 1, g.RandomKey(seed)), dt)
	return a
}

// TestStates: slots set and replaced, sizes, no trimming, and an attention
// layer handed a state cache failing its graph.
func TestStates(t *testing.T) {
	g := mlx.NewGraph(nil)
	defer g.Close()
	c := NewStates(2)
	defer c.Free()
	if !c.Empty() || c.Nbytes() != 0 || c.Slot(0) != nil || c.Slots() != 2 {
		t.Fatalf("a new cache: empty %v, %d bytes, %d slots", c.Empty(), c.Nbytes(), c.Slots())
	}
	conv := normal(g, 1, mlx.BFloat16, 1, 3, 8)
	state := normal(g, 2, mlx.Float32, 1, 2, 4, 4)
	c.SetSlot(g, 0, conv)
	c.SetSlot(g, 1, state)
	c.Advance(5)
	if err := mlx.Eval(c.Slot(0), c.Slot(1)); err != nil {
		t.Fatal(err)
	}
	if c.Empty() || c.Offset() != 5 || c.Nbytes() != 3*8*2+2*4*4*4 {
		t.Errorf("empty %v, offset %d, %d bytes", c.Empty(), c.Offset(), c.Nbytes())
	}
	if c.Trimmable() || c.Trim(2) != 0 || c.Offset() != 5 {
		t.Errorf("a state cache trimmed")
	}
	c.SetSlot(g, 1, normal(g, 3, mlx.Float32, 1, 2, 4, 4))
	if err := mlx.Eval(c.Slot(1)); err != nil {
		t.Fatal(err)
	}
	g2 := mlx.NewGraph(nil)
	defer g2.Close()
	kv := c.Update(g2, g2.Zeros([]int{1, 1, 1, 4}, mlx.Float32), g2.Zeros([]int{1, 1, 1, 4}, mlx.Float32))
	if err := g2.Eval(kv.Keys); err == nil || !strings.Contains(err.Error(), "recurrent state (States), which holds no keys and values") {
		t.Errorf("Update on a state cache: %v", err)
	}
	c.Free()
	if !c.Empty() || c.Offset() != 0 || c.Nbytes() != 0 {
		t.Error("Free left something")
	}
}

// TestMergeStates: rows of several sequences stacked in order, an empty
// slot read as zeros, then filtered and extracted back.
func TestMergeStates(t *testing.T) {
	g := mlx.NewGraph(nil)
	defer g.Close()
	a, b, empty := NewStates(2), NewStates(2), NewStates(2)
	for _, c := range []*States{a, b, empty} {
		defer c.Free()
	}
	a.SetSlot(g, 0, normal(g, 1, mlx.Float32, 1, 3, 4))
	a.SetSlot(g, 1, normal(g, 2, mlx.Float32, 1, 2, 2))
	b.SetSlot(g, 1, normal(g, 3, mlx.Float32, 2, 2, 2))
	a.Advance(3)
	b.Advance(7)
	m, err := MergeStates(g, []*States{a, b, empty})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	if m.Offset() != 7 || m.Slot(0).Dim(0) != 4 || m.Slot(1).Dim(0) != 4 {
		t.Fatalf("merged: offset %d, rows %d and %d", m.Offset(), m.Slot(0).Dim(0), m.Slot(1).Dim(0))
	}
	row := func(c *States, slot, r int) []float32 {
		xc, err := c.Extract(g, r)
		if err != nil {
			t.Fatal(err)
		}
		x := xc.(*States)
		defer x.Free()
		v, err := g.AsType(x.Slot(slot), mlx.Float32).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	same := func(what string, got, want []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s[%d] = %g, want %g", what, i, got[i], want[i])
			}
		}
	}
	same("row 0 slot 0", row(m, 0, 0), row(a, 0, 0))
	same("row 1 slot 0 (empty in its part)", row(m, 0, 1), make([]float32, 12))
	same("row 2 slot 1", row(m, 1, 2), row(b, 1, 1))
	same("row 3 slot 1 (an empty part)", row(m, 1, 3), make([]float32, 4))
	if err := m.Filter(g, []int{2, 0}); err != nil {
		t.Fatal(err)
	}
	if err := m.Filter(g, []int{2}); err == nil {
		t.Error("row 2 of 2 kept")
	}
	same("filtered row 0", row(m, 1, 0), row(b, 1, 1))
	same("filtered row 1", row(m, 0, 1), row(a, 0, 0))
	if _, err := MergeStates(g, []*States{a, NewStates(3)}); err == nil {
		t.Error("caches of 2 and 3 slots merged")
	}
}

// TestStatesFiles: a file of attention layers, state layers and a list of
// both (Falcon-H1's kind of layer) written by Save reads back the same,
// and mlx-lm's load_prompt_cache reads it as KVCache, ArraysCache and
// CacheList layers with the same arrays; a file mlx-lm's
// save_prompt_cache wrote reads here as Plain, States and List with its
// arrays.
func TestStatesFiles(t *testing.T) {
	dir := t.TempDir()
	g := mlx.NewGraph(nil)
	defer g.Close()
	kv := NewPlain()
	kv.Update(g, normal(g, 1, mlx.Float32, 1, 2, 5, 8), normal(g, 2, mlx.Float32, 1, 2, 5, 8))
	full, half := NewStates(2), NewStates(2)
	full.SetSlot(g, 0, normal(g, 3, mlx.BFloat16, 1, 3, 12))
	full.SetSlot(g, 1, normal(g, 4, mlx.Float32, 1, 2, 4, 6))
	half.SetSlot(g, 1, normal(g, 5, mlx.Float32, 1, 2, 4, 6))
	full.Advance(5)
	ssm := NewStates(2)
	ssm.SetSlot(g, 0, normal(g, 6, mlx.Float32, 1, 3, 10))
	ssm.SetSlot(g, 1, normal(g, 7, mlx.Float32, 1, 2, 4, 5))
	ssm.Advance(4)
	attn := NewPlain()
	attn.Update(g, normal(g, 8, mlx.Float32, 1, 1, 4, 8), normal(g, 9, mlx.Float32, 1, 1, 4, 8))
	both := NewList(ssm, attn)
	caches := []Cache{kv, full, half, both}
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	if err := g.Eval(full.Slot(0), full.Slot(1), half.Slot(1), ssm.Slot(0), ssm.Slot(1)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ours.safetensors")
	if err := Save(path, caches, map[string]string{"who": "archgen"}); err != nil {
		t.Fatal(err)
	}

	back, meta, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range back {
			c.Free()
		}
	}()
	if meta["who"] != "archgen" || len(back) != 4 {
		t.Fatalf("read back %d layers, metadata %v", len(back), meta)
	}
	bf, ok1 := back[1].(*States)
	bh, ok2 := back[2].(*States)
	if !ok1 || !ok2 {
		t.Fatalf("layers 1 and 2 read back as %T and %T", back[1], back[2])
	}
	if bf.Offset() != 5 || bh.Slot(0) != nil {
		t.Errorf("offset %d, empty slot %v", bf.Offset(), bh.Slot(0))
	}
	sameArray(t, "slot 1.0", bf.Slot(0), full.Slot(0))
	sameArray(t, "slot 1.1", bf.Slot(1), full.Slot(1))
	sameArray(t, "slot 2.1", bh.Slot(1), half.Slot(1))
	bl, ok := back[3].(*List)
	if !ok || bl.Parts() != 2 {
		t.Fatalf("layer 3 read back as %T", back[3])
	}
	bs, ok1 := bl.Part(0).(*States)
	bp, ok2 := bl.Part(1).(*Plain)
	if !ok1 || !ok2 || bs.Offset() != 4 || bp.Offset() != 4 || bl.Offset() != 4 || bl.Trimmable() {
		t.Fatalf("layer 3's parts: %T and %T, offsets %d, %d", bl.Part(0), bl.Part(1), bl.Part(0).Offset(), bl.Part(1).Offset())
	}
	sameArray(t, "part 3.0 slot 1", bs.Slot(1), ssm.Slot(1))
	sameArray(t, "part 3.1 keys", bp.filled(g)[0], attn.filled(g)[0])

	// mlx-lm reads our file.
	out := filepath.Join(dir, "read.safetensors")
	runStatesRefs(t, "read", path, out)
	arrays, info := loadRefs(t, out)
	for name, class := range map[string]string{"0": "KVCache", "1": "ArraysCache", "2": "ArraysCache", "3": "CacheList", "3.0": "ArraysCache", "3.1": "KVCache"} {
		if got := info["class."+name]; got != class {
			t.Errorf("mlx-lm read %s as %q, want %q", name, got, class)
		}
	}
	if info["empty.2.0"] != "1" || !strings.Contains(info["meta"], "who=archgen") {
		t.Errorf("mlx-lm's view: %v", info)
	}
	sameArray(t, "mlx-lm's slot 1.0", need(t, arrays, "1.0"), full.Slot(0))
	sameArray(t, "mlx-lm's slot 1.1", need(t, arrays, "1.1"), full.Slot(1))
	sameArray(t, "mlx-lm's slot 2.1", need(t, arrays, "2.1"), half.Slot(1))
	sameArray(t, "mlx-lm's part 3.0 slot 0", need(t, arrays, "3.0.0"), ssm.Slot(0))
	sameArray(t, "mlx-lm's part 3.1 keys", need(t, arrays, "3.1.keys"), attn.filled(g)[0])

	// We read mlx-lm's file.
	theirs := filepath.Join(dir, "theirs.safetensors")
	runStatesRefs(t, "write", theirs)
	want, _ := loadRefs(t, theirs+".arrays.safetensors")
	got, meta, err := Load(theirs)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range got {
			c.Free()
		}
	}()
	if meta["who"] != "mlx-lm" || len(got) != 4 {
		t.Fatalf("read %d layers of mlx-lm's file, metadata %v", len(got), meta)
	}
	p, ok := got[0].(*Plain)
	if !ok {
		t.Fatalf("layer 0 is %T", got[0])
	}
	sameArray(t, "their keys", p.filled(g)[0], need(t, want, "0.keys"))
	f, ok1 := got[1].(*States)
	h, ok2 := got[2].(*States)
	if !ok1 || !ok2 {
		t.Fatalf("layers 1 and 2 are %T and %T", got[1], got[2])
	}
	sameArray(t, "their slot 1.0", f.Slot(0), need(t, want, "1.0"))
	sameArray(t, "their slot 1.1", f.Slot(1), need(t, want, "1.1"))
	// mlx-lm's ArraysCache keeps no token count: a state cache takes the
	// count of the attention cache beside it (the rope of a recurrent
	// layer reads it)
	if h.Slot(0) != nil || p.Offset() == 0 || f.Offset() != p.Offset() || h.Offset() != p.Offset() {
		t.Errorf("their empty slot %v, offsets %d and %d, want the attention cache's %d", h.Slot(0), f.Offset(), h.Offset(), p.Offset())
	}
	sameArray(t, "their slot 2.1", h.Slot(1), need(t, want, "2.1"))
	l, ok := got[3].(*List)
	if !ok || l.Parts() != 2 {
		t.Fatalf("their layer 3 is %T", got[3])
	}
	ls, ok1 := l.Part(0).(*States)
	lp, ok2 := l.Part(1).(*Plain)
	if !ok1 || !ok2 {
		t.Fatalf("their layer 3's parts are %T and %T", l.Part(0), l.Part(1))
	}
	sameArray(t, "their part 3.0 slot 0", ls.Slot(0), need(t, want, "3.0.0"))
	sameArray(t, "their part 3.0 slot 1", ls.Slot(1), need(t, want, "3.0.1"))
	sameArray(t, "their part 3.1 keys", lp.filled(g)[0], need(t, want, "3.1.keys"))
	sameArray(t, "their part 3.1 values", lp.filled(g)[1], need(t, want, "3.1.values"))
}

func runStatesRefs(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(python(t), append([]string{"testdata/states_refs.py"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("states_refs.py %v: %v\n%s", args, err, out)
	}
}

// TestStatesFileErrors: an ArraysCache saved between batched steps (with
// left_padding), one without slots, and a token count on a layer that is
// not a state cache, each refused naming the file, the layer and the
// tensor or key.
func TestStatesFileErrors(t *testing.T) {
	dir := t.TempDir()
	g := mlx.NewGraph(nil)
	defer g.Close()
	slot := normal(g, 1, mlx.Float32, 2, 3)
	for _, c := range []struct {
		name   string
		arrays map[string]*mlx.Array
		meta   map[string]string
		want   string
	}{
		{"left padding", map[string]*mlx.Array{"0.0.0": slot, "0.1": mlx.FromSlice(g, []int32{1, 0}, 2)},
			map[string]string{"1.0": "ArraysCache", "2.0": ""},
			`layer 0 (ArraysCache): tensor "0.1": an ArraysCache saved in the middle of a batched prompt (with left_padding or lengths) is not taken; save it after the prompt`},
		{"no slots", map[string]*mlx.Array{"0.1": mlx.FromSlice(g, []float32{}, 0)},
			map[string]string{"1.0": "ArraysCache", "2.0": "", "2.1.0": "0.1", "2.1.1": "none"},
			`layer 0 (ArraysCache): no slots (tensors "0.0.0", ...)`},
		{"list without parts", map[string]*mlx.Array{"0.x": mlx.FromSlice(g, []float32{1}, 1)},
			map[string]string{"1.0": "CacheList", "2.0": ""},
			`layer 0 (CacheList): no parts (tensors "0.0.1", ...)`},
		{"token count on an attention layer", map[string]*mlx.Array{"0.0": mlx.FromSlice(g, []float32{}, 0), "0.1": mlx.FromSlice(g, []float32{}, 0), "0.2": mlx.FromSlice(g, []int32{0})},
			map[string]string{"1.0": "KVCache", "0.kv_offset_0": "3", "2.0": "", "2.1.0": "0.0", "2.1.1": "none", "2.2.0": "0.1", "2.2.1": "none", "2.3.0": "0.2", "2.3.1": "scalar"},
			`metadata "0.kv_offset_0": layer 0 is a KVCache, not an ArraysCache`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".safetensors")
			if err := g.Eval(slot); err != nil {
				t.Fatal(err)
			}
			if err := mlx.SaveSafetensors(path, c.arrays, c.meta); err != nil {
				t.Fatal(err)
			}
			_, _, err := Load(path)
			if want := path + ": " + c.want; err == nil || err.Error() != want {
				t.Errorf("error\n%v\nwant\n%s", err, want)
			}
		})
	}
	if err := Save(filepath.Join(dir, "x.safetensors"), nil, map[string]string{"kv_offset_0": "1"}); err == nil || !strings.Contains(err.Error(), `metadata key "kv_offset_0" is reserved`) {
		t.Errorf("a reserved metadata key: %v", err)
	}
}

// TestList: a list's offset, size and trimming follow its parts (trimmed
// only when every part can be), and an attention layer handed a list fails
// its graph.
func TestList(t *testing.T) {
	g := mlx.NewGraph(nil)
	defer g.Close()
	a, b := NewPlain(), NewPlain()
	a.Update(g, normal(g, 1, mlx.Float32, 1, 1, 5, 4), normal(g, 2, mlx.Float32, 1, 1, 5, 4))
	b.Update(g, normal(g, 3, mlx.Float32, 1, 1, 3, 4), normal(g, 4, mlx.Float32, 1, 1, 3, 4))
	l := NewList(a, b)
	defer l.Free()
	if err := g.Eval(a.filled(g)[0], b.filled(g)[0]); err != nil {
		t.Fatal(err)
	}
	if l.Offset() != 5 || l.Nbytes() != a.Nbytes()+b.Nbytes() || !l.Trimmable() {
		t.Fatalf("offset %d, %d bytes, trimmable %v", l.Offset(), l.Nbytes(), l.Trimmable())
	}
	if n := l.Trim(2); n != 2 || a.Offset() != 3 || b.Offset() != 1 {
		t.Errorf("Trim(2) = %d; parts at %d and %d", n, a.Offset(), b.Offset())
	}
	withState := NewList(NewPlain(), NewStates(1))
	defer withState.Free()
	if withState.Trimmable() || withState.Trim(1) != 0 {
		t.Error("a list with a state part trimmed")
	}
	// The mask is the first part's that makes one (not a state's).
	g2 := mlx.NewGraph(nil)
	defer g2.Close()
	scan := NewList(NewStates(2), a)
	if got, want := scan.Mask(g2, 1, 0, true), a.Mask(g2, 1, 0, true); got.Mode != want.Mode || (got.Array == nil) != (want.Array == nil) || g2.Err() != nil {
		t.Errorf("a state beside keys and values: mask %+v, want the keys' %+v (%v)", got, want, g2.Err())
	}
	states := NewList(NewStates(1), NewStates(2))
	defer states.Free()
	states.Mask(g2, 1, 0, false)
	if err := g2.Err(); err == nil || !strings.Contains(err.Error(), "list of caches (List) none of which makes a mask") {
		t.Errorf("Mask on a list of states: %v", err)
	}
}

// TestMergeRowsKinds: MergeRows batches state caches as States and
// attention caches as Batched, and refuses a mix naming the odd one.
func TestMergeRowsKinds(t *testing.T) {
	g := mlx.NewGraph(nil)
	defer g.Close()
	s, err := MergeRows(g, []Cache{NewStates(2), NewStates(2)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*States); !ok {
		t.Fatalf("state caches batched as a %T", s)
	}
	s.Free()
	b, err := MergeRows(g, []Cache{NewPlain(), NewPlain()})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(*Batched); !ok {
		t.Fatalf("attention caches batched as a %T", b)
	}
	b.Free()
	for _, c := range []struct {
		caches []Cache
		want   string
	}{
		{[]Cache{NewStates(2), NewPlain()}, "kv: cache 1: a *kv.Plain among state caches"},
		{[]Cache{NewPlain(), NewStates(2)}, "kv: cache 1: a *kv.States cannot be batched (Plain and Rotating caches can)"},
		{nil, "kv: merging no caches"},
	} {
		if _, err := MergeRows(g, c.caches); err == nil || err.Error() != c.want {
			t.Errorf("error %v, want %s", err, c.want)
		}
	}
}
