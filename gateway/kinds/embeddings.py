"""The embeddings kind: the one place texts become rows, and rows become vectors.

An embedding model (`[models.embeddings]`, or any model of an OpenAI-compatible
predictor) is a tensor model whose batch form is one BYTES tensor of texts, shape
[rows, 1], and whose answer is one FP32 output of vectors, [rows, dims]:

- an OpenAI client's texts (`wire.embeddings.EmbeddingsRequest`) become that tensor, named
  as the predictor's text input (configured, else the only one it describes, else
  "text"); OIP clients that send BYTES texts, and KServe v1 clients whose instances are
  texts (each a string, or a list of one), land in the same batches; a v1 client is
  answered one vector per instance;
- an OpenAI client's token ids (LangChain's default) are decoded back to their texts in the
  model's tiktoken encoding (`token_ids`, `gateway.kinds.tokens.TokenDecoder`) and batched as
  texts (the rows a request declares are held against the queue's `max_queue` before a
  single id is checked: `InferenceService.decode_embeddings`); a model of an
  OpenAI-compatible predictor configured with `token_ids = "as_is"` sends them on as they
  are instead, in batches of their own (`wire.embeddings.TOKEN_IDS_INPUT`);
- every request's rows are measured in tokens (`gateway.kinds.tokens`), whatever its protocol,
  so that the scheduler can cap a batch by `max_batch_tokens` and group similar lengths
  by bucket (its rows spec is a `TextSpec`: texts pad nothing in the gateway);
- identical texts within one batch are sent once and their vector copied back
  (`deduplicate`, on by default), since an encoder's answer depends on the text alone;
- the vectors are read from the output configured, else the only FP32 output; a vector
  holding NaN or an infinity is the predictor's bad answer (502), never a JSON null.

Its table's keys are declared on `EmbeddingsConfig`; the rules between them and the
predictor (which predictors take texts, token ids passed as they are, a tokenizer or an
encoding readable now) are `Embeddings.configure`'s. It knows no wire format (the OpenAI
codec decodes before it and encodes after it), no predictor protocol beyond the backend
interface, and nothing of the scheduler.
"""
from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.settings import PredictorProtocol, PredictorSettings
from gateway.batching.config import TextSpec
from gateway.batching.executor import Executor
from gateway.config_keys import ConfigError, Kind, key, read, table
from gateway.kinds.base import BatchInputs, answers, output_holding, reads, table_key, texts_column, texts_of
from gateway.kinds.texts import TextKind
from gateway.kinds.tokens import (
    DEFAULT_TOKEN_ENCODING,
    TOKEN_ENCODINGS,
    EncodingUnavailable,
    TokenCounter,
    TokenizerUnavailable,
    UndecodableTokens,
    token_decoder,
)
from wire.embeddings import TOKEN_IDS_INPUT, EmbeddingsRequest, pack_token_ids
from wire.errors import BadPredictorAnswer, InvalidInput
from wire.tensors import Tensor, TensorSpec
from wire.upload import TorchServeRequest

DEFAULT_TEXT_INPUT = "text"
TOKEN_IDS_AS_IS = "as_is"  # [models.embeddings] token_ids: the predictor's own vocabulary, passed on

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EmbeddingsConfig:
    """The `[models.embeddings]` table: a model whose rows are texts, embedded into vectors.
    Set on every model of an OpenAI-compatible predictor."""
    # "" = the estimate (gateway.kinds.tokens).
    tokenizer: str = key(Kind.STRING, "", "The model's tokenizer.json: exact token counts (the embeddings extra); "
                                          "unset: an estimate.", file=True)
    input: str = key(Kind.STRING, "", "The BYTES input the texts travel in.", shown="the only input, else text")
    output: str = key(Kind.STRING, "", "The FP32 output holding the vectors.", shown="the only FP32 output")
    deduplicate: bool = key(Kind.BOOLEAN, True, "Identical texts in one batch are sent once.")
    # An OpenAI client's token ids: decoded back to text in this tiktoken encoding
    # (gateway.kinds.tokens), or TOKEN_IDS_AS_IS: sent to an OpenAI-compatible predictor as they are.
    token_ids: str = key(Kind.STRING, DEFAULT_TOKEN_ENCODING,
                         "What an OpenAI client's token ids (LangChain's default) mean: a tiktoken encoding "
                         f"({', '.join(TOKEN_ENCODINGS)}) they are decoded in, back to their text; "
                         f"{TOKEN_IDS_AS_IS}: the predictor's own ids, sent to it as they are (api = \"openai\").",
                         choices=(*TOKEN_ENCODINGS, TOKEN_IDS_AS_IS))
    token_ids_file: str = key(Kind.STRING, "", "The encoding's .tiktoken file; unset: tiktoken's cache "
                                               "(TIKTOKEN_CACHE_DIR, else its default). Never downloaded.",
                              shown="tiktoken's cache", file=True)


