"""KServe v1 over HTTP (KServe, or TorchServe with service_envelope=kserve).

The batch travels as one `{"instances": [...]}` body; the predictor must answer one
prediction per instance, in order (`wire.codecs.v1` reads the answer). Holds the v1 REST
client only; it knows nothing of the gateway.
"""
from __future__ import annotations

from collections.abc import Callable

from backends import errors
from backends.base import Backend, BatchForm
from backends.http import HttpPredictor
from wire.codecs import v1
from wire.errors import GatewayError
from wire.tensors import Tensor, rows_tensor


class KServeV1Backend(Backend):
    batch_form = BatchForm.INSTANCES

    def __init__(self, base_url: str, model: str, ca_file: str = "", ready_path: str = "",
                 translate_status: Callable[[str, int, bytes], GatewayError] = errors.from_http_status) -> None:
        self.http = HttpPredictor(base_url, model, ca_file=ca_file, translate_status=translate_status)
        self.model = model
        self._predict_path = f"/v1/models/{model}:predict"
        # TorchServe answers 404 here: it passes "/ping" ({"status": "Healthy"}, 500 if not).
        self._ready_path = ready_path or f"/v1/models/{model}"

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        rows = inputs[0].data
        _, payload = await self.http.post(self._predict_path, v1.encode_request(rows), {"Content-Type": "application/json"})
        with errors.reading_answer(self.model):
            predictions = v1.decode_predictions(payload, len(rows))
        return [rows_tensor(predictions)]

    async def ready(self) -> bool:
        document = await self.http.probe_json(self._ready_path)  # None: not 200, or not JSON
        if document is None:
            return False
        return not isinstance(document, dict) or document.get("ready", True) is not False

    async def close(self) -> None:
        await self.http.close()
