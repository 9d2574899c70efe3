"""Text-embedding models: the one place texts become rows, and rows become vectors.

An embedding model (`[models.embeddings]`, or any model of an OpenAI-compatible
predictor) is a tensor model whose batch form is one BYTES tensor of texts, shape
[rows, 1], and whose answer is one FP32 output of vectors, [rows, dims]:

- an OpenAI client's texts (`wire.embeddings.EmbeddingsRequest`) become that tensor, named
  as the predictor's text input (configured, else the only one it describes, else
  "text"); OIP clients that send BYTES texts, and KServe v1 clients whose instances are
  texts (each a string, or a list of one), land in the same batches; a v1 client is
  answered one vector per instance;
- an OpenAI client's token ids (LangChain's default) are decoded back to their texts in the
  model's tiktoken encoding (`token_ids`, `gateway.tokens.TokenDecoder`) and batched as
  texts (the rows a request declares are held against the queue's `max_queue` before a
  single id is checked: `InferenceService.decode_embeddings`); a model of an
  OpenAI-compatible predictor configured with `token_ids = "as_is"` sends them on as they
  are instead, in batches of their own (`wire.embeddings.TOKEN_IDS_INPUT`);
- every request's rows are measured in tokens (`gateway.tokens`), whatever its protocol,
  so that the scheduler can cap a batch by `max_batch_tokens` and group similar lengths
  by bucket (`gateway.batching.padding`: texts pad nothing in the gateway);
- identical texts within one batch are sent once and their vector copied back
  (`deduplicate`, on by default), since an encoder's answer depends on the text alone;
- the vectors are read from the output configured, else the only FP32 output; a vector
  holding NaN or an infinity is the predictor's bad answer (502), never a JSON null.

It knows no wire format (the OpenAI codec decodes before it and encodes after it), no
predictor protocol beyond the backend interface, and nothing of the scheduler.
"""
from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from backends.base import Backend
from gateway.batching.executor import Executor
from gateway.config import TOKEN_IDS_AS_IS, EmbeddingsConfig, ModelConfig
from gateway.models.base import BatchInputs, ClientRequest
from gateway.models.tensor import TensorModel
from gateway.tokens import EncodingUnavailable, TokenCounter, UndecodableTokens, token_decoder
from wire.embeddings import TOKEN_IDS_INPUT, EmbeddingsRequest, pack_token_ids
from wire.errors import BadPredictorAnswer, InvalidInput
from wire.tensors import Tensor, TensorSpec

DEFAULT_TEXT_INPUT = "text"

log = logging.getLogger(__name__)


