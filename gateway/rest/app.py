"""The HTTP front end's URL map: which route each path is, and which routes are hot.

The hot routes (`HOT_ROUTES`: the inference routes, each an `Endpoint`) are served by the
lean path (`gateway.rest.lean`) by default; every other route (metadata, health,
`/metrics`, the live page, TorchServe's ping, the model lists) by the Tornado
`Application`'s RequestHandlers, which also hold each hot route's twin
(`gateway.rest.base.EndpointHandler`): it serves what the lean path hands back, and every
hot route when `[server] lean_routes = false`.
"""
from __future__ import annotations

from typing import Any

import tornado.httputil
import tornado.web

from gateway.rest import cohere, dashboard, oip, openai, operations, v1
from gateway.rest import torchserve as ts
from gateway.rest.base import EndpointHandler, NotFoundHandler, log_request
from gateway.rest.endpoint import Endpoint
from gateway.rest.lean import LeanFrontEnd
from gateway.service import InferenceService
from wire.codecs.limits import Limits

MODEL = r"([^/:]+)"
VERSION = r"(?:/versions/([^/]+))?"

# The inference routes: every request of a hot path is a Call, batched with its model's.
HOT_ROUTES: tuple[tuple[str, Endpoint], ...] = (
    (rf"/v1/models/{MODEL}:predict", v1.V1Predict()),
    (rf"/v2/models/{MODEL}{VERSION}/infer", oip.Infer()),
    (rf"/predictions/{MODEL}(?:/([^/]+))?", ts.Predictions()),  # TorchServe style
    (r"(?:/openai)?/v1/embeddings", openai.Embeddings()),  # OpenAI's (KServe's prefix too)
    (r"/v1/rerank", cohere.Rerank(1)),  # Cohere's rerank, v1 and v2
    (r"/v2/rerank", cohere.Rerank(2)),
)


def make_front_end(service: InferenceService, limits: Limits,
                   lean_routes: bool = True) -> tornado.httputil.HTTPServerConnectionDelegate:
    """What the HTTP server hands each request to: the lean path in front of the
    Application, or (`lean_routes` false) the Application alone."""
    app = make_app(service, limits)
    return LeanFrontEnd(service, limits, HOT_ROUTES, app) if lean_routes else app


def make_app(service: InferenceService, limits: Limits) -> tornado.web.Application:
    context = {"service": service, "limits": limits}
    routes = [
        (rf"/v1/models/{MODEL}", openai.SharedModelHandler),  # KServe v1's, and OpenAI's for an embedding model
        (r"/metrics", operations.MetricsHandler),
        (r"/dashboard", dashboard.DashboardPageHandler),  # the live page of the batching
        (r"/dashboard/dashboard\.js", dashboard.DashboardScriptHandler),
        (r"/dashboard/data", dashboard.DashboardDataHandler),
        (r"/v2/health/live", oip.LiveHandler),
        (r"/v2/health/ready", oip.ReadyHandler),
        (r"/v2/?", oip.ServerMetadataHandler),
        (rf"/v2/models/{MODEL}{VERSION}/ready", oip.ModelReadyHandler),
        (rf"/v2/models/{MODEL}{VERSION}/config", oip.ModelConfigHandler),
        (r"/v2/models/stats", oip.ModelStatisticsHandler),
        (rf"/v2/models/{MODEL}{VERSION}/stats", oip.ModelStatisticsHandler),
        (rf"/v2/models/{MODEL}{VERSION}", oip.ModelMetadataHandler),
        (r"/ping", ts.PingHandler),
        (r"(?:/openai)?/v1/models", openai.ModelsHandler),
        (rf"/openai/v1/models/{MODEL}", openai.ModelsHandler),
    ]
    handlers: list[tuple[str, type[tornado.web.RequestHandler], dict[str, Any]]] = \
        [(pattern, EndpointHandler, {**context, "endpoint": endpoint}) for pattern, endpoint in HOT_ROUTES]
    handlers += [(pattern, handler, context) for pattern, handler in routes]
    return tornado.web.Application(
        handlers,
        default_handler_class=NotFoundHandler,
        default_handler_args=context,
        compress_response=False,
        log_function=log_request,
    )
