"""An inference request as the front ends decode it, whatever its wire form (OIP JSON,
binary extension or protobuf): the input tensors and what the client asked about outputs.

It knows no wire format and nothing of batching; the codecs build it and the service reads it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wire.tensors import Tensor


@dataclass(slots=True)
class RequestedOutput:
    name: str
    binary: bool | None = None  # None: follow the request-level default


@dataclass(slots=True)
class OipRequest:
    """An OIP inference request as decoded from either wire form (JSON or protobuf)."""
    inputs: list[Tensor]
    id: str = ""
    outputs: list[RequestedOutput] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def binary_output_default(self) -> bool:
        return self.parameters.get("binary_data_output") is True
