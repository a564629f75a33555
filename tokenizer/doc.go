// Package tokenizer reads the tokenizer of a Hugging Face checkpoint
// (tokenizer.json, and tokenizer_config.json beside it) and turns text into
// token ids and ids back into text, as the Hugging Face tokenizers library
// does.
//
// It covers the BPE tokenizers of current checkpoints, in both families:
//
//   - byte-level BPE (GPT-2, Llama 3, Qwen2/3, SmolLM, StarCoder2): a
//     regular-expression split, then each byte mapped to a printable
//     character before the merges;
//   - sentencepiece-style BPE (Llama 2, Mistral, Gemma): spaces become ▁ (a
//     Prepend and Replace normalizer, or a Metaspace pre-tokenizer), and
//     characters the vocabulary lacks fall back to <0xXX> byte tokens.
//
// The parts of tokenizer.json it reads: added_tokens (with single_word,
// lstrip, rstrip, normalized and special); the normalizers NFC, NFD, NFKC,
// NFKD, Lowercase, Prepend, Replace, Strip and Sequence; the pre-tokenizers
// ByteLevel, Split, Metaspace, Digits, Whitespace, WhitespaceSplit and
// Sequence; the BPE model (byte_fallback, fuse_unk, ignore_merges,
// continuing_subword_prefix, end_of_word_suffix); the post-processors
// TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing and
// Sequence; and the decoders ByteLevel, ByteFallback, Fuse, Replace, Strip,
// Metaspace and Sequence. Anything else is an error that names its key.
// Other models (WordPiece, Unigram), BPE dropout, pairs of sequences,
// offsets, truncation and padding are not supported.
//
// LoadFile reads a tokenizer.json as the tokenizers library does. Load reads
// a checkpoint folder as transformers' AutoTokenizer does: it also reads
// tokenizer_config.json (special tokens, chat template) and, for the one
// tokenizer class where transformers rebuilds the pipeline
// (LlamaTokenizer), rebuilds it the same way.
//
// A Stream decodes ids one at a time during generation and returns text
// only once its characters are complete. The chat subpackage renders the
// chat templates of tokenizer_config.json.
package tokenizer
