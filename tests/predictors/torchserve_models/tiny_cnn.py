"""The network of the test model ``image``: ``TinyCNN``, a small image classifier that
really computes (three strided 3x3 convolutions 3->16->32->64 with ReLU, global average
pooling, ``Linear(64, 10)``) on normalized 3x224x224 images; ~25k parameters, random
weights (``torch.manual_seed(0)``, then PyTorch's default initialization).

Archived as the model file of ``image.mar`` (``torch-model-archiver --model-file``):
TorchServe's ``BaseHandler`` imports it inside the worker, instantiates its ONE class (it
refuses a module that defines more than one) and loads the state dict the server script
saved. It must not know TorchServe, the handler, or how images travel: tensors in, logits
out.
"""

from __future__ import annotations

import torch
from torch import nn

CLASSES = 10


class TinyCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, stride=2, padding=1), nn.ReLU(),   # 112 x 112
            nn.Conv2d(16, 32, kernel_size=3, stride=2, padding=1), nn.ReLU(),  # 56 x 56
            nn.Conv2d(32, 64, kernel_size=3, stride=2, padding=1), nn.ReLU(),  # 28 x 28
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.classifier = nn.Linear(64, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``images`` [batch, 3, 224, 224] float32 -> logits [batch, 10]."""
        return self.classifier(self.features(images))
