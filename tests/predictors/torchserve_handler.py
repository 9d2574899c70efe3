"""The TorchServe handler of the test model ``double`` (archived into ``double.mar``).

Runs inside a TorchServe worker, in the TORCHSERVE predictor venv (torch 2.13.0 CPU).
The model is a real ``torch.nn.Linear(4, 4, bias=False)`` whose weight is ``2 * I``
(built and saved by ``torchserve_server.py``), so every output row is 2 x its input row.

TorchServe's request envelope (``service_envelope`` in config.properties, global to the
server) decides what ``handle`` gets, and the model's ``batchSize`` is 1, so one request
is one call:

* ``kserve``: the rows of ``{"instances": [...]}`` as ONE list; ``handle`` returns one
  prediction per row and the envelope answers ``{"predictions": [...]}``.
* ``kservev2``: the Open Inference Protocol inputs as a list of
  ``{"name", "shape", "datatype", "data"}`` (data nested by shape); ``handle`` returns one
  result per input, and the envelope flattens it and calls it FP64 (plain lists).

Every call appends ONE JSON line to the call log named in the model's config file
(``handler.call_log`` in model-config.yaml; the server's other models write there too):
``{"model": "double", "envelope": "kserve"|"kservev2", "batch_size": <rows>, "pid": <worker pid>,
"t": <time>}``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import torch

_model: torch.nn.Module | None = None
_call_log: str | None = None
_name = "double"


def _initialize(context: Any) -> None:
    global _model, _call_log, _name
    torch.set_num_threads(1)  # a 2-core machine shared with the gateway and the tests
    model_dir = context.system_properties["model_dir"]
    serialized = context.manifest["model"]["serializedFile"]
    model = torch.nn.Linear(4, 4, bias=False)
    model.load_state_dict(torch.load(os.path.join(model_dir, serialized), weights_only=True))
    model.eval()
    _model = model
    _call_log = (context.model_yaml_config or {}).get("handler", {}).get("call_log")
    _name = context.manifest["model"]["modelName"]


def _record(envelope: str, rows: int) -> None:
    if _call_log:
        # Open/append/close per call so a test can read the log while the server runs.
        with open(_call_log, "a") as log:
            entry = {"model": _name, "envelope": envelope, "batch_size": rows, "pid": os.getpid(), "t": time.time()}
            log.write(json.dumps(entry) + "\n")


def _forward(rows: Any) -> list:
    with torch.inference_mode():
        batch = torch.as_tensor(rows, dtype=torch.float32)
        if batch.ndim != 2 or batch.shape[1] != 4:
            raise ValueError(f"expected rows of 4 numbers, got shape {list(batch.shape)}")
        return _model(batch).tolist()


def handle(data: Any, context: Any) -> list | None:
    if _model is None:
        _initialize(context)
    if not data:
        return None  # TorchServe's load-time probe
    if isinstance(data[0], dict) and "datatype" in data[0]:
        # kservev2: one entry per input tensor; one result per input, in order.
        results = [_forward(tensor["data"]) for tensor in data]
        _record("kservev2", len(results[0]))
        return results
    # kserve: the instances of the ONE request, one prediction per row.
    predictions = _forward(data)
    _record("kserve", len(predictions))
    return predictions