# The predictors that take texts as a BYTES tensor: OIP (Triton, KServe v2), OpenAI's API.
_TAKE_TEXTS = frozenset({PredictorProtocol.OIP_HTTP, PredictorProtocol.OIP_GRPC, PredictorProtocol.OPENAI_HTTP,
                         PredictorProtocol.SIMULATED})


class Embeddings(TextKind):
    """A model that embeds texts (see the module)."""

    name = "embeddings"
    settings_type = EmbeddingsConfig
    table_key = table_key("embeddings", "A text-embedding model ([models.embeddings]): implied by api = \"openai\" "
                                        "and by the simulated encoder.")
    rows = TextSpec
    what = "an embedding model"
    makes = "embed texts"

    def __init__(self, settings: EmbeddingsConfig, model: Any) -> None:
        super().__init__(settings, model)
        self.settings: EmbeddingsConfig = settings
        self._warming: asyncio.Future | None = None
        self._refusing_token_ids = ""  # why token ids were last refused, as logged (logged once for each why)

    # -- the config --------------------------------------------------------------------

    @classmethod
    def configure(cls, raw: dict, key: str, predictor: PredictorSettings) -> EmbeddingsConfig | None:
        """The `[models.embeddings]` table; a model of an OpenAI-compatible predictor (or the
        simulated encoder) is an embedding model even without it."""
        protocol = predictor.protocol
        implied = protocol is PredictorProtocol.OPENAI_HTTP or predictor.simulated_task == "embed"
        if "embeddings" not in raw and not implied:
            return None
        where = f"{key}.embeddings"
        if protocol not in _TAKE_TEXTS or (protocol is PredictorProtocol.SIMULATED and not implied):
            raise ConfigError(where, "an embedding model's texts travel as a BYTES tensor: it needs a tensor "
                                     "predictor (Triton, KServe v2, an OpenAI-compatible server with api = "
                                     "\"openai\", or the simulated model with task = \"embed\")")
        given = table(raw, "embeddings", where)
        config = EmbeddingsConfig(**read(cls.table(), given, where))
        check_tokenizer(config.tokenizer, where)
        _check_token_ids(given, where, config, protocol)
        return config

    # -- serving -----------------------------------------------------------------------

    def start(self) -> None:
        if self.settings.token_ids != TOKEN_IDS_AS_IS:
            # Read the encoding in a thread now (about 0.2 s), not on the loop at the first token ids.
            self._warming = asyncio.ensure_future(asyncio.to_thread(self._warm_token_decoder))

    def _warm_token_decoder(self) -> None:
        try:
            token_decoder(self.settings.token_ids, self.settings.token_ids_file)
        except EncodingUnavailable as exc:
            log.info("model '%s' will refuse token ids: %s", self.model.name, exc)

    @property
    def text_input(self) -> str:
        """The name of the BYTES input the texts travel in."""
        if self.settings.input:
            return self.settings.input
        inputs = self.model.client_inputs
        return inputs[0].name if len(inputs) == 1 else DEFAULT_TEXT_INPUT

    # -- into the batch form ------------------------------------------------------------

    @reads(EmbeddingsRequest)
    def from_embeddings_request(self, request: EmbeddingsRequest) -> BatchInputs:
        parameters = {}
        if request.dimensions is not None:
            if not self.model.backend.takes_dimensions:
                raise InvalidInput(f"model '{self.model.name}': its predictor returns vectors of one size; "
                                   f"'dimensions' is passed only to an OpenAI-compatible predictor (api = \"openai\")")
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
        return BatchInputs([texts_column(self.text_input, texts)], self.tokens.count(texts), parameters=parameters)

    def _decode(self, rows: list[list[int]]) -> list[str]:
        """Token ids back to the texts they were made from (see gateway.kinds.tokens)."""
        try:
            decoder = token_decoder(self.settings.token_ids, self.settings.token_ids_file)
        except EncodingUnavailable as exc:
            # The operator reads where the file was looked for; the client, what is missing.
            if str(exc) != self._refusing_token_ids:
                self._refusing_token_ids = str(exc)
                log.warning("model '%s' refuses token ids: %s", self.model.name, exc)
            raise InvalidInput(f"model '{self.model.name}' cannot read token ids: {exc.public}; send 'input' as "
                               f"texts") from None
        texts = []
        for index, ids in enumerate(rows):
            try:
                texts.append(decoder.decode(ids))
            except UndecodableTokens as exc:
                raise InvalidInput(f"'input[{index}]' of model '{self.model.name}': {exc}") from None
        return texts

    @reads(list)
    def from_instances(self, instances: list[Any]) -> BatchInputs:
        """A KServe v1 (or TorchServe JSON) client's instances: each a text, or a list of one."""
        texts = []
        for index, instance in enumerate(instances):
            text = instance[0] if isinstance(instance, list) and len(instance) == 1 else instance
            if not isinstance(text, str):
                raise InvalidInput(f"instance {index}: model '{self.model.name}' embeds texts: each instance is a "
                                   f"string (or a list of one string), got {type(instance).__name__}")
            texts.append(text)
        return BatchInputs([texts_column(self.text_input, texts)], self.tokens.count(texts))

    def check_inputs(self, inputs: Sequence[TensorSpec]) -> None:
        """The texts travel as the BYTES input, one per row (before it is decoded)."""
        text = next((spec for spec in inputs if spec.name == self.text_input), None)
        if text is None or text.datatype != "BYTES":
            raise InvalidInput(f"model '{self.model.name}' embeds texts: send them as the BYTES input "
                               f"'{self.text_input}', one per row")
        if math.prod(text.shape[1:]) != 1:
            raise InvalidInput(f"input '{self.text_input}' of model '{self.model.name}' holds one text per row "
                               f"(shape [rows, 1]); got {list(text.shape)}")

    def measure(self, tensors: list[Tensor]) -> np.ndarray:
        """Each row's tokens, read from the request's text input (an OIP client's BYTES)."""
        self.check_inputs([TensorSpec(tensor.name, tensor.datatype, tensor.data.shape) for tensor in tensors])
        text = next(tensor for tensor in tensors if tensor.name == self.text_input)
        return self.tokens.count(texts_of(self.model.name, text))

    # -- out of the answer --------------------------------------------------------------

    @answers(list, TorchServeRequest)
    def vectors_as_predictions(self, outputs: list[Tensor], batch: BatchInputs) -> list[Any]:
        """A v1 client's answer: one vector per instance."""
        return self.vectors(outputs, batch).tolist()

    @answers(EmbeddingsRequest)
    def vectors(self, outputs: list[Tensor], batch: BatchInputs | None = None) -> np.ndarray:
        """The vectors, float32 [rows, dims], from the predictor's outputs."""
        name = self.model.name
        output = output_holding(name, outputs, self.settings.output, "the embeddings", "embeddings")
        vectors = output.data
        if vectors.ndim != 2 or vectors.dtype.kind != "f":
            raise BadPredictorAnswer(f"model '{name}': output '{output.name}' is not one vector per "
                                     f"row (shape {list(vectors.shape)}, {output.datatype})")
        vectors = vectors.astype(np.float32, copy=False)
        finite = np.isfinite(vectors).all(axis=1)
        if not finite.all():
            raise BadPredictorAnswer(f"model '{name}': its predictor ({self.model.server}) answered "
                                     f"a vector with NaN or infinite values (row {int(np.argmin(finite))} of the "
                                     f"request): not an embedding")
        return vectors

    # -- the predictor call --------------------------------------------------------------

    def executor(self) -> Executor:
        return self._infer_once_per_text if self.settings.deduplicate else self.model.backend.infer

    async def _infer_once_per_text(self, inputs: list[Tensor]) -> list[Tensor]:
        """The batch with each distinct text sent once, every row answered."""
        infer = self.model.backend.infer
        if len(inputs) != 1:
            return await infer(inputs)
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
            return await infer(inputs)
        outputs = await infer([Tensor(inputs[0].name, "BYTES", texts[kept])])
        return [Tensor(t.name, t.datatype, t.data[inverse]) for t in outputs]


