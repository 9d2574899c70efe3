"""Choose the backend client for a model from its config."""
from __future__ import annotations

import dataclasses

from backends.base import Backend
from backends.kserve_v1 import KServeV1Backend
from backends.oip_grpc import OipGrpcBackend
from backends.oip_http import OipHttpBackend
from backends.replicas import ReplicaSet
from backends.simulated.inprocess import InProcessBackend
from backends.simulated.model import Cost, SimulatedModel
from backends.torchserve_grpc import TORCHSERVE_OIP_SERVICE, TorchServeGrpcBackend
from gateway.config import ModelConfig


def create_backend(config: ModelConfig) -> Backend:
    """The model's backend; several predictor addresses become one ReplicaSet."""
    if len(config.replicas) > 1:
        replicas = [_create_one(dataclasses.replace(config, url=url)) for url in config.replicas]
        return ReplicaSet(replicas, names=list(config.replicas))
    return _create_one(config)


def _create_one(config: ModelConfig) -> Backend:
    if config.backend == "simulated":
        cost = Cost(config.simulated.call_ms, config.simulated.per_instance_ms, config.simulated.slots)
        return InProcessBackend(SimulatedModel(config.target_model, cost))
    if config.protocol == "grpc":
        if config.backend == "torchserve" and config.api == "v1":
            # TorchServe's own Predictions API (service_envelope=kserve): rows as instances.
            return TorchServeGrpcBackend(config.url, config.target_model, tls=config.tls, ca_file=config.ca_file)
        if config.backend == "torchserve":
            # TorchServe's OIP (service_envelope=kservev2): another service name, typed
            # contents only, outputs flattened and FP64.
            return OipGrpcBackend(config.url, config.target_model, tls=config.tls, ca_file=config.ca_file,
                                  service=TORCHSERVE_OIP_SERVICE, typed_contents=True, restore_outputs=True,
                                  signature=config.signature)
        return OipGrpcBackend(config.url, config.target_model, tls=config.tls, ca_file=config.ca_file)
    if config.backend == "torchserve":
        # TorchServe with service_envelope=kserve answers the KServe v1 API; its inference
        # port has no per-model readiness, only /ping.
        return KServeV1Backend(config.url, config.target_model, ca_file=config.ca_file, ready_path="/ping")
    if config.api == "v1":
        return KServeV1Backend(config.url, config.target_model, ca_file=config.ca_file)
    return OipHttpBackend(config.url, config.target_model, binary=config.binary_data, ca_file=config.ca_file)
