package parity

import (
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/nn"
)

// refusedLevel checks a level mlx-lm cannot run (its refs.json records
// why, and there are no dumps): the model loads, and its prefill of the
// case's prompt fails with libmlx's same refusal, as an error, not a
// crash. It returns the table's note.
func refusedLevel(t *testing.T, models string, c CaseInfo, refs *Refs, level, why string) string {
	t.Helper()
	m, err := registry.Load(LevelDir(models, c, level), nn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	_, _, err = Prefill(m, refs.Prompt)
	switch {
	case err == nil:
		t.Errorf("mlx-lm refuses this level (%s), but archgen runs it: there is nothing to compare with", why)
	case !strings.Contains(err.Error(), why):
		t.Errorf("mlx-lm refuses this level with %q; archgen with %q", why, err)
	}
	return "mlx-lm refuses it, and so does archgen: " + why
}
