// Package kv holds the key/value caches generated forward passes attend
// over, and the masks that go with them, with the semantics of mlx-lm's
// cache.py and base.py (mlx-lm 0.32).
//
// # Kinds
//
//   - Plain (NewPlain): every position, in buffers that grow by 256
//     positions and are written with slice_update (mlx-lm's KVCache).
//   - Rotating (NewRotating): a window of maxSize positions, the first keep
//     pinned, written into a ring when decoding (mlx-lm's RotatingKVCache).
//   - Either one quantized: NewQuantized, or Quantize with a Quantization,
//     which can also switch a cache to quantized once its offset reaches a
//     start (mlx-lm's QuantizedKVCache and quantized_kv_start). Unlike in
//     mlx-lm, a rotating cache can be quantized too.
//   - States (NewStates): a recurrent layer's slots, each one array the
//     layer replaces at every step (a short convolution's last inputs, a
//     recurrence's state), nil for a fresh sequence (mlx-lm's
//     ArraysCache). Not trimmable; MergeStates, Filter and Extract move its
//     rows as a batch changes.
//   - List (NewList): a layer's several caches, read part by part (mlx-lm's
//     CacheList: Falcon-H1's attention beside its state-space state).
//
// Options picks the kinds for a model's layers: Full for full-attention
// layers, Sliding for sliding-window ones, with mlx-lm's max_kv_size and
// KV quantization, and the dtype they hold keys and values in (Hold: a
// model computing in float32 on a half-precision checkpoint holds them in
// the checkpoint's dtype by default, half the bytes to keep and to read;
// attention widens them exactly where it reads them).
//
// # A step
//
// A forward pass over L new tokens asks each group of layers that share a
// mask (all full layers; all sliding layers of one window) for it once, of
// the group's first cache, before any Update:
//
//	full := caches[0].Mask(g, L, 0, false)
//	swa := caches[1].Mask(g, L, window, false)
//
// Mask gives what mlx-lm gives: the "causal" mode where it suffices, no
// mask for one query, and a boolean array (true attends) for windows that
// bind and when forceArray asks for one (attention written out by hand,
// such as gemma2's); PromptMask makes the same choices for a pass without
// caches. Then each layer rotates its queries and keys from
// Offset, calls Update and attends over the KV it returns:
//
//	o := kv.Attend(g, q, c.Update(g, k, v), kv.Spec{Scale: scale, Mask: mask})
//
// Attention runs MLX's fused kernel on dense caches and attention on the
// quantized keys and values on quantized ones. Attention written out by
// hand uses Scores, MaskScores and Mix, which take both kinds and handle
// grouped-query heads.
//
// # Batches
//
// Batched holds one layer's keys and values for several sequences of
// different lengths, as mlx-lm's BatchKVCache and BatchRotatingKVCache do,
// but with each row in a slot of its own: its entries at the positions its
// own cache holds them (mlx-lm right-aligns the rows behind left padding),
// an offset per row, and masks that hide what a row does not hold.
// Sequences join by Merge (their own caches, after their prompts) and
// Extend, and leave by Filter, between steps: a join writes the joining
// rows into free slots, a leave moves the last rows into the freed ones,
// and the batch is copied only when it outgrows its room (runtime/mlx's
// CacheRows writes the rows in place). A batched cache's
// Mask binds the rows' offsets to the step's graph (RowOffsets), and the
// ropes of runtime/nn rotate each row from its own position, so a generated
// forward pass runs a batch unchanged. A window batch keeps each row's ring
// where the row's own cache keeps it, so a row's logits are those it gets
// alone, bit for bit, as long as the model's kernels round a row alike
// however many rows they multiply (runtime/mlx's float32 quantized kernel
// takes another path past two rows, a rounding apart).
//
// # Lifetimes and writing in place
//
// A cache owns its arrays across graphs and releases the handle of every
// buffer a step replaces before the step is evaluated, so that nothing but
// the step's graph refers to the old buffer and MLX writes into it in
// place. For that, close (or Reset) each step's graph before building the
// next: arrays of an earlier step that view a buffer keep it from being
// reused. Evaluating a step's logits evaluates its writes; a step left
// unevaluated is not lost, but the next one then builds on its lazy graph.
//
// # Files
//
// Save writes a list of caches of mixed kinds to a safetensors file and
// Load reads it back; the layout is mlx-lm's save_prompt_cache's, so that
// mlx-lm's load_prompt_cache reads files of KVCache, QuantizedKVCache and
// RotatingKVCache layers, and Load reads mlx-lm's. Layer i's state items
// are tensors named "i.j" ("i.j.t" for the parts t of a quantized triple):
//
//	KVCache                   i.0 keys [B, Hkv, N, D], i.1 values, i.2 offset
//	QuantizedKVCache          i.0.0-2 the keys' packed uint32 weight, scales and
//	                          biases, i.1.0-2 the values', i.2 offset,
//	                          i.3 group size, i.4 bits
//	RotatingKVCache           i.0 keys, i.1 values (ring order), i.2 offset,
//	                          i.3 keep, i.4 max size, i.5 next write slot
//	QuantizedRotatingKVCache  i.0.0-2 and i.1.0-2 as QuantizedKVCache, then
//	                          i.2-i.5 as RotatingKVCache, i.6 group size,
//	                          i.7 bits (this package's own kind)
//	ArraysCache               i.0.j slot j (None when empty), i.1 left_padding
//	                          and i.2 lengths (None: Load refuses others)
//	CacheList                 i.k.0.* part k's state as above, i.k.1 its class
//	                          name (a string: character codes, marked "string")
//
// Scalars are 0-d int32 tensors. The keys and values of an empty cache are
// empty float32 tensors standing for None. A plain cache saves the positions
// it holds (mlx-lm saves its whole buffer; either loads). The metadata holds
// "1.i" = layer i's kind (the names above); "2.0" = "" and, for each scalar
// or None tensor, "2.k.0" = its name and "2.k.1" = "scalar" or "none"; and
// "0.key" = the caller's metadata. A dense cache due to switch to quantized
// records that in "0.kv_quantize_i" = "bits=B group=G start=S", and a
// States cache its token count in "0.kv_offset_i" (mlx-lm's ArraysCache
// keeps none; its files load with 0), a list's part k under the key "i.k";
// mlx-lm passes both on as metadata.
//
// Save records a CRC-32C of the tensors (each one's name, dtype, shape and
// bytes, in name order) in "0.kv_crc32c", and Load refuses a file whose
// tensors disagree with it (files without one, mlx-lm's, load by the
// layout's checks alone). Save writes a temporary file beside the path,
// syncs it and renames it over the path, so that a reader never sees part
// of a file and a failed save leaves the earlier one.
package kv
