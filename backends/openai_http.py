"""An OpenAI-compatible embeddings predictor over HTTP: KServe's OpenAI endpoint
(`/openai/v1/embeddings`), Infinity (`/embeddings`), TEI or vLLM (`/v1/embeddings`), or any
server of OpenAI's Embeddings API, at its base path.

The batch travels as ONE `POST <base path>/embeddings` whose `input` is the list of the
batch's texts (its BYTES tensor of shape [rows, 1]), or of its token-id lists when the
batch is of `wire.embeddings.TOKEN_IDS_INPUT` (a model configured to pass them as they
are); the answer's vectors come back by their `index` as the FP32 tensor `embedding`
[rows, dims]. A batch's `dimensions`
parameter, when its requests asked for one, is sent along. Readiness is the model's
presence in `<base path>/models`. Bodies are `wire.codecs.openai`'s; it knows nothing of
the gateway.
"""
from __future__ import annotations

from backends import errors
from backends.base import Backend
from backends.http import HttpPredictor
from wire.codecs import openai
from wire.embeddings import TOKEN_IDS_INPUT, unpack_token_ids
from wire.errors import PredictorRejected
from wire.tensors import ModelSignature, Tensor, TensorSpec
from wire.tracing import current_batch

TEXT_INPUT = "text"
EMBEDDING_OUTPUT = "embedding"
# What the OpenAI API is, as tensors: texts in, vectors out.
SIGNATURE = ModelSignature(inputs=(TensorSpec(TEXT_INPUT, "BYTES", (-1, 1)),),
                           outputs=(TensorSpec(EMBEDDING_OUTPUT, "FP32", (-1, -1)),))


class OpenAIEmbeddingsBackend(Backend):
    takes_dimensions = True

    def __init__(self, base_url: str, model: str, base_path: str = "/openai/v1", ca_file: str = "") -> None:
        self.http = HttpPredictor(base_url, model, ca_file=ca_file)
        self.model = model
        self._embeddings_path = f"{base_path}/embeddings"
        self._models_path = f"{base_path}/models"

    async def infer(self, inputs: list[Tensor]) -> list[Tensor]:
        rows = inputs[0]
        try:
            if rows.name == TOKEN_IDS_INPUT:  # the predictor's own token ids, passed as they are
                values: list = [unpack_token_ids(row[0]) for row in rows.data]
            else:
                values = [row[0].decode("utf-8") for row in rows.data]
        except (UnicodeDecodeError, AttributeError, IndexError, TypeError):
            # The served model checks its clients' texts; this is the predictor's own refusal.
            raise PredictorRejected("an OpenAI-compatible predictor takes UTF-8 texts (or packed token ids), one "
                                    "per row of a BYTES tensor") from None
        batch = current_batch.get()
        dimensions = batch.parameters.get("dimensions") if batch is not None else None
        body = openai.encode_request(self.model, values, dimensions)
        _, payload = await self.http.post(self._embeddings_path, body, {"Content-Type": "application/json"})
        with errors.reading_answer(self.model):
            vectors = openai.decode_answer(payload, len(values))
        return [Tensor(EMBEDDING_OUTPUT, "FP32", vectors)]

    async def ready(self) -> bool:
        return await self.http.lists_model(self._models_path, self.model)

    async def metadata(self) -> tuple[ModelSignature, list[str]]:
        return SIGNATURE, []

    async def close(self) -> None:
        await self.http.close()
