"""The reference for archgen's encoders: mlx-embeddings' own model modules
(PyPI mlx-embeddings, pinned in scripts/requirements.lock), on random
checkpoints this script makes and on real ones.

    ref.py < jobs.json > replies.json

Each job is one of:

  {"make": DIR, "arch": "bert" | "xlm_roberta", "config": {...}, "seed": int,
   "layout": "bare" | "prefixed", "labels": int}
      Builds mlx-embeddings' model of arch (its module's name) from config
      with random weights (mx.random.seed(seed)), perturbs every
      LayerNorm's weight and bias so that they are not 1 and 0, and saves
      DIR/config.json and DIR/model.safetensors. "bare" names the tensors as
      the module does (embeddings..., encoder..., pooler...), as
      sentence-transformers' BertModel and XLMRobertaModel files are;
      "prefixed" is the sequence classifier's layout: under "bert." with a
      random classifier.weight [labels, hidden] and classifier.bias
      (BertForSequenceClassification), or under "roberta." without the
      pooler, with random classifier.dense and classifier.out_proj
      (XLMRobertaForSequenceClassification). Replies {}.

  {"run": DIR, "arch": "bert", "ids": [[int]], "types": [[int]] or null}
  {"run": DIR, "arch": "bert", "texts": [str]}
  {"run": DIR, "arch": "bert", "pairs": [[str, str]], "tokenizer": DIR2}
      Runs the checkpoint in DIR through mlx-embeddings' model, each input
      alone (no padding). Texts and pairs are encoded first by the Hugging
      Face tokenizers library from DIR's tokenizer.json (or DIR2's), with
      its special tokens and its pair template, truncation and padding off
      (as sentence-transformers encodes what fits), and the reply gives
      their "ids" and "types" too. It replies {"hidden": [[[float]]], "mean":
      [[float]], "cls": [[float]], "embeds": [[float]], "scores":
      [[float]] or null}: the last hidden states, their mean and first
      position, mlx-embeddings' text_embeds (mean-pooled and normalized),
      and, where the checkpoint holds a classifier, its scores, in numpy
      (mlx-embeddings has no classification heads; these are the heads'
      computations on its outputs): BERT's pooler_output (dense and tanh
      on the first token) times classifier.weight plus classifier.bias;
      XLM-R's first hidden state through classifier.dense, tanh and
      classifier.out_proj.

  {"make": DIR, "arch": "gemma3_text", "config": {...}, "seed": int}
      EmbeddingGemma's sentence-transformers folder: mlx-embeddings'
      gemma3_text model with random weights (its norms moved off their
      initial values), the stack saved bare as Gemma3TextModel's files are
      (embed_tokens, layers, norm), its two dense layers as 2_Dense and
      3_Dense (linear.weight, no bias, Identity), 1_Pooling (the mean),
      modules.json with a Normalize module last, and config.json with
      use_bidirectional_attention. Replies {}.

  {"run": DIR, "arch": "gemma3_text", "ids": [[int]], "window": bool}
      As run above (no types, no scores): mlx-embeddings' EmbeddingGemma
      attends fully on every layer. With "window", the sliding layers
      attend as transformers reads use_bidirectional_attention instead:
      each query to the keys less than sliding_window // 2 + 1 positions
      away, the module's own layers run with those masks.

  {"make": DIR, "arch": "modernbert", "config": {...}, "seed": int,
   "layout": "bare" | "prefixed" | "masked_lm" | "classifier", "labels": int}
  {"run": DIR, "arch": "modernbert", "ids": [[int]]}
      ModernBERT: mlx-embeddings' modernbert model (ModernBertModel) with
      random weights, its norms moved off 1, saved under "model." or bare;
      run replies the hidden states and embeddings (mlx-embeddings' mean
      pooling and normalization). "masked_lm" is ModernBertForMaskedLM's
      layout: the stack under "model." with the module's head (head.dense,
      head.norm) and decoder, random. mlx-embeddings' MLP activates with the tanh-approximate
      GELU where transformers' ModernBERT (hidden_activation "gelu") uses
      the exact one: the reference runs the module with the exact GELU.
      "classifier" makes ModernBertForSequenceClassification (labels rows,
      id2label written): the module's head (head.dense, head.norm, moved
      off 1) and classifier, random. Its run also replies "scores", the
      logits (the module's pooling as classifier_pooling says, its head and
      classifier), and "probs", the module's own pooler_output (their
      sigmoid for one label, softmax for more). The module's head runs with
      transformers' activation, the exact GELU (classifier_activation
      "gelu"; mlx-embeddings uses the tanh approximation), and with the
      bias classifier_bias asks for (mlx-embeddings' head never has one).

  {"batch": DIR, "arch": "bert", "ids": [[int]]}
      Runs the inputs as one batch, padded after their ends with id 0 and
      an attention mask, as mlx-embeddings batches them; replies
      {"embeds": [[float]]}.
"""

