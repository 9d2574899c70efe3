"""An inference request as the front ends decode it, whatever its wire form (OIP JSON,
binary extension or protobuf): the input tensors and what the client asked about outputs.

It knows no wire format and nothing of batching; the codecs build it and the service reads it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wire.errors import InvalidInput
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

    def __post_init__(self) -> None:
        # Each requested output is answered once: a list of duplicates would make the
        # answer (and the work to build it) grow without bound in the request's own size.
        seen: set[str] = set()
        for output in self.outputs:
            if output.name in seen:
                raise InvalidInput(f"output '{output.name}' is requested more than once")
            seen.add(output.name)

    @property
    def binary_output_default(self) -> bool:
        return self.parameters.get("binary_data_output") is True
