package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
)

// pythonCmd runs the project venv's python on args.
func pythonCmd(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	p, err := filepath.Abs("../.deps/py/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the project venv is missing (%v): run `make setup`", err)
	}
	return exec.Command(p, args...)
}

// badFiles writes testdata/make_bad_gguf.py's files into a new directory.
func badFiles(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	out, err := pythonCmd(t, "testdata/make_bad_gguf.py", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("make_bad_gguf.py: %v\n%s", err, out)
	}
	return dir
}

// TestReadRefuses: files llama.cpp's gguf library wrote that Read cannot
// load are refused with a message naming the file and the tensor or
// architecture, before any tensor data is read.
func TestReadRefuses(t *testing.T) {
	dir := badFiles(t)
	readable := "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4"
	cut := filepath.Join(dir, "f32.gguf")
	data, err := os.ReadFile(cut)
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := ParseHeader(bytes.NewReader(data), int64(len(data)), cut)
	if err != nil {
		t.Fatal(err)
	}
	last := hdr.Tensors[len(hdr.Tensors)-1]
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// q4_k.gguf's token_embd.weight as rows of 128 values (8 of them): the
	// same bytes, in rows that are not whole Q4_K blocks
	q4k, err := os.ReadFile(filepath.Join(dir, "q4_k.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	name := []byte("token_embd.weight")
	at := bytes.Index(q4k, name) + len(name) + 4 // past the name and its dimension count
	binary.LittleEndian.PutUint64(q4k[at:], 128)
	binary.LittleEndian.PutUint64(q4k[at+8:], 8)
	halfRows := write("q4_k-rows.gguf", q4k)
	header := write("cut-header.gguf", data[:100])
	body := write("cut-body.gguf", data[:len(data)-16])
	for _, c := range []struct {
		name, path, want string
	}{
		{"type without a kernel", filepath.Join(dir, "iq2_xxs.gguf"),
			"tensor token_embd.weight is stored as IQ2_XXS, which archgen cannot read (readable: " + readable + ")"},
		{"ternary type", filepath.Join(dir, "tq1_0.gguf"),
			"tensor token_embd.weight is stored as TQ1_0, which archgen cannot read (readable: " + readable + ")"},
		{"block type on a vector", filepath.Join(dir, "q4_norm.gguf"),
			"tensor output_norm.weight is stored as Q4_0, which archgen reads for matrices and stacks of them (experts' weights) only"},
		{"rows that are not whole blocks", halfRows, "tensor token_embd.weight: rows of 128 values are not whole Q4_K blocks of 256"},
		{"unsupported architecture", filepath.Join(dir, "rwkv6.gguf"),
			`GGUF architecture "rwkv6" is not supported (supported: [apertus bailingmoe bailingmoe2 bert cohere2 command-r deepseek deepseek2 dots1 ernie4_5 ernie4_5-moe exaone exaone-moe exaone4 falcon-h1 gemma gemma2 gemma3 gemma4 glm4 glm4moe gpt-oss gpt2 gptneox granite granitehybrid granitemoe hunyuan-dense internlm2 lfm2 lfm2moe llama mamba mamba2 mellum minicpm minicpm3 minimax-m2 mistral3 nemotron nemotron_h nemotron_h_moe nomic-bert olmo2 olmoe phi2 phi3 qwen qwen2 qwen2moe qwen2vl qwen3 qwen35 qwen35moe qwen3moe qwen3next qwen3vl qwen3vlmoe seed_oss smollm3 stablelm starcoder starcoder2])`},
		{"architecture read only from other files", filepath.Join(dir, "deepseek2_softmax.gguf"),
			`GGUF architecture "deepseek2" is read only from files with deepseek2.expert_gating_func == 2 (deepseek_v3's; this file's: 1)`},
		{"feed-forward widths that are not one and twice it", filepath.Join(dir, "gemma4_widths.gguf"),
			"gemma4.feed_forward_length: layer 1 is 96 wide, where the narrowest is 64 (archgen reads widths of it and twice it)"},
		{"key/value heads that differ within a kind of layer", filepath.Join(dir, "gemma4_kv.gguf"),
			"gemma4.attention.head_count_kv: layer 3 has 3 key/value heads, where the others of its kind (full attention) have 1"},
		{"rope factors other than turning and still", filepath.Join(dir, "gemma4_rope.gguf"),
			"tensor rope_freqs.weight: entry 1 is 0.5: archgen reads factors of 1 (the pairs that turn, first) and 1e30 (those that do not)"},
		{"fused rows that do not split", filepath.Join(dir, "gemma4_split.gguf"),
			"tensor model.layers.0.experts.gate_up.weight [2 3 64] does not split into 2 equal parts of rows (experts.switch_glu.gate_proj, experts.switch_glu.up_proj)"},
		{"a number no word names", filepath.Join(dir, "bailingmoe2_gating.gguf"),
			"bailingmoe2.expert_gating_func is 3, which archgen does not read (it reads [1 2])"},
		{"fused rows that do not split by group", filepath.Join(dir, "qwen3next_groups.gguf"),
			"tensor model.layers.0.linear_attn.in_proj_ba.weight [8 64] does not split into 3 groups (linear_num_key_heads) of 2 equal parts of rows (linear_attn.in_proj_b, linear_attn.in_proj_a)"},
		{"feed-forward widths for fewer layers", filepath.Join(dir, "nemotron_h_widths.gguf"),
			"nemotron_h.feed_forward_length holds 2 widths, for 3 layers"},
		{"parts of a joined projection that do not split into its groups", filepath.Join(dir, "internlm2_groups.gguf"),
			"layer 0: model.layers.0.attention.wqkv (attention.wq, attention.wk, attention.wv): part 3's 5 rows do not split into 2 groups (num_key_value_heads)"},
		{"quotient of metadata keys that is not whole", filepath.Join(dir, "mamba2_heads.gguf"),
			"mamba2.ssm.inner_size (100) is not a whole multiple of mamba2.ssm.time_step_rank (3)"},
		{"fused qkv that does not split by head", filepath.Join(dir, "gptneox_qkv.gguf"),
			"tensor model.h.0.attention.query_key_value.weight (llama.cpp's attn_qkv): 190 rows do not split into q, k and v of 4 heads"},
		{"quantized tensor whose form is undone", filepath.Join(dir, "qwen35_conv_q8.gguf"),
			"tensor model.layers.0.linear_attn.conv1d.weight (llama.cpp's ssm_conv1d) is quantized, which archgen reads for matrices only"},
		{"key/value heads a layer that differ", filepath.Join(dir, "lfm2_kv_mixed.gguf"),
			"lfm2.attention.head_count_kv: layer 2 has 4 key/value heads, where the others with attention have 2"},
		{"key/value heads a layer, none with attention", filepath.Join(dir, "lfm2_kv_none.gguf"),
			"lfm2.attention.head_count_kv: no layer has attention"},
		{"key/value heads for fewer layers", filepath.Join(dir, "lfm2_kv_short.gguf"),
			"lfm2.attention.head_count_kv holds 2 counts, for 3 layers"},
		{"fused qkv by head with shared key/value heads", filepath.Join(dir, "gptneox_kv.gguf"),
			"2 key/value heads for 4 query heads: a fused qkv grouped by head needs one of each a head"},
		{"cut in the header", header, "not a valid GGUF file: metadata key llama.block_count: the file ends inside its header (truncated?)"},
		{"cut in the tensor data", body,
			fmt.Sprintf("tensor %s: its %d bytes at offset %d run past the end of the file (truncated?)", last.Name, 4*last.Dims[0]*last.Dims[1], last.Offset)},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := Read(c.path, nil, registry.Archs())
			if err == nil {
				m.Free()
				t.Fatal("Read succeeded")
			}
			if want := c.path + ": " + c.want; err.Error() != want {
				t.Fatalf("error\n%s\nwant\n%s", err, want)
			}
		})
	}
	if hdr.Version != 3 || hdr.Strings["general.architecture"] != "llama" || !slices.Contains(hdr.Keys, "llama.block_count") {
		t.Errorf("header %+v", hdr)
	}
	if len(hdr.Tensors) != 2 || hdr.Tensors[1].Name != "token_embd.weight" || hdr.Tensors[1].Type.String() != "F32" ||
		!slices.Equal(hdr.Tensors[1].Dims, []uint64{64, 4}) {
		t.Errorf("tensors %+v", hdr.Tensors)
	}
}

