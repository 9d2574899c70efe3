"""The small cross-encoder every real rerank predictor serves, built in code.

Runs inside the predictor venvs, never in the gateway's venv: ``infinity`` has torch,
transformers and tokenizers (everything here); ``triton`` has numpy, tokenizers and
safetensors (``build``, ``NumpyCrossEncoder``). Nothing is downloaded: the test encoder of
``embedding_model.py`` (its seeded BERT weights, WordPiece vocabulary and tokenizer, whose
pair template is ``[CLS] $A [SEP] $B:1 [SEP]:1``) with a classification head of one label,
drawn from ``SEED``: a ``BertForSequenceClassification`` with ``num_labels`` 1, which is
what Infinity, sentence-transformers' ``CrossEncoder`` and vLLM take as a reranker.

The model folder (``build()``): ``config.json`` (``architectures``
``["BertForSequenceClassification"]``, one label) + ``model.safetensors`` (``bert.*`` the
encoder's weights, ``bert.pooler.dense`` and ``classifier`` [1, 128] drawn here), and the
tokenizer files (``tokenizer.json``, ``vocab.txt``, ``tokenizer_config.json``,
``special_tokens_map.json``). Keyed by a hash of this file and ``embedding_model.py``, under
``${BATCHING_GATEWAY_CACHE:-~/.cache/batching-gateway}/models/rerank-<hash>``, built once
under a file lock, so every venv and server loads the SAME weights.

A pair's score is the sigmoid of the model's logit for ``tokenizer(query, document)``
(truncated at 512, longest first): what Infinity's ``/rerank`` answers by default and what
Triton's ``rerank`` model answers. ``score(pairs)`` is the reference (transformers'
``BertForSequenceClassification``, one forward for all pairs); ``NumpyCrossEncoder`` is the
same forward in numpy, equal to it to about 1e-6.

CLI (the gateway-side tests, which have no torch, run this with a predictor venv's python)::

    python rerank_model.py build                                   # prints the model folder
    echo '[["a query", "a document"]]' | python rerank_model.py score [--engine numpy]   # JSON [scores]
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import embedding_model  # a sibling module: scripts run with their own venv

SEED = 20261127
MODEL_NAME = "reranker"  # the name the test servers serve it under


def source_key() -> str:
    """Short sha256 of this file and the encoder's builder: the folder's name changes with either."""
    sources = pathlib.Path(__file__).read_bytes() + pathlib.Path(embedding_model.__file__).read_bytes()
    return hashlib.sha256(sources).hexdigest()[:12]


def default_folder() -> pathlib.Path:
    return embedding_model.cache_root() / "models" / f"rerank-{source_key()}"


def build(folder: pathlib.Path | str | None = None) -> pathlib.Path:
    """Build the model folder if missing (idempotent, safe from several processes); return it."""
    folder = pathlib.Path(folder) if folder is not None else default_folder()
    if (folder / "BUILT").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with embedding_model._file_lock(folder.with_name(folder.name + ".lock")):
        if (folder / "BUILT").is_file():
            return folder
        shutil.rmtree(folder, ignore_errors=True)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
        try:
            _write_model(tmp)
            (tmp / "BUILT").write_text(json.dumps({"source": source_key(), "seed": SEED}) + "\n")
            tmp.chmod(0o755)
            for path in tmp.rglob("*"):
                path.chmod(0o755 if path.is_dir() else 0o644)
            tmp.rename(folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return folder


def _write_model(folder: pathlib.Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    pieces = embedding_model.vocabulary()
    config = {**embedding_model.bert_config(len(pieces)), "architectures": ["BertForSequenceClassification"],
              "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    weights = {f"bert.{name}": value for name, value in embedding_model.bert_weights(len(pieces)).items()}
    rng = np.random.default_rng(SEED)
    hidden = embedding_model.HIDDEN
    # The pooler and the head, drawn here: scores spread over (0, 1) rather than all near 0.5.
    weights["bert.pooler.dense.weight"] = (0.1 * rng.standard_normal((hidden, hidden))).astype(np.float32)
    weights["bert.pooler.dense.bias"] = (0.1 * rng.standard_normal(hidden)).astype(np.float32)
    weights["classifier.weight"] = (1.0 * rng.standard_normal((1, hidden))).astype(np.float32)
    weights["classifier.bias"] = np.zeros(1, dtype=np.float32)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    embedding_model.make_tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "vocab.txt").write_text("".join(f"{piece}\n" for piece in pieces))
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                "mask_token": "[MASK]"}
    (folder / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n")
    tokenizer_config = {
        "tokenizer_class": "BertTokenizer", "do_lower_case": True, "tokenize_chinese_chars": True,
        "strip_accents": None, "model_max_length": embedding_model.MAX_TOKENS, "clean_up_tokenization_spaces": False,
        **specials,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")


def _sigmoid(logits: Any) -> Any:
    import numpy as np

    return (1.0 / (1.0 + np.exp(-logits.astype(np.float64)))).astype(np.float32)


_loaded: dict[str, Any] = {}


def score(pairs: Sequence[tuple[str, str]], folder: pathlib.Path | str | None = None) -> Any:
    """The reference scores: float32 numpy ``[len(pairs)]``, one forward of transformers'
    BertForSequenceClassification over all pairs, sigmoid of the logit."""
    import numpy as np
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    if not pairs:
        return np.zeros(0, dtype=np.float32)
    folder = build(folder)
    if str(folder) not in _loaded:  # once per process
        model = BertForSequenceClassification.from_pretrained(folder, attn_implementation="eager")
        model.eval()
        _loaded[str(folder)] = (AutoTokenizer.from_pretrained(str(folder)), model)
    tokenizer, model = _loaded[str(folder)]
    features = tokenizer([query for query, _ in pairs], [document for _, document in pairs], padding=True,
                         truncation="longest_first", max_length=embedding_model.MAX_TOKENS, return_tensors="pt")
    with torch.inference_mode():
        logits = model(**features).logits
    return _sigmoid(logits.reshape(-1).numpy())


class NumpyCrossEncoder:
    """The same cross-encoder's forward in numpy alone (plus ``tokenizers`` and
    ``safetensors``), read from the same folder: for Triton's venv, which has no torch."""

    def __init__(self, folder: pathlib.Path | str | None = None) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = build(folder)
        config = json.loads((folder / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config["layer_norm_eps"])
        self.weights = load_file(str(folder / "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=embedding_model.MAX_TOKENS, strategy="longest_first")
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def _layer_norm(self, x: Any, prefix: str) -> Any:
        import numpy as np

        mean = x.mean(axis=-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        normed = (x - mean) / np.sqrt(variance + np.float32(self.eps))
        return normed * self.weights[f"{prefix}.weight"] + self.weights[f"{prefix}.bias"]

    def _linear(self, x: Any, prefix: str) -> Any:
        return x @ self.weights[f"{prefix}.weight"].T + self.weights[f"{prefix}.bias"]

    def logits(self, ids: Any, mask: Any, types: Any) -> Any:
        """float32 ``[rows]``: [CLS]'s hidden state through the pooler (tanh) and the head."""
        import numpy as np

        w, hidden = self.weights, embedding_model.HIDDEN
        rows, length = ids.shape
        x = (w["bert.embeddings.word_embeddings.weight"][ids] + w["bert.embeddings.position_embeddings.weight"][:length]
             + w["bert.embeddings.token_type_embeddings.weight"][types]).reshape(rows * length, hidden)
        x = self._layer_norm(x, "bert.embeddings.LayerNorm")
        head = hidden // self.heads
        bias = ((1.0 - mask[:, None, None, :].astype(np.float32)) * np.finfo(np.float32).min).astype(np.float32)
        scale = np.float32(1.0 / np.sqrt(head))

        def split(t: Any) -> Any:
            return t.reshape(rows, length, self.heads, head).transpose(0, 2, 1, 3)

        for index in range(self.layers):
            prefix = f"bert.encoder.layer.{index}"
            q = split(self._linear(x, f"{prefix}.attention.self.query"))
            k = split(self._linear(x, f"{prefix}.attention.self.key"))
            v = split(self._linear(x, f"{prefix}.attention.self.value"))
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = scores / scores.sum(axis=-1, keepdims=True)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(rows * length, hidden)
            x = self._layer_norm(self._linear(context, f"{prefix}.attention.output.dense") + x,
                                 f"{prefix}.attention.output.LayerNorm")
            inner = embedding_model._gelu_tanh(self._linear(x, f"{prefix}.intermediate.dense"))
            x = self._layer_norm(self._linear(inner, f"{prefix}.output.dense") + x, f"{prefix}.output.LayerNorm")
        first = x.reshape(rows, length, hidden)[:, 0]
        pooled = np.tanh(self._linear(first, "bert.pooler.dense"))
        return self._linear(pooled, "classifier").reshape(-1).astype(np.float32)

    def score(self, pairs: Sequence[tuple[str, str]]) -> Any:
        import numpy as np

        if not pairs:
            return np.zeros(0, dtype=np.float32)
        encodings = self.tokenizer.encode_batch([(query, document) for query, document in pairs])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        return _sigmoid(self.logits(ids, mask, types))


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "score"])
    parser.add_argument("--engine", choices=["torch", "numpy"], default="torch",
                        help="score with transformers' model (the reference) or NumpyCrossEncoder (no torch)")
    args = parser.parse_args(argv)
    if args.command == "build":
        print(build())
        return 0
    pairs = json.load(sys.stdin)
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        print("stdin must be a JSON list of [query, document] pairs", file=sys.stderr)
        return 2
    scores = score(pairs) if args.engine == "torch" else NumpyCrossEncoder().score(pairs)
    json.dump([float(value) for value in scores], sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
