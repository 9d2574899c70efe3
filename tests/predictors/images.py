"""Test images made in code, as the files a client would upload: ``png(seed)`` and
``jpeg(seed)`` (bytes), and ``pixels(seed)`` (the RGB array both encode). The same seed and
size always give the same image; different seeds give different images.

Made with Pillow and numpy in the gateway's test venv (Pillow: pyproject's dev extras).
It knows nothing of any server or model: what uploads them, and where, is the tests' business.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

SIZE = (224, 224)  # (width, height), Pillow's order: the image model's input size


def pixels(seed: int, size: tuple[int, int] = SIZE) -> np.ndarray:
    """An RGB image, uint8 [height, width, 3]: smooth random colour fields (a coarse random
    grid scaled up, so it looks like a photo to an encoder, not noise) plus a little grain."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, size=(6, 6, 3), dtype=np.uint8))
    smooth = np.asarray(coarse.resize(size, Image.Resampling.BICUBIC), dtype=np.int16)
    grain = rng.integers(-12, 13, size=smooth.shape, dtype=np.int16)
    return np.clip(smooth + grain, 0, 255).astype(np.uint8)


def png(seed: int, size: tuple[int, int] = SIZE) -> bytes:
    """``pixels(seed, size)`` as a PNG file (lossless: it decodes to exactly those pixels)."""
    return _encode(pixels(seed, size), "PNG")


def jpeg(seed: int, size: tuple[int, int] = SIZE, quality: int = 90) -> bytes:
    """``pixels(seed, size)`` as a JPEG file (lossy: it decodes to nearly those pixels)."""
    return _encode(pixels(seed, size), "JPEG", quality=quality)


def _encode(rgb: np.ndarray, image_format: str, **options: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format=image_format, **options)
    return out.getvalue()
