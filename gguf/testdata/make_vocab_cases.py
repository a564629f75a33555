"""Makes GGUF files of the vocabulary kinds package gguf reads, and
llama.cpp's own tokenization of test texts with each.

Usage: make_vocab_cases.py DIR TOOLS_DIR

TOOLS_DIR holds bench/llama-logits (`make setup-llama-tools`). DIR receives:
  spm-prefix.gguf    a SentencePiece-style vocabulary (tokenizer.ggml.model
                     "llama": scored pieces, byte-fallback tokens, no merges)
                     with add_space_prefix true, as llama.cpp's converter
                     writes Llama 2's and Mistral's
  spm-noprefix.gguf  the same with add_space_prefix false (Gemma's)
  bpe-<PRE>.gguf     a byte-level BPE vocabulary (tokenizer.ggml.model
                     "gpt2") under each pre-tokenizer type PRE of
                     PRE_TYPES; its merges are learned on the test texts
                     whole, across spaces, digits, case and punctuation, so
                     that where a pre-tokenizer splits shows in the ids
  wpm-<NAME>.gguf    a WordPiece vocabulary (tokenizer.ggml.model "bert")
                     in the converter's phantom-space spelling, BERT's
                     special tokens at BERT's ids ([PAD] 0, [UNK] 100,
                     [CLS] 101, [SEP] 102, [MASK] 103), the words and
                     suffixes of the texts: wpm-default writes no
                     normalizer keys and no special ids (llama.cpp's
                     defaults: lowercased, accents stripped), wpm-cased
                     tokenizer.ggml.normalizer.lowercase false, wpm-accents
                     lowercase true and strip_accents false, wpm-ids the
                     special ids at other tokens
  gemma4.gguf        Gemma 4's BPE of pieces (tokenizer.ggml.model
                     "gemma4"): <pad>, <eos>, <bos>, <unk>, the control
                     tokens, the 256 <0xXX> byte tokens, the characters of
                     the SentencePiece text and "\n", and merges learned
                     on the texts with spaces as the piece space, across
                     words (llama.cpp splits only at newlines); capitals,
                     accented letters and CJK fall back to bytes
  texts.json         the texts
  ids-<name>.txt     llama.cpp's ids of each text with that file: two lines
                     a text, without and with the vocabulary's BOS

The files hold metadata only (llama.cpp reads them vocab_only). The pieces
are learned on a fixed text by merging the most frequent pair, each merge's
score below the one before, as SentencePiece's BPE scores its pieces; some
characters (capitals, most accented letters, CJK) are left out, so that
their UTF-8 bytes fall back to the byte tokens.
"""

import json
import os
import subprocess
import sys
from collections import Counter

from gguf import GGUFWriter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gguf import add_hparams  # noqa: E402
from make_gguf import byte_alphabet, merge_pairs, writer  # noqa: E402

SPACE = "\u2581"
TEXT = (
    "the quick brown fox jumps over the lazy dog. the dog sleeps; the fox runs "
    "and the other fox thinks about the weather, then the rain. caf\u00e9 au lait, "
    "the caf\u00e9 is open."
)
TEXTS = [
    "the quick brown fox",
    " the  dog",
    "the fox\nthe dog\tsleeps",
    "The Rain, then THE weather.",
    "na\u00efve caf\u00e9 \u00fcber",
    "\u65e5\u672c\u8a9e the fox",
    "",
    "   ",
    "fox.fox;fox,fox",
    "<|im_start|>user\nthe fox<|im_end|>\n",
    "a<|im_end|>b",
    "thethethe",
    "the 12345 foxes don't RUN, I'M sure; x=1+2 <3",
    "http://the.fox/dog?a=b  \t the\r\nrain!!! ...",
    "CamelCaseFox theDOGsleeps \u00c9t\u00e9 \u0394\u03ad\u03bb\u03c4\u03b1",
    "\u4f60\u597d\u4e16\u754c the \u3053\u3093\u306b\u3061\u306f 2024\u5e74",
    "cafe\u0301 nai\u0308ve the\u0301fox \u0915\u093f\u0924\u093e\u092c",
    "(see:Foo.Bar)/baz #tag @user 3.14159 \u65e5\u672c2024\u5e74\u306e\u30c6\u30b9\u30c8",
    "[CLS] the fox [SEP] dogs[MASK]",
    "\u0130stanbul \u00a0the\u3000fox \x07bell thefoxes",
    "\uc548\ub155\ud558\uc138\uc694 \u200bthe\u200bfox \u01d5ber \ufb01le \U0001f642 e\u0301t\u00e9 \u0915\u093f",
]

