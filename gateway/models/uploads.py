"""TorchServe uploads (`wire.upload`) in either batch form: the one place a row of named
parts becomes a KServe v1 instance or typed BYTES tensors.

* **Instances** (a TorchServe predictor behind its ``kserve`` envelope, or a KServe v1
  predictor): the row becomes the instance ``{part name: value}``, which TorchServe's
  envelope hands its handler as the row a raw upload would have been. JSON carries no
  bytes, so each value travels as KServe's TorchServe examples send it: a JSON part as its
  value, a text part as its text, a part declared of any other type as a base64 string
  (TorchServe's own image and audio handlers decode a string as base64), and an undeclared
  part (``curl -T``, form fields, gRPC entries) as its text when it is UTF-8, else base64:
  a text handler then reads text and an image handler bytes, as they would from TorchServe.
* **Tensors** (an Open Inference Protocol predictor): each part is one BYTES element, its
  bytes exactly as sent, of shape ``[1, 1]`` (``[1]`` for a 1-D input). One part goes to
  the model's single BYTES input (``input-0`` when the model describes no inputs); several
  parts go to the BYTES inputs of the same names. Anything else is refused with 400 naming
  the config key that would make it work.

It knows no wire format and nothing of batching.
"""
from __future__ import annotations

import base64
from typing import Any

import numpy as np

from gateway.models.instances import UNNAMED_INPUT
from wire.errors import InvalidInput
from wire.tensors import Tensor, TensorSpec
from wire.upload import Part, Upload


def upload_to_instance(row: Upload) -> dict[str, Any]:
    """The KServe v1 instance of one upload: one key per part."""
    return {name: _json_value(name, part) for name, part in row.items()}


def _json_value(name: str, part: Part) -> Any:
    value = part.value(name)  # as TorchServe's worker decodes it: JSON, text, or still bytes
    if not isinstance(value, bytes):
        return value
    if not part.media_type:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return base64.b64encode(value).decode("ascii")


def upload_to_tensors(model: str, row: Upload, inputs: tuple[TensorSpec, ...]) -> list[Tensor]:
    """One upload as the BYTES tensors of a tensor model whose client inputs are `inputs`
    (empty: the model describes none), in the model's input order."""
    if not inputs:
        if len(row) != 1:
            raise InvalidInput(
                f"model '{model}' describes no inputs, so an upload of several parts ({', '.join(row)}) has no "
                f"tensors to travel as; declare one BYTES input per part ([[models.inputs]] named like the parts)")
        inputs = (TensorSpec(UNNAMED_INPUT, "BYTES", (-1, 1)),)
    if len(row) == 1 and len(inputs) == 1:
        pairs = [(inputs[0], next(iter(row.values())).data)]
    elif set(row) == {spec.name for spec in inputs}:
        pairs = [(spec, row[spec.name].data) for spec in inputs]
    else:
        names = [spec.name for spec in inputs]
        raise InvalidInput(
            f"model '{model}' takes inputs {names}; an upload travels as one BYTES tensor per part, named like "
            f"the model's inputs (this one has parts {list(row)}), or as the one input of a model with a single "
            f"BYTES input")
    tensors = []
    for spec, data in pairs:
        if spec.datatype != "BYTES" or len(spec.shape) > 2 or any(d not in (-1, 1) for d in spec.shape[1:]):
            raise InvalidInput(
                f"model '{model}' takes input '{spec.name}' as {spec.datatype} of shape {list(spec.shape)}, and this "
                f"request is an upload (a body that is not one of the JSON forms, or a form), whose bytes travel as "
                f"one BYTES element per row: send a JSON body, or serve a model whose input is BYTES "
                f'([[models.inputs]] name = "{spec.name}", datatype = "BYTES", shape = [-1, 1])')
        element = np.empty((1,) * len(spec.shape), dtype=object)
        element.reshape(-1)[0] = data
        tensors.append(Tensor(spec.name, "BYTES", element))
    return tensors
