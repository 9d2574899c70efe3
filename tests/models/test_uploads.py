"""gateway/models/uploads.py: a TorchServe upload as a KServe v1 instance (each part's value as
KServe's TorchServe examples send it: JSON, text, or base64) and as BYTES tensors (the
bytes exactly, to the model's single BYTES input, `input-0`, or inputs named like the
parts), and the 400s that name the config key."""
from __future__ import annotations

import base64

import pytest

from gateway.models.uploads import upload_to_instance, upload_to_tensors
from wire.errors import InvalidInput
from wire.tensors import TensorSpec
from wire.upload import Part

PNG = b"\x89PNG\r\n\x1a\n\x00\xff"


def test_an_instance_holds_each_part_as_a_torchserve_handler_reads_it():
    instance = upload_to_instance({
        "data": Part(PNG, "image/png"),                   # declared binary: base64, which the handler decodes
        "raw": Part(PNG),                                 # undeclared and not UTF-8: base64 too
        "note": Part(b"a tabby cat"),                     # undeclared UTF-8 (a form field, curl -T of text): text
        "text": Part("chât noir".encode(), "text/plain"),  # text/*: its text
        "meta": Part(b'{"topk": 3}', "application/json"),  # JSON: its value
        "blob": Part(b"abc", "application/octet-stream"),  # declared binary, even if it is ASCII: base64
    })
    assert instance == {"data": base64.b64encode(PNG).decode(), "raw": base64.b64encode(PNG).decode(),
                        "note": "a tabby cat", "text": "chât noir", "meta": {"topk": 3}, "blob": "YWJj"}


def test_text_that_is_not_utf8_travels_as_base64():
    assert upload_to_instance({"body": Part(b"\xff\xfe", "text/plain")}) == {"body": "//4="}


def test_one_part_goes_to_the_models_single_bytes_input_as_sent():
    [tensor] = upload_to_tensors("m", {"body": Part(PNG, "image/png")}, (TensorSpec("IMAGE", "BYTES", (-1, 1)),))
    assert (tensor.name, tensor.datatype, tensor.shape, tensor.data[0, 0]) == ("IMAGE", "BYTES", [1, 1], PNG)
    [flat] = upload_to_tensors("m", {"body": Part(PNG)}, (TensorSpec("IMAGE", "BYTES", (-1,)),))
    assert flat.shape == [1] and flat.data[0] == PNG


def test_a_model_that_describes_no_inputs_gets_input_0():
    [tensor] = upload_to_tensors("m", {"data": Part(b"text")}, ())
    assert (tensor.name, tensor.datatype, tensor.shape) == ("input-0", "BYTES", [1, 1])


def test_several_parts_go_to_the_inputs_of_their_names_in_the_models_order():
    inputs = (TensorSpec("image", "BYTES", (-1, 1)), TensorSpec("caption", "BYTES", (-1, 1)))
    tensors = upload_to_tensors("m", {"caption": Part(b"cat"), "image": Part(PNG)}, inputs)
    assert [(t.name, t.data[0, 0]) for t in tensors] == [("image", PNG), ("caption", b"cat")]


@pytest.mark.parametrize("row, inputs, message", [
    ({"body": Part(PNG)}, (TensorSpec("INPUT0", "FP32", (-1, 4)),), 'datatype = "BYTES"'),
    ({"body": Part(PNG)}, (TensorSpec("IMAGE", "BYTES", (-1, 3)),), "shape = \\[-1, 1\\]"),
    ({"a": Part(b"1"), "b": Part(b"2")}, (), "declare one BYTES input per part"),
    ({"a": Part(b"1"), "c": Part(b"2")}, (TensorSpec("a", "BYTES", (-1, 1)), TensorSpec("b", "BYTES", (-1, 1))),
     "named like the model's inputs"),
])
def test_what_cannot_travel_is_a_400_naming_the_config_key(row, inputs, message):
    with pytest.raises(InvalidInput, match=message):
        upload_to_tensors("m", row, inputs)
