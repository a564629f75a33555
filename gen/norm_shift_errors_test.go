package gen

import "testing"

// TestNormShiftErrors: weights.norm_shift's bad forms, each with its exact
// message.
func TestNormShiftErrors(t *testing.T) {
	good := base + "weights:\n  norm_shift: {add: 1, norms: [.input_layernorm.weight], when_suffix: .mlp.experts.0.up_proj.weight}\n"
	if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(good)}); err != nil {
		t.Fatalf("a whole norm_shift: %v", err)
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"without when_suffix", base + "weights:\n  norm_shift: {add: 1, norms: [.input_layernorm.weight]}\n",
			"descriptors/a.yaml:20: weights.norm_shift: add, norms and when_suffix go together"},
		{"a name with a space", base + "weights:\n  norm_shift: {add: 1, norms: [\"input layernorm\"], when_suffix: x}\n",
			`descriptors/a.yaml:20: weights.norm_shift.norms: entry 0, "input layernorm", is not the end of a checkpoint name`},
		{"add not a number", base + "weights:\n  norm_shift: {add: one, norms: [x], when_suffix: x}\n",
			`descriptors/a.yaml:20: weights.norm_shift.add: want a number, got "one"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(c.yaml)})
			if err == nil || err.Error() != c.want {
				t.Fatalf("error\n%v\nwant\n%s", err, c.want)
			}
		})
	}
}
