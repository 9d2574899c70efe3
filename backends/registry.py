"""Choose the predictor client for a model from its `PredictorSettings`.

The one place that knows which client class speaks which `PredictorProtocol`; the gateway
asks it for a `Backend` and knows no client class. It knows nothing of the gateway's config.
"""
from __future__ import annotations

import dataclasses
from typing import assert_never

from backends import errors
from backends.base import Backend
from backends.discovery import dns_addresses
from backends.kserve_v1 import KServeV1Backend
from backends.oip_grpc import TORCHSERVE_OIP_SERVICE, OipGrpcBackend
from backends.oip_http import OipHttpBackend
from backends.openai_http import OpenAIEmbeddingsBackend
from backends.replicas import ReplicaSet
from backends.rerank_http import CohereRerankBackend, ScoreBackend
from backends.settings import PredictorProtocol, PredictorSettings
from backends.simulated.encoder import SimulatedEncoder
from backends.simulated.inprocess import InProcessBackend
from backends.simulated.model import SimulatedModel
from backends.simulated.reranker import SimulatedReranker
from backends.torchserve_grpc import TorchServeGrpcBackend


def create_backend(settings: PredictorSettings) -> Backend:
    """The model's client; several predictor addresses, or a name resolving to them,
    become one ReplicaSet."""
    def make(address: str) -> Backend:
        return _create_one(dataclasses.replace(settings, addresses=(address,)))

    if settings.dns_refresh_s is not None:
        return ReplicaSet(make, resolve=dns_addresses(settings.url), refresh_s=settings.dns_refresh_s,
                          seed=settings.url)
    if len(settings.addresses) > 1:
        return ReplicaSet(make, settings.addresses)
    return _create_one(settings)


def _create_one(settings: PredictorSettings) -> Backend:
    url, model, ca_file = settings.url, settings.model, settings.ca_file
    # Of the servers speaking OIP, only Triton has a model configuration to ask (KServe v2
    # would answer 404 every time).
    reads_model_config = settings.server == "triton"
    match settings.protocol:
        case PredictorProtocol.SIMULATED:
            if settings.simulated_task == "embed":
                return InProcessBackend(SimulatedEncoder(model, settings.simulated_cost))
            if settings.simulated_task == "rerank":
                return InProcessBackend(SimulatedReranker(model, settings.simulated_cost))
            return InProcessBackend(SimulatedModel(model, settings.simulated_cost))
        case PredictorProtocol.OPENAI_HTTP:
            return OpenAIEmbeddingsBackend(url, model, base_path=settings.base_path, ca_file=ca_file)
        case PredictorProtocol.SCORE_HTTP:
            return ScoreBackend(url, model, base_path=settings.base_path, ca_file=ca_file)
        case PredictorProtocol.RERANK_HTTP:
            return CohereRerankBackend(url, model, base_path=settings.base_path, ca_file=ca_file)
        case PredictorProtocol.OIP_HTTP:
            return OipHttpBackend(url, model, binary=settings.binary_data, ca_file=ca_file,
                                  reads_model_config=reads_model_config)
        case PredictorProtocol.OIP_GRPC:
            return OipGrpcBackend(url, model, tls=settings.tls, ca_file=ca_file, reads_model_config=reads_model_config)
        case PredictorProtocol.KSERVE_V1_HTTP:
            return KServeV1Backend(url, model, ca_file=ca_file)
        case PredictorProtocol.TORCHSERVE_KSERVE_HTTP:
            # TorchServe's inference port has no per-model readiness, only /ping.
            return KServeV1Backend(url, model, ca_file=ca_file, ready_path="/ping",
                                   translate_status=errors.from_torchserve_status)
        case PredictorProtocol.TORCHSERVE_PREDICTIONS_GRPC:
            return TorchServeGrpcBackend(url, model, tls=settings.tls, ca_file=ca_file)
        case PredictorProtocol.TORCHSERVE_OIP_GRPC:
            # Another service name, typed contents only, outputs flattened and FP64.
            return OipGrpcBackend(url, model, tls=settings.tls, ca_file=ca_file, service=TORCHSERVE_OIP_SERVICE,
                                  typed_contents=True, restore_outputs=True, signature=settings.signature)
    assert_never(settings.protocol)
