"""Clients of the computing TorchServe models, shared by the tests that talk to TorchServe
directly and those that talk to the gateway in front of it: the real curl binary, run as
TorchServe's and KServe's docs write the commands, and how two answers of the ``image`` and
``encoder`` models are compared (the image model's: the same classes in the same order, each
probability within `IMAGE_ULPS` float32 units in the last place).

It knows no server: the URLs are the tests'."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from collections.abc import Sequence
from typing import Any

import numpy as np

CURL = "/usr/bin/curl"
# A forward over a batch is not bit-equal to forwards over its rows on every CPU: the kernels
# chosen by batch size sum in other orders. On an Intel Xeon the image model's top-5 moved by
# at most 2 ulps between a batch of 8 (or 64) and each picture alone, at 1 and 2 threads
# (tests/predictors/batch_rounding.py); on an AMD EPYC, by none. 16 ulps (about 1.2e-7 at
# these probabilities, ~0.1) leaves 8x that, while two pictures' answers differ by >10,000
# ulps and a picture's neighbouring classes by >100,000: a row answered another's is still
# caught, and no order can flip within the bound.
IMAGE_ULPS = 16
ENCODER_TOLERANCE = 1e-4
JSON = ("-H", "Content-Type: application/json")
# curl would send loopback requests through a proxy named in the environment.
CURL_ENV = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}


def curl_command(*args: str) -> list[str]:
    # -w: the status on a last line of its own, after the body.
    return [CURL, "-s", "-w", "\n%{http_code}", *args]


def answer(stdout: bytes) -> tuple[int, Any]:
    body, _, status = stdout.rpartition(b"\n")
    return int(status), json.loads(body)


def curl(*args: str, cwd: pathlib.Path | None = None) -> tuple[int, Any]:
    """Run the real curl; (HTTP status, the JSON it printed)."""
    result = subprocess.run(curl_command(*args), capture_output=True, cwd=cwd, env=CURL_ENV, timeout=60, check=True)
    return answer(result.stdout)


def curl_at_once(commands: Sequence[Sequence[str]], cwd: pathlib.Path) -> list[tuple[int, Any]]:
    """Start every curl before waiting for any: concurrent clients."""
    running = [subprocess.Popen(curl_command(*args), stdout=subprocess.PIPE, cwd=cwd, env=CURL_ENV)
               for args in commands]
    return [answer(proc.communicate(timeout=60)[0]) for proc in running]


def ok(status_and_body: tuple[int, Any]) -> Any:
    status, body = status_and_body
    assert status == 200, body
    return body


def assert_top5(prediction: Any) -> None:
    assert isinstance(prediction, dict) and len(prediction) == 5, prediction
    assert all(label.startswith("class_") and 0 < p < 1 for label, p in prediction.items()), prediction
    assert list(prediction.values()) == sorted(prediction.values(), reverse=True)


def float32_ulps(a: float, b: float) -> int:
    """How many float32 values lie between a and b (both of one sign): 0 when equal."""
    return abs(int(np.float32(a).view(np.int32)) - int(np.float32(b).view(np.int32)))


def assert_same_top5(got: dict[str, float], expected: dict[str, float]) -> None:
    """The same classes, in the same order, each probability within `IMAGE_ULPS`."""
    assert list(got) == list(expected), (got, expected)
    ulps = {label: float32_ulps(got[label], p) for label, p in expected.items()}
    assert max(ulps.values()) <= IMAGE_ULPS, (ulps, got, expected)


def assert_close(got: Sequence[float], expected: Sequence[float]) -> None:
    assert len(got) == len(expected) == 64
    difference = np.max(np.abs(np.asarray(got) - np.asarray(expected)))
    assert difference <= ENCODER_TOLERANCE, difference
