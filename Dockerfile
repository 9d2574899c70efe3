# syntax=docker/dockerfile:1
# The batching gateway as a slim, multi-stage, non-root image, installed the way the README
# installs it (`pip install .`, with the `shared` extra: Redis's client, for quotas held across
# replicas with [shared], docs/tenants.md). Build from the repository root:
#
#   docker build -t batching-gateway:0.1.0 .
#   docker run --rm -p 8080:8080 -p 8081:8081 batching-gateway:0.1.0
#   docker run --rm -p 8080:8080 -p 8081:8081 \
#     -v "$PWD/gateway.toml:/etc/batching-gateway/gateway.toml:ro" batching-gateway:0.1.0
#
# Config (deploy/docker/entrypoint.sh): /etc/batching-gateway/gateway.toml when that file
# exists, else the embedded default (model `demo` on the in-process simulated predictor).
# GATEWAY_CONFIG=/path names another file, which must then exist. Inside the container the
# gateway always listens on 0.0.0.0, HTTP 8080 and gRPC 8081: the file's [server] host and
# ports are overridden, so EXPOSE, the HEALTHCHECK and the Kubernetes probes stay right.
#
# The base image is pinned by tag, and both stages use the same one. For production, pin it
# by digest as well (FROM python:3.11.14-slim-trixie@sha256:<digest>, the digest from
# `docker buildx imagetools inspect python:3.11.14-slim-trixie`): a tag can be re-pushed, a
# digest cannot, so the build is then reproducible (update the pin when the base is patched).
FROM python:3.11.14-slim-trixie AS base

# -- build: the gateway and its dependencies in a self-contained venv -------------------
# All dependencies ship manylinux wheels for CPython 3.11: no compiler in either stage.
FROM base AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY backends ./backends
COPY wire ./wire
RUN python -m venv /opt/gateway \
 && /opt/gateway/bin/pip install --no-cache-dir --disable-pip-version-check ".[shared]"

# -- runtime: the venv only, owned by root and run by an unprivileged user ---------------
FROM base AS runtime
LABEL org.opencontainers.image.title="batching-gateway" \
      org.opencontainers.image.description="HTTP + gRPC inference batching gateway for Triton, KServe and TorchServe predictors" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric UID/GID: Kubernetes can verify runAsNonRoot only against a numeric USER.
RUN groupadd --system --gid 10001 gateway \
 && useradd --system --no-log-init --uid 10001 --gid 10001 \
      --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin gateway
COPY --from=build /opt/gateway /opt/gateway
COPY --chmod=0755 deploy/docker/entrypoint.sh /usr/local/bin/gateway-entrypoint
# Bytecode was compiled at install time; a read-only root filesystem needs no more.
ENV PATH=/opt/gateway/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
# 8080: HTTP (KServe v1 and Open Inference Protocol REST); 8081: OIP gRPC + grpc.health.v1.
EXPOSE 8080 8081
# Liveness, not readiness: /v2/health/live answers 200 whenever the process serves, while
# /v2/health/ready is 503 until every predictor is ready, and a predictor that is down is
# no reason to call the gateway's container unhealthy (Kubernetes uses its own probes,
# deploy/deployment.yaml, not this).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/v2/health/live', timeout=2)"]
ENTRYPOINT ["gateway-entrypoint"]