import importlib.util
import json
import os
import sys
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import numpy as np  # noqa: E402
from mlx.utils import tree_flatten, tree_map  # noqa: E402


def module(arch):
    """mlx-embeddings' module for arch, imported without the package's
    __init__ (which imports mlx-vlm, not installed here)."""
    if "mlx_embeddings" not in sys.modules:
        spec = importlib.util.find_spec("mlx_embeddings")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("mlx_embeddings is not installed: run make setup-py")
        root = Path(list(spec.submodule_search_locations)[0])
        for name, path in (("mlx_embeddings", root), ("mlx_embeddings.models", root / "models")):
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(path)]
            sys.modules[name] = pkg
    return importlib.import_module(f"mlx_embeddings.models.{arch}")


# Each module's sequence classifier: the prefix of its stack.
PREFIX = {"bert": "bert.", "xlm_roberta": "roberta."}


def build(arch, config):
    mod = module(arch)
    args = mod.ModelArgs.from_dict(config)
    return mod, mod.Model(args)


def make_gemma(job, out, config):
    """EmbeddingGemma's folder (see make_gemma in the docstring)."""
    config = dict(config, use_bidirectional_attention=True, architectures=["Gemma3TextModel"])
    _, model = build("gemma3_text", config)
    params = dict(tree_flatten(model.parameters()))
    for name, p in params.items():
        if name.endswith("norm.weight"):
            params[name] = p + 0.2 * mx.random.normal(p.shape)
    mx.eval(params)
    stack = {k[len("model."):]: v for k, v in params.items() if k.startswith("model.")}
    mx.save_safetensors(str(out / "model.safetensors"), stack)
    hidden = config["hidden_size"]
    for i, (name, d_in, d_out) in enumerate([("2_Dense", hidden, 4 * hidden), ("3_Dense", 4 * hidden, hidden)]):
        (out / name).mkdir(exist_ok=True)
        mx.save_safetensors(str(out / name / "model.safetensors"), {"linear.weight": params[f"dense.{i}.weight"]})
        (out / name / "config.json").write_text(json.dumps({"in_features": d_in, "out_features": d_out, "bias": False,
                                                            "activation_function": "torch.nn.modules.linear.Identity"}))
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": hidden, "pooling_mode_cls_token": False,
                                                               "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                                                               "pooling_mode_lasttoken": False}))
    modules = [("0", "", "Transformer"), ("1", "1_Pooling", "Pooling"), ("2", "2_Dense", "Dense"), ("3", "3_Dense", "Dense"),
               ("4", "4_Normalize", "Normalize")]
    (out / "modules.json").write_text(json.dumps([{"idx": int(i), "name": i, "path": p, "type": "sentence_transformers.models." + t}
                                                  for i, p, t in modules]))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return {}


def load_gemma(d, config):
    _, model = build("gemma3_text", config)
    weights = {"model." + k: v for k, v in mx.load(str(d / "model.safetensors")).items()}
    for i, name in enumerate(["2_Dense", "3_Dense"]):
        weights[f"dense.{i}.weight"] = mx.load(str(d / name / "model.safetensors"))["linear.weight"]
    model.load_weights(list(weights.items()))
    model.eval()
    mx.eval(model.parameters())
    return model


