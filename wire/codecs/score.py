"""vLLM's score API, towards a predictor (`POST <base path>/score`): a batch of (query,
document) pairs as `text_1` and `text_2`, two lists of one length, so pairs of different
queries share one call; answered `{"data": [{"index", "score"}]}`, each pair's score by its
`index`.

A codec raises `InvalidInput` for anything malformed (here, the predictor's answer). It knows
nothing of batching, tokenizers or models; Cohere's rerank shape is `wire.codecs.cohere`'s.
"""
from __future__ import annotations

import numpy as np
import orjson

from wire.codecs.json_data import loads, scores_by_index


def encode_request(model: str, queries: list[str], documents: list[str]) -> bytes:
    """Pair i is (text_1[i], text_2[i]), whatever query each pair has."""
    return orjson.dumps({"model": model, "text_1": queries, "text_2": documents})


def decode_answer(body: bytes, rows: int) -> np.ndarray:
    """The scores as float32 [rows], row i the item whose `index` is i."""
    document = loads(body, "the predictor's answer")
    data = document.get("data") if isinstance(document, dict) else None
    return scores_by_index(data, rows, "data", "score")
