"""``CallLoggingHandler``: what the class-based handlers of the test models ``image`` and
``encoder`` share, archived into their .mar files as an extra file (``--extra-files``) and
imported by them as a sibling module inside the TorchServe worker.

On top of TorchServe's ``BaseHandler`` (which imports the archive's model file, loads the
state dict and the ``index_to_name.json`` label map) it pins torch to one thread and appends
ONE JSON line per handler call to the call log named in the model's config file
(``handler.call_log`` in model-config.yaml), so tests and benchmarks see how TorchServe
batched the requests::

    {"model": <served name>, "envelope": "kserve" | "none", "batch_size": <rows in the call>,
     "pid": <worker pid>, "t": <time>, ...what the handler adds, e.g. "lengths"}

Only a call that answered is logged. It must not know the models' inputs.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import torch
from ts.torch_handler.base_handler import BaseHandler


class CallLoggingHandler(BaseHandler):
    def initialize(self, context: Any) -> None:
        # A 2-core machine shared with the gateway, the load generator and other workers.
        torch.set_num_threads(1)
        super().initialize(context)
        config = (context.model_yaml_config or {}).get("handler", {})
        self.call_log: str | None = config.get("call_log")
        self.envelope: str = config.get("envelope", "none")
        self.model_name: str = context.manifest["model"]["modelName"]

    def handle(self, data: Any, context: Any) -> Any:
        output = super().handle(data, context)
        self.record(len(data), **self.call_details(data))
        return output

    def call_details(self, data: list[Any]) -> dict[str, Any]:
        """Extra fields of this call's log line (a subclass's)."""
        return {}

    def record(self, rows: int, **details: Any) -> None:
        if not self.call_log:
            return
        entry = {"model": self.model_name, "envelope": self.envelope, "batch_size": rows,
                 "pid": os.getpid(), "t": time.time(), **details}
        # Open/append/close per call: a test reads the log while the server runs, and several
        # workers append to the same file (one short O_APPEND write each).
        with open(self.call_log, "a") as log:
            log.write(json.dumps(entry) + "\n")
