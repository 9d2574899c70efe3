"""A rerank request as the Cohere front end decodes it: one query, its documents, and what
the client wants back; and how a (query, document) pair travels in a batch (two BYTES
inputs, `QUERY_INPUT` and `DOCUMENT_INPUT`, one pair a row, answered by the FP32
`SCORE_OUTPUT`, one score a row), which the served rerank model builds and the rerank
predictors' clients read.

It knows no wire format and nothing of batching; `wire.codecs.cohere` builds the request and
the served rerank model (`gateway.kinds.rerank`) reads it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

QUERY_INPUT = "query"
DOCUMENT_INPUT = "document"
SCORE_OUTPUT = "score"
DEFAULT_MAX_TOKENS_PER_DOC = 4096  # Cohere's v2 default


@dataclass(slots=True)
class RerankRequest:
    """`POST /v1/rerank` or `/v2/rerank`: one row per document, each paired with the query."""
    model: str                       # the name as the client gave it
    query: str
    documents: list[str]             # the texts scored against the query, in the client's order
    top_n: int | None = None         # the best this many (None: all)
    return_documents: bool = False   # v1: each result carries its document as sent
    max_tokens_per_doc: int = DEFAULT_MAX_TOKENS_PER_DOC  # each document cut to this many tokens
    priority: int | None = None      # v2's `priority` (0 the highest, Cohere's default)
    version: int = 2                 # 1 or 2: the route, which decides the answer's shape
    # v1: each document as the client sent it (a string or an object), echoed with return_documents.
    originals: list[Any] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return len(self.documents)
