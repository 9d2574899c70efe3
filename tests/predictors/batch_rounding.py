"""What batching changes in the image model's answers on THIS CPU: run in a venv with torch
(the Triton venv), ``python batch_rounding.py <folder of PNGs>`` prints, as JSON, each
picture's top-5 probabilities from one forward over all the pictures as one batch, and from
one forward per picture (the batch of one TorchServe's worker ran). The thread count is the
environment's (``OMP_NUM_THREADS``), as a server started in it would use.

The network is ``torchserve_models/tiny_cnn.py`` with the weights every test server builds
(``torch.manual_seed(0)``, PyTorch's default initialization); each picture goes through the
preprocessing of the served model (``from_torchserve/model_repository/image/1/model.py``,
TorchServe's ``image_handler.py``): Pillow, RGB, 224x224 bilinear, [0, 1], ImageNet's mean and
std. It knows no server and no gateway.
"""
from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import torch
from PIL import Image

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE / "torchserve_models"))
from tiny_cnn import TinyCNN  # noqa: E402  (the archive's model file, beside the handlers)

SIZE = (224, 224)
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def image_tensor(path: pathlib.Path) -> torch.Tensor:
    with Image.open(path) as opened:
        rgb = opened.convert("RGB").resize(SIZE, Image.Resampling.BILINEAR)
    pixels = (np.asarray(rgb, dtype=np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))


def top5(model: TinyCNN, batch: torch.Tensor) -> list[dict[str, float]]:
    with torch.inference_mode():
        probabilities, classes = torch.topk(torch.softmax(model(batch), dim=1), 5, dim=1)
    return [{f"class_{k}": p for k, p in zip(ks, ps, strict=True)}
            for ks, ps in zip(classes.tolist(), probabilities.tolist(), strict=True)]


def main() -> None:
    torch.manual_seed(0)
    model = TinyCNN().eval()
    images = [image_tensor(path) for path in sorted(pathlib.Path(sys.argv[1]).glob("*.png"))]
    together = top5(model, torch.stack(images))
    alone = [top5(model, image[None])[0] for image in images]
    print(json.dumps({"threads": torch.get_num_threads(), "batched": together, "alone": alone}))


if __name__ == "__main__":
    main()