def run_gemma(job):
    """EmbeddingGemma's hidden states and embeddings (see run_gemma in the
    docstring)."""
    d = Path(job["run"])
    config = json.loads((d / "config.json").read_text())
    model = load_gemma(d, config)
    out = {"hidden": [], "embeds": []}
    args = model.config
    for ids in job["ids"]:
        x = mx.array(ids)[None]
        if not job.get("window"):
            r = model(x)
            h, e = r.last_hidden_state[0], r.text_embeds[0]
        else:
            inner = model.model
            h = inner.embed_tokens(x)
            h *= mx.array(args.hidden_size**0.5, inner.embed_tokens.weight.dtype).astype(h.dtype)
            L = len(ids)
            pos = mx.arange(L)
            near = mx.abs(pos[:, None] - pos[None, :]) < (args.sliding_window // 2 + 1)
            sliding = mx.where(near, 0.0, -mx.inf)[None, None]
            full = mx.zeros((1, 1, L, L))
            for i, layer in enumerate(inner.layers):
                is_global = i % args.sliding_window_pattern == args.sliding_window_pattern - 1
                h = layer(h, full if is_global else sliding, None)
            h = inner.norm(h)
            e = h.mean(axis=1)
            for dense in model.dense:
                e = dense(e)
            e = (e / mx.linalg.norm(e, axis=-1, keepdims=True))[0]
            h = h[0]
        out["hidden"].append(np.array(h.astype(mx.float32)).tolist())
        out["embeds"].append(np.array(e.astype(mx.float32)).tolist())
    return out


def modernbert_model(config):
    """mlx-embeddings' modernbert Model of config, with transformers'
    activations (the exact GELU) and head bias (see the docstring)."""
    _, model = build("modernbert", config)
    for layer in model.model.layers:
        layer.mlp.act = nn.GELU()  # transformers' "gelu": the exact GELU
    if hasattr(model, "head"):
        model.head.act = nn.GELU()
        hidden = config["hidden_size"]
        model.head.dense = nn.Linear(hidden, hidden, bias=config.get("classifier_bias", False))
    return model


def make_modernbert(job, out, config):
    layout = job.get("layout")
    if layout == "classifier":
        labels = job.get("labels", 1)
        config = dict(config, architectures=["ModernBertForSequenceClassification"],
                      id2label={str(i): f"LABEL_{i}" for i in range(labels)})
    elif layout == "masked_lm":
        config = dict(config, architectures=["ModernBertForMaskedLM"])
    else:
        config = dict(config, architectures=["ModernBertModel"])
    model = modernbert_model(config)
    params = dict(tree_flatten(model.parameters()))
    for name, p in params.items():
        if name.endswith("norm.weight"):
            params[name] = p + 0.2 * mx.random.normal(p.shape)
        elif name.endswith("norm.bias") or name.startswith(("head.dense.bias", "classifier.", "decoder.bias")):
            params[name] = 0.2 * mx.random.normal(p.shape)
    if layout == "bare":
        params = {k[len("model."):]: v for k, v in params.items()}
    mx.eval(params)
    mx.save_safetensors(str(out / "model.safetensors"), params)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return {}


def run_modernbert(job):
    d = Path(job["run"])
    config = json.loads((d / "config.json").read_text())
    model = modernbert_model(config)
    weights = {(k if k.startswith(("model.", "head.", "classifier.", "decoder.")) else "model." + k): v
               for k, v in mx.load(str(d / "model.safetensors")).items()}
    model.load_weights(list(weights.items()))
    model.eval()
    mx.eval(model.parameters())
    base = module("base")
    classifier = hasattr(model, "classifier")
    out = {"hidden": [], "embeds": [], "scores": [] if classifier else None, "probs": [] if classifier else None}
    for ids in job["ids"]:
        x = mx.array(ids)[None]
        mask = mx.ones(x.shape)
        h = model.model(x, attention_mask=mask)["last_hidden_state"]
        out["hidden"].append(np.array(h[0].astype(mx.float32)).tolist())
        mean = base.mean_pooling(h, mask)
        out["embeds"].append(np.array(base.normalize_embeddings(mean)[0].astype(mx.float32)).tolist())
        if classifier:
            pooled = h[:, 0] if model.config.classifier_pooling == "cls" else mean
            logits = model.classifier(model.head(pooled))
            out["scores"].append(np.array(logits[0].astype(mx.float32)).tolist())
            out["probs"].append(np.array(model(x).pooler_output[0].astype(mx.float32)).tolist())
    return out


def make(job):
    out = Path(job["make"])
    out.mkdir(parents=True, exist_ok=True)
    mx.random.seed(job["seed"])
    config = dict(job["config"])
    if job["arch"] == "gemma3_text":
        return make_gemma(job, out, config)
    if job["arch"] == "modernbert":
        return make_modernbert(job, out, config)
    _, model = build(job["arch"], config)
    # LayerNorms start at weight 1 and bias 0; move them so a wrong norm shows.
    params = dict(tree_flatten(model.parameters()))
    for name, p in params.items():
        if name.endswith("LayerNorm.weight"):
            params[name] = p + 0.2 * mx.random.normal(p.shape)
        elif name.endswith("LayerNorm.bias"):
            params[name] = 0.2 * mx.random.normal(p.shape)
    hidden = config["hidden_size"]
    arch = job["arch"]
    if job.get("layout") == "prefixed":
        labels = job.get("labels", 1)
        if arch == "bert":
            params = {"bert." + k: v for k, v in params.items()}
            params["classifier.weight"] = 0.1 * mx.random.normal((labels, hidden))
            params["classifier.bias"] = 0.1 * mx.random.normal((labels,))
            config["architectures"] = ["BertForSequenceClassification"]
        else:
            params = {"roberta." + k: v for k, v in params.items() if not k.startswith("pooler.")}
            params["classifier.dense.weight"] = 0.1 * mx.random.normal((hidden, hidden))
            params["classifier.dense.bias"] = 0.1 * mx.random.normal((hidden,))
            params["classifier.out_proj.weight"] = 0.1 * mx.random.normal((labels, hidden))
            params["classifier.out_proj.bias"] = 0.1 * mx.random.normal((labels,))
            config["architectures"] = ["XLMRobertaForSequenceClassification"]
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(labels)}
    else:
        config["architectures"] = ["BertModel" if arch == "bert" else "XLMRobertaModel"]
    mx.eval(params)
    mx.save_safetensors(str(out / "model.safetensors"), params)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return {}


