"""A real Infinity server (``infinity-emb`` 0.0.78) serving the test embedding model, or
(``--model rerank``) the test cross-encoder of ``rerank_model.py`` with its own ``/rerank``.

Run by the INFINITY predictor venv's interpreter (``python -m tools.predictor_envs
infinity`` prints it); the harness (``tests.predictors.harness.InfinityServer``) starts it::

    <infinity venv>/bin/python tests/predictors/infinity_server.py --port 7997

It builds (or reuses) the model folder of ``embedding_model.py`` and runs Infinity's own
CLI in this process, as ``infinity_emb v2`` would: ``--model-id <folder>
--served-model-name embedding --engine torch --device cpu --dtype float32 --host 127.0.0.1
--port N``, with Infinity's own batching as it comes (``--batch-size`` 32 unless given;
its queue sorts by length and cuts batches). ``--no-bettertransformer`` and
``--no-compile`` only say what already holds (BetterTransformer, on by default, needs
optimum, which this venv lacks; torch.compile is off by default), so the forward is
sentence-transformers' own, equal to ``embedding_model.embed``; no vector disk cache (its
default) and no model warm-up (only startup time). ``DO_NOT_TRACK=1`` and
``HF_HUB_OFFLINE=1``: nothing leaves the machine.

Prints ``READY http=127.0.0.1:N embeddings=<url>`` (``rerank=<url>``) on stdout, its only line there (all
else goes to stderr), once ``GET /health`` and ``GET <prefix>/models`` answer (the model is
loaded by then: Infinity starts its engine in the app's lifespan, before uvicorn accepts
connections): the READY line ``tools.processes`` reads, so benchmarks run it by path.
Exits on SIGTERM/SIGINT (uvicorn's own handling), or when
stdin closes with ``--exit-on-stdin-eof``.

Facts about Infinity 0.0.78 (read from its source and checked against this server):

* Routes have NO ``/v1``: ``POST /embeddings``, ``GET /models``, ``GET /health`` (always at
  the root), plus ``/rerank`` and ``/classify``. ``--url-prefix /v1`` (here ``--url-prefix``)
  moves all but ``/health`` under it, which is what an OpenAI client with
  ``base_url=.../v1`` needs.
* ``encoding_format: "base64"`` is honoured: each embedding is the base64 of its float32
  bytes in the machine's order (little-endian here), as OpenAI's clients decode it.
* ``dimensions`` is honoured as a Matryoshka cut: the first N values of the normalised
  vector, NOT normalised again; 0 (its default) means all, and N outside 1..128 is a 400.
* ``input``: a string or a list of 1..2048 strings (``INFINITY_MAX_CLIENT_BATCH_SIZE``);
  an empty list is a 422. Each string has its surrounding whitespace stripped first.
* ``usage.prompt_tokens`` is, as Infinity ships (``--no-lengths-via-tokenize``), the number
  of CHARACTERS of each stripped text; with ``--lengths-via-tokenize`` (this script's
  ``--count-tokens``) it counts tokens WITHOUT [CLS]/[SEP], i.e.
  ``embedding_model.token_counts`` minus 2 per text.
* Errors are OpenAI's form ``{"error": {"message", "type", "param", "code"}}``; a request
  validation error is FastAPI's 422 ``{"detail": [...]}``; a full queue (32,000 items) is 429.
* ``model`` in the request is NOT checked while one model is served (any name, or none,
  reaches it); the answer always names the served model.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

import embedding_model  # a sibling module: scripts run with their own venv
import rerank_model
from ready_line import announce_when_ready, stdout_for_ready_only
from stdin_watchdog import on_stdin_eof


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--url-prefix", default="", help="route prefix, e.g. /v1 (Infinity's default: none)")
    parser.add_argument("--batch-size", type=int, default=32, help="Infinity's maximum batch size (its default 32)")
    parser.add_argument("--model", choices=["embedding", "rerank"], default="embedding",
                        help="which test model: the encoder (/embeddings) or the cross-encoder (/rerank)")
    parser.add_argument("--model-name", default="", help="the served model name (default: the model's own)")
    parser.add_argument("--count-tokens", action="store_true",
                        help="usage counts tokens (Infinity's --lengths-via-tokenize), not characters")
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument(
        "--exit-on-stdin-eof", action="store_true", help="shut down when stdin closes (the harness's watchdog)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    module = rerank_model if args.model == "rerank" else embedding_model
    folder = module.build()
    model_name = args.model_name or module.MODEL_NAME
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("INFINITY_ANONYMOUS_USAGE_STATS", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    cli_args = [
        "infinity_emb", "v2",
        "--model-id", str(folder), "--served-model-name", model_name,
        "--engine", "torch", "--device", "cpu", "--dtype", "float32",
        "--batch-size", str(args.batch_size),
        "--no-bettertransformer", "--no-compile", "--no-model-warmup", "--no-vector-disk-cache",
        "--lengths-via-tokenize" if args.count_tokens else "--no-lengths-via-tokenize",
        "--host", "127.0.0.1", "--port", str(args.port), "--url-prefix", args.url_prefix,
        "--log-level", args.log_level,
    ]
    ready_out = stdout_for_ready_only()
    print("infinity: " + json.dumps(cli_args), flush=True)
    if args.exit_on_stdin_eof:
        # uvicorn turns SIGTERM into a clean shutdown.
        on_stdin_eof(lambda: os.kill(os.getpid(), signal.SIGTERM))
    base = f"http://127.0.0.1:{args.port}"
    route = "rerank" if args.model == "rerank" else "embeddings"
    announce_when_ready(ready_out, [f"{base}/health", f"{base}{args.url_prefix}/models"],
                        f"READY http=127.0.0.1:{args.port} {route}={base}{args.url_prefix}/{route}")

    from infinity_emb.cli import cli

    sys.argv = cli_args
    try:
        cli()  # typer: runs uvicorn until a signal, then raises SystemExit
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
