"""The small text-embedding model every real embedding predictor serves, built in code.

Runs inside the predictor venvs, never in the gateway's venv: ``infinity`` and
``kserve-openai`` have torch, transformers and tokenizers (everything here); ``triton`` has
numpy, tokenizers and safetensors (``build``, ``token_counts``, ``NumpyEncoder``). Nothing is downloaded: a seeded
BERT-style encoder with random weights and a WordPiece vocabulary written below.

The model folder (``build()``) is a Hugging Face model folder that Infinity,
sentence-transformers and transformers load from the local path:

* ``config.json`` + ``model.safetensors``: a ``BertModel`` (hidden 128, 2 layers, 2 heads,
  intermediate 256, 512 positions, ``gelu_new``, the tanh GELU, so that a numpy forward
  needs no erf), weights drawn by numpy from ``SEED`` (``bert_weights``) and written with
  ``safetensors``: building needs numpy, tokenizers and safetensors only, no torch;
* ``tokenizer.json`` (``tokenizers``: BertNormalizer lowercasing, BertPreTokenizer,
  WordPiece with ``##`` continuations, ``[CLS] $A [SEP]`` template, truncation at 512),
  ``tokenizer_config.json``, ``special_tokens_map.json``, ``vocab.txt``;
* sentence-transformers' ``modules.json`` (Transformer -> ``1_Pooling`` MEAN ->
  ``2_Normalize``), ``sentence_bert_config.json`` and ``config_sentence_transformers.json``.

The folder is keyed by a hash of this file's source, under the project's cache root
``${BATCHING_GATEWAY_CACHE:-~/.cache/batching-gateway}/models/embedding-<hash>``, built once
(under a file lock, in a temp folder renamed into place), so every venv and every server
loads the SAME weights, whichever venv built them: the folder, not the seed, is the truth.

``NumpyEncoder`` is the same forward in numpy (Triton's venv has no torch); ``embed(texts)``
is the reference: tokenize (with [CLS]/[SEP], truncated at 512), one
forward of the folder's ``BertModel``, mean over the attention mask, L2 normalisation;
float32 ``[n, 128]``. ``token_counts(texts)`` counts each text's tokens as OpenAI's
``usage`` does here (with the special tokens, after truncation).

CLI (the gateway-side tests, which have no torch, run this with a predictor venv's python)::

    python embedding_model.py build              # prints the model folder
    echo '["a text", "another"]' | python embedding_model.py embed   # JSON [[128 floats], ...]
    echo '["a text"]' | python embedding_model.py tokens             # JSON [token counts]
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import string
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

SEED = 20261126
HIDDEN = 128
LAYERS = 2
HEADS = 2
INTERMEDIATE = 256
MAX_POSITIONS = 512
MAX_TOKENS = 512  # truncation, [CLS] and [SEP] included
LAYER_NORM_EPS = 1e-12
DIMENSIONS = HIDDEN
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
CACHE_ENV_VAR = "BATCHING_GATEWAY_CACHE"
MODEL_NAME = "embedding"  # the name the test servers serve it under

# A few hundred common English words (whole-word pieces); anything else is spelled with
# the single-character and suffix pieces, so no lowercase ASCII text becomes [UNK].
_WORDS = """
the of and to a in is it you that he was for on are with as i his they be at one have this from
or had by hot word but what some we can out other were all there when up use your how said an
each she which do their time if will way about many then them write would like so these her long
make thing see him two has look more day could go come did number sound no most people my over
know water than call first who may down side been now find any new work part take get place made
live where after back little only round man year came show every good me give our under name
very through just form sentence great think say help low line differ turn cause much mean before
move right boy old too same tell does set three want air well also play small end put home read
hand port large spell add even land here must big high such follow act why ask men change went
light kind off need house picture try us again animal point mother world near build self earth
father head stand own page should country found answer school grow study still learn plant cover
food sun four between state keep eye never last let thought city tree cross farm hard start
might story saw far sea draw left late run while press close night real life few north open seem
together next white children begin got walk example ease paper group always music those both
mark often letter until mile river car feet care second book carry took science eat room friend
began idea fish mountain stop once base hear horse cut sure watch color face wood main enough
plain girl usual young ready above ever red list though feel talk bird soon body dog family
direct pose leave song measure door product black short numeral class wind question happen
complete ship area half rock order fire south problem piece told knew pass since top whole king
space heard best hour better true during hundred five remember step early hold west ground
interest reach fast verb sing listen six table travel less morning ten simple several vowel
toward war lay against pattern slow center love person money serve appear road map rain rule
govern pull cold notice voice unit power town fine certain fly fall lead cry dark machine note
wait plan figure star box noun field rest correct able pound done beauty drive stood contain
front teach week final gave green oh quick develop ocean warm free minute strong special mind
behind clear tail produce fact street inch multiply nothing course stay wheel full force blue
object decide surface deep moon island foot system busy test record boat common gold possible
plane stead dry wonder laugh thousand ago ran check game shape equate miss brought heat snow
tire bring yes distant fill east paint language among model server batch request text embedding
vector query search document token gateway predictor latency input output data network cluster
"""
COMMON_WORDS = tuple(_WORDS.split())
SUFFIXES = ("s", "es", "ed", "ing", "ly", "er", "est", "ion", "tion", "ment", "ness", "able", "al", "ic", "ous")


def vocabulary() -> list[str]:
    """The WordPiece vocabulary, in id order: specials, characters, continuations, suffixes, words."""
    characters = string.ascii_lowercase + string.ascii_uppercase + string.digits + string.punctuation
    pieces: list[str] = list(SPECIAL_TOKENS)
    pieces += list(characters)
    pieces += [f"##{c}" for c in characters]
    pieces += [f"##{s}" for s in SUFFIXES]
    pieces += COMMON_WORDS
    seen: set[str] = set()
    return [p for p in pieces if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]


def source_key() -> str:
    """Short sha256 of this file: the model folder's name changes with the builder."""
    return hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:12]


