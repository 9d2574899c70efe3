"""The rerank kind: the one place (query, document) pairs become rows, and rows become scores.

A rerank model (`[models.rerank]`, or any model of a score or Cohere-rerank predictor) is a
tensor model whose batch form is two BYTES tensors, the query and the document of each pair,
shape [rows, 1] each, and whose answer is one FP32 score a row:

- a Cohere client's request (`wire.rerank.RerankRequest`) becomes one row per document, each
  paired with the query, its query first cut to the model's `max_tokens_per_doc` tokens and
  its documents to the request's (at most the model's; `gateway.kinds.tokens.TokenCounter.cut`),
  as Cohere cuts what is too long rather than refusing it; OIP clients that send the two
  BYTES inputs themselves, and KServe v1 clients whose instances are pairs (`[query,
  document]` or `{"query": ..., "document": ...}`), land in the same batches;
- every pair is measured in tokens, its query's and its document's apart (lengths [rows,
  2]), each counted as an embedding text is (`gateway.kinds.tokens`), so that the scheduler caps a
  batch by `max_batch_tokens`, counting the query once a batch where the predictor takes
  one query per call (its rows spec is a `PairSpec`: `gateway.batching.layouts.pairs`);
- the scores are read from the output configured, else the only FP32 output, one per row; a
  score that is NaN or infinite is the predictor's bad answer (502).

Which pairs may share a predictor call is the pair layout's: one query a batch for a
predictor that takes one query per call (`Backend.one_query_per_call`). Its table's keys are
declared on `RerankConfig`, the rules between them and the predictor in `Rerank.configure`.
It knows no wire format (the Cohere codec decodes before it and encodes after it), no
predictor protocol beyond the backend interface, and nothing of the scheduler.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.settings import PredictorProtocol, PredictorSettings
from gateway.batching.config import PairSpec, RowsSpec, TextSpec
from gateway.config_keys import ConfigError, Kind, key, only, read, table
from gateway.kinds.base import BatchInputs, answers, output_holding, reads, table_key, texts_column, texts_of
from gateway.kinds.embeddings import check_tokenizer
from gateway.kinds.texts import TextKind
from wire.errors import BadPredictorAnswer, InvalidInput
from wire.rerank import DEFAULT_MAX_TOKENS_PER_DOC, DOCUMENT_INPUT, QUERY_INPUT, RerankRequest
from wire.tensors import Tensor
from wire.upload import TorchServeRequest


@dataclass(frozen=True, slots=True)
class RerankConfig:
    """The `[models.rerank]` table: a cross-encoder whose rows are (query, document) pairs,
    scored. Set on every model of a score or rerank predictor."""
    tokenizer: str = key(Kind.STRING, "", "The model's tokenizer.json: exact token counts of each pair (the "
                                          "embeddings extra); unset: an estimate.", file=True)
    query_input: str = key(Kind.STRING, QUERY_INPUT, "OIP: the BYTES input holding each pair's query.")
    document_input: str = key(Kind.STRING, DOCUMENT_INPUT, "OIP: the BYTES input holding each pair's document.")
    output: str = key(Kind.STRING, "", "OIP: the FP32 output holding the scores, [rows, 1].",
                      shown="the only FP32 output")
    # A query is cut, not refused, as Cohere cuts what is too long (docs/rerank.md says why).
    max_tokens_per_doc: int = key(Kind.INTEGER, DEFAULT_MAX_TOKENS_PER_DOC,
                                  "The most tokens of a Cohere client's query or document the predictor is sent: a "
                                  "longer query is cut to it, each document to the request's max_tokens_per_doc, "
                                  "at most this.", minimum=1)


# The predictors that score pairs: OIP (two BYTES inputs), vLLM's score API, Cohere's rerank API.
_SCORE_PAIRS = frozenset({PredictorProtocol.OIP_HTTP, PredictorProtocol.OIP_GRPC, PredictorProtocol.SCORE_HTTP,
                          PredictorProtocol.RERANK_HTTP, PredictorProtocol.SIMULATED})
_OIP = frozenset({PredictorProtocol.OIP_HTTP, PredictorProtocol.OIP_GRPC})


class Rerank(TextKind):
    """A model that scores (query, document) pairs (see the module)."""

    name = "rerank"
    settings_type = RerankConfig
    table_key = table_key("rerank", "A rerank model, (query, document) pairs scored ([models.rerank]): implied by "
                                    "api = \"score\" or \"rerank\" and by the simulated reranker.")
    rows = PairSpec
    what = "a rerank model"
    makes = "score (query, document) pairs"

    def __init__(self, settings: RerankConfig, model: Any) -> None:
        super().__init__(settings, model)
        self.settings: RerankConfig = settings

    # -- the config --------------------------------------------------------------------

    @classmethod
    def configure(cls, raw: dict, key: str, predictor: PredictorSettings) -> RerankConfig | None:
        """The `[models.rerank]` table; a model of a score or rerank predictor (or the
        simulated reranker) is a rerank model even without it."""
        protocol = predictor.protocol
        implied = (protocol in (PredictorProtocol.SCORE_HTTP, PredictorProtocol.RERANK_HTTP)
                   or predictor.simulated_task == "rerank")
        if "rerank" not in raw and not implied:
            return None
        where = f"{key}.rerank"
        if protocol not in _SCORE_PAIRS or (protocol is PredictorProtocol.SIMULATED and not implied):
            raise ConfigError(where, "a rerank model's pairs travel as two BYTES tensors or a score API: it needs "
                                     "Triton, KServe v2, api = \"score\" or \"rerank\", or the simulated model "
                                     "with task = \"rerank\"")
        given = table(raw, "rerank", where)
        declared = cls.table()
        only(given, where, declared.names())
        if protocol not in _OIP:  # said before what is wrong with the value: no value would do
            for name in sorted({"query_input", "document_input", "output"} & given.keys()):
                raise ConfigError(f"{where}.{name}", "names a tensor of an Open Inference Protocol predictor "
                                                     "(Triton, KServe v2); this one's are fixed")
        config = RerankConfig(**read(declared, given, where))
        if config.query_input == config.document_input:
            raise ConfigError(f"{where}.document_input", f"the query and the document travel in two inputs; both "
                                                         f"are named '{config.query_input}'")
        check_tokenizer(config.tokenizer, where)
        return config

    @classmethod
    def spec(cls, settings: RerankConfig, texts: TextSpec) -> RowsSpec:
        return PairSpec(texts.buckets, texts.summed, query_input=settings.query_input)

    def rows_for(self, configured: RowsSpec) -> RowsSpec:
        """A predictor that takes one query per call gets batches of one query's pairs."""
        if isinstance(configured, PairSpec) and self.model.backend.one_query_per_call:
            return dataclasses.replace(configured, one_query=True)
        return configured

    # -- into the batch form ------------------------------------------------------------

    @reads(RerankRequest)
    def from_rerank_request(self, request: RerankRequest) -> BatchInputs:
        # The query is cut as the documents are, to the model's most: uncut, a long one costs every
        # pair its length, and the predictor would score it cut (Cohere) or refuse it (vLLM) itself.
        most = self.settings.max_tokens_per_doc
        (query,) = self.tokens.cut([request.query], most)
        documents = self.tokens.cut(request.documents, min(request.max_tokens_per_doc, most))
        counts = self.tokens.count([query, *documents])
        return BatchInputs(self._pairs([query] * len(documents), documents), _pair_lengths(counts[0], counts[1:]))

    @reads(list)
    def from_instances(self, instances: list[Any]) -> BatchInputs:
        """A KServe v1 (or TorchServe JSON) client's instances: each a pair, `[query, document]`
        or `{"<query input>": ..., "<document input>": ...}`."""
        names = (self.settings.query_input, self.settings.document_input)
        queries, documents = [], []
        for index, instance in enumerate(instances):
            pair = [instance.get(name) for name in names] if isinstance(instance, dict) else instance
            if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(text, str) for text in pair):
                raise InvalidInput(f"instance {index}: model '{self.model.name}' scores pairs: each instance is "
                                   f"[query, document] or {{\"{names[0]}\": ..., \"{names[1]}\": ...}}, two strings")
            queries.append(pair[0])
            documents.append(pair[1])
        tensors = self._pairs(queries, documents)
        return BatchInputs(tensors, self.measure(tensors))

    def _pairs(self, queries: list[str], documents: list[str]) -> list[Tensor]:
        """The pairs as the two BYTES inputs, [rows, 1] each, in the model's input order."""
        tensors = {name: texts_column(name, texts) for name, texts in
                   ((self.settings.query_input, queries), (self.settings.document_input, documents))}
        order = [spec.name for spec in self.model.client_inputs if spec.name in tensors] or list(tensors)
        return [tensors[name] for name in order]

    def measure(self, tensors: list[Tensor]) -> np.ndarray:
        """Each pair's tokens, [rows, 2]: the query's and the document's (an OIP client's BYTES too)."""
        by_name = {tensor.name: tensor for tensor in tensors}
        name_of_model = self.model.name
        counts = []
        for name in (self.settings.query_input, self.settings.document_input):
            tensor = by_name.get(name)
            if tensor is None or tensor.datatype != "BYTES":
                raise InvalidInput(f"model '{name_of_model}' scores pairs: send the query and the document as the "
                                   f"BYTES inputs '{self.settings.query_input}' and '{self.settings.document_input}', "
                                   f"one pair per row")
            if tensor.data.reshape(len(tensor.data), -1).shape[1] != 1:
                raise InvalidInput(f"input '{name}' of model '{name_of_model}' holds one text per row (shape [rows, "
                                   f"1]); got {list(tensor.data.shape)}")
            counts.append(self.tokens.count(texts_of(name_of_model, tensor)))
        return _pair_lengths(counts[0], counts[1])

    # -- out of the answer --------------------------------------------------------------

    @answers(list, TorchServeRequest)
    def scores_as_predictions(self, outputs: list[Tensor], batch: BatchInputs) -> list[Any]:
        """A v1 client's answer: one score per instance."""
        return self.scores(outputs, batch).tolist()

    @answers(RerankRequest)
    def scores(self, outputs: list[Tensor], batch: BatchInputs | None = None) -> np.ndarray:
        """The scores, float32 [rows], in the request's order, from the predictor's outputs."""
        name = self.model.name
        output = output_holding(name, outputs, self.settings.output, "the scores", "rerank")
        scores = output.data
        if scores.dtype.kind != "f" or scores.ndim not in (1, 2) or (scores.ndim == 2 and scores.shape[1] != 1):
            raise BadPredictorAnswer(f"model '{name}': output '{output.name}' is not one score per row "
                                     f"(shape {list(scores.shape)}, {output.datatype})")
        scores = scores.reshape(-1).astype(np.float32, copy=False)
        finite = np.isfinite(scores)
        if not finite.all():
            raise BadPredictorAnswer(f"model '{name}': its predictor ({self.model.server}) answered "
                                     f"a score that is NaN or infinite (row {int(np.argmin(finite))} of the request)")
        return scores


def _pair_lengths(queries: np.ndarray | int, documents: np.ndarray) -> np.ndarray:
    """The pairs' lengths as the pair layout reads them: [rows, 2], each query's tokens and its document's."""
    lengths = np.empty((len(documents), 2), dtype=np.int64)
    lengths[:, 0] = queries
    lengths[:, 1] = documents
    return lengths
