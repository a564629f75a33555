package archgen

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/internal/tinychat"
	"github.com/archgen/archgen/runtime/mlx"
)

// TestEmbedDefaults: a folder's sentence-transformers files set Embed's
// pooling and normalization (Qwen3-Embedding's: the last token,
// normalized; a mean without Normalize); a folder without them has none;
// modules Embed does not run, pooling modes it does not do, and malformed
// files are errors naming the file.
func TestEmbedDefaults(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	require.NoError(t, tinychat.Write(dir, nil, nil))
	m, err := Load(context.Background(), dir, LoadOptions{})
	require.NoError(t, err)
	defer m.Free()
	write := func(modules, pooling string) {
		t.Helper()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "modules.json"), []byte(modules), 0o644))
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), []byte(pooling), 0o644))
	}
	_, ok, err := m.EmbedDefaults()
	require.NoError(t, err)
	assert.False(t, ok, "no modules.json")

	const st = `{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
		{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}`
	write(`[`+st+`, {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]`,
		`{"word_embedding_dimension": 64, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": false, "pooling_mode_lasttoken": true, "include_prompt": true}`)
	d, ok, err := m.EmbedDefaults()
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, EmbedOptions{Pooling: PoolLast}, d)

	write(`[`+st+`]`, `{"pooling_mode_mean_tokens": true, "pooling_mode_lasttoken": false}`)
	d, ok, err = m.EmbedDefaults()
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, EmbedOptions{Pooling: PoolMean, NoNormalize: true}, d)
	// What the defaults ask for is what Embed then gives.
	got, err := m.Embed(context.Background(), []string{"hello there"}, d)
	require.NoError(t, err)
	want, err := m.Embed(context.Background(), []string{"hello there"}, EmbedOptions{Pooling: PoolMean, NoNormalize: true})
	require.NoError(t, err)
	assert.Equal(t, want, got)

	modules := filepath.Join(dir, "modules.json")
	pooling := filepath.Join(dir, "1_Pooling", "config.json")
	for _, c := range []struct{ modules, pooling, want string }{
		{`[` + st + `, {"path": "2_Other", "type": "sentence_transformers.models.WeightedLayerPooling"}]`, `{"pooling_mode_mean_tokens": true}`,
			modules + ": module 2 is a sentence_transformers.models.WeightedLayerPooling, which archgen's embeddings do not run (they pool, run Dense modules and normalize)"},
		{`[{"path": "", "type": "sentence_transformers.models.Transformer"}, {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]`, `{}`,
			modules + ": module 1, a Dense module, comes before the Pooling module; archgen runs Dense modules on the pooled vectors"},
		{`[` + st + `, {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]`, `{"pooling_mode_mean_tokens": true}`,
			filepath.Join(dir, "2_Dense", "config.json") + ": no such file or directory"},
		{`[` + st + `]`, `{"pooling_mode_max_tokens": true}`,
			pooling + ": pooling_mode_max_tokens, which archgen's embeddings do not do (pooling_mode_lasttoken, pooling_mode_mean_tokens and pooling_mode_cls_token are)"},
		{`[` + st + `]`, `{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true}`,
			pooling + ": 2 pooling modes on"},
		{`{"not": "a list"}`, `{}`, modules + ": want a list of modules"},
		{`[{"path": "", "type": "sentence_transformers.models.Transformer"}]`, `{}`,
			modules + ": no sentence_transformers.models.Pooling module: the pooling is not said"},
	} {
		write(c.modules, c.pooling)
		_, _, err := m.EmbedDefaults()
		require.Error(t, err, c.modules)
		assert.Contains(t, err.Error(), c.want)
	}
}

// TestEmbedDenseRefusals: a Dense module's files that readDense cannot
// run are errors naming the file and the key; a good one reads its
// weights as they are stored.
func TestEmbedDenseRefusals(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "2_Dense")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	cfgPath := filepath.Join(dir, "config.json")
	weights := func(shape ...int) {
		t.Helper()
		n := 1
		for _, s := range shape {
			n *= s
		}
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32(i)
		}
		a, err := mlx.NewArray(vals, shape...)
		require.NoError(t, err)
		defer a.Free()
		require.NoError(t, mlx.SaveSafetensors(filepath.Join(dir, "model.safetensors"), map[string]*mlx.Array{"linear.weight": a}, nil))
	}
	for _, c := range []struct{ config, want string }{
		{`{"out_features": 8}`, cfgPath + ": in_features: want a positive integer"},
		{`{"in_features": 4, "out_features": 8, "activation_function": "torch.nn.modules.activation.ReLU"}`,
			cfgPath + `: activation_function "torch.nn.modules.activation.ReLU", which archgen's Dense modules do not run (Identity and Tanh do)`},
		{`{"in_features": 4, "out_features": 8, "bias": false}`,
			dir + ": no model.safetensors: archgen reads a Dense module's weights from it (not pytorch_model.bin)"},
	} {
		require.NoError(t, os.WriteFile(cfgPath, []byte(c.config), 0o644))
		_, err := readDense(dir)
		assert.EqualError(t, err, c.want)
	}
	weights(4, 8)
	_, err := readDense(dir)
	assert.EqualError(t, err, filepath.Join(dir, "model.safetensors")+": linear.weight is [4 8], want [8 4] (out_features, in_features)")
	weights(8, 4)
	d, err := readDense(dir)
	require.NoError(t, err)
	assert.Equal(t, Dense{In: 4, Out: 8, Activation: "identity", Weight: d.Weight}, d)
	assert.Equal(t, float32(31), d.Weight[31])
}
