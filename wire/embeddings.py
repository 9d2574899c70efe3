"""An embeddings request as the OpenAI front end decodes it: the texts (or token ids) to
embed and how the client wants the vectors back.

It knows no wire format and nothing of batching; `wire.codecs.openai` builds it and the
served embedding model (`gateway.embeddings`) reads it.
"""
from __future__ import annotations

from dataclasses import dataclass

ENCODING_FORMATS = ("float", "base64")


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
