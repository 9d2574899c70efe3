"""The image classifier of ``image.mar``, moved from TorchServe to Triton's Python backend.

It does what the TorchServe handler did (``torchserve_models/image_handler.py``): each upload
decoded by Pillow, RGB, 224x224 bilinear, scaled to [0, 1] and normalized with ImageNet's
mean and std; the rows stacked into one batch for the network of the archive
(``tiny_cnn.py`` with its state dict ``image.pt``, one torch thread); each row's top-5
``{label: probability}`` from ``index_to_name.json``. The files of the archive sit beside
this one (``unzip image.mar -d models/image/1``).

Input ``image``: BYTES, one uploaded file per row, its bytes as sent. Output ``prediction``:
BYTES, per row the bytes TorchServe's worker sent for that row (``json.dumps(row,
indent=2)``), so a TorchServe client reads what it read before.

It knows nothing of the gateway or of how the bytes arrived.
"""

import io
import json
import os
import sys

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from PIL import Image

SIZE = (224, 224)
TOP_K = 5
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def image_tensor(upload: bytes) -> torch.Tensor:
    with Image.open(io.BytesIO(upload)) as opened:  # raises for bytes that are no image
        rgb = opened.convert("RGB").resize(SIZE, Image.Resampling.BILINEAR)
    pixels = (np.asarray(rgb, dtype=np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))  # HWC -> CHW


class TritonPythonModel:
    def initialize(self, args):
        torch.set_num_threads(1)  # as TorchServe's worker ran it: the same float32 sums
        here = os.path.join(args["model_repository"], args["model_version"])
        sys.path.insert(0, here)
        from tiny_cnn import TinyCNN  # the archive's model file

        self.model = TinyCNN()
        self.model.load_state_dict(torch.load(os.path.join(here, "image.pt"), map_location="cpu"))
        self.model.eval()
        with open(os.path.join(here, "index_to_name.json")) as labels:
            self.labels = json.load(labels)

    def execute(self, requests):
        responses = []
        for request in requests:
            uploads = pb_utils.get_input_tensor_by_name(request, "image").as_numpy().reshape(-1)
            try:
                batch = torch.stack([image_tensor(bytes(upload)) for upload in uploads])
            except Exception as exc:  # a file that is no image: a bad request (the gateway bisects it)
                error = pb_utils.TritonError(f"not an image: {exc}", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            with torch.inference_mode():
                logits = self.model(batch)
            probabilities, classes = torch.topk(torch.softmax(logits, dim=1), TOP_K, dim=1)
            rows = [{self.labels[str(k)]: p for k, p in zip(ks, ps, strict=True)}
                    for ks, ps in zip(classes.tolist(), probabilities.tolist(), strict=True)]
            answers = np.array([json.dumps(row, indent=2).encode() for row in rows], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("prediction", answers)]))
        return responses
