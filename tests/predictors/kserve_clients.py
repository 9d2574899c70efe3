"""KServe's own Python clients (``kserve.InferenceRESTClient`` for v1 and v2,
``kserve.InferenceGRPCClient``) against a gateway, as KServe users call a model.

Run by the KSERVE predictor venv's interpreter (the ``kserve`` package lives there)::

    <kserve venv>/bin/python tests/predictors/kserve_clients.py HTTP_URL GRPC_ADDRESS MODEL

Prints one JSON object: what each client saw (readiness, and the answer to a request of
two rows ``[[1, 2, 3, 4], [5, 6, 7, 8]]``), for the test to check.
"""
from __future__ import annotations

import asyncio
import json
import sys

import numpy as np


async def main(http_url: str, grpc_address: str, model: str) -> dict:
    from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig

    rows = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.float32)
    seen: dict = {}

    v1 = InferenceRESTClient(RESTConfig(protocol="v1"))
    seen["v1_ready"] = await v1.is_model_ready(http_url, model)
    answer = await v1.infer(http_url, {"instances": rows.tolist()}, model_name=model)
    seen["v1_predictions"] = answer["predictions"]
    await v1.close()

    v2 = InferenceRESTClient(RESTConfig(protocol="v2"))
    seen["v2_live"] = await v2.is_server_live(http_url)
    seen["v2_ready"] = await v2.is_model_ready(http_url, model)
    tensor = InferInput("INPUT0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows, binary_data=False)
    response = await v2.infer(http_url, InferRequest(model_name=model, infer_inputs=[tensor], request_id="kserve-rest"),
                              model_name=model)
    seen["v2_id"] = response.id
    seen["v2_output"] = {"name": response.outputs[0].name, "data": response.outputs[0].as_numpy().tolist()}
    await v2.close()

    grpc_client = InferenceGRPCClient(grpc_address)
    tensor = InferInput("INPUT0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    response = await grpc_client.infer(InferRequest(model_name=model, infer_inputs=[tensor], request_id="kserve-grpc"))
    seen["grpc_id"] = response.id
    seen["grpc_output"] = {"name": response.outputs[0].name, "data": response.outputs[0].as_numpy().tolist()}
    await grpc_client.close()
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))))
