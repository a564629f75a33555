package nn

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
)

// needKeys is an error naming the keys the scaling object lacks (a key
// present with null counts as present), nil when it has them all.
func (r *RopeScaling) needKeys(keys ...string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r.raw, &m); err != nil {
		return err
	}
	var missing []string
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("must contain the keys %s (missing %s)", strings.Join(keys, ", "), strings.Join(missing, ", "))
	}
	if r.LongFactor == nil {
		return fmt.Errorf("long_factor: want a number or a list of numbers, got null")
	}
	return nil
}

// suMscaleRope is RopeSuMscale's rope: suRope's frequencies, with
// long_mscale as the input scale where it is set and not 0.
func suMscaleRope(g *mlx.Graph, spec RopeSpec, r *RopeScaling) *freqRope {
	fr := suRope(g, spec.Dims, spec.Base, spec.MaxPositions, spec.OriginalMaxPositions, r.LongFactor)
	if fr != nil && r.LongMscale != nil && *r.LongMscale != 0 {
		fr.mscale = *r.LongMscale
	}
	return fr
}