# llama.cpp's pre-tokenizer types the byte-level cases cover (see
# gguf/tokenizer.go's preSplits and preAliases)
PRE_TYPES = ["default", "gpt-2", "llama-bpe", "qwen2", "smollm", "starcoder", "tekken", "gpt-4o",
             "deepseek-v3", "falcon", "dbrx", "stablelm2", "command-r"]
SPECIALS = ["<|im_start|>", "<|im_end|>"]


def learn(text, n_merges):
    words = Counter(tuple(SPACE + w) for w in text.split(" "))
    return [a + b for a, b in merge_pairs(words, n_merges)]


def vocabulary():
    """Pieces, scores and llama.cpp token types, in SentencePiece's order:
    unknown, BOS, EOS, the 256 byte pieces, the control tokens, then the
    characters and the learned pieces."""
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    for s in SPECIALS:
        tokens.append(s)
        scores.append(0.0)
        types.append(3)
    chars = sorted(set(SPACE + TEXT.replace(" ", "")) - {"\u00e9"}) + ["\u00e9"]
    merges = [m for m in learn(TEXT, 60) if m not in chars]
    for i, m in enumerate(merges):
        tokens.append(m)
        scores.append(-float(i))
        types.append(1)
    for i, c in enumerate(chars):
        tokens.append(c)
        scores.append(-1000.0 - i)
        types.append(1)
    return tokens, scores, types


def write(path, prefix, vocab):
    tokens, scores, types = vocab
    w = GGUFWriter(path, "llama")
    config = {"num_attention_heads": 4, "num_key_value_heads": 4, "hidden_size": 64, "num_hidden_layers": 1,
              "max_position_embeddings": 512, "intermediate_size": 128, "rope_theta": 10000.0,
              "rms_norm_eps": 1e-5}
    add_hparams(w, config, len(tokens))
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def wordpiece_vocabulary():
    """BERT's layout: [PAD], 99 unused pieces, [UNK], [CLS], [SEP], [MASK],
    then every character of the texts (lowercased and not) as a word start
    and as a continuation, the texts' words as word starts, and a few
    suffixes as continuations; CJK ideographs but one are left out, so that
    their words are unknown. Returns the pieces in the converter's
    phantom-space spelling and their llama.cpp token types."""
    import unicodedata

    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    types = [3] + [1] * 99 + [3, 3, 3, 3]
    tokens[1:100] = [SPACE + t for t in tokens[1:100]]
    seen = set(tokens)

    def add(piece):
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            types.append(1)

    text = " ".join(TEXTS + [TEXT])
    folded = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
    for c in sorted(set(text + text.lower() + folded)):
        if c.isspace() or ("\u4e00" <= c <= "\u9fff" and c != "\u65e5"):
            continue
        add(SPACE + c)
        add(c)
    for w in sorted(set((text + " " + folded).replace(".", " ").replace(",", " ").replace(";", " ").split())):
        if w.isalpha() and len(w) > 1:
            add(SPACE + w)
    for suffix in ("s", "es", "ing", "er", "ly", "ox", "he"):
        add(suffix)
    return tokens, types


def write_wordpiece(path, vocab, keys):
    tokens, types = vocab
    w = GGUFWriter(path, "llama")
    config = {"num_attention_heads": 4, "num_key_value_heads": 4, "hidden_size": 64, "num_hidden_layers": 1,
              "max_position_embeddings": 512, "intermediate_size": 128, "rope_theta": 10000.0,
              "rms_norm_eps": 1e-5}
    add_hparams(w, config, len(tokens))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    for k in ("lowercase", "strip_accents"):
        if k in keys:
            w.add_bool("tokenizer.ggml.normalizer." + k, keys[k])
    if "ids" in keys:
        unk, cls, sep = keys["ids"]
        w.add_uint32("tokenizer.ggml.unknown_token_id", unk)
        w.add_uint32("tokenizer.ggml.bos_token_id", cls)
        w.add_uint32("tokenizer.ggml.seperator_token_id", sep)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# The WordPiece files: their names and the keys each writes.
