"""The Tornado application: the URL map of the HTTP front end."""
from __future__ import annotations

import tornado.web

from gateway.rest import handlers as h
from gateway.rest import torchserve as ts
from gateway.service import InferenceService
from wire.codecs.limits import Limits

MODEL = r"([^/:]+)"
VERSION = r"(?:/versions/([^/]+))?"


def make_app(service: InferenceService, limits: Limits, auth_token: str = "") -> tornado.web.Application:
    context = {"service": service, "limits": limits, "auth_token": auth_token}
    routes = [
        (rf"/v1/models/{MODEL}:predict", h.V1PredictHandler),
        (rf"/v1/models/{MODEL}", h.V1ModelHandler),
        (r"/metrics", h.MetricsHandler),
        (r"/v2/health/live", h.LiveHandler),
        (r"/v2/health/ready", h.ReadyHandler),
        (r"/v2/?", h.ServerMetadataHandler),
        (rf"/v2/models/{MODEL}{VERSION}/infer", h.InferHandler),
        (rf"/v2/models/{MODEL}{VERSION}/ready", h.ModelReadyHandler),
        (rf"/v2/models/{MODEL}{VERSION}/config", h.ModelConfigHandler),
        (r"/v2/models/stats", h.ModelStatisticsHandler),
        (rf"/v2/models/{MODEL}{VERSION}/stats", h.ModelStatisticsHandler),
        (rf"/v2/models/{MODEL}{VERSION}", h.ModelMetadataHandler),
        (rf"/predictions/{MODEL}(?:/([^/]+))?", ts.PredictionsHandler),  # TorchServe style
        (r"/ping", ts.PingHandler),
    ]
    return tornado.web.Application(
        [(pattern, handler, context) for pattern, handler in routes],
        default_handler_class=h.NotFoundHandler,
        default_handler_args=context,
        compress_response=False,
    )
