"""Size limits every decoder enforces before it allocates anything a client declared."""
from __future__ import annotations

from dataclasses import dataclass

from wire.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_bytes: int = 64 * 1024 * 1024
    # JSON costs about 18x its size to parse into Python objects, on the event loop: a JSON
    # document (a whole JSON body, or the JSON header of a binary one) is bounded apart.
    max_json_bytes: int = 16 * 1024 * 1024
    # Protobuf parses a gRPC message's typed part (all but its raw contents) a field at a time,
    # holding the GIL (on the event loop, or in a thread: the same), and a field can be 2 bytes:
    # 32 MB of empty strings held the loop 0.6-1.4 s; 4 MiB of them, about 30 ms.
    max_typed_bytes: int = 4 * 1024 * 1024
    max_instances: int = 65536          # rows (batch dimension) in one request
    max_tensor_elements: int = 64 * 1024 * 1024


DEFAULT_LIMITS = Limits()
MAX_DIMENSIONS = 64  # numpy's own limit (NPY_MAXDIMS): a tensor can have no more


def element_count(name: str, shape: object, limits: Limits) -> int:
    """Validate a declared shape and return its element count, without allocating."""
    if not isinstance(shape, (list, tuple)) or not all(
        isinstance(d, int) and not isinstance(d, bool) for d in shape
    ):
        raise InvalidInput(f"input '{name}': shape must be a list of integers, got {shape!r}")
    if len(shape) == 0:
        raise InvalidInput(f"input '{name}': shape must have a batch dimension first, got []")
    if len(shape) > MAX_DIMENSIONS:
        raise InvalidInput(f"input '{name}': shape has {len(shape)} dimensions; at most {MAX_DIMENSIONS} are supported")
    count = 1
    for dim in shape:
        if dim < 0:
            raise InvalidInput(f"input '{name}': shape {list(shape)} has a negative dimension")
        count *= dim
        if count > limits.max_tensor_elements:
            raise InvalidInput(
                f"input '{name}': shape {list(shape)} exceeds the limit of "
                f"{limits.max_tensor_elements} elements per tensor"
            )
    if shape[0] > limits.max_instances:
        raise InvalidInput(
            f"input '{name}': {shape[0]} instances exceed the limit of {limits.max_instances}"
        )
    return count