def cache_root() -> pathlib.Path:
    configured = os.environ.get(CACHE_ENV_VAR)
    root = pathlib.Path(configured) if configured else pathlib.Path.home() / ".cache" / "batching-gateway"
    return root.expanduser().resolve()


def default_folder() -> pathlib.Path:
    return cache_root() / "models" / f"embedding-{source_key()}"


@contextlib.contextmanager
def _file_lock(path: pathlib.Path) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _complete(folder: pathlib.Path) -> bool:
    return (folder / "BUILT").is_file()


def build(folder: pathlib.Path | str | None = None) -> pathlib.Path:
    """Build the model folder if missing (idempotent, safe from several processes); return it."""
    folder = pathlib.Path(folder) if folder is not None else default_folder()
    if _complete(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(folder.with_name(folder.name + ".lock")):
        if _complete(folder):
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


def make_tokenizer() -> Any:
    """The ``tokenizers.Tokenizer`` (truncation on, no padding)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = {piece: index for index, piece in enumerate(vocabulary())}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                      strip_accents=None, lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    return tokenizer


def bert_config(vocab_size: int) -> dict[str, Any]:
    """config.json of the encoder, as transformers' BertConfig writes it."""
    return {
        "architectures": ["BertModel"], "model_type": "bert", "vocab_size": vocab_size, "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": INTERMEDIATE,
        "max_position_embeddings": MAX_POSITIONS, "type_vocab_size": 2, "hidden_act": "gelu_new",
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "layer_norm_eps": LAYER_NORM_EPS,
        "pad_token_id": 0, "position_embedding_type": "absolute", "initializer_range": 0.02,
        "classifier_dropout": None, "use_cache": True, "torch_dtype": "float32",
    }


def bert_weights(vocab_size: int) -> dict[str, Any]:
    """The encoder's weights, named as ``BertModel`` names them, drawn with numpy from SEED.

    Matrices and embeddings ~ N(0, 0.02) (BERT's own init), biases ~ N(0, 0.02), LayerNorm
    gains 1 + N(0, 0.1) and biases N(0, 0.1): nothing of the forward is an identity that a
    wrong implementation could get right by chance. numpy, not torch, so that any venv
    with numpy and safetensors (Triton's included) can build the folder."""
    import numpy as np

    rng = np.random.default_rng(SEED)
    weights: dict[str, Any] = {}

    def normal(name: str, *shape: int, scale: float = 0.02, mean: float = 0.0) -> None:
        weights[name] = (mean + scale * rng.standard_normal(shape)).astype(np.float32)

    def linear(prefix: str, out_features: int, in_features: int) -> None:
        normal(f"{prefix}.weight", out_features, in_features)
        normal(f"{prefix}.bias", out_features)

    def layer_norm(prefix: str) -> None:
        normal(f"{prefix}.weight", HIDDEN, scale=0.1, mean=1.0)
        normal(f"{prefix}.bias", HIDDEN, scale=0.1)

    normal("embeddings.word_embeddings.weight", vocab_size, HIDDEN)
    weights["embeddings.word_embeddings.weight"][0] = 0.0  # [PAD], as BERT's padding_idx
    normal("embeddings.position_embeddings.weight", MAX_POSITIONS, HIDDEN)
    normal("embeddings.token_type_embeddings.weight", 2, HIDDEN)
    layer_norm("embeddings.LayerNorm")
    for index in range(LAYERS):
        prefix = f"encoder.layer.{index}"
        for part in ("query", "key", "value"):
            linear(f"{prefix}.attention.self.{part}", HIDDEN, HIDDEN)
        linear(f"{prefix}.attention.output.dense", HIDDEN, HIDDEN)
        layer_norm(f"{prefix}.attention.output.LayerNorm")
        linear(f"{prefix}.intermediate.dense", INTERMEDIATE, HIDDEN)
        linear(f"{prefix}.output.dense", HIDDEN, INTERMEDIATE)
        layer_norm(f"{prefix}.output.LayerNorm")
    linear("pooler.dense", HIDDEN, HIDDEN)  # BertModel has it; embeddings never use it
    return weights


def _write_model(folder: pathlib.Path) -> None:
    from safetensors.numpy import save_file

    pieces = vocabulary()
    (folder / "config.json").write_text(json.dumps(bert_config(len(pieces)), indent=2) + "\n")
    # format "pt": transformers refuses a safetensors file whose metadata names no framework.
    save_file(bert_weights(len(pieces)), str(folder / "model.safetensors"), metadata={"format": "pt"})

    make_tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "vocab.txt").write_text("".join(f"{piece}\n" for piece in pieces))
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                "mask_token": "[MASK]"}
    (folder / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n")
    tokenizer_config = {
        "tokenizer_class": "BertTokenizer", "do_lower_case": True, "tokenize_chinese_chars": True,
        "strip_accents": None, "model_max_length": MAX_TOKENS, "clean_up_tokenization_spaces": False,
        **specials,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")

    # sentence-transformers: Transformer -> mean pooling -> L2 normalisation.
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": MAX_TOKENS, "do_lower_case": False}, indent=2) + "\n")
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"}, indent=2) + "\n")
    (folder / "1_Pooling").mkdir()
    pooling = {
        "word_embedding_dimension": HIDDEN, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": False, "include_prompt": True,
    }
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2) + "\n")
    (folder / "2_Normalize").mkdir()