WORDPIECE_CASES = {"default": {}, "cased": {"lowercase": False}, "accents": {"lowercase": True, "strip_accents": False},
                   "ids": {"ids": (103, 102, 101)}}


def bpe_vocabulary(n_merges=400):
    """Control tokens, the 256 bytes in GPT-2's alphabet, and merges learned
    on the texts (and the SentencePiece text) without splitting them."""
    alphabet = byte_alphabet()
    merges = merge_pairs(Counter(tuple(alphabet[b] for b in t.encode()) for t in TEXTS + [TEXT] if t and "<|" not in t),
                         n_merges)
    specials = ["<|endoftext|>"] + SPECIALS
    tokens = specials + alphabet
    for a, b in merges:
        if a + b not in tokens:
            tokens.append(a + b)
    types = [3] * len(specials) + [1] * (len(tokens) - len(specials))
    return tokens, types, merges


def write_bpe(path, pre):
    config = {"num_attention_heads": 4, "num_key_value_heads": 4, "hidden_size": 64, "num_hidden_layers": 1,
              "max_position_embeddings": 512, "intermediate_size": 128, "rope_theta": 10000.0,
              "rms_norm_eps": 1e-5}
    w = writer(path, "llama", config, bpe_vocabulary(), pre=pre)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gemma4_vocabulary(n_merges=300):
    """Gemma 4's layout: its four specials, the control tokens, the byte
    tokens, the characters, then the merged pieces, and the merges."""
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"] + SPECIALS
    types = [3, 3, 3, 2] + [3] * len(SPECIALS)
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(6)
    chars = sorted(set(SPACE + "\n" + TEXT.replace(" ", "")))
    tokens += chars
    types += [1] * len(chars)
    lines = [t.replace(" ", SPACE) for text in TEXTS + [TEXT] if text and "<|" not in text for t in text.split("\n")]
    words = Counter(tuple(c for c in line) for line in lines if line and all(c in chars for c in line))
    words[("\n", "\n")] += 3
    words[("\n", "\n", "\n")] += 1
    merges = merge_pairs(words, n_merges)
    for a, b in merges:
        if a + b not in tokens:
            tokens.append(a + b)
            types.append(1)
    return tokens, types, merges


def write_gemma4(path):
    tokens, types, merges = gemma4_vocabulary()
    w = GGUFWriter(path, "llama")
    config = {"num_attention_heads": 4, "num_key_value_heads": 4, "hidden_size": 64, "num_hidden_layers": 1,
              "max_position_embeddings": 512, "intermediate_size": 128, "rope_theta": 10000.0,
              "rms_norm_eps": 1e-5}
    add_hparams(w, config, len(tokens))
    # as llama.cpp's Gemma4Model writes it (scores too, which its BPE
    # does not read)
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out, tools = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    vocab = vocabulary()
    with open(os.path.join(out, "texts.json"), "w") as f:
        json.dump(TEXTS, f)
    texts = os.path.join(out, "texts.bin")
    with open(texts, "wb") as f:
        for t in TEXTS:
            f.write(t.encode() + b"\0")
    files = []
    for name, prefix in (("spm-prefix", True), ("spm-noprefix", False)):
        path = os.path.join(out, name + ".gguf")
        write(path, prefix, vocab)
        files.append((name, path))
    for pre in PRE_TYPES:
        path = os.path.join(out, f"bpe-{pre}.gguf")
        write_bpe(path, pre)
        files.append((f"bpe-{pre}", path))
    wordpiece = wordpiece_vocabulary()
    for name, keys in WORDPIECE_CASES.items():
        path = os.path.join(out, f"wpm-{name}.gguf")
        write_wordpiece(path, wordpiece, keys)
        files.append((f"wpm-{name}", path))
    path = os.path.join(out, "gemma4.gguf")
    write_gemma4(path)
    files.append(("gemma4", path))
    with open(os.path.join(out, "files.json"), "w") as f:
        json.dump([n for n, _ in files], f)
    for name, path in files:
        args = [os.path.join(tools, "llama-logits"), "--tokenize", path, texts, os.path.join(out, f"ids-{name}.txt")]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(args)}:\n{r.stderr[-2000:]}")


if __name__ == "__main__":
    main()
