"""``kserve_image.py`` as the tests run it: the user's file unchanged, on 127.0.0.1.

KServe binds every interface and has no host flag, so the servers are rebound to loopback
first (``kserve_server._bind_to_loopback``, a sibling of this folder); with
``--exit-on-stdin-eof`` it shuts down when its stdin closes (the harness's watchdog). Run by a
venv with kserve 0.21.0, torch 2.13.0+cpu and Pillow 13.0.0 (``kserve-openai`` of
``tools.predictor_envs``, the one KServe venv with torch: the TorchServe venv's versions)::

    <kserve-openai python> kserve_loopback.py --model_dir D --http_port P --grpc_port Q

Every other flag is ``kserve_image.py``'s (KServe's own). It knows no test.
"""
from __future__ import annotations

import os
import pathlib
import runpy
import signal
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from kserve_server import _bind_to_loopback  # noqa: E402  (siblings of this folder, by path)
from stdin_watchdog import on_stdin_eof  # noqa: E402


def main() -> None:
    if "--exit-on-stdin-eof" in sys.argv:
        sys.argv.remove("--exit-on-stdin-eof")
        # KServe's ModelServer turns SIGTERM into a clean shutdown.
        on_stdin_eof(lambda: os.kill(os.getpid(), signal.SIGTERM))
    _bind_to_loopback()
    runpy.run_path(str(HERE / "kserve_image.py"), run_name="__main__")


if __name__ == "__main__":
    main()
