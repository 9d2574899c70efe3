"""OIP model metadata (REST JSON or protobuf) -> a `wire.tensors.ModelSignature` and versions.

Used by the OIP clients only; it reads what a predictor says and fetches nothing itself.
"""
from __future__ import annotations

from typing import Any

from wire.tensors import ModelSignature


def signature_from_json(document: dict[str, Any]) -> tuple[ModelSignature, list[str]]:
    # Empty lists are an answer too: the model describes no tensors (a custom kserve.Model,
    # KServe's sklearn and xgboost runtimes), which is not the same as no answer.
    return ModelSignature.described(document), [str(v) for v in document.get("versions") or []]


def signature_from_proto(message: Any) -> tuple[ModelSignature, list[str]]:
    return signature_from_json({
        "inputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in message.inputs],
        "outputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in message.outputs],
        "versions": list(message.versions),
    })
