package nn

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// ropeCase is one case of testdata/rope.json, written by
// testdata/rope_reference.py from mlx-lm's own rope classes.
type ropeCase struct {
	Name                 string          `json:"name"`
	Kind                 string          `json:"kind"`
	HeadDim              int             `json:"head_dim"`
	Offset               int             `json:"offset"`
	Dims                 int             `json:"dims"`
	Base                 float64         `json:"base"`
	Traditional          bool            `json:"traditional"`
	Scaling              json.RawMessage `json:"scaling"`
	MaxPositions         int             `json:"max_positions"`
	OriginalMaxPositions int             `json:"original_max_positions"`
	Out                  []float64       `json:"out"`
}

func TestRopeMatchesMLXLM(t *testing.T) {
	data, err := os.ReadFile("testdata/rope.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		B, H, L int
		Cases   []ropeCase
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]RopeKind{"plain": RopePlain, "scaled": RopeScaled, "su": RopeSu}
	for _, c := range ref.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var rs *RopeScaling
			if len(c.Scaling) > 0 && string(c.Scaling) != "null" {
				if rs, err = ParseRopeScaling(c.Scaling); err != nil {
					t.Fatal(err)
				}
			}
			kind := kinds[c.Kind]
			if rs, err = CheckRopeScaling(kind, rs, c.MaxPositions); err != nil {
				t.Fatal(err)
			}
			rope, err := NewRope(RopeSpec{Kind: kind, Dims: c.Dims, Base: c.Base, Traditional: c.Traditional,
				Scaling: rs, MaxPositions: c.MaxPositions, OriginalMaxPositions: c.OriginalMaxPositions}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer FreeRope(rope)
			g := mlx.NewGraph(nil)
			defer g.Close()
			n := ref.B * ref.H * ref.L * c.HeadDim
			x := g.Reshape(g.Sin(g.MultiplyScalar(g.Arange(0, float64(n), 1, mlx.Float32), 0.37)), ref.B, ref.H, ref.L, c.HeadDim)
			y := rope.Apply(g, x, c.Offset)
			if err := g.Eval(y); err != nil {
				t.Fatal(err)
			}
			got, _ := y.Float32s()
			if len(got) != len(c.Out) {
				t.Fatalf("%d values, want %d", len(got), len(c.Out))
			}
			worst := 0.0
			for i := range got {
				worst = math.Max(worst, math.Abs(float64(got[i])-c.Out[i]))
			}
			if worst > 1e-6 {
				t.Fatalf("differs from mlx-lm by up to %g", worst)
			}
		})
	}
}

func TestCheckRopeScaling(t *testing.T) {
	parse := func(s string) *RopeScaling {
		r, err := ParseRopeScaling(json.RawMessage(s))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, c := range []struct {
		kind   RopeKind
		in     string
		maxPos int
		want   string // error, or "" for none
		off    bool   // scaling turned off
	}{
		{RopeScaled, `{"rope_type": "llama3", "factor": 8}`, 0, "", false},
		{RopeScaled, `{"rope_type": "llama3"}`, 0, `type "llama3" needs factor`, false},
		{RopeScaled, `{"type": "dynamic", "factor": 2}`, 0, `type "dynamic" needs max_position_embeddings in the config`, false},
		{RopeScaled, `{"type": "longrope", "long_factor": [1], "short_factor": [1]}`, 4096, `type "longrope" needs original_max_position_embeddings`, false},
		{RopeScaled, `{"type": "mrope", "mrope_section": [1, 2]}`, 0, `type "mrope" needs an mrope_section of 3 entries, got 2`, false},
		{RopeScaled, `{"type": "ntk"}`, 0, `unsupported type "ntk" (want one of default, linear, dynamic, llama3, yarn, deepseek_yarn, telechat3-yarn, longrope, proportional, mrope)`, false},
		{RopeSu, `{"long_factor": [1]}`, 0, "must contain the keys long_factor and type", false},
		{RopeSu, `{"type": "su", "long_factor": [1]}`, 0, `type "su" needs short_factor`, false},
		{RopeSu, `{"type": "yarn", "long_factor": [1], "factor": 2}`, 0, "", true},
		{RopePlain, `{"type": "anything"}`, 0, "", true},
	} {
		got, err := CheckRopeScaling(c.kind, parse(c.in), c.maxPos)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != c.want || (err == nil && (got == nil) != c.off) {
			t.Errorf("%s: got %v, %q; want off=%v, %q", c.in, got, msg, c.off, c.want)
		}
	}
	if _, err := ParseRopeScaling(json.RawMessage(`{"factor": "big"}`)); err == nil || err.Error() != `factor: want a number, got "big"` {
		t.Errorf("bad factor: %v", err)
	}
	if r, err := ParseRopeScaling(json.RawMessage(`{}`)); r != nil || err != nil {
		t.Errorf("{} reads as %v, %v; want none", r, err)
	}
}
