"""vLLM's score and rerank APIs, served by a small test server: vLLM's wheel is built for
CUDA and its cross-encoder serving does not run on this CPU, so the tests' predictor speaks
vLLM's request and answer shapes faithfully and computes with the test cross-encoder
(``rerank_model.score``: transformers' BertForSequenceClassification, sigmoid of the logit,
which is vLLM's default activation for a one-label classifier).

Run by the INFINITY predictor venv's interpreter (it has torch, transformers, FastAPI and
uvicorn)::

    <infinity venv>/bin/python tests/predictors/vllm_score_server.py --port 8000

Routes, as ``vllm serve <model> --task score`` (vLLM 0.8-0.10) has them:

* ``POST /score`` and ``/v1/score``: ``{"model", "text_1", "text_2", "truncate_prompt_tokens"}``.
  ``text_1`` a string and ``text_2`` a string or a list: the one query against each text;
  both lists: pair i is ``(text_1[i], text_2[i])``, and lists of different lengths are a 400.
  Answer ``{"id": "score-<hex>", "object": "list", "created", "model", "data": [{"index",
  "object": "score", "score"}], "usage": {"prompt_tokens", "total_tokens",
  "completion_tokens": 0, "prompt_tokens_details": null}}``.
* ``POST /rerank``, ``/v1/rerank``, ``/v2/rerank``: Cohere's shape ``{"model", "query",
  "documents", "top_n"}`` (``top_n`` 0 or absent: all), answered ``{"id", "model", "usage":
  {"total_tokens"}, "results": [{"index", "document": {"text"}, "relevance_score"}]}`` best
  first.
* ``GET /v1/models`` (``{"object": "list", "data": [{"id", "object": "model", ...}]}``),
  ``GET /health``.
* Errors: ``{"object": "error", "message", "type": "BadRequestError", "param": null, "code":
  400}``; a model other than the served one is a 404 ``NotFoundError``.

One forward at a time (``--cost-ms`` adds a fixed sleep per call and ``--pair-ms`` per pair,
for the benchmark's "one call at a time" predictor), each call's pair count appended to
``--call-log`` as a JSON line when given. Prints ``READY http=127.0.0.1:N`` once
``/health`` answers; exits on SIGTERM or when stdin closes (``--exit-on-stdin-eof``).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations (Request) at run time.

import argparse
import json
import os
import signal
import sys
import threading
import time
import uuid
from typing import Any

import rerank_model  # a sibling module: scripts run with their own venv
from ready_line import announce_when_ready, stdout_for_ready_only
from stdin_watchdog import on_stdin_eof


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-name", default=rerank_model.MODEL_NAME)
    parser.add_argument("--cost-ms", type=float, default=0.0, help="a fixed sleep per call, on top of the forward")
    parser.add_argument("--pair-ms", type=float, default=0.0, help="a sleep per pair, on top of the forward")
    parser.add_argument("--no-model", action="store_true", help="score by a hash of each pair instead of the "
                                                                "cross-encoder: the cost is the sleeps alone")
    parser.add_argument("--call-log", default="", help="append each call's pair count here (JSON lines)")
    parser.add_argument("--exit-on-stdin-eof", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:  # noqa: C901 (one app, its routes inside)
    args = _parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import hashlib

    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()
    one_at_a_time = threading.Lock()  # one forward at a time, as one engine step would
    started = int(time.time())

    def error(message: str, status: int = 400, kind: str = "BadRequestError") -> JSONResponse:
        return JSONResponse({"object": "error", "message": message, "type": kind, "param": None, "code": status},
                            status_code=status)

    def compute(pairs: list[tuple[str, str]]) -> list[float]:
        with one_at_a_time:
            if args.no_model:
                scores = [int.from_bytes(hashlib.blake2b(f"{q}\0{d}".encode(), digest_size=4).digest(), "little")
                          / 2 ** 32 for q, d in pairs]
            else:
                scores = [float(value) for value in rerank_model.score(pairs)]
            delay = (args.cost_ms + args.pair_ms * len(pairs)) / 1000
            if delay > 0:
                time.sleep(delay)
            if args.call_log:
                with open(args.call_log, "a") as log:
                    log.write(json.dumps({"pairs": len(pairs), "queries": len({q for q, _ in pairs})}) + "\n")
        return scores

    def tokens(pairs: list[tuple[str, str]]) -> int:
        return sum(len(q.split()) + len(d.split()) + 3 for q, d in pairs)

    def model_checked(body: dict[str, Any]) -> JSONResponse | None:
        model = body.get("model")
        if model is not None and model != args.model_name:
            return error(f"The model `{model}` does not exist.", 404, "NotFoundError")
        return None

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": args.model_name, "object": "model", "created": started,
                                            "owned_by": "vllm", "root": args.model_name, "max_model_len": 512}]}

    async def checked_body(request: Request) -> dict[str, Any] | JSONResponse:
        """The request's JSON object for this model, or vLLM's error answer."""
        try:
            body = await request.json()
        except ValueError:
            return error("the body is not valid JSON")
        if not isinstance(body, dict):
            return error("the body must be a JSON object")
        refused = model_checked(body)
        return refused if refused is not None else body

    async def score(request: Request) -> JSONResponse:
        body = await checked_body(request)
        if isinstance(body, JSONResponse):
            return body
        text_1, text_2 = body.get("text_1"), body.get("text_2")
        if isinstance(text_1, str):
            text_1 = [text_1]
        if isinstance(text_2, str):
            text_2 = [text_2]
        if not isinstance(text_1, list) or not isinstance(text_2, list) or not text_1 or not text_2 or \
                not all(isinstance(t, str) for t in text_1 + text_2):
            return error("text_1 and text_2 must be strings or non-empty lists of strings")
        if len(text_1) == 1:
            text_1 = text_1 * len(text_2)
        elif len(text_1) != len(text_2):
            return error("Input lengths must be either 1:1, 1:N or N:N")
        pairs = list(zip(text_1, text_2, strict=True))
        scores = compute(pairs)
        used = tokens(pairs)
        return JSONResponse({"id": f"score-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                             "model": args.model_name,
                             "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
                             "usage": {"prompt_tokens": used, "total_tokens": used, "completion_tokens": 0,
                                       "prompt_tokens_details": None}})

    async def rerank(request: Request) -> JSONResponse:
        body = await checked_body(request)
        if isinstance(body, JSONResponse):
            return body
        query, documents, top_n = body.get("query"), body.get("documents"), body.get("top_n") or 0
        if not isinstance(query, str) or not isinstance(documents, list) or not documents or \
                not all(isinstance(d, str) for d in documents) or not isinstance(top_n, int):
            return error("query must be a string and documents a non-empty list of strings")
        pairs = [(query, document) for document in documents]
        scores = compute(pairs)
        order = sorted(range(len(scores)), key=lambda i: -scores[i])[:top_n or None]
        return JSONResponse({"id": f"rerank-{uuid.uuid4().hex}", "model": args.model_name,
                             "usage": {"total_tokens": tokens(pairs)},
                             "results": [{"index": i, "document": {"text": documents[i]}, "relevance_score": scores[i]}
                                         for i in order]})

    for path in ("/score", "/v1/score"):
        app.add_api_route(path, score, methods=["POST"])
    for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
        app.add_api_route(path, rerank, methods=["POST"])

    if not args.no_model:
        rerank_model.score([("warm", "up")])  # the model loaded before READY
    ready_out = stdout_for_ready_only()
    if args.exit_on_stdin_eof:
        on_stdin_eof(lambda: os.kill(os.getpid(), signal.SIGTERM))
    base = f"http://127.0.0.1:{args.port}"
    announce_when_ready(ready_out, [f"{base}/health"], f"READY http=127.0.0.1:{args.port}")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
