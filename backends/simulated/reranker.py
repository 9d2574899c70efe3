"""The simulated cross-encoder: (query, document) pairs in, one relevance score each, at a
configurable cost.

Inputs `query` and `document`, BYTES [rows, 1] (UTF-8), output `score` FP32 [rows, 1]: each
pair's score is a pseudo-random number in (0, 1) seeded by the pair itself, so the same pair
always gets the same score, whatever batch (and whatever other queries) it travels with:
what the tests check answers against. A call costs the simulated model's `call_ms +
per_instance_ms x rows + per_element_us x tokens`, the tokens counted as a padding encoder
pays for them: rows x the longest pair, each text 1 token per 4 bytes, plus 3 ([CLS] and two
[SEP]). It speaks no protocol and knows nothing of the gateway.
"""
from __future__ import annotations

import hashlib

import numpy as np

from backends.simulated.model import SimulatedModel
from wire.errors import InvalidInput
from wire.rerank import DOCUMENT_INPUT, QUERY_INPUT, SCORE_OUTPUT
from wire.tensors import ModelSignature, Tensor, TensorSpec

SIGNATURE = ModelSignature(
    inputs=(TensorSpec(QUERY_INPUT, "BYTES", (-1, 1)), TensorSpec(DOCUMENT_INPUT, "BYTES", (-1, 1))),
    outputs=(TensorSpec(SCORE_OUTPUT, "FP32", (-1, 1)),),
)


def score(query: bytes, document: bytes) -> float:
    """The pair's own score, in (0, 1) (float32-exact)."""
    digest = hashlib.blake2b(len(query).to_bytes(8, "little") + query + document, digest_size=8).digest()
    return float(np.float32((int.from_bytes(digest, "little") % 1_000_003 + 1) / 1_000_005))


class SimulatedReranker(SimulatedModel):
    signature = SIGNATURE

    async def predict(self, inputs: list[Tensor]) -> list[Tensor]:
        by_name = {tensor.name: tensor for tensor in inputs}
        if len(inputs) != 2 or set(by_name) != {QUERY_INPUT, DOCUMENT_INPUT} or \
                any(tensor.datatype != "BYTES" for tensor in inputs):
            raise InvalidInput(f"model '{self.name}' takes exactly two inputs, {QUERY_INPUT} and {DOCUMENT_INPUT} "
                               f"(BYTES)")
        queries, documents = (_texts(by_name[name].data, name, self.name) for name in (QUERY_INPUT, DOCUMENT_INPUT))
        if len(queries) != len(documents):
            raise InvalidInput(f"model '{self.name}': {len(queries)} queries for {len(documents)} documents")
        longest = max(-(-len(query) // 4) + -(-len(document) // 4) for query, document in
                      zip(queries, documents, strict=True)) + 3
        await self.pay(len(queries), longest * len(queries))
        scores = [score(query, document) for query, document in zip(queries, documents, strict=True)]
        return [Tensor(SCORE_OUTPUT, "FP32", np.asarray(scores, dtype=np.float32).reshape(-1, 1))]


def _texts(data: np.ndarray, name: str, model: str) -> list[bytes]:
    if data.ndim != 2 or data.shape[1] != 1:
        raise InvalidInput(f"model '{model}': {name} has shape [rows, 1], got {list(data.shape)}")
    return [row[0] if isinstance(row[0], bytes) else str(row[0]).encode() for row in data]
