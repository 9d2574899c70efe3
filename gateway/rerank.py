"""Rerank models: the one place (query, document) pairs become rows, and rows become scores.

A rerank model (`[models.rerank]`, or any model of a score or Cohere-rerank predictor) is a
tensor model whose batch form is two BYTES tensors, the query and the document of each pair,
shape [rows, 1] each, and whose answer is one FP32 score a row:

- a Cohere client's request (`wire.rerank.RerankRequest`) becomes one row per document, each
  paired with the query, its query first cut to the model's `max_tokens_per_doc` tokens and
  its documents to the request's (at most the model's; `gateway.tokens.TokenCounter.cut`),
  as Cohere cuts what is too long rather than refusing it; OIP clients that send the two BYTES inputs themselves, and KServe v1 clients
  whose instances are pairs (`[query, document]` or `{"query": ..., "document": ...}`),
  land in the same batches;
- every pair is measured in tokens, its query's and its document's apart (lengths [rows,
  2]), each counted as an embedding text is (`gateway.tokens`), so that the scheduler caps a
  batch by `max_batch_tokens`, counting the query once a batch where the predictor takes
  one query per call (`gateway.batching.layouts.pairs`);
- the scores are read from the output configured, else the only FP32 output, one per row; a
  score that is NaN or infinite is the predictor's bad answer (502).

Which pairs may share a predictor call is the layout's (`one_query` for a predictor that
takes one query per call), set by the config. It knows no wire format (the Cohere codec
decodes before it and encodes after it), no predictor protocol beyond the backend interface,
and nothing of the scheduler.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from backends.base import Backend
from gateway.config import ModelConfig, RerankConfig
from gateway.models.base import BatchInputs, ClientRequest
from gateway.models.tensor import TensorModel
from gateway.tokens import TokenCounter
from wire.errors import BadPredictorAnswer, InvalidInput
from wire.rerank import RerankRequest
from wire.tensors import Tensor


class RerankModel(TensorModel):
    """A predictor that scores (query, document) pairs (see the module)."""

    def __init__(self, config: ModelConfig, backend: Backend) -> None:
        super().__init__(config, backend)
        self.settings: RerankConfig = config.rerank or RerankConfig()
        self.tokens = TokenCounter(self.settings.tokenizer)

    @property
    def reranks(self) -> bool:
        return True

    # -- into the batch form ------------------------------------------------------------

    def batch_inputs(self, request: ClientRequest) -> BatchInputs:
        if isinstance(request, RerankRequest):
            return self._from_rerank_request(request)
        batch = super().batch_inputs(request)
        batch.lengths = self._measure(batch.tensors)
        return batch

    def _from_rerank_request(self, request: RerankRequest) -> BatchInputs:
        # The query is cut as the documents are, to the model's most: uncut, a long one costs every
        # pair its length, and the predictor would score it cut (Cohere) or refuse it (vLLM) itself.
        most = self.settings.max_tokens_per_doc
        (query,) = self.tokens.cut([request.query], most)
        documents = self.tokens.cut(request.documents, min(request.max_tokens_per_doc, most))
        counts = self.tokens.count([query, *documents])
        return BatchInputs(self._pairs([query] * len(documents), documents), _pair_lengths(counts[0], counts[1:]))

    def batch_inputs_from_instances(self, instances: list[Any]) -> BatchInputs:
        """A KServe v1 (or TorchServe JSON) client's instances: each a pair, `[query, document]`
        or `{"<query input>": ..., "<document input>": ...}`."""
        names = (self.settings.query_input, self.settings.document_input)
        queries, documents = [], []
        for index, instance in enumerate(instances):
            pair = [instance.get(name) for name in names] if isinstance(instance, dict) else instance
            if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(text, str) for text in pair):
                raise InvalidInput(f"instance {index}: model '{self.name}' scores pairs: each instance is "
                                   f"[query, document] or {{\"{names[0]}\": ..., \"{names[1]}\": ...}}, two strings")
            queries.append(pair[0])
            documents.append(pair[1])
        tensors = self._pairs(queries, documents)
        return BatchInputs(tensors, self._measure(tensors))

    def _pairs(self, queries: list[str], documents: list[str]) -> list[Tensor]:
        """The pairs as the two BYTES inputs, [rows, 1] each, in the model's input order."""
        tensors = {name: _column(name, texts) for name, texts in
                   ((self.settings.query_input, queries), (self.settings.document_input, documents))}
        order = [spec.name for spec in self.client_inputs if spec.name in tensors] or list(tensors)
        return [tensors[name] for name in order]

    def _measure(self, tensors: list[Tensor]) -> np.ndarray:
        """Each pair's tokens, [rows, 2]: the query's and the document's (an OIP client's BYTES too)."""
        by_name = {tensor.name: tensor for tensor in tensors}
        counts = []
        for name in (self.settings.query_input, self.settings.document_input):
            tensor = by_name.get(name)
            if tensor is None or tensor.datatype != "BYTES":
                raise InvalidInput(f"model '{self.name}' scores pairs: send the query and the document as the BYTES "
                                   f"inputs '{self.settings.query_input}' and '{self.settings.document_input}', one "
                                   f"pair per row")
            if tensor.data.reshape(len(tensor.data), -1).shape[1] != 1:
                raise InvalidInput(f"input '{name}' of model '{self.name}' holds one text per row (shape [rows, 1]); "
                                   f"got {list(tensor.data.shape)}")
            counts.append(self.tokens.count(self.texts_of(tensor)))
        return _pair_lengths(counts[0], counts[1])

    # -- out of the answer --------------------------------------------------------------

    def predictions_from_outputs(self, outputs: list[Tensor], lengths: np.ndarray | None = None) -> list[Any]:
        """A v1 client's answer: one score per instance."""
        return self.scores_from_outputs(outputs).tolist()

    def scores_from_outputs(self, outputs: list[Tensor]) -> np.ndarray:
        """The scores, float32 [rows], from the predictor's outputs."""
        output = self.output_holding(outputs, self.settings.output, "the scores", "rerank")
        scores = output.data
        if scores.dtype.kind != "f" or scores.ndim not in (1, 2) or (scores.ndim == 2 and scores.shape[1] != 1):
            raise BadPredictorAnswer(f"model '{self.name}': output '{output.name}' is not one score per row "
                                     f"(shape {list(scores.shape)}, {output.datatype})")
        scores = scores.reshape(-1).astype(np.float32, copy=False)
        finite = np.isfinite(scores)
        if not finite.all():
            raise BadPredictorAnswer(f"model '{self.name}': its predictor ({self.config.predictor.server}) answered "
                                     f"a score that is NaN or infinite (row {int(np.argmin(finite))} of the request)")
        return scores


def _column(name: str, texts: list[str]) -> Tensor:
    column = np.empty((len(texts), 1), dtype=object)
    column[:, 0] = [text.encode("utf-8", "surrogatepass") for text in texts]
    return Tensor(name, "BYTES", column)


def _pair_lengths(queries: np.ndarray | int, documents: np.ndarray) -> np.ndarray:
    """The pairs' lengths as the pair layout reads them: [rows, 2], each query's tokens and its document's."""
    lengths = np.empty((len(documents), 2), dtype=np.int64)
    lengths[:, 0] = queries
    lengths[:, 1] = documents
    return lengths
