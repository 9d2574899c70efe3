"""The gRPC engine against the simulated predictor, and its request built from JSON."""
from __future__ import annotations

import pytest

from tests.tools.loadgen.support import oip, run
from tools.loadgen.engines.grpc_engine import grpc_payload


async def test_grpc_mode_against_the_simulated_predictor(predictor):
    call = "inference.GRPCInferenceService/ModelInfer"
    result = await run(target=predictor.grpc_address, grpc=True, call=call, body=oip(), requests=40, concurrency=4)
    assert result.statuses == {"OK": 40} and result.ok == 40 and result.bytes_received > 0
    wrong = await run(target=predictor.grpc_address, grpc=True, call=call, body=oip("nope"), requests=6,
                      concurrency=2, connections=2)
    assert wrong.statuses == {"NOT_FOUND": 6} and wrong.ok == 0
    assert list(wrong.errors) == ["NOT_FOUND: unknown model 'nope'"]
    live = await run(target=predictor.grpc_address, grpc=True, call="inference.GRPCInferenceService.ServerLive",
                     requests=3, concurrency=1)
    assert live.statuses == {"OK": 3}


def test_grpc_request_json_and_method_are_checked():
    path, payload = grpc_payload("inference.GRPCInferenceService/ModelInfer", oip())
    assert path == "/inference.GRPCInferenceService/ModelInfer" and b"INPUT0" in payload
    with pytest.raises(ValueError, match="does not fit"):
        grpc_payload("inference.GRPCInferenceService/ModelInfer", b'{"no_such_field": 1}')
    with pytest.raises(ValueError, match="no method"):
        grpc_payload("inference.GRPCInferenceService/Nope", b"")
    with pytest.raises(ValueError, match="unknown gRPC service"):
        grpc_payload("nope.Service/Call", b"")
