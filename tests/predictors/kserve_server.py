"""A real KServe model server (``kserve.ModelServer``) serving the test model ``double``.

Run by the KSERVE predictor venv's interpreter (see ``tools.predictor_envs``); the
harness (``tests.predictors.harness.KServeServer``) starts it and polls
``GET /v2/health/ready`` and ``GET /v2/models/double/ready`` for readiness::

    <kserve venv>/bin/python tests/predictors/kserve_server.py \
        --http-port 8080 --grpc-port 8081 --call-log /tmp/kserve-calls.jsonl

Model ``double`` answers both protocols KServe speaks:

* v1 ``POST /v1/models/double:predict`` with ``{"instances": [...]}`` ->
  ``{"predictions": [...]}``, every number doubled (nested lists elementwise);
* Open Inference Protocol (v2 REST and gRPC ``ModelInfer``): input ``INPUT0`` FP32
  ``[rows, n]`` -> output ``OUTPUT0`` FP32 = 2 * INPUT0, same shape.

Model ``plain`` is a model as users most often write one: a ``kserve.Model`` that does
not override ``get_input_types``/``get_output_types``, so its metadata lists no tensors.
It doubles whatever it gets and lets KServe shape the answer (``get_predict_response``,
as KServe's sklearn and xgboost runtimes do): v1 ``predictions``; for an OIP request, one
output ``output-0`` with the datatype numpy gives the doubled first input.

Every accepted predict call appends ONE JSON line to ``--call-log``:
``{"protocol": "v1"|"v2", "batch_size": <instances or rows>, "t": <time.time()>, "model": <name>,
"parameters": <the request's parameters>}``, so
a test sees how many calls (batches) the predictor itself received. Rejected input
raises ``kserve.errors.InvalidInput`` (HTTP 400 / gRPC INVALID_ARGUMENT) and is not
logged, as nothing was executed.

KServe binds all interfaces and has no host option; this script rebinds both servers
to 127.0.0.1 before starting them.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import sys
import time
import types
from typing import Any

from stdin_watchdog import on_stdin_eof  # a sibling module: scripts run with their own venv


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--call-log", type=pathlib.Path, required=True)
    parser.add_argument(
        "--exit-on-stdin-eof", action="store_true", help="shut down when stdin closes (the harness's watchdog)"
    )
    return parser.parse_args(argv)


def _bind_to_loopback() -> None:
    """Force KServe's REST (uvicorn) and gRPC servers onto 127.0.0.1.

    kserve 0.21 hard-codes ``uvicorn.Config(host="0.0.0.0")`` and
    ``add_insecure_port("[::]:<port>")``; tests must only listen on loopback.
    """
    import grpc.aio
    import uvicorn
    from kserve.protocol.grpc import server as kserve_grpc_server

    class LoopbackConfig(uvicorn.Config):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["host"] = "127.0.0.1"
            super().__init__(*args, **kwargs)

    # kserve.protocol.rest.server calls `uvicorn.Config(...)` through the module attribute.
    uvicorn.Config = LoopbackConfig  # type: ignore[misc]

    real_server = grpc.aio.server

    def loopback_server(*args: Any, **kwargs: Any) -> grpc.aio.Server:
        server = real_server(*args, **kwargs)
        add_insecure_port = server.add_insecure_port

        def add_loopback_port(address: str) -> int:
            port = address.rsplit(":", 1)[1]
            return add_insecure_port(f"127.0.0.1:{port}")

        server.add_insecure_port = add_loopback_port  # type: ignore[method-assign]
        return server

    # Only kserve's gRPC module sees the wrapper (it uses `aio.server(...)` and nothing else).
    kserve_grpc_server.aio = types.SimpleNamespace(server=loopback_server)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    # kserve.model_server parses sys.argv at import time (parse_known_args) for its own
    # flags; hide ours from it. Ports are passed to ModelServer explicitly below.
    sys.argv = sys.argv[:1]

    import numpy as np
    from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer
    from kserve.errors import InvalidInput
    from kserve.utils.utils import generate_uuid, get_predict_response

    _bind_to_loopback()
    call_log: pathlib.Path = args.call_log
    call_log.parent.mkdir(parents=True, exist_ok=True)
    call_log.touch()

    def record_call(protocol: str, batch_size: int, model: str = "double", parameters: Any = None) -> None:
        # Open/append/close per call so a test can read the log while the server runs.
        with open(call_log, "a") as log:
            log.write(json.dumps({"protocol": protocol, "batch_size": batch_size, "t": time.time(),
                                  "model": model, "parameters": parameters or {}}, default=str) + "\n")

    def double_json(value: Any) -> Any:
        """Double every number of a JSON value, keeping ints as ints and the nesting."""
        if isinstance(value, list):
            return [double_json(item) for item in value]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return 2 * value
        raise InvalidInput(f"instances must hold numbers or (nested) lists of numbers, got {value!r}")

    class DoubleModel(Model):
        """``OUTPUT0 = 2 * INPUT0``; one predict call == one batch as the gateway sent it."""

        def load(self) -> bool:
            self.ready = True
            return self.ready

        def get_input_types(self) -> list[dict[str, Any]]:
            return [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}]

        def get_output_types(self) -> list[dict[str, Any]]:
            return [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1]}]

        async def predict(
            self,
            payload: dict[str, Any] | InferRequest,
            headers: dict[str, str] | None = None,
            response_headers: dict[str, str] | None = None,
        ) -> dict[str, Any] | InferResponse:
            if isinstance(payload, InferRequest):
                return self._predict_v2(payload)
            return self._predict_v1(payload)

        def _predict_v1(self, payload: Any) -> dict[str, Any]:
            if not isinstance(payload, dict) or not isinstance(payload.get("instances"), list):
                raise InvalidInput('v1 request body must be {"instances": [...]}')
            instances = payload["instances"]
            predictions = double_json(instances)
            record_call("v1", len(instances))
            return {"predictions": predictions}

        def _predict_v2(self, request: InferRequest) -> InferResponse:
            if len(request.inputs) != 1 or request.inputs[0].name != "INPUT0":
                raise InvalidInput(f"expected exactly one input INPUT0, got {[i.name for i in request.inputs]}")
            unknown = [o.name for o in request.request_outputs or [] if o.name != "OUTPUT0"]
            if unknown:
                raise InvalidInput(f"unknown requested outputs {unknown}; the only output is OUTPUT0")
            infer_input = request.inputs[0]
            if infer_input.datatype != "FP32":
                raise InvalidInput(f"INPUT0 must be FP32, got {infer_input.datatype}")
            if len(infer_input.shape) != 2:
                raise InvalidInput(f"INPUT0 must have shape [rows, n], got {infer_input.shape}")
            try:
                tensor = infer_input.as_numpy()
            except ValueError as exc:  # data length does not match the declared shape
                raise InvalidInput(f"INPUT0 data does not match shape {infer_input.shape}: {exc}") from None
            result = (tensor * 2).astype(np.float32)
            output = InferOutput(name="OUTPUT0", shape=list(result.shape), datatype="FP32")
            # Not InferOutput(data=<ndarray>): kserve 0.21's InferResponse.to_grpc() then fails
            # with "truth value of an array ... is ambiguous" (gRPC INTERNAL) whenever the
            # request used raw_input_contents, as tritonclient does. Encoding it here mirrors
            # the request: raw in -> raw out (gRPC), typed/JSON in -> typed/JSON out;
            # to_rest() re-encodes for the REST binary tensor extension when asked.
            output.set_data_from_numpy(result, binary_data=request.use_binary_outputs)
            response = InferResponse(
                # KServe's REST response model requires a string id; the request may have none.
                response_id=request.id or generate_uuid(),
                model_name=self.name,
                infer_outputs=[output],
                # Honour the binary tensor extension (REST) / raw contents (gRPC) as asked.
                use_binary_outputs=request.use_binary_outputs,
                requested_outputs=request.request_outputs,
            )
            record_call("v2", int(result.shape[0]))
            return response

    class PlainModel(Model):
        """Describes nothing; doubles its input and lets KServe shape the answer."""

        def load(self) -> bool:
            self.ready = True
            return self.ready

        async def predict(
            self,
            payload: dict[str, Any] | InferRequest,
            headers: dict[str, str] | None = None,
            response_headers: dict[str, str] | None = None,
        ) -> dict[str, Any] | InferResponse:
            if isinstance(payload, InferRequest):
                data = payload.inputs[0].as_numpy()
                parameters = {key: _plain_value(value) for key, value in (payload.parameters or {}).items()}
                record_call("v2", len(data), self.name, parameters)
            else:
                data = np.asarray(payload["instances"])
                record_call("v1", len(data), self.name)
            return get_predict_response(payload, data * 2, self.name)

    def _plain_value(value: Any) -> Any:
        # KServe keeps gRPC parameters as InferParameter messages: their one set field.
        if hasattr(value, "WhichOneof"):
            return getattr(value, value.WhichOneof("parameter_choice"))
        return value

    model = DoubleModel("double")
    model.load()
    plain = PlainModel("plain")
    plain.load()
    if args.exit_on_stdin_eof:
        # KServe's ModelServer turns SIGTERM into a clean shutdown.
        on_stdin_eof(lambda: os.kill(os.getpid(), signal.SIGTERM))
    # grace_period: wait at most 5 s for in-flight requests on SIGTERM (default 30 s).
    ModelServer(http_port=args.http_port, grpc_port=args.grpc_port, workers=1, grace_period=5).start([model, plain])
    return 0


if __name__ == "__main__":
    sys.exit(main())
