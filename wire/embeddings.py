"""An embeddings request as the OpenAI front end decodes it: the texts (or token ids) to
embed and how the client wants the vectors back; and how token ids that go to the predictor
as they are travel in a batch (`TOKEN_IDS_INPUT`: one BYTES row each, the ids packed as
little-endian uint32), which the served embedding model packs and an OpenAI-compatible
predictor's client unpacks.

It knows no wire format and nothing of batching; `wire.codecs.openai` builds the request and
the served embedding model (`gateway.kinds.embeddings`) reads it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

ENCODING_FORMATS = ("float", "base64")
# The input of a batch of token-id rows (its name keeps them out of batches of texts).
TOKEN_IDS_INPUT = "token_ids"
_TOKEN_ID = np.dtype("<u4")  # wire.codecs.openai refuses an id beyond 32 bits


@dataclass(slots=True)
class EmbeddingsRequest:
    """`POST /v1/embeddings`: one row per text, answered in the same order."""
    model: str                                  # the name as the client gave it (echoed in the answer)
    texts: list[str]                            # one row each; empty when the client sent token ids
    token_ids: list[list[int]] | None = None    # OpenAI's other input form: pre-tokenized rows
    encoding_format: str = "float"              # "float": JSON numbers; "base64": little-endian float32
    dimensions: int | None = None               # a shorter vector, for a predictor that can give one
    user: str = ""                              # the client's end-user id (OpenAI's), for logs

    @property
    def rows(self) -> int:
        return len(self.token_ids) if self.token_ids is not None else len(self.texts)


@dataclass(frozen=True, slots=True)
class EmbeddingsHead:
    """An embeddings request read as far as its model and the rows it declares: its inputs
    (each text, or each token id, a Python step) are checked by `decode`, once the model has
    room for that many rows."""
    model: str
    rows: int
    decode: Callable[[], EmbeddingsRequest]  # raises InvalidInput for a malformed input


def pack_token_ids(ids: Sequence[int]) -> bytes:
    """One row of token ids as a BYTES element of TOKEN_IDS_INPUT."""
    return np.asarray(ids, dtype=_TOKEN_ID).tobytes()


def unpack_token_ids(row: bytes) -> list[int]:
    return np.frombuffer(row, dtype=_TOKEN_ID).tolist()
