"""The kinds of model: what a model's rows mean, one module and one object per kind.

A served model's *batch form* (typed tensors or KServe v1 instances, `gateway.models`) says
how its rows travel to its predictor; its *kind* says what they are: `Tensors` (the
default: tensors or instances as clients send them, `base.py`), `Embeddings` (texts in,
vectors out: `embeddings.py`) and `Rerank` ((query, document) pairs in, scores out:
`rerank.py`; `texts.py` holds what the two text kinds share, `tokens.py` a text's tokens).
Each kind declares, in its one module (`base.ModelKind` says how): its
`[models.<kind>]` table and the rules of its keys, the client request types it answers and
how each becomes batch inputs, its rows spec (from which the scheduler's row layout is
chosen), and its answer by request type. Kinds register themselves when defined, so the
config reads a new kind's table and its clients' requests reach it with no other module
edited (docs/ARCHITECTURE.md, "Adding a model kind").

It knows no served model class, no front end, no wire format and no predictor protocol
beyond the backends' interface (and the protocols a kind's table is valid for); the config,
which reads the kinds' tables, is above it.
"""
from __future__ import annotations

from gateway.kinds.base import KINDS, BatchInputs, Model, ModelKind, Tensors, answers, kind_of, reads, refusal
from gateway.kinds.embeddings import TOKEN_IDS_AS_IS, Embeddings, EmbeddingsConfig
from gateway.kinds.rerank import Rerank, RerankConfig

__all__ = ["KINDS", "TOKEN_IDS_AS_IS", "BatchInputs", "Embeddings", "EmbeddingsConfig", "Model", "ModelKind",
           "Rerank", "RerankConfig", "Tensors", "answers", "kind_of", "reads", "refusal"]
