"""A run's `Result` and its renderings.

It holds what a run measured (latencies, statuses, errors, counters) and turns it into the
summary dict, the hey-like text report, the JSON document, and the picklable form a worker
process sends back (merged by `Result.merge`). It must not know how the numbers were
measured (engines, runner) nor where a report goes (cli).
"""
from __future__ import annotations

import array
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tools.loadgen.config import Config
from tools.loadgen.stats import PERCENTILES, histogram, percentile_key, percentiles

MAX_ERROR_KINDS = 100                 # distinct error messages kept; the rest are pooled
OTHER_ERRORS = "(other errors)"


def is_ok(status: str) -> bool:
    """An HTTP 2xx or gRPC OK."""
    return status == "OK" or (len(status) == 3 and status.startswith("2"))


def count_error(errors: dict[str, int], message: str, n: int = 1) -> None:
    """Count `message`, pooling new kinds beyond MAX_ERROR_KINDS (a run must not grow without bound)."""
    if message not in errors and len(errors) >= MAX_ERROR_KINDS:
        message = OTHER_ERRORS
    errors[message] = errors.get(message, 0) + n


REFUSAL_STATUSES = frozenset({"429", "503", "RESOURCE_EXHAUSTED", "UNAVAILABLE"})  # refused for load


@dataclass
class Result:
    config: Config
    started_at: float = 0.0                 # unix time
    elapsed_s: float = 0.0
    latencies: array.array = field(default_factory=lambda: array.array("d"))  # seconds, answered requests
    # seconds, the answered requests that succeeded (HTTP < 400, gRPC OK): goodput within an SLO
    ok_latencies: array.array = field(default_factory=lambda: array.array("d"))
    # seconds, the answers that refused for load (REFUSAL_STATUSES): how fast a client may retry elsewhere
    refusal_latencies: array.array = field(default_factory=lambda: array.array("d"))
    statuses: dict[str, int] = field(default_factory=dict)   # "200", "404" / "OK", "NOT_FOUND"
    errors: dict[str, int] = field(default_factory=dict)     # message -> count
    sent: int = 0                           # requests started
    transport_errors: int = 0               # requests that got no answer at all
    unfinished: int = 0                     # in flight when the run was cut short by -z
    late: int = 0                           # open loop: sent > late_ms behind schedule
    dropped: int = 0                        # open loop: not sent, -c requests in flight
    max_lag_s: float = 0.0                  # open loop: worst lateness of a send
    bytes_received: int = 0
    cpu_s: float = 0.0                      # the generator's own CPU time (all processes)
    processes: int = 1

    @property
    def answered(self) -> int:
        return len(self.latencies)

    @property
    def finished(self) -> int:
        return self.answered + self.transport_errors

    @property
    def ok(self) -> int:
        return sum(n for status, n in self.statuses.items() if is_ok(status))

    @property
    def rps(self) -> float:
        return self.finished / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        lat = self.latencies
        n = len(lat)
        ms = 1000.0
        return {
            "total_s": self.elapsed_s,
            "sent": self.sent,
            "finished": self.finished,
            "answered": n,
            "ok": self.ok,
            "errors": sum(self.errors.values()),
            "transport_errors": self.transport_errors,
            "unfinished": self.unfinished,
            "slowest_ms": max(lat) * ms if n else None,
            "fastest_ms": min(lat) * ms if n else None,
            "average_ms": sum(lat) / n * ms if n else None,
            "rps": self.rps,
            "ok_rps": self.ok / self.elapsed_s if self.elapsed_s > 0 else 0.0,
            "bytes_received": self.bytes_received,
            "bytes_per_answer": self.bytes_received / n if n else None,
            "late": self.late,
            "dropped": self.dropped,
            "max_lag_ms": self.max_lag_s * ms,
            "cpu_s": self.cpu_s,
            "cpu_us_per_request": self.cpu_s / self.sent * 1e6 if self.sent else None,
            "processes": self.processes,
        }

    def percentiles_ms(self) -> dict[str, float | None]:
        if not self.latencies:
            return {percentile_key(p): None for p in PERCENTILES}
        return {k: v * 1000.0 for k, v in percentiles(self.latencies).items()}

    def histogram_ms(self) -> list[dict[str, float]]:
        return [{"le_ms": mark * 1000.0, "count": count} for mark, count in histogram(self.latencies)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": "tools.loadgen",
            "started_at": self.started_at,
            "config": self.config.describe(),
            "summary": self.summary(),
            "percentiles_ms": self.percentiles_ms(),
            "histogram": self.histogram_ms(),
            "status_codes": dict(sorted(self.statuses.items())),
            "errors": dict(sorted(self.errors.items(), key=lambda kv: -kv[1])),
        }

    def format_report(self) -> str:
        s = self.summary()
        out = ["", "Summary:", f"  Total:\t{self.elapsed_s:.4f} secs"]
        if self.answered:
            out += [f"  Slowest:\t{s['slowest_ms'] / 1000:.4f} secs",
                    f"  Fastest:\t{s['fastest_ms'] / 1000:.4f} secs",
                    f"  Average:\t{s['average_ms'] / 1000:.4f} secs"]
        out.append(f"  Requests/sec:\t{self.rps:.4f}")
        out += ["", f"  Requests:\t{self.sent} sent, {self.finished} finished, {self.ok} ok"
                    + (f", {self.unfinished} unfinished at the end" if self.unfinished else "")]
        if self.answered:
            out += [f"  Total data:\t{self.bytes_received} bytes",
                    f"  Size/answer:\t{self.bytes_received // self.answered} bytes"]
        if self.config.open_loop:
            out += ["", "Open loop:",
                    f"  Target rate:\t{self.config.rate:g} req/s ({self.config.arrivals} arrivals)",
                    f"  Achieved:\t{self.sent / self.elapsed_s if self.elapsed_s else 0:.1f} req/s sent",
                    f"  Late:\t\t{self.late} (sent more than {self.config.late_ms:g} ms behind schedule; "
                    f"worst {self.max_lag_s * 1000:.1f} ms)",
                    f"  Dropped:\t{self.dropped} (not sent: {self.config.workers} already in flight)"]
        if self.answered:
            out += ["", "Response time histogram:"]
            bars = histogram(self.latencies)
            top = max(c for _, c in bars) or 1
            for mark, count in bars:
                out.append(f"  {mark:.3f} [{count}]\t|{'■' * round(40 * count / top)}")
            out += ["", "Latency distribution:"]
            for p, value in self.percentiles_ms().items():
                assert value is not None  # there are latencies
                out.append(f"  {p}% in {value / 1000:.4f} secs")
        if self.statuses:
            out += ["", "Status code distribution:"]
            for status, count in sorted(self.statuses.items()):
                out.append(f"  [{status}]\t{count} responses")
        if self.errors:
            out += ["", "Error distribution:"]
            for message, count in sorted(self.errors.items(), key=lambda kv: -kv[1]):
                out.append(f"  [{count}]\t{message}")
        cpu = s["cpu_us_per_request"]
        out += ["", f"Load generator: {self.processes} process(es), {s['cpu_s']:.2f} s CPU"
                    + (f" ({cpu:.0f} us/request, ceiling ~{1e6 / cpu:.0f} req/s per core)" if cpu else ""), ""]
        return "\n".join(out)

    @classmethod
    def merge(cls, config: Config, parts: list[Result]) -> Result:
        merged = cls(config, processes=len(parts))
        merged.started_at = min(p.started_at for p in parts)
        merged.elapsed_s = max(p.elapsed_s for p in parts)
        for p in parts:
            merged.latencies.extend(p.latencies)
            merged.ok_latencies.extend(p.ok_latencies)
            merged.refusal_latencies.extend(p.refusal_latencies)
            for key in ("sent", "transport_errors", "unfinished", "late", "dropped", "bytes_received"):
                setattr(merged, key, getattr(merged, key) + getattr(p, key))
            merged.cpu_s += p.cpu_s
            merged.max_lag_s = max(merged.max_lag_s, p.max_lag_s)
            for status, n in p.statuses.items():
                merged.statuses[status] = merged.statuses.get(status, 0) + n
            for message, n in p.errors.items():
                count_error(merged.errors, message, n)
        return merged

    def to_wire(self) -> dict[str, Any]:
        """Picklable form to send back from a worker process."""
        document = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "config"}
        document["latencies"] = self.latencies.tobytes()
        document["ok_latencies"] = self.ok_latencies.tobytes()
        document["refusal_latencies"] = self.refusal_latencies.tobytes()
        return document

    @classmethod
    def from_wire(cls, config: Config, document: dict[str, Any]) -> Result:
        latencies, ok_latencies, refusal_latencies = array.array("d"), array.array("d"), array.array("d")
        latencies.frombytes(document.pop("latencies"))
        ok_latencies.frombytes(document.pop("ok_latencies"))
        refusal_latencies.frombytes(document.pop("refusal_latencies"))
        return cls(config=config, latencies=latencies, ok_latencies=ok_latencies,
                   refusal_latencies=refusal_latencies, **document)
