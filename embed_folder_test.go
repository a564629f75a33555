package archgen

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/internal/tinychat"
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
		{`[` + st + `, {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]`, `{"pooling_mode_mean_tokens": true}`,
			modules + ": module 2 is a sentence_transformers.models.Dense, which archgen's embeddings do not run (they pool and normalize)"},
		{`[` + st + `]`, `{"pooling_mode_cls_token": true}`,
			pooling + ": pooling_mode_cls_token, which archgen's embeddings do not do (pooling_mode_lasttoken and pooling_mode_mean_tokens are)"},
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
