# syntax=docker/dockerfile:1
# Slim multi-stage image of the gateway, installed the way the README installs it.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY protos ./protos
COPY gateway ./gateway
COPY backends ./backends
RUN python -m venv /opt/gateway \
 && /opt/gateway/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/gateway/bin/pip install --no-cache-dir .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 gateway
COPY --from=build /opt/gateway /opt/gateway
ENV PATH=/opt/gateway/bin:$PATH PYTHONUNBUFFERED=1
USER gateway
EXPOSE 8080 8081
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/v2/health/live', timeout=2).status == 200 else 1)"
ENTRYPOINT ["batching-gateway", "serve", "--host", "0.0.0.0"]