// FuzzParseHeader: no input makes the GGUF header reader or the tensor
// reader panic, or accept entries that do not fit in the file (a type code
// out of range, rows that are not whole blocks, data past the end).
func FuzzParseHeader(f *testing.F) {
	dir := badFiles(f)
	files, _ := filepath.Glob(filepath.Join(dir, "*.gguf"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("GGUF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHeader(bytes.NewReader(data), int64(len(data)), "fuzz.gguf")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.gguf: not a valid GGUF file: ") {
				t.Fatalf("error without the file's name: %v", err)
			}
			return
		}
		for _, ti := range h.Tensors {
			if len(ti.Dims) == 0 || len(ti.Dims) > 4 {
				t.Fatalf("tensor %s has %d dimensions", ti.Name, len(ti.Dims))
			}
			// what the tensor reader would take of it: within the file
			if _, _, _, n, err := layout(h, ti); err == nil && h.DataOffset+int64(ti.Offset)+n > h.Size {
				t.Fatalf("tensor %s: %d bytes at %d accepted past the end of a file of %d", ti.Name, n, ti.Offset, h.Size)
			}
		}
		// and the reader itself on the file: every tensor read, or an
		// error naming the file
		p := filepath.Join(t.TempDir(), "fuzz.gguf")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ts, err := readTensors(p, h)
		if err != nil {
			if !strings.HasPrefix(err.Error(), p+": ") {
				t.Fatalf("error without the file's name: %v", err)
			}
			return
		}
		for _, x := range ts {
			x.array.Free()
		}
	})
}
