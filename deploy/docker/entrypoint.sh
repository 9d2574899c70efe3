#!/bin/sh
# The image's entrypoint: `batching-gateway serve` on 0.0.0.0, HTTP 8080, gRPC 8081.
#
# Config file:
#   GATEWAY_CONFIG unset   /etc/batching-gateway/gateway.toml if that file exists, else the
#                          embedded default (model `demo`, in-process simulated predictor)
#   GATEWAY_CONFIG=FILE    FILE, which must exist: a missing file exits 2, never a silent
#                          fallback to the demo model (the Kubernetes manifests set it)
# Arguments given to the container are appended, so they win: `docker run IMAGE --log-level DEBUG`.
set -eu

default_config=/etc/batching-gateway/gateway.toml
config="${GATEWAY_CONFIG:-$default_config}"

if [ -n "${GATEWAY_CONFIG:-}" ] || [ -f "$config" ]; then
  set -- --config "$config" "$@"
else
  echo "gateway-entrypoint: no $default_config (and GATEWAY_CONFIG unset): serving the embedded default model 'demo'" >&2
fi

# exec: the gateway is PID 1 and receives SIGTERM itself (it drains, then exits).
exec batching-gateway serve --host 0.0.0.0 --http-port 8080 --grpc-port 8081 "$@"
