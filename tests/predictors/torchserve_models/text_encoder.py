"""The network of the test model ``encoder``: ``TextEncoder``, a small Transformer text
encoder that really computes: token embeddings (vocabulary 1000, width 64) plus learned
positions (at most 512), two ``nn.TransformerEncoder`` layers (4 heads, feed-forward 128,
batch first), and the mean over each row's REAL tokens: one 64-float embedding per row.
Random weights (``torch.manual_seed(0)``, then PyTorch's default initialization).

Archived as the model file of ``encoder.mar`` (``torch-model-archiver --model-file``):
TorchServe's ``BaseHandler`` imports it inside the worker, instantiates its ONE class (it
refuses a module that defines more than one) and loads the state dict the server script
saved. It must not know TorchServe, the handler, or how token ids travel: it takes a padded
batch and the padding mask, whoever padded it.
"""

from __future__ import annotations

import torch
from torch import nn

VOCABULARY = 1000
MAX_LENGTH = 512
WIDTH = 64


class TextEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCABULARY, WIDTH)
        self.positions = nn.Embedding(MAX_LENGTH, WIDTH)
        layer = nn.TransformerEncoderLayer(d_model=WIDTH, nhead=4, dim_feedforward=128, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)

    def forward(self, ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        """``ids`` [batch, length] int64 and ``padding`` [batch, length] bool (True where a
        row is padded) -> [batch, 64] float32, each row the mean over its real tokens only,
        so a row's embedding does not depend on how far it was padded."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        hidden = self.encoder(self.tokens(ids) + self.positions(positions), src_key_padding_mask=padding)
        real = (~padding).unsqueeze(-1).to(hidden.dtype)
        # Padded positions are zeroed here whichever path the encoder took (its eval-mode fast
        # path already returns 0 there; the reference path returns values that must not count).
        return (hidden * real).sum(dim=1) / real.sum(dim=1)