class EmbeddingModel(TensorModel):
    """A predictor that embeds texts (see the module)."""

    def __init__(self, config: ModelConfig, backend: Backend) -> None:
        super().__init__(config, backend)
        self.settings: EmbeddingsConfig = config.embeddings or EmbeddingsConfig()
        self.tokens = TokenCounter(self.settings.tokenizer)
        self._warming: asyncio.Future | None = None
        self._refusing_token_ids = ""  # why token ids were last refused, as logged (logged once for each why)

    @property
    def embeds_texts(self) -> bool:
        return True

    def start(self, on_batch_limit: Callable[[], None] | None = None) -> None:
        super().start(on_batch_limit)
        if self.settings.token_ids != TOKEN_IDS_AS_IS:
            # Read the encoding in a thread now (about 0.2 s), not on the loop at the first token ids.
            self._warming = asyncio.ensure_future(asyncio.to_thread(self._warm_token_decoder))

    def _warm_token_decoder(self) -> None:
        try:
            token_decoder(self.settings.token_ids, self.settings.token_ids_file)
        except EncodingUnavailable as exc:
            log.info("model '%s' will refuse token ids: %s", self.name, exc)

    @property
    def text_input(self) -> str:
        """The name of the BYTES input the texts travel in."""
        if self.settings.input:
            return self.settings.input
        inputs = self.client_inputs
        return inputs[0].name if len(inputs) == 1 else DEFAULT_TEXT_INPUT

    # -- into the batch form ------------------------------------------------------------

    def batch_inputs(self, request: ClientRequest) -> BatchInputs:
        if isinstance(request, EmbeddingsRequest):
            return self._from_embeddings_request(request)
        batch = super().batch_inputs(request)
        batch.lengths = self._measure(batch.tensors)
        return batch

    def _from_embeddings_request(self, request: EmbeddingsRequest) -> BatchInputs:
        parameters = {}
        if request.dimensions is not None:
            if not self.backend.takes_dimensions:
                raise InvalidInput(f"model '{self.name}': its predictor returns vectors of one size; 'dimensions' "
                                   f"is passed only to an OpenAI-compatible predictor (api = \"openai\")")
            parameters["dimensions"] = request.dimensions
        if request.token_ids is None:
            texts = request.texts
        elif self.settings.token_ids == TOKEN_IDS_AS_IS:
            column = np.empty((len(request.token_ids), 1), dtype=object)
            column[:, 0] = [pack_token_ids(ids) for ids in request.token_ids]
            lengths = np.array([len(ids) for ids in request.token_ids], dtype=np.int64)
            return BatchInputs([Tensor(TOKEN_IDS_INPUT, "BYTES", column)], lengths, parameters=parameters)
        else:
            texts = self._decode(request.token_ids)
        return BatchInputs([self._texts_tensor(texts)], self.tokens.count(texts), parameters=parameters)

    def _decode(self, rows: list[list[int]]) -> list[str]:
        """Token ids back to the texts they were made from (see gateway.tokens)."""
        try:
            decoder = token_decoder(self.settings.token_ids, self.settings.token_ids_file)
        except EncodingUnavailable as exc:
            # The operator reads where the file was looked for; the client, what is missing.
            if str(exc) != self._refusing_token_ids:
                self._refusing_token_ids = str(exc)
                log.warning("model '%s' refuses token ids: %s", self.name, exc)
            raise InvalidInput(f"model '{self.name}' cannot read token ids: {exc.public}; send 'input' as "
                               f"texts") from None
        texts = []
        for index, ids in enumerate(rows):
            try:
                texts.append(decoder.decode(ids))
            except UndecodableTokens as exc:
                raise InvalidInput(f"'input[{index}]' of model '{self.name}': {exc}") from None
        return texts

    def batch_inputs_from_instances(self, instances: list[Any]) -> BatchInputs:
        """A KServe v1 (or TorchServe JSON) client's instances: each a text, or a list of one."""
        texts = []
        for index, instance in enumerate(instances):
            text = instance[0] if isinstance(instance, list) and len(instance) == 1 else instance
            if not isinstance(text, str):
                raise InvalidInput(f"instance {index}: model '{self.name}' embeds texts: each instance is a string "
                                   f"(or a list of one string), got {type(instance).__name__}")
            texts.append(text)
        return BatchInputs([self._texts_tensor(texts)], self.tokens.count(texts))

    def _texts_tensor(self, texts: list[str]) -> Tensor:
        """The texts as the BYTES input, [rows, 1]."""
        column = np.empty((len(texts), 1), dtype=object)
        column[:, 0] = [text.encode("utf-8", "surrogatepass") for text in texts]
        return Tensor(self.text_input, "BYTES", column)

    def check_inputs(self, inputs: Sequence[TensorSpec]) -> None:
        """Also: the texts travel as the BYTES input, one per row (before it is decoded)."""
        super().check_inputs(inputs)
        self._check_text(inputs)

    def _check_text(self, inputs: Sequence[TensorSpec]) -> None:
        text = next((spec for spec in inputs if spec.name == self.text_input), None)
        if text is None or text.datatype != "BYTES":
            raise InvalidInput(f"model '{self.name}' embeds texts: send them as the BYTES input "
                               f"'{self.text_input}', one per row")
        if math.prod(text.shape[1:]) != 1:
            raise InvalidInput(f"input '{self.text_input}' of model '{self.name}' holds one text per row "
                               f"(shape [rows, 1]); got {list(text.shape)}")

    def _measure(self, tensors: list[Tensor]) -> np.ndarray:
        """Each row's tokens, read from the request's text input (an OIP client's BYTES)."""
        self._check_text([TensorSpec(tensor.name, tensor.datatype, tensor.data.shape) for tensor in tensors])
        text = next(tensor for tensor in tensors if tensor.name == self.text_input)
        return self.tokens.count(self.texts_of(text))

    # -- out of the answer --------------------------------------------------------------

    def predictions_from_outputs(self, outputs: list[Tensor], lengths: np.ndarray | None = None) -> list[Any]:
        """A v1 client's answer: one vector per instance."""
        return self.embeddings_from_outputs(outputs).tolist()

    def embeddings_from_outputs(self, outputs: list[Tensor]) -> np.ndarray:
        """The vectors, float32 [rows, dims], from the predictor's outputs."""
        output = self.output_holding(outputs, self.settings.output, "the embeddings", "embeddings")
        vectors = output.data
        if vectors.ndim != 2 or vectors.dtype.kind != "f":
            raise BadPredictorAnswer(f"model '{self.name}': output '{output.name}' is not one vector per "
                                     f"row (shape {list(vectors.shape)}, {output.datatype})")
        vectors = vectors.astype(np.float32, copy=False)
        finite = np.isfinite(vectors).all(axis=1)
        if not finite.all():
            raise BadPredictorAnswer(f"model '{self.name}': its predictor ({self.config.predictor.server}) answered "
                                     f"a vector with NaN or infinite values (row {int(np.argmin(finite))} of the "
                                     f"request): not an embedding")
        return vectors

    # -- the predictor call --------------------------------------------------------------

    @property
    def executor(self) -> Executor:
        return self._infer_once_per_text if self.settings.deduplicate else self.backend.infer

    async def _infer_once_per_text(self, inputs: list[Tensor]) -> list[Tensor]:
        """The batch with each distinct text sent once, every row answered."""
        if len(inputs) != 1:
            return await self.backend.infer(inputs)
        texts = inputs[0].data
        sent_as: dict[Any, int] = {}       # a text -> its row in what is sent
        kept: list[int] = []               # the rows sent: each text's first
        inverse = np.empty(len(texts), dtype=np.intp)  # each row -> the sent row that answers it
        for row, text in enumerate(texts[:, 0]):
            position = sent_as.get(text)
            if position is None:
                position = sent_as[text] = len(kept)
                kept.append(row)
            inverse[row] = position
        if len(kept) == len(texts):
            return await self.backend.infer(inputs)
        outputs = await self.backend.infer([Tensor(inputs[0].name, "BYTES", texts[kept])])
        return [Tensor(t.name, t.datatype, t.data[inverse]) for t in outputs]
