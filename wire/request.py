"""An inference request as the front ends decode it, whatever its wire form (OIP JSON,
binary extension or protobuf): the input tensors and what the client asked about outputs;
and `RequestHead`, the same request with only its headers read.

A codec reads a request in two steps: its head (every input's name, datatype and shape,
each checked against the size of its payload), then, when asked, the payloads. Whoever
holds the head can refuse the request before a payload is decoded (`gateway.models` checks
it against the served model), and choose where the decoding runs (`gateway.service`).

It knows no wire format and nothing of batching; the codecs build it and the service reads it.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wire.errors import InvalidInput
from wire.tensors import Tensor, TensorSpec

# How a client without OIP parameters (KServe v1, TorchServe; HTTP header or gRPC metadata)
# gives Triton's `priority`: 1 is the highest level, 0 the model's default.
PRIORITY_HEADER = "X-Request-Priority"


def priority_from_header(value: str | None) -> int:
    """The priority a client's header (or gRPC metadata) asks for; 0 if none."""
    if value is None:
        return 0
    if not value.strip().isdigit():
        raise InvalidInput(f"{PRIORITY_HEADER} must be a non-negative integer (1 is the highest), got '{value}'")
    return int(value)


# Request parameters the gateway acts on itself, never forwarded: the deadline, the
# priority, and how the client wants its own answer encoded.
GATEWAY_PARAMETERS = frozenset({"timeout", "priority", "binary_data_output"})


# Triton's shared-memory extension: a tensor's data in a region the client registered with
# the server. The gateway does not implement it (its clients' regions are not its memory).
SHARED_MEMORY_PARAMETERS = frozenset({"shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"})


def refuse_shared_memory(where: str, parameters: Mapping[str, Any]) -> None:
    """A tensor (input or requested output) whose parameters name shared memory is refused,
    whatever its wire form: answering it would leave the client reading a region nobody wrote."""
    named = SHARED_MEMORY_PARAMETERS.intersection(parameters)
    if named:
        raise InvalidInput(
            f"{where} names shared memory ({', '.join(sorted(named))}): the gateway does not implement Triton's "
            f"shared-memory extension; send the tensor's data in the request (or binary_data), and read outputs "
            f"from the answer")


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

    @property
    def timeout_s(self) -> float | None:
        """Triton's `timeout` parameter (microseconds) as a deadline in seconds."""
        if "timeout" not in self.parameters:
            return None
        value = self.parameters["timeout"]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidInput(f"parameter 'timeout' must be a positive integer of microseconds, got {value!r}")
        return value / 1_000_000

    @property
    def priority(self) -> int:
        """Triton's `priority` parameter: 1 is the highest, 0 the model's default."""
        value = self.parameters.get("priority", 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput(f"parameter 'priority' must be a non-negative integer, got {value!r}")
        return value

    def forwarded_parameters(self) -> dict[str, Any]:
        """The parameters that travel with the batch to the predictor: all but the ones the
        gateway itself acts on, and never `triton_*` (Triton's HTTP answers 400 to them, and
        tritonclient's C++ gRPC client adds one to every request)."""
        forwarded = {}
        for name, value in self.parameters.items():
            if name in GATEWAY_PARAMETERS or name.startswith("triton_"):
                continue
            if isinstance(value, (dict, list)):
                raise InvalidInput(f"parameter '{name}' must be a string, number or boolean")
            forwarded[name] = value
        return forwarded


@dataclass(slots=True)
class RequestHead:
    """An OIP request whose headers are read and whose payloads are not decoded yet."""
    inputs: list[TensorSpec]  # each input as its header declares it (the shape as sent, batch first)
    bytes_elements: int  # BYTES elements its payloads hold: the work of decoding that grows per element
    decode: Callable[[], OipRequest]  # the payloads, decoded (raises InvalidInput for a malformed one)
