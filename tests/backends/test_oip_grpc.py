"""The OIP gRPC client's TorchServe options: typed contents, and outputs restored from
their flattened FP64 form (no server needed)."""
from __future__ import annotations

import numpy as np
import pytest

from backends.oip_grpc import restore_flattened_outputs
from wire.codecs import oip_grpc
from wire.errors import BadPredictorAnswer
from wire.tensors import ModelSignature, Tensor, TensorSpec

SIGNATURE = ModelSignature(inputs=(TensorSpec("INPUT0", "FP32", (-1, 4)),),
                           outputs=(TensorSpec("OUTPUT0", "FP32", (-1, 4)),))


def flat_fp64(rows: int, width: int) -> list[Tensor]:
    return [Tensor("INPUT0", "FP64", np.arange(rows * width, dtype=np.float64))]


def output_shape(*shape: int) -> ModelSignature:
    return ModelSignature(SIGNATURE.inputs, (TensorSpec("OUTPUT0", "FP32", shape),))


def batch(rows: int, width: int = 4) -> list[Tensor]:
    return [Tensor("INPUT0", "FP32", np.zeros((rows, width), np.float32))]


def test_restore_gives_the_batch_shape_datatype_and_name_of_the_signature():
    (out,) = restore_flattened_outputs("m", flat_fp64(3, 4), batch(3), SIGNATURE)
    assert (out.name, out.datatype, out.shape, out.data.dtype) == ("OUTPUT0", "FP32", [3, 4], np.float32)
    np.testing.assert_array_equal(out.data.ravel(), np.arange(12))


@pytest.mark.parametrize("signature, inputs, outputs, shape", [
    (None, batch(2, 3), flat_fp64(2, 3), [2, 3]),                  # no signature: like the input
    (output_shape(-1, 2, 2), batch(2), flat_fp64(2, 4), [2, 2, 2]),
    (output_shape(-1, -1), batch(2), flat_fp64(2, 6), [2, 6]),
    (output_shape(-1, 3, -1), batch(2), flat_fp64(2, 6), [2, 3, 2]),
])
def test_restore_shape_rules(signature, inputs, outputs, shape):
    assert restore_flattened_outputs("m", outputs, inputs, signature)[0].shape == shape


def test_restore_refuses_what_cannot_be_the_batch():
    with pytest.raises(BadPredictorAnswer, match="not 3 rows"):
        restore_flattened_outputs("m", flat_fp64(1, 10), batch(3), SIGNATURE)
    with pytest.raises(BadPredictorAnswer, match="declares shape"):
        restore_flattened_outputs("m", flat_fp64(3, 5), batch(3), SIGNATURE)
    ints = ModelSignature(SIGNATURE.inputs, (TensorSpec("OUTPUT0", "INT32", (-1, 4)),))
    halves = [Tensor("INPUT0", "FP64", np.full(8, 0.5))]
    with pytest.raises(BadPredictorAnswer, match="not INT32"):
        restore_flattened_outputs("m", halves, batch(2), ints)


def test_typed_contents_encoding():
    message = oip_grpc.encode_request([Tensor("INPUT0", "FP32", np.arange(4, dtype=np.float32).reshape(1, 4))],
                                      "m", typed=True)
    assert not message.raw_input_contents
    assert list(message.inputs[0].contents.fp32_contents) == [0, 1, 2, 3]
    assert list(message.inputs[0].shape) == [1, 4]
