package nn

import (
	"fmt"
	"sort"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
)

// fp8Scale is the suffix of an FP8 weight's scale: W.weight_scale_inv
// beside W.weight, the layout of Hugging Face's per-tensor FP8 checkpoints
// (Ministral 3's, for one).
const fp8Scale = "_scale_inv"

// dequantFP8 turns every FP8 weight of the checkpoint into the scale's
// float dtype at load: W.weight (F8_E4M3 codes, loaded as uint8) becomes
// from_fp8(W.weight) * W.weight_scale_inv, and the scale is consumed. The
// codes are read as FP8 values first: multiplying the raw uint8 codes by the
// scale would give other numbers. Only one scale per tensor is read (a
// block-wise scale is refused, naming the tensor). In a group of processes
// each one dequantizes whole weights and keeps its slices of them.
func (l *loader) dequantFP8() error {
	var scales []string
	for name := range l.tensors {
		if strings.HasSuffix(name, ".weight"+fp8Scale) {
			scales = append(scales, name)
		}
	}
	if len(scales) == 0 {
		return nil
	}
	sort.Strings(scales)
	for _, sname := range scales {
		wname := strings.TrimSuffix(sname, fp8Scale)
		s, w := l.tensors[sname], l.tensors[wname]
		if w == nil {
			return fmt.Errorf("tensor %s: a scale without its weight %s", sname, wname)
		}
		if w.Dtype() != mlx.Uint8 {
			return fmt.Errorf("tensor %s: %s, want FP8 codes (F8_E4M3) beside its scale %s", wname, w.Dtype(), sname)
		}
		if !s.Dtype().IsFloat() || s.Size() != 1 {
			return fmt.Errorf("tensor %s: %s of shape %v, want one float (a scale per tensor; block-wise FP8 scales are not read)", sname, s.Dtype(), s.Shape())
		}
		g := l.g
		deq := g.Multiply(g.FromFP8(w, s.Dtype()), g.Reshape(s))
		g.Keep(deq)
		if err := g.Eval(deq); err != nil {
			return fmt.Errorf("tensor %s: %w", wname, err)
		}
		w.Free()
		s.Free()
		delete(l.tensors, sname)
		l.tensors[wname] = deq
		// In a group, slices come from the dequantized weight, not from
		// the file's codes.
		delete(l.files, wname)
		delete(l.files, sname)
	}
	return nil
}
