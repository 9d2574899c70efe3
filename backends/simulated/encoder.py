"""The simulated text encoder: texts in, unit vectors out, at a configurable cost.

Input `text` BYTES [rows, 1] (UTF-8), output `embedding` FP32 [rows, DIMENSIONS]: each
text's vector is a pseudo-random unit vector seeded by the text itself, so the same text
always gets the same vector, whatever batch it travels in (what the tests check answers
against), and different texts get different ones. A call costs the simulated model's
`call_ms + per_instance_ms x rows + per_element_us x tokens`, the tokens counted as a
padding encoder pays for them: rows x the longest text, each text 1 token per 4 bytes
plus 2. It speaks no protocol and knows nothing of the gateway.
"""
from __future__ import annotations

import hashlib

import numpy as np

from backends.simulated.model import SimulatedModel
from wire.errors import InvalidInput
from wire.tensors import ModelSignature, Tensor, TensorSpec

DIMENSIONS = 32
SIGNATURE = ModelSignature(
    inputs=(TensorSpec("text", "BYTES", (-1, 1)),),
    outputs=(TensorSpec("embedding", "FP32", (-1, DIMENSIONS)),),
)


def vector(text: bytes) -> np.ndarray:
    """The text's own unit vector (float32, DIMENSIONS)."""
    seed = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")
    values = np.random.default_rng(seed).standard_normal(DIMENSIONS)
    return (values / np.linalg.norm(values)).astype(np.float32)


class SimulatedEncoder(SimulatedModel):
    signature = SIGNATURE

    async def predict(self, inputs: list[Tensor]) -> list[Tensor]:
        if len(inputs) != 1 or inputs[0].name != "text" or inputs[0].datatype != "BYTES":
            raise InvalidInput(f"model '{self.name}' takes exactly one input, text (BYTES)")
        data = inputs[0].data
        if data.ndim != 2 or data.shape[1] != 1:
            raise InvalidInput(f"model '{self.name}': text has shape [rows, 1], got {list(data.shape)}")
        texts = [row[0] if isinstance(row[0], bytes) else str(row[0]).encode() for row in data]
        longest = max(-(-len(text) // 4) for text in texts) + 2
        await self.pay(len(texts), longest * len(texts))
        return [Tensor("embedding", "FP32", np.stack([vector(text) for text in texts]))]
