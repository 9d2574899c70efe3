"""The image classifier of ``image.mar``, moved from TorchServe to a KServe model server.

It does what the TorchServe handler did (``torchserve_models/image_handler.py``), as
``model_repository/image/1/model.py`` does in Triton: each upload decoded by Pillow, RGB, 224x224
bilinear, scaled and normalized with ImageNet's mean and std; one batch through the network of
the archive (``tiny_cnn.py``, ``image.pt``, one torch thread); each row's top-5
``{label: probability}`` from ``index_to_name.json``. ``--model_dir`` holds the archive's
files (``unzip image.mar -d models/image/1``)::

    python kserve_image.py --model_dir models/image/1 --http_port 8090 --grpc_port 8091

Open Inference Protocol: input ``image`` BYTES ``[-1]``, one uploaded file per row; output
``prediction`` BYTES ``[-1]``, per row the bytes TorchServe's worker sent for it
(``json.dumps(row, indent=2)``). It knows nothing of the gateway.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from typing import Any

import numpy as np
import torch
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer, model_server
from kserve.errors import InvalidInput
from kserve.utils.utils import generate_uuid
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


class ImageClassifier(Model):
    def __init__(self, name: str, model_dir: str) -> None:
        super().__init__(name)
        self.model_dir = model_dir
        self.load()

    def load(self) -> bool:
        torch.set_num_threads(1)  # as TorchServe's worker ran it: the same float32 sums
        sys.path.insert(0, self.model_dir)
        from tiny_cnn import TinyCNN  # the archive's model file

        self.network = TinyCNN()
        self.network.load_state_dict(torch.load(os.path.join(self.model_dir, "image.pt"), map_location="cpu"))
        self.network.eval()
        with open(os.path.join(self.model_dir, "index_to_name.json")) as labels:
            self.labels = json.load(labels)
        self.ready = True
        return self.ready

    def get_input_types(self) -> list[dict[str, Any]]:
        return [{"name": "image", "datatype": "BYTES", "shape": [-1]}]

    def get_output_types(self) -> list[dict[str, Any]]:
        return [{"name": "prediction", "datatype": "BYTES", "shape": [-1]}]

    async def predict(self, payload: InferRequest, headers: dict[str, str] | None = None,
                      response_headers: dict[str, str] | None = None) -> InferResponse:
        uploads = payload.inputs[0].as_numpy().reshape(-1)
        try:
            batch = torch.stack([image_tensor(bytes(upload)) for upload in uploads])
        except Exception as exc:
            raise InvalidInput(f"not an image: {exc}") from None
        with torch.inference_mode():
            logits = self.network(batch)
        probabilities, classes = torch.topk(torch.softmax(logits, dim=1), TOP_K, dim=1)
        rows = [{self.labels[str(k)]: p for k, p in zip(ks, ps, strict=True)}
                for ks, ps in zip(classes.tolist(), probabilities.tolist(), strict=True)]
        output = InferOutput(name="prediction", shape=[len(rows)], datatype="BYTES")
        # set_data_from_numpy, not InferOutput(data=...): KServe 0.21 then answers raw gRPC requests.
        output.set_data_from_numpy(np.array([json.dumps(row, indent=2).encode() for row in rows], dtype=np.object_),
                                   binary_data=payload.use_binary_outputs)
        return InferResponse(response_id=payload.id or generate_uuid(), model_name=self.name, infer_outputs=[output],
                             use_binary_outputs=payload.use_binary_outputs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[model_server.parser])  # KServe's own flags: --http_port, ...
    parser.add_argument("--model_dir", required=True)
    args, _ = parser.parse_known_args()
    ModelServer().start([ImageClassifier("image", args.model_dir)])
