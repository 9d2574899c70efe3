"""A real KServe model server (kserve 0.21.0) serving the test embedding model through
KServe's own OpenAI endpoints: ``OpenAIEncoderModel.create_embedding`` at
``POST /openai/v1/embeddings`` (``GET /openai/v1/models`` lists it).

Run by the KSERVE-OPENAI predictor venv's interpreter (``python -m tools.predictor_envs
kserve-openai``); the harness (``tests.predictors.harness.KServeOpenAIServer``) starts it::

    <kserve-openai venv>/bin/python tests/predictors/kserve_openai_server.py \
        --http-port 8080 --grpc-port 8081 --call-log /tmp/kserve-openai-calls.jsonl

``kserve.protocol.rest.openai`` imports its request/response types from vllm's package
(``vllm.entrypoints...protocol``): the venv holds vllm 0.24.0's wheel WITHOUT its
dependencies plus the few packages its protocol modules import (see the EnvSpec in
``tools/predictor_envs.py``); vllm's engine and compiled ops are never used.

Model ``embedding`` (a ``kserve.Model`` and ``OpenAIEncoderModel``, as KServe's Hugging Face
runtime's ``HuggingfaceEncoderModel`` is) takes that runtime's path for an encoder: per
HTTP request, ``create_embedding`` calls the model (``Model.__call__``: preprocess ->
predict -> postprocess), the whole ``input`` list is tokenized by transformers'
tokenizer (padding, truncation at 512, lower case: the runtime's defaults) and run in ONE
forward of ``embedding_model.py``'s BERT inside the request's coroutine (the event loop
waits for it), then mean-pooled over the attention mask, L2-normalised and turned into
lists; base64 is packed float by float. So requests never share a forward: no batching
across requests (KServe's own batcher speaks only v1 ``:predict``). The same model also
answers v1 ``POST /v1/models/embedding:predict`` with ``{"instances": [texts]}``.

Where the runtime (kserve 0.21's huggingfaceserver) differs, this model says so: it
answers token-id inputs (the runtime: 501 "'input' as token lists is not supported") and
honours ``dimensions`` (the runtime ignores it); its top-level ``object`` is ``"list"``
(the runtime's is ``"embedding"``).

* ``input``: a string, a list of strings, or token ids (a list of ints, or a list of such
  lists), ids used as given ([CLS]/[SEP] not added) and cut at 512; an empty list or an
  empty id list is a 400.
* ``encoding_format``: ``float`` (lists of floats) or ``base64`` (the float32 bytes,
  little-endian unless ``endianness: "big"``, as OpenAI's clients decode them); vllm's
  ``embed_dtype`` other than ``float32`` is a 400.
* ``dimensions``: the first N values, normalised again (what OpenAI's ``dimensions``
  means); N outside 1..128 is a 400.
* ``usage``: ``prompt_tokens`` = ``total_tokens`` = the tokens the model ran (the attention
  mask's sum: [CLS] and [SEP] included, after truncation).
* ``model`` must name the served model: KServe checks it, and an unknown or missing one
  is a 404 in KServe's own form ``{"error": "Model with name X does not exist."}``; the
  answer names the model. This model's errors are OpenAI's form ``{"error": {"message",
  "type", "param", "code": "400"}}``; a body vllm's types refuse is KServe's 400/422.
* The answer also carries vllm's extra usage fields (``completion_tokens: 0``,
  ``prompt_tokens_details: null``) and ``id``/``created``.

Every embeddings call appends ONE JSON line to ``--call-log``: ``{"texts": [the call's
inputs, as sent], "tokens": <prompt tokens>, "padded": <rows x longest>, "t": <time.time()>}``,
so a test sees how many forwards the predictor ran, of which texts, and how big each was.

Prints ``READY http=127.0.0.1:P grpc=127.0.0.1:P embeddings=<url>`` on stdout, its only
line there (all else goes to stderr), once ``/v2/health/ready`` and ``<prefix>/v1/models``
answer: the READY line ``tools.processes`` reads, so benchmarks run it by path.

KServe binds all interfaces; the REST and gRPC servers are rebound to 127.0.0.1 (as in
``kserve_server.py``). The route prefix is KServe's ``KSERVE_OPENAI_ROUTE_PREFIX``
(default ``/openai``), read when KServe's module is imported (``--route-prefix`` sets it).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pathlib
import signal
import struct
import sys
import time
from typing import Any

import embedding_model  # sibling modules: scripts run with their own venv
from kserve_server import _bind_to_loopback
from ready_line import announce_when_ready, stdout_for_ready_only
from stdin_watchdog import on_stdin_eof


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--call-log", type=pathlib.Path, default=None)
    parser.add_argument("--model-name", default=embedding_model.MODEL_NAME)
    parser.add_argument("--route-prefix", default=None, help="KSERVE_OPENAI_ROUTE_PREFIX (KServe's default: /openai)")
    parser.add_argument(
        "--exit-on-stdin-eof", action="store_true", help="shut down when stdin closes (the harness's watchdog)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    ready_out = stdout_for_ready_only()
    sys.argv = sys.argv[:1]  # kserve.model_server parses sys.argv at import time
    if args.route_prefix is not None:
        os.environ["KSERVE_OPENAI_ROUTE_PREFIX"] = args.route_prefix
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    import torch
    from kserve import Model, ModelServer
    from kserve.protocol.rest.openai import OpenAIEncoderModel
    from kserve.protocol.rest.openai.types import (
        Embedding,
        EmbeddingResponseData,
        Error,
        ErrorResponse,
        UsageInfo,
    )

    _bind_to_loopback()
    folder = embedding_model.build()
    call_log: pathlib.Path | None = args.call_log
    if call_log is not None:
        call_log.parent.mkdir(parents=True, exist_ok=True)
        call_log.touch()

    def error(message: str, param: str | None = None, status: int = 400) -> ErrorResponse:
        return ErrorResponse(error=Error(message=message, type="invalid_request_error", param=param,
                                         code=str(status)))

    class EmbeddingModel(Model, OpenAIEncoderModel):
        """The test encoder on the path KServe's Hugging Face runtime takes for an encoder
        (``HuggingfaceEncoderModel``): ``create_embedding`` calls the model itself
        (``Model.__call__``: preprocess -> predict -> postprocess, with KServe's latency
        histograms), preprocess tokenizes the whole list with transformers' tokenizer
        (padding, truncation at 512, lower case as the runtime's default), predict runs ONE
        forward inside the request's coroutine, postprocess mean-pools over the attention
        mask, normalises and turns each row into a list; base64 is packed per float."""

        def load(self) -> bool:
            from transformers import AutoTokenizer, BertModel

            self._tokenizer = AutoTokenizer.from_pretrained(str(folder), do_lower_case=True)
            self._encoder = BertModel.from_pretrained(str(folder), dtype=torch.float32)
            self._encoder.eval()
            self.ready = True
            return self.ready

        def preprocess(self, payload: Any, context: Any = None) -> Any:
            instances = payload["instances"]
            context["instances"] = instances
            if all(isinstance(item, str) for item in instances):
                inputs = self._tokenizer(instances, max_length=embedding_model.MAX_TOKENS, add_special_tokens=True,
                                        return_tensors="pt", padding=True, truncation=True)
                inputs = {key: value for key, value in inputs.items()}
            else:  # token ids, as given (checked by create_embedding), padded with [PAD]
                rows = [list(item)[:embedding_model.MAX_TOKENS] for item in instances]
                longest = max(len(row) for row in rows)
                ids = torch.zeros((len(rows), longest), dtype=torch.int64)
                mask = torch.zeros((len(rows), longest), dtype=torch.int64)
                for index, row in enumerate(rows):
                    ids[index, :len(row)] = torch.tensor(row, dtype=torch.int64)
                    mask[index, :len(row)] = 1
                inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
            context["attention_mask"] = inputs["attention_mask"]
            return inputs

        async def predict(self, payload: Any, headers: Any = None, response_headers: Any = None) -> Any:
            # One forward of every row, in this coroutine: the event loop waits for it.
            with torch.no_grad():
                return self._encoder(**payload).last_hidden_state

        def postprocess(self, outputs: Any, context: Any = None, response_headers: Any = None) -> Any:
            mask = context["attention_mask"]
            weights = mask.unsqueeze(-1).expand(outputs.size()).float()
            pooled = (outputs * weights).sum(1) / torch.clamp(weights.sum(1), min=1e-9)
            vectors = torch.nn.functional.normalize(pooled, p=2, dim=1)
            dimensions = context.get("dimensions")
            if dimensions is not None:
                vectors = torch.nn.functional.normalize(vectors[:, :dimensions], p=2, dim=1)
            if call_log is not None:
                with open(call_log, "a") as log:  # open/append/close: tests read it meanwhile
                    log.write(json.dumps({"texts": context["instances"], "tokens": int(mask.sum()),
                                          "padded": int(mask.numel()), "t": time.time()}) + "\n")
            return {"predictions": [row.tolist() for row in vectors]}

        def _inputs(self, request: Any) -> list[Any] | ErrorResponse:
            """The request's inputs as a list of texts or of token-id lists, or an error."""
            value = getattr(request, "input", None)
            if isinstance(value, str):
                return [value]
            if not isinstance(value, list) or not value:
                return error("input must be a string, a non-empty list of strings, or token ids", "input")
            if all(isinstance(item, str) for item in value):
                return value
            if all(isinstance(item, int) for item in value):
                value = [value]
            if all(isinstance(item, list) and item and all(isinstance(i, int) for i in item) for item in value):
                vocab_size = self._encoder.config.vocab_size
                if any(not 0 <= i < vocab_size for item in value for i in item):
                    return error(f"token ids must lie in 0..{vocab_size - 1}", "input")
                return value
            return error("input must be a string, a non-empty list of strings, or token ids", "input")

        async def create_embedding(self, request: Any, raw_request: Any = None,
                                   context: dict[str, Any] | None = None) -> Embedding | ErrorResponse:
            instances = self._inputs(request)
            if isinstance(instances, ErrorResponse):
                return instances
            encoding_format = getattr(request, "encoding_format", "float") or "float"
            if encoding_format not in ("float", "base64"):
                return error(f"encoding_format {encoding_format!r} is not supported: float or base64",
                             "encoding_format")
            if (getattr(request, "embed_dtype", "float32") or "float32") != "float32":
                return error("embed_dtype must be float32", "embed_dtype")
            dimensions = getattr(request, "dimensions", None)
            if dimensions is not None and not 1 <= dimensions <= embedding_model.DIMENSIONS:
                return error(f"dimensions must lie in 1..{embedding_model.DIMENSIONS}", "dimensions")
            call_context: dict[str, Any] = {"dimensions": dimensions}
            answer, _ = await self({"instances": instances}, call_context)
            embeddings = answer["predictions"]
            tokens = int(call_context["attention_mask"].sum())
            if encoding_format == "base64":
                order = ">" if getattr(request, "endianness", "native") == "big" else "<"
                embeddings = [base64.b64encode(b"".join(struct.pack(f"{order}f", x) for x in row)).decode("ascii")
                              for row in embeddings]
            return Embedding(
                model=request.model or self.name,
                data=[EmbeddingResponseData(index=index, embedding=value) for index, value in enumerate(embeddings)],
                usage=UsageInfo(prompt_tokens=tokens, total_tokens=tokens),
            )

        async def create_rerank(self, request: Any, raw_request: Any = None,
                                context: dict[str, Any] | None = None) -> ErrorResponse:
            return error(f"model {self.name} does not rerank")

    model = EmbeddingModel(args.model_name)
    model.load()
    if args.exit_on_stdin_eof:
        on_stdin_eof(lambda: os.kill(os.getpid(), signal.SIGTERM))
    # KServe reads its prefix when its module is imported: ask the module, not the option.
    from kserve.protocol.rest.openai.endpoints import OPENAI_ROUTE_PREFIX

    base = f"http://127.0.0.1:{args.http_port}{OPENAI_ROUTE_PREFIX}/v1"
    announce_when_ready(ready_out, [f"http://127.0.0.1:{args.http_port}/v2/health/ready", f"{base}/models"],
                        f"READY http=127.0.0.1:{args.http_port} grpc=127.0.0.1:{args.grpc_port} "
                        f"embeddings={base}/embeddings")
    ModelServer(http_port=args.http_port, grpc_port=args.grpc_port, workers=1, grace_period=5).start([model])
    return 0


if __name__ == "__main__":
    sys.exit(main())
