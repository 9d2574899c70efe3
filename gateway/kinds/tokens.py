"""How many tokens a text costs the predictor: the one place texts are counted.

Semantics
---------
* With the model's own tokenizer configured (`[models.embeddings] tokenizer`, a Hugging
  Face `tokenizer.json`, read with the `tokenizers` library: the optional `embeddings`
  extra), a text's count is exact: the ids the predictor's tokenizer makes, special tokens
  included, truncation and padding turned off (the gateway counts; the predictor cuts).
* Without one, the count is an *estimate*: one token per 4 bytes of UTF-8, rounded up,
  plus 2 for the special tokens an encoder adds ([CLS] and [SEP]). OpenAI documents about
  4 characters a token for English text; WordPiece and BPE vocabularies land near it for
  prose and above it for code or rare words. The estimate decides batch composition only
  (`max_batch_tokens`), so an error shifts a batch's size, never its answers; `usage`
  reports it as it is (the docs say so).

And how an OpenAI client's token ids become text again (`TokenDecoder`): LangChain's
`OpenAIEmbeddings`, by default, tokenizes each text with tiktoken (`cl100k_base` for a model
name it does not know) and sends the ids. A tiktoken encoding is a byte-level BPE: each id
stands for a fixed byte string, so the text is the ids' bytes joined, exactly (lossless),
and the predictor then tokenizes that text as its own. The encoding's `.tiktoken` file is
read from a configured path or from tiktoken's own cache (`TIKTOKEN_CACHE_DIR`, else
`DATA_GYM_CACHE_DIR`, else `<tmp>/data-gym-cache`, where tiktoken keeps what it fetched),
checked against tiktoken's hash for it, and never downloaded; the encoding's special tokens
are tiktoken's own (`tiktoken_ext.openai_public`).

It knows no wire format, no batching and no model beyond its tokenizer and encoding files.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import math
import os
import tempfile
import threading
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

SPECIAL_TOKENS = 2      # [CLS] and [SEP]: what an encoder's tokenizer adds to every text
BYTES_PER_TOKEN = 4


class TokenCounter:
    """Counts each text's tokens: exactly with a tokenizer file, else by the estimate."""

    def __init__(self, tokenizer_file: str = "") -> None:
        self.exact = bool(tokenizer_file)
        self._tokenizer = _load(tokenizer_file) if tokenizer_file else None

    def count(self, texts: Sequence[str]) -> np.ndarray:
        """Each text's tokens (int64, one per text)."""
        if self._tokenizer is None:
            return np.fromiter((estimate(text) for text in texts), dtype=np.int64, count=len(texts))
        # The fast form: ids only, no offsets (a quarter less work), one text after another.
        encodings = self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=True)
        return np.fromiter((len(encoding.ids) for encoding in encodings), dtype=np.int64, count=len(texts))

    def cut(self, texts: Sequence[str], max_tokens: int) -> list[str]:
        """Each text cut to its first `max_tokens` tokens, special tokens aside (Cohere's
        `max_tokens_per_doc`): exactly at a token's end with the tokenizer, else at
        `max_tokens` x 4 bytes of UTF-8 (the estimate's rate), on a character's boundary.
        Texts that fit are returned as they are."""
        if self._tokenizer is None:
            limit = max_tokens * BYTES_PER_TOKEN
            return [text if len(text) <= limit // 4 or len(encoded := text.encode("utf-8", "surrogatepass")) <= limit
                    else encoded[:limit].decode("utf-8", "ignore") for text in texts]
        long = [index for index, text in enumerate(texts) if len(text) > max_tokens]  # a token is one character or more
        cut = list(texts)
        if long:
            encodings = self._tokenizer.encode_batch([texts[index] for index in long], add_special_tokens=False)
            for index, encoding in zip(long, encodings, strict=True):
                if len(encoding.offsets) > max_tokens:
                    cut[index] = texts[index][:encoding.offsets[max_tokens - 1][1]]
        return cut


