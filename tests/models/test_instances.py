"""KServe v1 instances and typed tensors convert both ways exactly (gateway.models.instances):
every datatype JSON can carry, non-UTF-8 BYTES as {"b64": ...}, and BF16 refused both ways."""
from __future__ import annotations

import orjson
import pytest

from gateway.models import instances
from tests.datatypes import JSON_DATATYPES, assert_exact, binary_sample, json_sample
from wire.errors import BadPredictorAnswer, InvalidInput
from wire.tensors import Tensor, TensorSpec


@pytest.mark.parametrize("datatype", JSON_DATATYPES)
def test_every_json_datatype_round_trips_through_instances(datatype):
    sent = Tensor("IN", datatype, json_sample(datatype))
    rows = orjson.loads(orjson.dumps(instances.tensors_to_instances([sent])))
    (got,) = instances.instances_to_tensors(rows, (TensorSpec("IN", datatype, (-1, -1)),))
    assert_exact(got.data, sent.data, datatype)


def test_v1_non_utf8_bytes_travel_as_b64_and_come_back_exact():
    sent = Tensor("IN", "BYTES", binary_sample("BYTES"))
    rows = instances.tensors_to_instances([sent])
    assert {"b64": "//4AgA=="} in rows[0]
    (got,) = instances.instances_to_tensors(orjson.loads(orjson.dumps(rows)), (TensorSpec("IN", "BYTES", (-1, -1)),))
    assert_exact(got.data, sent.data, "BYTES")


def test_v1_refuses_bf16_both_ways():
    with pytest.raises(InvalidInput, match="BF16 has no JSON form"):
        instances.instances_to_tensors([[1.0, 2.0]], (TensorSpec("IN", "BF16", (-1, 2)),))
    with pytest.raises(InvalidInput, match="BF16, which has no JSON form"):
        instances.tensors_to_instances([Tensor("IN", "BF16", binary_sample("BF16"))])


def test_undescribed_predictions_follow_kserves_convention():
    [ints] = instances.conventional_outputs([[1, 2], [3, 4]])
    assert (ints.name, ints.datatype, ints.data.tolist()) == ("output-0", "INT64", [[1, 2], [3, 4]])
    [floats] = instances.conventional_outputs([0.5, 1])
    assert (floats.datatype, str(floats.data.dtype)) == ("FP64", "float64")
    [labels] = instances.conventional_outputs(["cat", "dog"])
    assert (labels.datatype, labels.data.tolist()) == ("BYTES", [b"cat", b"dog"])
    by_key = instances.conventional_outputs([{"label": 1, "score": 0.5}, {"label": 0, "score": 0.25}])
    assert [(t.name, t.datatype) for t in by_key] == [("label", "INT64"), ("score", "FP64")]


def test_undescribed_predictions_that_are_not_a_tensor_say_what_would_fix_it():
    with pytest.raises(BadPredictorAnswer, match=r"\[\[models.outputs\]\]"):
        instances.conventional_outputs([[1, 2], [3]])


def test_instances_for_a_model_that_describes_no_inputs_travel_as_input_0():
    [ints] = instances.unnamed_instances_to_tensors([[1, 2], [3, 4]])
    assert (ints.name, ints.datatype, ints.data.tolist()) == ("input-0", "INT64", [[1, 2], [3, 4]])
    [floats] = instances.unnamed_instances_to_tensors([[0.5, 1]])
    assert floats.datatype == "FP64"
    [texts] = instances.unnamed_instances_to_tensors(["a", "b"])
    assert texts.datatype == "BYTES" and texts.data.tolist() == [b"a", b"b"]
    with pytest.raises(InvalidInput, match=r"not one tensor .*\[\[models.inputs\]\]"):
        instances.unnamed_instances_to_tensors([[1, 2], [3]])
    with pytest.raises(InvalidInput, match="not one tensor"):
        instances.unnamed_instances_to_tensors([{"a": 1}])


def test_a_padded_input_names_its_variable_dimension_when_an_instance_is_ragged_within_itself():
    spec = TensorSpec("tokens", "INT64", (-1, -1, 2))
    with pytest.raises(InvalidInput, match=r"instance 1 is ragged within itself.*only dimension 1 \(its pad.dim\)"):
        instances.padded_instances_to_tensors([[[1, 2]], [[1, 2], [3]]], (spec,), {"tokens": (1, 0)})
    tensors, lengths = instances.padded_instances_to_tensors([[[1, 2]], [[1, 2], [3, 4]]], (spec,), {"tokens": (1, 0)})
    assert tensors[0].data.shape == (2, 2, 2) and lengths.tolist() == [1, 2]
