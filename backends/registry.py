"""Choose the backend client for a model from its config."""
from __future__ import annotations

from backends.base import Backend
from backends.kserve_v1 import KServeV1Backend
from backends.oip_grpc import OipGrpcBackend
from backends.oip_http import OipHttpBackend
from backends.simulated.inprocess import InProcessBackend
from backends.simulated.model import Cost, SimulatedModel
from gateway.config import ConfigError, ModelConfig


def create_backend(config: ModelConfig) -> Backend:
    if config.backend == "simulated":
        cost = Cost(config.simulated.call_ms, config.simulated.per_instance_ms, config.simulated.slots)
        return InProcessBackend(SimulatedModel(config.target_model, cost))
    if config.protocol == "grpc":
        if config.backend == "torchserve":
            raise ConfigError(f"models.{config.name}.protocol", "TorchServe over gRPC is not supported yet; use http")
        return OipGrpcBackend(config.url, config.target_model, tls=config.tls, ca_file=config.ca_file)
    if config.backend == "torchserve" or config.api == "v1":
        # TorchServe with service_envelope=kserve answers the KServe v1 API.
        return KServeV1Backend(config.url, config.target_model, ca_file=config.ca_file)
    return OipHttpBackend(config.url, config.target_model, binary=config.binary_data, ca_file=config.ca_file)
