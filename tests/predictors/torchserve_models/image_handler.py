"""The handler of the test model ``image`` (``TinyCNN``, archived into ``image.mar``):
TorchServe's own image-classifier contract, written with Pillow and numpy because
torchvision (what ``ts.torch_handler.image_classifier`` imports) has no wheel for this torch.

Runs inside a TorchServe worker, in the TORCHSERVE predictor venv. Every row of a call is
one image, whichever way it arrived, read as ``VisionHandler`` reads it:
``row.get("data") or row.get("body")``:

* bytes: a raw upload (``curl -T kitten.png``: ``body``), or a multipart file part
  (``curl -F data=@kitten.jpg``: ``data``);
* str: base64 of the file, how a KServe-envelope instance ``{"data": "<base64>"}`` arrives.

Each image is decoded by Pillow, converted to RGB, resized to 224x224 (bilinear), scaled to
[0, 1] and normalized with ImageNet's mean and std; the rows are stacked into one batch.
Each row's answer is its top-5 as ``{"class_<k>": probability}`` (softmax), like
TorchServe's ``ImageClassifier`` mapping the top classes through ``index_to_name.json``.
A row that is not an image raises: TorchServe answers the call with an error status.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import torch
from call_logging import CallLoggingHandler  # a sibling in the archive (--extra-files)
from PIL import Image
from ts.utils.util import map_class_to_label

SIZE = (224, 224)
TOP_K = 5
# ImageNet's channel statistics, as torchvision's Normalize in TorchServe's ImageClassifier.
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


class ImageClassifierHandler(CallLoggingHandler):
    def preprocess(self, data: list[Any]) -> torch.Tensor:
        return torch.stack([self.image_tensor(row) for row in data])

    @staticmethod
    def image_tensor(row: Any) -> torch.Tensor:
        image = (row.get("data") or row.get("body")) if isinstance(row, dict) else None
        if isinstance(image, str):
            image = base64.b64decode(image)
        if not isinstance(image, (bytes, bytearray)):
            raise ValueError(f"expected an image (bytes, or base64 in 'data'), got {type(image).__name__}")
        with Image.open(io.BytesIO(image)) as opened:  # raises for bytes that are no image
            rgb = opened.convert("RGB").resize(SIZE, Image.Resampling.BILINEAR)
        pixels = (np.asarray(rgb, dtype=np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))  # HWC -> CHW

    def postprocess(self, data: torch.Tensor) -> list[dict[str, float]]:
        probabilities, classes = torch.topk(torch.softmax(data, dim=1), TOP_K, dim=1)
        return map_class_to_label(probabilities.tolist(), self.mapping, classes.tolist())