def check_tokenizer(path: str, where: str) -> None:
    """A tokenizer named must load now, not when its first text arrives."""
    if path:
        try:
            TokenCounter(path)
        except TokenizerUnavailable as exc:
            raise ConfigError(f"{where}.tokenizer", str(exc)) from None


def _check_token_ids(given: dict, where: str, config: EmbeddingsConfig, protocol: PredictorProtocol) -> None:
    """`token_ids` and `token_ids_file`: an encoding named here must be readable now; the
    default one is looked for when the model starts, and token ids are refused without it."""
    if config.token_ids == TOKEN_IDS_AS_IS:
        if protocol is not PredictorProtocol.OPENAI_HTTP:
            raise ConfigError(f"{where}.token_ids", "only an OpenAI-compatible predictor (api = \"openai\") takes "
                                                    "token ids; this one takes texts: name the tiktoken encoding "
                                                    "the ids are decoded in")
        if config.token_ids_file:
            raise ConfigError(f"{where}.token_ids_file", "token ids passed as they are are not decoded: "
                                                         "no encoding file is read")
        return
    if "token_ids" in given or "token_ids_file" in given:
        try:
            token_decoder(config.token_ids, config.token_ids_file)
        except EncodingUnavailable as exc:
            raise ConfigError(f"{where}.{'token_ids_file' if config.token_ids_file else 'token_ids'}",
                              str(exc)) from None

