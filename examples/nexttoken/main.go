// Command nexttoken loads a model directory, of any supported architecture,
// runs a sequence of token ids through it and prints the logits of the
// next token: the most likely ids and their log-probabilities.
//
//	go run ./examples/nexttoken -model DIR -tokens 1,2,3
//	go run ./examples/nexttoken -tiny /tmp/tiny-llama   # write a tiny random llama first
//
// DIR is a directory as mlx-lm saves it (mlx_lm.convert, or a Hugging Face
// snapshot of a supported model_type): config.json and its safetensors.
// The architecture comes from config.json's model_type, through the
// registry; a Llama-family model also shows what its typed Config holds.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/archgen/archgen/generated/llama"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

func main() {
	dir := flag.String("model", "", "model directory (config.json and safetensors)")
	tiny := flag.String("tiny", "", "write a tiny random llama checkpoint to this directory and use it")
	tokens := flag.String("tokens", "1,2,3,4", "comma-separated token ids")
	top := flag.Int("top", 5, "how many of the most likely next tokens to print")
	dtype := flag.String("dtype", "", "compute dtype (float32, float16, bfloat16, or checkpoint: as stored); default float32 on the CPU")
	flag.Parse()
	if err := run(*dir, *tiny, *tokens, *top, *dtype); err != nil {
		fmt.Fprintln(os.Stderr, "nexttoken:", err)
		os.Exit(1)
	}
}

// tinyLlama is the config of the checkpoint -tiny writes.
const tinyLlama = `{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
 "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
 "rms_norm_eps": 1e-5, "vocab_size": 100, "tie_word_embeddings": true}`

func run(dir, tiny, tokenList string, top int, dtype string) error {
	if tiny != "" {
		specs, err := llama.Tensors([]byte(tinyLlama))
		if err != nil {
			return err
		}
		if err := nn.RandomCheckpoint(tiny, []byte(tinyLlama), specs, mlx.Float32, 1); err != nil {
			return err
		}
		dir = tiny
	}
	if dir == "" {
		return fmt.Errorf("give -model DIR (or -tiny DIR)")
	}
	opts := nn.Options{}
	if dtype != "" {
		dt, err := nn.ParseDtype(dtype)
		if err != nil {
			return fmt.Errorf("-%v", err)
		}
		opts.Dtype = dt
	}
	model, err := registry.Load(dir, opts)
	if err != nil {
		return err
	}
	defer model.Free()
	info := model.Info()
	fmt.Printf("%s: model_type %s on %s, %d layers, hidden %d, vocab %d, %s, %.1f MB of weights\n",
		dir, info.ModelType, info.Arch, info.Layers, info.Hidden, info.VocabSize, info.Dtype, float64(info.Nbytes)/1e6)
	if m, ok := model.(*llama.Model); ok {
		c := m.Config
		fmt.Printf("llama config: %d heads (%d for keys and values) of %d, rope base %g, tied head %v\n",
			c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.RopeTheta, c.TieWordEmbeddings)
	}

	var ids []int32
	for _, s := range strings.Split(tokenList, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || v < 0 || v >= info.VocabSize {
			return fmt.Errorf("token %q is not an id below %d", s, info.VocabSize)
		}
		ids = append(ids, int32(v))
	}
	tok, err := mlx.NewArray(ids, 1, len(ids))
	if err != nil {
		return err
	}
	defer tok.Free()

	caches := model.NewCaches()
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	g := mlx.NewGraph(nil)
	defer g.Close()
	logits := model.Forward(g, tok, caches) // [1, L, vocab]
	L := len(ids)
	last := g.Reshape(g.Slice(logits, []int{0, L - 1, 0}, []int{1, L, info.VocabSize}), info.VocabSize)
	logp := g.Subtract(g.AsType(last, mlx.Float32), g.LogSumExp(g.AsType(last, mlx.Float32), true, -1))
	if err := g.Eval(logp); err != nil {
		return err
	}
	v, err := logp.Float32s()
	if err != nil {
		return err
	}
	order := make([]int, len(v))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return v[order[a]] > v[order[b]] })
	fmt.Printf("next token after %v:\n", ids)
	for _, id := range order[:min(top, len(order))] {
		fmt.Printf("  %6d  log p %8.4f  (p %.4f)\n", id, v[id], math.Exp(float64(v[id])))
	}
	return nil
}