def estimate(text: str) -> int:
    """The estimate (see the module): a quarter of its UTF-8 bytes, rounded up, plus 2."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN) + SPECIAL_TOKENS


class TokenizerUnavailable(RuntimeError):
    """The configured tokenizer cannot be read (the config layer reports it with its key)."""


def _load(path: str) -> Any:  # the `tokenizers` Tokenizer (an optional import)
    # Counting runs on the event loop: the library's own thread pool would spread a list over
    # the cores the loop and the predictor need (measured: 2.1 ms of CPU for 32 texts instead
    # of 1.4, in 1.1 ms instead of 1.4). Read once, when the pool is first used.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        from tokenizers import Tokenizer  # the optional `embeddings` extra
    except ImportError:
        raise TokenizerUnavailable("counting with a tokenizer needs the `tokenizers` package "
                                   "(pip install 'batching-gateway[embeddings]')") from None
    if not Path(path).is_file():
        raise TokenizerUnavailable(f"no tokenizer file at {path}")
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as exc:  # the library raises its own Exception for a malformed file
        raise TokenizerUnavailable(f"{path} is not a tokenizer.json the `tokenizers` library reads: {exc}") from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


# -- token ids back to text ------------------------------------------------------------------

DEFAULT_TOKEN_ENCODING = "cl100k_base"  # what LangChain and OpenAI's cookbook fall back to
# tiktoken's encodings whose vocabulary is a .tiktoken file (gpt2's is another format).
TOKEN_ENCODINGS = ("cl100k_base", "o200k_base", "o200k_harmony", "p50k_base", "p50k_edit", "r50k_base")


class EncodingUnavailable(RuntimeError):
    """A tiktoken encoding cannot be read here (not installed, no file, the wrong file). Its
    message is for the operator (the config's error, the gateway's log) and may name a path
    on the gateway; `public` says the same to a client without one."""

    def __init__(self, message: str, public: str = "") -> None:
        super().__init__(message)
        self.public = public or message


class UndecodableTokens(ValueError):
    """Token ids that are not text in the encoding (the model layer names the row)."""


class TokenDecoder:
    """Token ids of one tiktoken encoding back to their text: the bytes each id stands for,
    joined (ids of special tokens become the tokens' own text, e.g. `<|endoftext|>`)."""

    def __init__(self, encoding: str, table: list[bytes | None]) -> None:
        self.encoding = encoding
        self._table = table  # id -> its bytes (None: an id the encoding does not assign)

    def decode(self, ids: Sequence[int]) -> str:
        try:
            pieces = [self._table[token] for token in ids]
            text = b"".join(pieces)  # type: ignore[arg-type]  # a None (an unassigned id) raises TypeError
        except (IndexError, TypeError):
            unknown = next(t for t in ids if t >= len(self._table) or self._table[t] is None)
            raise UndecodableTokens(f"token id {unknown} is not in {self.encoding} (its ids are 0 to "
                                    f"{len(self._table) - 1})") from None
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as exc:
            # A byte-level BPE can split a character between two tokens: a list cut between them.
            raise UndecodableTokens(f"its ids decode in {self.encoding} to bytes that are not UTF-8 text "
                                    f"({exc.reason} at byte {exc.start}): was a text cut inside a character?") \
                from None


_loading = threading.Lock()  # one load of an encoding at a time: a warm-up thread and the loop may both ask


def token_decoder(encoding: str, file: str = "") -> TokenDecoder:
    """The decoder of `encoding` (one of TOKEN_ENCODINGS), from `file` or tiktoken's cache,
    read once per process (about 0.2 s for cl100k_base). Raises EncodingUnavailable."""
    with _loading:
        return _token_decoder(encoding, file, None if file else tiktoken_cache())


@functools.cache  # a failure is not cached: the file may be put in place later
def _token_decoder(encoding: str, file: str, cache: Path | None) -> TokenDecoder:
    if encoding not in TOKEN_ENCODINGS:
        raise EncodingUnavailable(f"{encoding!r} is not a tiktoken encoding the gateway reads; "
                                  f"choose one of {', '.join(TOKEN_ENCODINGS)}")
    try:
        from tiktoken_ext import openai_public  # the optional `embeddings` extra
    except ImportError:
        raise EncodingUnavailable("decoding token ids needs the `tiktoken` package "
                                  "(pip install 'batching-gateway[embeddings]')") from None
    constructor = _offline(openai_public,
                           lambda url, expected_hash=None: _ranks(encoding, url, expected_hash, file, cache))
    spec = constructor[encoding]()
    ranks: dict[bytes, int] = spec["mergeable_ranks"]
    special: dict[str, int] = spec["special_tokens"]
    table: list[bytes | None] = [None] * (max(max(ranks.values()), *special.values()) + 1)
    for piece, rank in ranks.items():
        table[rank] = piece
    for name, rank in special.items():
        table[rank] = name.encode("utf-8")
    return TokenDecoder(encoding, table)


def _offline(module: types.ModuleType, read: Callable[..., dict[bytes, int]]) -> dict[str, Callable[[], dict]]:
    """tiktoken's encoding constructors, each reading its vocabulary with `read` instead of
    `load_tiktoken_bpe` (which fetches over the network on a cache miss): the same functions
    in a copy of their module's namespace, so the URLs, hashes, patterns and special tokens
    stay tiktoken's own, written once there."""
    namespace = dict(vars(module), load_tiktoken_bpe=read)
    constructors = module.ENCODING_CONSTRUCTORS
    for function in constructors.values():
        namespace[function.__name__] = types.FunctionType(function.__code__, namespace, function.__name__,
                                                          function.__defaults__, function.__closure__)
    return {name: namespace[function.__name__] for name, function in constructors.items()}


def tiktoken_cache() -> Path | None:
    """Where tiktoken keeps the files it fetched (None: its cache is turned off), as it decides."""
    directory = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if directory is None:
        return Path(tempfile.gettempdir()) / "data-gym-cache"
    return Path(directory) if directory else None


def _ranks(encoding: str, url: str, expected_hash: str | None, file: str, cache: Path | None) -> dict[bytes, int]:
    """A .tiktoken file's ranks, from `file`, else from tiktoken's `cache` (named by the
    SHA-1 of the url it came from), checked against the hash tiktoken expects."""
    if file:
        path = Path(file)
    else:
        if cache is None:
            raise EncodingUnavailable(f"no {encoding} file: tiktoken's cache is turned off (TIKTOKEN_CACHE_DIR is "
                                      f"empty) and no token_ids_file is configured",
                                      f"the gateway has no {encoding} file (nothing is downloaded)")
        path = cache / hashlib.sha1(url.encode()).hexdigest()
    # A client is told what is missing, never where the gateway looked: that is the log's.
    public = f"the gateway has no usable {encoding} file (nothing is downloaded; its log says where it looked)"
    try:
        contents = path.read_bytes()
    except OSError as exc:
        where = "" if file else " (tiktoken's cache; nothing is downloaded: configure token_ids_file)"
        raise EncodingUnavailable(f"no {encoding} file at {path}{where}: {exc.strerror}", public) from None
    if expected_hash and hashlib.sha256(contents).hexdigest() != expected_hash:
        raise EncodingUnavailable(f"{path} is not tiktoken's {encoding} file: its SHA-256 is not {expected_hash}",
                                  public)
    ranks = {}
    for line in contents.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks
