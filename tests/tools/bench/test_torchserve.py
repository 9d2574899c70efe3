"""tools/bench/torchserve.py's own parts, without TorchServe: the PNG it uploads decodes to a
224x224 picture, and `hey` (the real binary) is read back into counts and percentiles."""
from __future__ import annotations

import io

from PIL import Image

from tests.harness import config_for, running_gateway
from tools.bench.torchserve import hey, png


def test_the_uploaded_picture_is_a_224_pixel_png():
    with Image.open(io.BytesIO(png())) as picture:
        assert (picture.format, picture.size, picture.mode) == ("PNG", (224, 224), "RGB")


def test_hey_puts_the_file_and_its_csv_becomes_a_row(tmp_path):
    picture = tmp_path / "kitten.png"
    picture.write_bytes(png())
    with running_gateway(config_for({"name": "demo", "backend": "simulated", "simulated": {"call_ms": 1}})) as gw:
        # The demo model takes FP32, not uploads: every PUT is a 400, counted as an error.
        refused = hey(f"{gw.http_url}/predictions/demo", picture, clients=2, duration=0.5)
        assert refused["ok"] == 0 and refused["errors"] > 0 and refused["p50_ms"] is None
        instance = tmp_path / "instance.json"
        instance.write_bytes(b"[1, 2, 3, 4]")
        answered = hey(f"{gw.http_url}/predictions/demo", instance, clients=2, duration=0.5,
                       content_type="application/json")
        assert answered["ok"] > 0 and answered["errors"] == 0 and answered["rps"] > 0
        assert 0 < answered["p50_ms"] <= answered["p99_ms"]
