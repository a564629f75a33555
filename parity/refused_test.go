package parity

import (
	"math"
	"testing"

	"github.com/archgen/archgen/runtime/nn"
)

// refusedLevel checks a level mlx-lm cannot run at its own dtype (its
// refs.json records why, and there are no dumps): there is nothing to
// compare with, so it checks only that archgen loads the level in the
// checkpoint's dtype and prefills the case's prompt to finite logits. (At
// the default compute dtype the level is held to mlx-lm's float32 run on
// its weights, which mlx-lm runs.) It returns the table's note.
func refusedLevel(t *testing.T, models string, c CaseInfo, refs *Refs, level, why string) string {
	t.Helper()
	finiteLevel(t, models, c, refs, level)
	return "not compared: mlx-lm refuses it (" + why + "); archgen runs it to finite logits"
}

// leftOutLevel is the check of a level the case leaves out because
// mlx-lm runs it wrongly (why): archgen loads the level's checkpoint, as
// mlx-lm saved it, and runs it to finite logits.
func leftOutLevel(t *testing.T, models string, c CaseInfo, refs *Refs, level, why string) string {
	t.Helper()
	finiteLevel(t, models, c, refs, level)
	return "not compared: mlx-lm runs it wrongly (" + why + "); archgen runs it to finite logits"
}

// finiteLevel loads the level's checkpoint in its own dtype and prefills
// the case's prompt, failing on a logit that is not finite.
func finiteLevel(t *testing.T, models string, c CaseInfo, refs *Refs, level string) {
	t.Helper()
	logits := prefillDirAt(t, LevelDir(models, c, level), refs.Prompt, nn.Options{Dtype: nn.CheckpointDtype})
	for i, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("logit %d is %v", i, v)
		}
	}
}
