"""OpenTelemetry traces of requests and batches (optional: `pip install '.[otel]'`).

Spans, as OpenTelemetry prescribes for batching (a span has one parent, so a batch that
serves many requests *links* to them):

* **request** (SERVER): one per inference request, from its arrival to its answer; it
  continues the client's `traceparent`. Events: `queued` (admitted to its model's queue)
  and `batched` (its batch left, with the batch id, timed when it left; added when the
  answer comes back, so a worker's request has it too, and a request its batch failed
  does not); attributes: model, front end,
  priority, request id and the HTTP status of the outcome (gRPC codes are paired with one).
  A request the sampler leaves out records nothing and passes its client's context on.
* **batch** (INTERNAL): one per batch with a sampled request, linked to every sampled
  request span it carries and a child of the first (so a trace viewer shows it under a
  request); attributes: model,
  batch id, rows, requests, why it left, padded and real elements, predictor calls (more
  than one: bisected), failed requests.
* **predictor** (CLIENT): one per predictor call, a child of its batch; its context is the
  `traceparent` sent to the predictor, so the predictor's own spans hang under it.

Turning it on: the standard variables alone are enough, as in any instrumented program
(`OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`,
`OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_SERVICE_NAME`, `OTEL_BSP_*`, `OTEL_SDK_DISABLED`); a
`[tracing]` key wins over its variable. Spans leave through a batch processor with a
bounded queue: when the collector is slow or down, new spans are dropped and counted
(`gateway_trace_spans_total{outcome="dropped"}`), never held or waited for. Off, nothing
is imported and each request and batch costs a method call.

Three modules, which depend one way (spans -> export -> settings; a lint-imports contract):
`settings.py` resolves `[tracing]` and the OTEL_* variables into `TracingSettings`;
`spans.py` makes the spans above (`Telemetry`, and `NO_TELEMETRY` when tracing is off);
`export.py` carries finished spans out, counting what was exported, failed or dropped.
Together they know the request's Call, the batch observer seam and W3C trace context; no
front end, no codec and no predictor protocol.
"""
