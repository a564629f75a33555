package parity

import (
	"math"
	"testing"
)

// refusedLevel checks a level mlx-lm cannot run (its refs.json records
// why, and there are no dumps): there is nothing to compare with, so it
// checks only that archgen loads the level and prefills the case's prompt
// to finite logits. It returns the table's note.
func refusedLevel(t *testing.T, models string, c CaseInfo, refs *Refs, level, why string) string {
	t.Helper()
	logits := prefillDir(t, LevelDir(models, c, level), refs.Prompt)
	for i, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("logit %d is %v", i, v)
		}
	}
	return "not compared: mlx-lm refuses it (" + why + "); archgen runs it to finite logits"
}
