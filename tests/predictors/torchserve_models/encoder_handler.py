"""The handler of the test model ``encoder`` (``TextEncoder``, archived into
``encoder.mar``): variable-length token ids in, one 64-float embedding per row out.

Runs inside a TorchServe worker, in the TORCHSERVE predictor venv. A row may come in
either of two forms, through either transport:

* the ids themselves, a JSON list of ints: TorchServe's own inference API
  (``POST /predictions/encoder`` with ``Content-Type: application/json``, which arrives
  parsed; a body of another type arrives as bytes or str and is parsed here), as
  ``row.get("data") or row.get("body")``; or a KServe-envelope instance that is the list
  itself or ``{"data": [ids]}``;
* padded by someone else, the gateway's KServe v1 instances of a padded model:
  ``{"input_ids": [ids padded with 0], "length": [n]}`` (or ``"length": n``, or a 0/1
  ``"mask"`` instead of ``length``); only the first n ids are real.

The handler cuts every row to its real ids and pads the call's rows to the longest with 0,
building the padding mask itself (TorchServe's own batching hands it unpadded rows of
different lengths: "the handler pads to the longest"), so a row's embedding is the same
(to float rounding) alone, batched with longer rows, or padded by the gateway. Token ids must
lie in [0, 1000) and a row hold 1 to 512 of them, else the call raises.
"""

from __future__ import annotations

import json
from typing import Any

import torch
from call_logging import CallLoggingHandler  # a sibling in the archive (--extra-files)

VOCABULARY = 1000
MAX_LENGTH = 512


class TextEncoderHandler(CallLoggingHandler):
    def preprocess(self, data: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [token_ids(row) for row in data]
        self.lengths = [len(row) for row in rows]
        ids = torch.zeros((len(rows), max(self.lengths)), dtype=torch.int64)
        padding = torch.ones(ids.shape, dtype=torch.bool)
        for index, row in enumerate(rows):
            ids[index, : len(row)] = torch.tensor(row, dtype=torch.int64)
            padding[index, : len(row)] = False
        return ids, padding

    def inference(self, data: tuple[torch.Tensor, torch.Tensor], *args: Any, **kwargs: Any) -> torch.Tensor:
        ids, padding = data
        with torch.inference_mode():
            return self.model(ids.to(self.device), padding.to(self.device))

    def postprocess(self, data: torch.Tensor) -> list[list[float]]:
        return data.tolist()

    def call_details(self, data: list[Any]) -> dict[str, Any]:
        return {"lengths": self.lengths}  # each row's real length: which rows shared a batch


def token_ids(row: Any) -> list[int]:
    """A row's real token ids, from any of the forms the module docstring lists."""
    if isinstance(row, dict) and "input_ids" not in row:
        row = row.get("data") if row.get("data") is not None else row.get("body")
    if isinstance(row, (bytes, bytearray, str)):
        row = json.loads(row)
    if isinstance(row, dict) and "input_ids" in row:
        ids = row["input_ids"]
        count = real_length(row, len(ids) if isinstance(ids, list) else 0)
        if not isinstance(ids, list) or not 0 < count <= len(ids):
            raise ValueError(f"a padded row needs 0 < length <= len(input_ids); got {count} of {ids!r:.80}")
        row = ids[:count]
    if not isinstance(row, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in row):
        raise ValueError(f"expected a list of token ids (ints), got {row!r:.80}")
    if not 0 < len(row) <= MAX_LENGTH:
        raise ValueError(f"a row must hold 1 to {MAX_LENGTH} token ids, got {len(row)}")
    if not all(0 <= i < VOCABULARY for i in row):
        raise ValueError(f"token ids must lie in [0, {VOCABULARY})")
    return row


def real_length(row: dict[str, Any], default: int) -> int:
    """``length`` (n or [n]), else the number of 1s in ``mask``, else all of the ids."""
    if "length" in row:
        length = row["length"]
        if isinstance(length, list) and len(length) == 1:
            length = length[0]
        if not isinstance(length, int) or isinstance(length, bool):
            raise ValueError(f"'length' must be an int or [int], got {row['length']!r:.40}")
        return length
    if "mask" in row:
        return int(sum(row["mask"]))
    return default
