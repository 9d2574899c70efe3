"""Open Inference Protocol over HTTP (Triton, KServe v2): JSON or the binary tensor extension.

Holds the OIP REST client only: paths, readiness and metadata. The body formats are
`wire.codecs.oip_json`'s, the connection pool `backends.http`'s; it knows nothing of the
gateway.
"""
from __future__ import annotations

from typing import Any

from backends import errors
from backends.base import Backend
from backends.http import HttpPredictor
from backends.metadata import signature_from_json
from wire.codecs import oip_json
from wire.tensors import ModelSignature, Tensor
from wire.tracing import current_batch


class OipHttpBackend(Backend):
    def __init__(self, base_url: str, model: str, binary: bool = False, ca_file: str = "", *,
                 reads_model_config: bool = False) -> None:
        self.http = HttpPredictor(base_url, model, ca_file=ca_file)
        self.model = model
        prefix = f"/v2/models/{model}"
        self._infer_path = prefix + "/infer"
        self._ready_path = prefix + "/ready"
        self._metadata_path = prefix
        self.binary = binary
        self.reads_model_config = reads_model_config  # Triton's model configuration; KServe v2 has none

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        batch = current_batch.get()
        body, json_length = oip_json.encode_request(inputs, binary=self.binary,
                                                    parameters=batch.parameters if batch is not None else None)
        response_headers, payload = await self.http.post(self._infer_path, body, oip_json.body_headers(json_length))
        with errors.reading_answer(self.model):
            length = oip_json.json_length(response_headers.get(oip_json.HEADER_LENGTH))
            outputs, _ = oip_json.decode_response(payload, length)
        return outputs

    async def ready(self) -> bool:
        status, _ = await self.http.probe(self._ready_path)
        return status == 200

    async def metadata(self) -> tuple[ModelSignature, list[str]] | None:
        document = await self.http.probe_json(self._metadata_path)
        if not isinstance(document, dict):
            return None
        try:
            return signature_from_json(document)
        except (ValueError, KeyError, TypeError):
            return None

    async def model_config(self) -> dict[str, Any] | None:
        config = await self.http.probe_json(self._metadata_path + "/config")  # Triton's; KServe has none
        return config if isinstance(config, dict) else None

    async def close(self) -> None:
        await self.http.close()
