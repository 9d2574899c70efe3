"""What a predictor client needs to know, and nothing more: `PredictorSettings`.

The gateway's config resolves its user-facing keys (`backend`, `protocol`, `api`, `url`,
...) into one `PredictorSettings` per model; `backends.registry` turns it into a client.
This module knows no TOML key and nothing of the gateway: it is the vocabulary both sides
share.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from wire.tensors import ModelSignature


class PredictorProtocol(enum.Enum):
    """How the gateway talks to a predictor: one value per client behaviour.

    Triton and KServe v2 speak the same Open Inference Protocol, so they share a value;
    the server's name is kept apart (`PredictorSettings.server`) for metadata only.
    """
    OIP_HTTP = "oip-http"                                        # Triton, KServe v2: OIP REST (JSON or binary)
    OIP_GRPC = "oip-grpc"                                        # Triton, KServe v2: OIP gRPC
    KSERVE_V1_HTTP = "kserve-v1-http"                            # KServe v1 REST: {"instances": [...]}
    TORCHSERVE_KSERVE_HTTP = "torchserve-kserve-http"            # TorchServe's KServe v1 envelope; readiness on /ping
    TORCHSERVE_PREDICTIONS_GRPC = "torchserve-predictions-grpc"  # TorchServe's own InferenceAPIsService/Predictions
    TORCHSERVE_OIP_GRPC = "torchserve-oip-grpc"                  # TorchServe's OIP (kservev2): its quirks restored
    OPENAI_HTTP = "openai-http"                                  # KServe's OpenAI endpoint, Infinity: /v1/embeddings
    SCORE_HTTP = "score-http"                                    # vLLM's score API: text_1/text_2 pairs at /score
    RERANK_HTTP = "rerank-http"                                  # Cohere's rerank shape (Infinity, vLLM): /rerank
    SIMULATED = "simulated"                                      # the simulated model, in the gateway's process

    @property
    def transport(self) -> str:
        """What carries the calls: "http", "grpc", or "in-process"."""
        if self is PredictorProtocol.SIMULATED:
            return "in-process"
        return "grpc" if self in _OVER_GRPC else "http"


_OVER_GRPC = frozenset({PredictorProtocol.OIP_GRPC, PredictorProtocol.TORCHSERVE_PREDICTIONS_GRPC,
                        PredictorProtocol.TORCHSERVE_OIP_GRPC})


@dataclass(frozen=True, slots=True)
class Cost:
    """What one call of the simulated model costs."""
    call_ms: float = 5.0
    per_instance_ms: float = 0.0
    slots: int = 1
    per_element_us: float = 0.0


@dataclass(frozen=True, slots=True)
class PredictorSettings:
    """One model's predictor, as its client sees it."""
    protocol: PredictorProtocol
    server: str                        # the predictor's software: triton | kserve | torchserve | simulated
    model: str                         # the model's name at the predictor
    addresses: tuple[str, ...] = ()    # one address, or every replica's (none for SIMULATED)
    binary_data: bool = False          # OIP HTTP with the binary tensor extension
    tls: bool = False                  # gRPC over TLS (HTTP: the https:// address says so)
    ca_file: str = ""                  # CA bundle to verify the predictor (default: system CAs)
    signature: ModelSignature | None = None  # as configured; TorchServe's OIP answers need it
    simulated_cost: Cost = field(default_factory=Cost)
    simulated_task: str = "double"     # the simulated model: "double" (2 x INPUT0), "embed" (texts to vectors)
    #                                    or "rerank" (pairs to scores)
    base_path: str = "/openai/v1"      # OPENAI_HTTP, SCORE_HTTP, RERANK_HTTP: the path before /embeddings,
    #                                    /score or /rerank (an OpenAI client's base_url's)
    dns_refresh_s: float | None = None  # the url's host name resolves to the replicas, looked up this often

    @property
    def url(self) -> str:
        """The first (or only) address, "" if there is none."""
        return self.addresses[0] if self.addresses else ""