_loaded: dict[str, Any] = {}


def load(folder: pathlib.Path | str | None = None) -> tuple[Any, Any]:
    """(tokenizer from the folder's tokenizer.json, BertModel from the folder), once per process."""
    folder = build(folder)
    key = str(folder)
    if key not in _loaded:
        from tokenizers import Tokenizer
        from transformers import BertModel

        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        model = BertModel.from_pretrained(folder, attn_implementation="eager")
        model.eval()
        _loaded[key] = (tokenizer, model)
    return _loaded[key]


def encode(tokenizer: Any, texts: Sequence[str]) -> tuple[Any, Any]:
    """(input_ids, attention_mask) as int64 numpy arrays, padded to the longest text."""
    import numpy as np

    encodings = tokenizer.encode_batch(list(texts))
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask


def token_counts(texts: Sequence[str], folder: pathlib.Path | str | None = None) -> list[int]:
    """Each text's token count: [CLS] and [SEP] included, after truncation at 512."""
    from tokenizers import Tokenizer

    folder = build(folder)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return [len(e.ids) for e in tokenizer.encode_batch(list(texts))]


def embed(texts: Sequence[str], folder: pathlib.Path | str | None = None) -> Any:
    """The reference embeddings: float32 numpy ``[len(texts), 128]``, one forward for all."""
    import numpy as np
    import torch

    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    tokenizer, model = load(folder)
    ids, mask = encode(tokenizer, texts)
    with torch.inference_mode():
        input_ids, attention_mask = torch.from_numpy(ids), torch.from_numpy(mask)
        hidden = model(input_ids=input_ids, attention_mask=attention_mask,
                       token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        normalised = torch.nn.functional.normalize(pooled, p=2, dim=1)
    return normalised.numpy().astype(np.float32)


def _gelu_tanh(x: Any) -> Any:
    """transformers' ``gelu_new``, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in float32
    and in place (``x ** 3`` is numpy's slow generic power: 19 ms of a 60 ms forward)."""
    import numpy as np

    y = x * x
    y *= x
    y *= np.float32(0.044715)
    y += x
    y *= np.float32(np.sqrt(2.0 / np.pi))
    np.tanh(y, out=y)
    y += np.float32(1.0)
    y *= x
    y *= np.float32(0.5)
    return y


class NumpyEncoder:
    """The same encoder's forward in numpy alone (plus ``tokenizers`` and ``safetensors``),
    read from the same folder: for venvs without torch (Triton's Python stub, numpy<2).
    Equal to ``embed()`` to about 1e-6 (float32 sums in another order)."""

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
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def _layer_norm(self, x: Any, prefix: str) -> Any:
        import numpy as np

        mean = x.mean(axis=-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        normed = (x - mean) / np.sqrt(variance + np.float32(self.eps))
        return normed * self.weights[f"{prefix}.weight"] + self.weights[f"{prefix}.bias"]

    def _linear(self, x: Any, prefix: str) -> Any:
        return x @ self.weights[f"{prefix}.weight"].T + self.weights[f"{prefix}.bias"]

    def forward(self, ids: Any, mask: Any) -> Any:
        """Mean-pooled, L2-normalised embeddings (float32 ``[rows, 128]``) of padded token ids."""
        import numpy as np

        w = self.weights
        rows, length = ids.shape
        # Tokens as one [rows * length, hidden] matrix: each linear layer is then one GEMM.
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
             + w["embeddings.token_type_embeddings.weight"][0]).reshape(rows * length, HIDDEN)
        x = self._layer_norm(x, "embeddings.LayerNorm")
        head = HIDDEN // self.heads
        # As transformers' eager attention: the dtype's minimum added where a key is padding.
        bias = ((1.0 - mask[:, None, None, :].astype(np.float32)) * np.finfo(np.float32).min).astype(np.float32)
        scale = np.float32(1.0 / np.sqrt(head))

        def split(t: Any) -> Any:
            return t.reshape(rows, length, self.heads, head).transpose(0, 2, 1, 3)

        for index in range(self.layers):
            prefix = f"encoder.layer.{index}"
            q = split(self._linear(x, f"{prefix}.attention.self.query"))
            k = split(self._linear(x, f"{prefix}.attention.self.key"))
            v = split(self._linear(x, f"{prefix}.attention.self.value"))
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = scores / scores.sum(axis=-1, keepdims=True)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(rows * length, HIDDEN)
            x = self._layer_norm(self._linear(context, f"{prefix}.attention.output.dense") + x,
                                 f"{prefix}.attention.output.LayerNorm")
            inner = _gelu_tanh(self._linear(x, f"{prefix}.intermediate.dense"))
            x = self._layer_norm(self._linear(inner, f"{prefix}.output.dense") + x, f"{prefix}.output.LayerNorm")
        x = x.reshape(rows, length, HIDDEN)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (x * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), np.float32(1e-9))
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), np.float32(1e-12))
        return (pooled / norms).astype(np.float32)

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        return self.forward(*encode(self.tokenizer, texts))


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "embed", "tokens"])
    parser.add_argument("--folder", type=pathlib.Path, default=None, help="model folder (default: the cache's)")
    parser.add_argument("--engine", choices=["torch", "numpy"], default="torch",
                        help="embed with transformers' BertModel (the reference) or NumpyEncoder (no torch)")
    args = parser.parse_args(argv)
    if args.command == "build":
        print(build(args.folder))
        return 0
    texts = json.load(sys.stdin)
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        print("stdin must be a JSON list of strings", file=sys.stderr)
        return 2
    if args.command == "tokens":
        json.dump(token_counts(texts, args.folder), sys.stdout)
    else:
        vectors = embed(texts, args.folder) if args.engine == "torch" else NumpyEncoder(args.folder).embed(texts)
        json.dump(vectors.tolist(), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
