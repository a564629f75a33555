// Package nn holds the layers and the loading machinery that generated
// architectures call: linear layers that are dense or quantized, embeddings
// (with their use as the output projection of a tied head), norms, every
// rotary-embedding variant mlx-lm knows, config.json reading with exact
// errors, weight loading from a model directory, and the catalog the
// registry of generated architectures is built on.
//
// Generated code is straight-line; what varies with a checkpoint (a bias or
// none, dense or quantized weights, which rope scaling, which layers slide)
// is decided once, at load, by the types in this package: a Linear with or
// without a bias, a Rope chosen by NewRope, a cache spec per layer.
//
// # Loading
//
// Weights reads config.json's quantization block and the safetensors files
// of a directory, and hands out typed modules by checkpoint name:
//
//	w, err := nn.OpenWeights(dir, configJSON, opts)
//	lw := w.Layer("model.layers", 3)             // names below read "layer 3: ..."
//	q := lw.Linear("self_attn.q_proj", 4096, 4096, false)
//	params, err := w.Finish()                    // every problem, named
//
// Every problem is recorded with the tensor's name, as in
// "layer 3: missing self_attn.k_proj.weight", and Finish reports them all,
// together with the tensors nobody asked for. RecordWeights runs the same
// calls without a checkpoint and lists the tensors they ask for, which is
// how tests write random checkpoints of any architecture.
//
// # Several processes
//
// With Options.Group (a group of mlx.InitGroup) and a ShardPlan, a process
// loads only its share of a model: the plan's linears are split by rows
// (all-to-sharded) or by columns with an all_sum after them
// (sharded-to-all), each read from its file alone, and the plan's config
// counts (heads, intermediate sizes) are divided before the model is
// built, so generated code runs its share unchanged.
package nn
