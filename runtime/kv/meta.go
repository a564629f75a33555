package kv

import (
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
)

// ReadMetadata is the metadata of a prompt-cache file (what Load returns
// beside the caches), read from the file's header alone: which model made
// the cache can be known before loading the model.
func ReadMetadata(path string) (map[string]string, error) {
	h, err := mlx.ReadSafetensorsHeader(path)
	if err != nil {
		return nil, err
	}
	user := map[string]string{}
	for k, v := range h.Metadata {
		if rest, ok := strings.CutPrefix(k, "0."); ok && !strings.HasPrefix(rest, pendingKey) && rest != checksumKey {
			user[rest] = v
		}
	}
	return user, nil
}
