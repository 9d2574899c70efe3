"""The tenants' usage as /metrics families (`batching.tenants`, the scheduler's
`read_tenant_usage`), labelled by the tenant's name, never a key or a digest of one:
`gateway_tenant_*` (requests by status, rows, tokens, time queued, refusals by reason,
requests in the gateway now). A tenant has these series once it has sent something; one
that has sent nothing (and every tenant, with none declared) has no sample, so a scrape is
as large as the tenants that send, not the tenants declared. Like every scheduler figure
they are the batcher's under `--workers`: one set of counts for the gateway.

The one part of a scrape that grows with the tenants, so it is written as strings directly
(`text`), with no object per sample for the cyclic collector to walk; it reads copies
(`gateway.observe.metrics.Scrape`) in any thread, and knows no key and no front end.
"""
from __future__ import annotations

from prometheus_client.utils import floatToGoString

from gateway.batching.usage import TenantUsageSnapshot

# The tenants' families, in the order they are written: (name, type, help).
_TENANT_FAMILIES = {
    "requests": ("gateway_tenant_requests", "counter",
                 "A tenant's requests by the HTTP status of their outcome, its quota's refusals (429) included"),
    "rows": ("gateway_tenant_rows", "counter", "Rows of a tenant's requests let into the queue"),
    "tokens": ("gateway_tenant_tokens", "counter",
               "Tokens of a tenant's requests let into the queue, as its tokens_per_minute counts them "
               "(a text model's tokens, a tensor model's rows)"),
    "queued": ("gateway_tenant_queue_wait_seconds", "histogram",
               "Time a tenant's request (or part) waited in the queue"),
    "refusals": ("gateway_tenant_refusals", "counter",
                 "A tenant's requests refused before they were queued, by reason: the quota refused "
                 "(requests_per_second, tokens_per_minute, max_concurrent) or why the queue refused it "
                 "(queue_full, deadline, too_large, invalid)"),
    "in_flight": ("gateway_tenant_requests_in_flight", "gauge",
                  "A tenant's requests in the gateway now: let in, not yet answered (what max_concurrent caps)"),
}


def text(usage: list[TenantUsageSnapshot]) -> str:
    """Each tenant's usage (gateway.batching.tenants) by its name, as Prometheus text: the
    families are always described, with samples only for the tenants that have sent
    something (those `usage` holds). The one part of a scrape that grows with the tenants,
    so it is written as strings directly, the text prometheus_client writes (labels sorted
    by name): no Metric and Sample objects, whose millions would run the cyclic collector,
    which stops every thread, the loop's too, for tens of milliseconds at a time."""
    number = floatToGoString
    names = [(tenant, _escape_label(tenant.tenant)) for tenant in usage]
    out: list[str] = []

    def head(family: str) -> str:
        name, kind, text = _TENANT_FAMILIES[family]
        exposed = f"{name}_total" if kind == "counter" else name
        out.append(f"# HELP {exposed} {_escape_help(text)}\n# TYPE {exposed} {kind}\n")
        return exposed

    exposed = head("requests")
    out.extend(f'{exposed}{{code="{status}",tenant="{name}"}} {number(count)}\n'
               for tenant, name in names for status, count in sorted(tenant.statuses.items()))
    exposed = head("rows")
    out.extend(f'{exposed}{{tenant="{name}"}} {number(tenant.rows)}\n' for tenant, name in names)
    exposed = head("tokens")
    out.extend(f'{exposed}{{tenant="{name}"}} {number(tenant.tokens)}\n' for tenant, name in names)
    exposed = head("queued")
    for tenant, name in names:
        waited = tenant.queue_wait_s.cumulative()
        out.extend(f'{exposed}_bucket{{le="{bound}",tenant="{name}"}} {number(count)}\n' for bound, count in waited)
        out.append(f'{exposed}_count{{tenant="{name}"}} {number(waited[-1][1])}\n'
                   f'{exposed}_sum{{tenant="{name}"}} {number(tenant.queue_wait_s.sum)}\n')
    exposed = head("refusals")
    out.extend(f'{exposed}{{reason="{_escape_label(reason)}",tenant="{name}"}} {number(count)}\n'
               for tenant, name in names for reason, count in sorted(tenant.refusals.items()))
    exposed = head("in_flight")
    out.extend(f'{exposed}{{tenant="{name}"}} {number(tenant.concurrent)}\n' for tenant, name in names)
    return "".join(out)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
