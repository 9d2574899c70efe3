"""The Tornado application: the URL map of the HTTP front end."""
from __future__ import annotations

from typing import Any

import tornado.web

from gateway.rest import cohere, dashboard, oip, openai, operations, v1
from gateway.rest import torchserve as ts
from gateway.rest.base import NotFoundHandler, log_request
from gateway.service import InferenceService
from wire.codecs.limits import Limits

MODEL = r"([^/:]+)"
VERSION = r"(?:/versions/([^/]+))?"


def make_app(service: InferenceService, limits: Limits) -> tornado.web.Application:
    context = {"service": service, "limits": limits}
    routes = [
        (rf"/v1/models/{MODEL}:predict", v1.V1PredictHandler),
        (rf"/v1/models/{MODEL}", openai.SharedModelHandler),  # KServe v1's, and OpenAI's for an embedding model
        (r"/metrics", operations.MetricsHandler),
        (r"/dashboard", dashboard.DashboardPageHandler),  # the live page of the batching
        (r"/dashboard/dashboard\.js", dashboard.DashboardScriptHandler),
        (r"/dashboard/data", dashboard.DashboardDataHandler),
        (r"/v2/health/live", oip.LiveHandler),
        (r"/v2/health/ready", oip.ReadyHandler),
        (r"/v2/?", oip.ServerMetadataHandler),
        (rf"/v2/models/{MODEL}{VERSION}/infer", oip.InferHandler),
        (rf"/v2/models/{MODEL}{VERSION}/ready", oip.ModelReadyHandler),
        (rf"/v2/models/{MODEL}{VERSION}/config", oip.ModelConfigHandler),
        (r"/v2/models/stats", oip.ModelStatisticsHandler),
        (rf"/v2/models/{MODEL}{VERSION}/stats", oip.ModelStatisticsHandler),
        (rf"/v2/models/{MODEL}{VERSION}", oip.ModelMetadataHandler),
        (rf"/predictions/{MODEL}(?:/([^/]+))?", ts.PredictionsHandler),  # TorchServe style
        (r"/ping", ts.PingHandler),
        (r"(?:/openai)?/v1/embeddings", openai.EmbeddingsHandler),  # OpenAI's (KServe's prefix too)
        (r"(?:/openai)?/v1/models", openai.ModelsHandler),
        (rf"/openai/v1/models/{MODEL}", openai.ModelsHandler),
    ]
    handlers: list[tuple[str, type[tornado.web.RequestHandler], dict[str, Any]]] = \
        [(pattern, handler, context) for pattern, handler in routes]
    # Cohere's rerank, v1 and v2: one handler, told which version's shape it speaks.
    handlers += [(rf"/v{version}/rerank", cohere.RerankHandler, {**context, "version": version}) for version in (1, 2)]
    return tornado.web.Application(
        handlers,
        default_handler_class=NotFoundHandler,
        default_handler_args=context,
        compress_response=False,
        log_function=log_request,
    )