def load(job):
    d = Path(job.get("run") or job.get("batch"))
    config = json.loads((d / "config.json").read_text())
    weights = mx.load(str(d / "model.safetensors"))
    classifier = {k: np.array(weights.pop(k)) for k in list(weights) if k.startswith("classifier.")} or None
    prefix = PREFIX[job["arch"]]
    weights = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in weights.items()}
    if job["arch"] == "xlm_roberta" and "pooler.dense.weight" not in weights:
        config["add_pooling_layer"] = False  # the sequence classifier's stack has none
    _, model = build(job["arch"], config)
    weights = model.sanitize(weights)
    model.load_weights(list(weights.items()))
    model.eval()  # the modules' dropouts are on until then
    model.update(tree_map(lambda p: p.astype(mx.float32) if mx.issubdtype(p.dtype, mx.floating) else p, model.parameters()))
    mx.eval(model.parameters())
    return model, classifier


def encode(job):
    """The ids and token types of job's texts or pairs, by the tokenizers
    library; job's own ids and types where it gives them."""
    if "texts" not in job and "pairs" not in job:
        return job["ids"], job.get("types")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(job.get("tokenizer") or job["run"]) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    if "texts" in job:
        encs = [tok.encode(t) for t in job["texts"]]
    else:
        encs = [tok.encode(q, d) for q, d in job["pairs"]]
    return [e.ids for e in encs], [e.type_ids for e in encs]


def run(job):
    model, classifier = load(job)
    job["ids"], types_ = encode(job)
    out = {"ids": job["ids"], "types": types_, "hidden": [], "mean": [], "cls": [], "embeds": [],
           "scores": None if classifier is None else []}
    for i, ids in enumerate(job["ids"]):
        x = mx.array(ids)[None]
        tt = None if types_ is None else mx.array(types_[i])[None]
        r = model(x, token_type_ids=tt)
        h = np.array(r.last_hidden_state[0].astype(mx.float32))
        out["hidden"].append(h.tolist())
        out["mean"].append(h.mean(axis=0, dtype=np.float64).astype(np.float32).tolist())
        out["cls"].append(h[0].tolist())
        out["embeds"].append(np.array(r.text_embeds[0]).tolist())
        if classifier is not None and job["arch"] == "bert":
            pooled = np.array(r.pooler_output[0].astype(mx.float32))
            out["scores"].append((pooled @ classifier["classifier.weight"].T + classifier["classifier.bias"]).tolist())
        elif classifier is not None:
            x = np.tanh(h[0] @ classifier["classifier.dense.weight"].T + classifier["classifier.dense.bias"])
            out["scores"].append((x @ classifier["classifier.out_proj.weight"].T + classifier["classifier.out_proj.bias"]).tolist())
    return out


def batch(job):
    model, _ = load(job)
    ids = job["ids"]
    L = max(len(x) for x in ids)
    x = mx.array([row + [0] * (L - len(row)) for row in ids])
    mask = mx.array([[1] * len(row) + [0] * (L - len(row)) for row in ids])
    r = model(x, attention_mask=mask)
    return {"embeds": np.array(r.text_embeds).tolist()}


def main():
    replies = []
    for job in json.load(sys.stdin):
        if "make" in job:
            replies.append(make(job))
        elif "run" in job and job["arch"] == "gemma3_text":
            replies.append(run_gemma(job))
        elif "run" in job and job["arch"] == "modernbert":
            replies.append(run_modernbert(job))
        elif "run" in job:
            replies.append(run(job))
        elif "batch" in job:
            replies.append(batch(job))
        else:
            raise SystemExit(f"unknown job {sorted(job)}")
    json.dump(replies, sys.stdout)


if __name__ == "__main__":
    main()
