"""The `autoscale` scenario of `python -m tools.bench`: a simulation of scale-out on this machine.

Simulated predictor replicas (`tools.simulated_predictor`, one call at a time, each its own
process on its own free port) sit behind one gateway whose model's `url` is the list of the
replicas in rotation. An autoscaler loop in this process applies the Horizontal Pod
Autoscaler's algorithm as Kubernetes documents it (desired = ceil(ready x metric / target),
its 0.1 tolerance, its scale-up and scale-down stabilisation windows and scaling policies)
with a pod start delay, on one of four signals:

- `cpu`: the gateway process's CPU utilisation against its request (deploy/gateway/hpa.yaml:
  70% of 500m), from `process_cpu_seconds_total` when /metrics has it, else from /proc as
  the kubelet's cAdvisor reads it;
- `queue`: Triton's queue/compute ratio from the gateway's own histograms (mean queue wait
  per request over mean predictor time per call), target 1;
- `load`: `gateway_predictor_load{model}`, target 0.7;
- `oracle`: knows the offered load in advance: ceil(offered / (capacity x 0.7)), for the
  highest offered load until a replica started now would be ready.

Adding a replica starts its process at once and puts it in the url list once the start delay
has passed (rewrite the gateway's config, SIGHUP); removing one drops it from the list
first, waits for its last batches, then stops its process by PID. Time is compressed: one
simulated minute is `--duration` real seconds (`Clock`); predictor costs and deadlines are
real. The load is tools.loadgen's open loop, one bounded Poisson run per HPA sync period at
that period's offered rate, ramping from 0.3x to 3x one replica's measured capacity and back.

It holds this scenario only; the harness (servers, load, checks) is `tools.bench.harness`.
It must not import another scenario.
"""
from __future__ import annotations

import asyncio
import math
import signal as signals
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tools import loadgen
from tools.bench.harness import V1_BODY, Context, Gateway, Predictor, check, http_request, load, to_toml

MODEL = "demo"
CALL_MS, PER_ROW_MS, MAX_BATCH = 50.0, 1.0, 16  # one replica: 66 ms per full batch, about 240 rows/s
SLO_MS = 250.0  # every request's deadline (the deadline policy's slo_ms)
DEMAND_SMOOTHING_S = 5.0  # the gateway's default demand_smoothing_ms, in simulated seconds
MIN_REPLICAS, MAX_REPLICAS = 1, 8
DRAIN_S = 1.0  # real seconds between dropping a replica from the url list and stopping it: a deadline and a batch, with margin

# Kubernetes' HPA defaults, in simulated seconds (kube-controller-manager's
# --horizontal-pod-autoscaler-sync-period and -tolerance, behavior's stabilizationWindowSeconds
# and its default policies), and a model server's start (image pulled, model loaded).
SYNC_S = 15.0
TOLERANCE = 0.1
UP_WINDOW_S = 0.0
DOWN_WINDOW_S = 300.0
START_DELAY_S = 60.0
RATE_WINDOW_S = 60.0  # the window rate-based signals are computed over, as a Prometheus rate(...[1m])

# Offered load, in multiples of one replica's capacity: (simulated minutes, from, to).
PHASES = ((2.0, 0.3, 0.3), (10.0, 0.3, 3.0), (3.0, 3.0, 3.0), (10.0, 3.0, 0.3), (5.0, 0.3, 0.3))
IDLE_MINUTES = PHASES[0][0]

CPU_REQUEST_CORES, CPU_TARGET = 0.5, 0.7  # deploy/gateway/hpa.yaml: averageUtilization 70 of a 500m request
QUEUE_TARGET = 1.0  # Triton's chart: queue time / compute time
LOAD_TARGET = 0.7


def offered_x(minute: float) -> float:
    """The offered load at `minute` of the schedule, in multiples of one replica's capacity."""
    start = 0.0
    for length, low, high in PHASES:
        if minute < start + length:
            return low + (high - low) * (minute - start) / length
        start += length
    return PHASES[-1][2]


def schedule_minutes() -> float:
    return sum(length for length, _, _ in PHASES)


@dataclass
class Clock:
    """Simulated seconds from the run's start; `real_per_sim` real seconds per simulated one."""
    real_per_sim: float
    t0: float = 0.0

    def start(self) -> None:
        self.t0 = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self.t0) / self.real_per_sim

    def real(self, sim_seconds: float) -> float:
        return sim_seconds * self.real_per_sim

    def sleep_until(self, sim_seconds: float) -> None:
        time.sleep(max(0.0, self.t0 + self.real(sim_seconds) - time.monotonic()))


@dataclass
class SignalSpec:
    key: str
    label: str
    target: float
    unit: str


SIGNALS = (
    SignalSpec("cpu", "(a) gateway CPU", CPU_TARGET, "of a 500m request"),
    SignalSpec("queue", "(b) queue/compute (Triton)", QUEUE_TARGET, "ratio"),
    SignalSpec("load", "(c) gateway_predictor_load", LOAD_TARGET, "of the fleet"),
    SignalSpec("oracle", "(d) oracle", LOAD_TARGET, "of the fleet, known in advance"),
)


# -- the gateway's metrics ---------------------------------------------------------------------------


def scrape(gateway: Gateway) -> dict[str, float]:
    """The model's samples (and the process's, unlabelled) of one /metrics scrape, by sample name."""
    status, body = http_request("GET", f"{gateway.http_url}/metrics", timeout=5)
    if status != 200:
        return {}
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("model") == MODEL and set(labels) <= {"model"} or not labels:
                samples[sample.name] = sample.value
    return samples


@dataclass
class Reading:
    """One scrape, with the gateway's CPU time as the kubelet (or the metric) has it."""
    at: float  # simulated seconds
    samples: dict[str, float]
    cpu_s: float
    cpu_source: str


def _delta(new: Reading, old: Reading, name: str) -> float | None:
    if name not in new.samples or name not in old.samples:
        return None
    return new.samples[name] - old.samples[name]


def mean_queue_wait_s(new: Reading, old: Reading) -> float | None:
    waited, count = _delta(new, old, "gateway_queue_wait_seconds_sum"), _delta(new, old, "gateway_queue_wait_seconds_count")
    return waited / count if waited is not None and count else None


def queue_compute_ratio(new: Reading, old: Reading) -> float | None:
    """Triton's ratio: mean queue time per request over mean compute time per request (each
    request's compute is its batch's call), from the two histograms' sums and counts."""
    waited = mean_queue_wait_s(new, old)
    spent, calls = (_delta(new, old, "gateway_predictor_latency_seconds_sum"),
                    _delta(new, old, "gateway_predictor_latency_seconds_count"))
    if waited is None or spent is None or not calls or spent <= 0:
        return None
    return waited / (spent / calls)


def cpu_utilisation(new: Reading, old: Reading, clock: Clock) -> float | None:
    """The gateway's CPU over the window, as a fraction of its 500m request."""
    seconds = clock.real(new.at - old.at)
    return (new.cpu_s - old.cpu_s) / seconds / CPU_REQUEST_CORES if seconds > 0 else None


# -- the fleet: replicas that start, join, leave and stop ----------------------------------------------


@dataclass
class Pod:
    index: int
    requested_at: float  # simulated seconds: when the autoscaler asked for it
    server: Predictor | None = None
    ready_at: float | None = None  # in the url list
    removed_at: float | None = None  # out of the url list (or cancelled while starting)
    stopped_at: float | None = None
    failed: str = ""

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.http_url


class Fleet:
    """The replicas of one run and the gateway's url list, kept in step (one writer at a time)."""

    def __init__(self, ctx: Context, run: str, clock: Clock, batching: dict[str, Any]) -> None:
        self.ctx, self.run, self.clock, self.batching = ctx, run, clock, batching
        self.pods: list[Pod] = []
        self.lock = threading.RLock()
        self.gateway: Gateway | None = None
        self.reloads: list[dict[str, Any]] = []
        self.threads: list[threading.Thread] = []
        self.closing = threading.Event()

    # the first replica, before the gateway
    def first(self) -> Pod:
        pod = Pod(0, 0.0)
        pod.server = Predictor(self.ctx.log_dir, f"autoscale-{self.run}-replica-0", CALL_MS, PER_ROW_MS).start()
        pod.ready_at = 0.0
        self.pods.append(pod)
        return pod

    def model(self, urls: list[str]) -> dict[str, Any]:
        return {"name": MODEL, "backend": "kserve", "protocol": "http", "api": "v1", "url": urls,
                "backend_model": MODEL, "batching": {**self.batching, "max_inflight": 1}}  # per replica

    def in_rotation(self) -> list[Pod]:
        return [p for p in self.pods if p.ready_at is not None and p.removed_at is None]

    def starting(self) -> list[Pod]:
        return [p for p in self.pods if p.ready_at is None and p.removed_at is None and not p.failed]

    def spec(self) -> int:
        return len(self.in_rotation()) + len(self.starting())

    def _write(self) -> None:
        """The url list of the pods in rotation into the gateway's config, and a SIGHUP; wait
        until /metrics shows that many replicas."""
        assert self.gateway is not None
        urls = [p.url for p in self.in_rotation()]
        began = time.monotonic()
        self._reload(urls)
        self.reloads.append({"at": self.clock.now(), "replicas": len(urls), "seconds": time.monotonic() - began})

    def _reload(self, urls: list[str]) -> None:
        assert self.gateway is not None
        self.gateway.config_path.write_text(to_toml([self.model(urls)]))
        self.gateway.signal(signals.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            samples = scrape(self.gateway)
            if samples.get("gateway_replicas") == len(urls):
                return
            time.sleep(0.05)
        self.ctx.say(f"  autoscale: the gateway did not show {len(urls)} replicas 10 s after its reload")

    def add(self) -> None:
        """Start a replica now; it joins the url list once the start delay has passed."""
        with self.lock:
            pod = Pod(len(self.pods), self.clock.now())
            self.pods.append(pod)
        thread = threading.Thread(target=self._bring_up, args=(pod,), daemon=True)
        self.threads.append(thread)
        thread.start()

    def _bring_up(self, pod: Pod) -> None:
        try:
            server = Predictor(self.ctx.log_dir, f"autoscale-{self.run}-replica-{pod.index}", CALL_MS, PER_ROW_MS)
            pod.server = server
            server.start()
        except Exception as error:  # noqa: BLE001 - a pod that fails to start is reported, not fatal
            pod.failed = str(error)
            return
        self.clock.sleep_until(pod.requested_at + START_DELAY_S)
        with self.lock:
            if pod.removed_at is not None or self.closing.is_set():  # cancelled while it started
                self._stop_later(pod, 0.0)
                return
            pod.ready_at = self.clock.now()
            self._write()

    def remove(self) -> None:
        """Take one replica away: a starting one first (Kubernetes deletes unready pods first),
        else the newest in rotation, which leaves the url list, drains, then stops."""
        with self.lock:
            starting = self.starting()
            if starting:
                starting[-1].removed_at = self.clock.now()  # its thread stops it once it is up
                return
            ready = self.in_rotation()
            if len(ready) <= MIN_REPLICAS:
                return
            pod = ready[-1]
            pod.removed_at = self.clock.now()
            self._write()
        self._stop_later(pod, DRAIN_S)

    def _stop_later(self, pod: Pod, after_s: float) -> None:
        def stop() -> None:
            time.sleep(after_s)
            if pod.server is not None:
                pod.server.stop()
            pod.stopped_at = self.clock.now()
        thread = threading.Thread(target=stop, daemon=True)
        self.threads.append(thread)
        thread.start()

    def close(self) -> None:
        self.closing.set()
        for thread in list(self.threads):
            thread.join(timeout=60)
        end = self.clock.now()
        for pod in self.pods:
            if pod.server is not None:
                pod.server.stop()
            if pod.stopped_at is None:
                pod.stopped_at = end

    def replica_seconds(self, until: float) -> float:
        """Simulated replica-seconds paid within [0, until]: each pod from its request to its stop."""
        return sum(max(0.0, min(until, pod.stopped_at if pod.stopped_at is not None else until) - pod.requested_at)
                   for pod in self.pods)

    def ready_seconds(self, until: float) -> float:
        return sum(max(0.0, min(until, pod.removed_at if pod.removed_at is not None else until) - pod.ready_at)
                   for pod in self.pods if pod.ready_at is not None)


# -- the autoscaler ---------------------------------------------------------------------------------


@dataclass
class Hpa:
    """Kubernetes' replica calculation and behaviour: tolerance, stabilisation windows, the
    default scaling policies (up: the larger of +100% and +4 pods per 15 s; down: -100%)."""
    target: float
    recommendations: list[tuple[float, int]] = field(default_factory=list)

    def desired(self, now: float, ready: int, spec: int, metric: float | None) -> int:
        if metric is None:  # no metric: Kubernetes leaves the scale alone
            return spec
        ratio = metric / self.target
        proposal = spec if abs(ratio - 1.0) <= TOLERANCE else math.ceil(max(ready, 1) * ratio)
        proposal = max(MIN_REPLICAS, min(MAX_REPLICAS, proposal))
        self.recommendations = [(t, r) for t, r in self.recommendations if now - t < max(UP_WINDOW_S, DOWN_WINDOW_S)]
        self.recommendations.append((now, proposal))
        up = min([r for t, r in self.recommendations if now - t <= UP_WINDOW_S] or [proposal])
        down = max(r for t, r in self.recommendations if now - t <= DOWN_WINDOW_S)
        if spec < up:
            return min(up, max(2 * spec, spec + 4), MAX_REPLICAS)
        if spec > down:
            return down
        return spec


def oracle_desired(now: float, capacity: float) -> int:
    """What a scaler that knows the load needs now: enough replicas at LOAD_TARGET for the
    highest load until a replica it starts now is ready (one sync period later at worst)."""
    horizon = [offered_x((now + dt) / 60.0) for dt in range(0, int(START_DELAY_S + SYNC_S) + 1, 5)]
    return max(MIN_REPLICAS, min(MAX_REPLICAS, math.ceil(max(horizon) / LOAD_TARGET - 1e-9)))


class Autoscaler(threading.Thread):
    """Every sync period: scrape, compute every signal (the one in charge scales), record."""

    def __init__(self, signal_key: str, fleet: Fleet, gateway: Gateway, clock: Clock, capacity: float, end: float) -> None:
        super().__init__(daemon=True)
        self.signal_key, self.fleet, self.gateway, self.clock = signal_key, fleet, gateway, clock
        self.capacity, self.end = capacity, end
        spec = next(s for s in SIGNALS if s.key == signal_key)
        self.hpa = Hpa(spec.target)
        self.readings: list[Reading] = []
        self.samples: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def read(self) -> Reading:
        samples = scrape(self.gateway)
        if "process_cpu_seconds_total" in samples:
            return Reading(self.clock.now(), samples, samples["process_cpu_seconds_total"], "process_cpu_seconds_total")
        return Reading(self.clock.now(), samples, self.gateway.cpu_seconds(), "/proc")

    def window_start(self, now: float) -> Reading:
        """The reading RATE_WINDOW_S before now (or the oldest)."""
        for reading in reversed(self.readings[:-1]):
            if now - reading.at >= RATE_WINDOW_S - 1e-6:
                return reading
        return self.readings[0]

    def run(self) -> None:
        try:
            self.readings.append(self.read())
            tick = 1
            while tick * SYNC_S <= self.end:
                self.clock.sleep_until(tick * SYNC_S)
                tick += 1
                self.step()
        except BaseException as error:  # noqa: BLE001 - reported by the scenario
            self.error = error

    def step(self) -> None:
        reading = self.read()
        self.readings.append(reading)
        now, previous, windowed = reading.at, self.readings[-2], self.window_start(reading.at)
        values: dict[str, float | None] = {
            "cpu": cpu_utilisation(reading, windowed, self.clock),
            "queue": queue_compute_ratio(reading, windowed),
            "load": reading.samples.get("gateway_predictor_load"),
        }
        ready, spec = len(self.fleet.in_rotation()), self.fleet.spec()
        if self.signal_key == "oracle":
            desired = oracle_desired(now, self.capacity)
        else:
            desired = self.hpa.desired(now, ready, spec, values[self.signal_key])
        for _ in range(desired - spec):
            self.fleet.add()
        for _ in range(spec - desired):
            self.fleet.remove()
        wait = mean_queue_wait_s(reading, previous)
        self.samples.append({
            "t": now, "offered_x": offered_x(now / 60.0), "ready": ready, "spec": spec, "desired": desired,
            "queue_wait_ms": None if wait is None else 1000 * wait, **values,
            "capacity_rps": reading.samples.get("gateway_predictor_capacity_rows_per_second"),
            "demand_rps": reading.samples.get("gateway_demand_rows_per_second"),
            "profile_ms": [None if value is None else 1000 * value for value in (
                reading.samples.get("gateway_predictor_profile_intercept_seconds"),
                reading.samples.get("gateway_predictor_profile_per_row_seconds"))],
            "mean_batch": _ratio(_delta(reading, previous, "gateway_batch_size_sum"),
                                 _delta(reading, previous, "gateway_batch_size_count")),
            "gateway_replicas": reading.samples.get("gateway_predictor_replicas", reading.samples.get("gateway_replicas")),
            "cpu_source": reading.cpu_source,
        })


# -- the load -----------------------------------------------------------------------------------------


DEADLINE_WORDS = ("deadline", "predicted to finish", "under overload")  # the deadline policy's refusals, as clients read them


async def drive(url: str, clock: Clock, capacity: float, seed: int) -> list[dict[str, Any]]:
    """One open-loop Poisson run per sync period at that period's offered rate (bounded in
    count and time), each started on schedule while the earlier ones finish."""
    period_real = clock.real(SYNC_S)
    periods = int(schedule_minutes() * 60 / SYNC_S)
    runs: list[tuple[int, float, asyncio.Task[loadgen.Result]]] = []
    loop = asyncio.get_running_loop()
    for i in range(periods):
        begins = clock.t0 + i * period_real
        await asyncio.sleep(max(0.0, begins - time.monotonic()))
        rate = offered_x((i + 0.5) * SYNC_S / 60.0) * capacity
        count = max(1, round(rate * period_real))
        config = loadgen.Config(target=url, body=V1_BODY, method="POST", concurrency=2000, requests=count,
                                duration=period_real * 3 + 5, timeout=5, rate=rate, seed=seed * 100_000 + i)
        runs.append((i, rate, loop.create_task(loadgen.run(config))))
    periods_out = []
    for i, rate, task in runs:
        result = await task
        answered = result.ok_latencies
        good = sum(1 for latency in answered if latency * 1000 <= SLO_MS)
        offered = result.sent + result.dropped
        # Failures other than the deadline's (refused at admission, dropped or expired): lost requests.
        other = {kind: n for kind, n in result.errors.items() if not any(word in kind for word in DEADLINE_WORDS)}
        periods_out.append({
            "t": i * SYNC_S, "rate": rate, "offered": offered, "good": good, "answered": len(answered),
            "goodput_pct": 100 * good / offered if offered else None,
            "refused": result.statuses.get("429", 0) + result.statuses.get("503", 0), "expired": result.statuses.get("504", 0),
            "other_errors": result.transport_errors + result.unfinished + sum(other.values()),
            "error_kinds": dict(list(other.items())[:3]),
            "latencies_ms": [round(1000 * latency, 2) for latency in answered],
        })
    return periods_out


# -- one run, and the scenario -------------------------------------------------------------------------


def measure_capacity(ctx: Context) -> dict[str, Any]:
    """One replica's rows/s through the gateway at its batch limit: a closed loop that keeps
    it saturated (no deadline), after a second of warm-up."""
    predictor = Predictor(ctx.log_dir, "autoscale-capacity-replica", CALL_MS, PER_ROW_MS).start()
    try:
        model = {"name": MODEL, "backend": "kserve", "protocol": "http", "api": "v1", "url": [predictor.http_url],
                 "backend_model": MODEL, "batching": {"max_batch_size": MAX_BATCH, "max_inflight": 1, "timeout_s": 30}}
        with Gateway(ctx.log_dir, "gateway-autoscale-capacity", [model]).start() as gateway:
            url = f"{gateway.http_url}/v1/models/{MODEL}:predict"
            load(url, V1_BODY, concurrency=64, duration=1.0, timeout=30)
            predictor.reset_stats()
            result = load(url, V1_BODY, concurrency=64, duration=max(3.0, ctx.duration), timeout=30)
            stats = predictor.stats()
    finally:
        predictor.stop()
    return {"rows_per_s": result.ok / result.elapsed_s, "mean_batch": stats["instances"] / max(1, stats["calls"]),
            "nominal_rows_per_s": MAX_BATCH / ((CALL_MS + PER_ROW_MS * MAX_BATCH) / 1000)}


def run_signal(ctx: Context, spec: SignalSpec, capacity: float, seed: int) -> dict[str, Any]:
    """The whole ramp with the autoscaler on one signal: its samples, periods and pods."""
    clock = Clock(ctx.duration / 60.0)
    # The gateway's demand smoothing is a time constant like the others: compressed with the
    # clock (its default, 5 s, becomes 5 simulated seconds).
    batching = {"max_batch_size": MAX_BATCH, "slo_ms": SLO_MS, "timeout_s": 5,
                "demand_smoothing_ms": clock.real(DEMAND_SMOOTHING_S) * 1000}
    fleet = Fleet(ctx, spec.key, clock, batching)
    fleet.first()
    end = schedule_minutes() * 60
    gateway = Gateway(ctx.log_dir, f"gateway-autoscale-{spec.key}", [fleet.model([fleet.pods[0].url])])
    with gateway.start():
        fleet.gateway = gateway
        url = f"{gateway.http_url}/v1/models/{MODEL}:predict"
        load(url, V1_BODY, concurrency=2000, rate=PHASES[0][1] * capacity, duration=2.0, timeout=5, seed=seed)
        clock.start()
        scaler = Autoscaler(spec.key, fleet, gateway, clock, capacity, end)
        scaler.start()
        try:
            periods = asyncio.run(drive(url, clock, capacity, seed))
            scaler.join(timeout=clock.real(2 * SYNC_S) + 30)
        finally:
            fleet.close()
        if scaler.error is not None:
            raise scaler.error
        log_errors = [line for line in gateway.log_text().splitlines() if " ERROR " in line][:5]
    return {"signal": spec.key, "samples": scaler.samples, "periods": periods, "end": end,
            "replica_seconds": fleet.replica_seconds(end), "ready_seconds": fleet.ready_seconds(end),
            "pods": [{"index": p.index, "requested_at": p.requested_at, "ready_at": p.ready_at, "removed_at": p.removed_at,
                      "stopped_at": p.stopped_at, "failed": p.failed} for p in fleet.pods],
            "reloads": fleet.reloads, "gateway_errors": log_errors}


def first_crossing(samples: list[dict[str, Any]], key: str, target: float, after: float = 0.0) -> float | None:
    """When the signal first exceeded its target by more than the tolerance: the HPA's first scale-up."""
    for sample in samples:
        value = sample.get(key)
        if sample["t"] > after and value is not None and value / target > 1 + TOLERANCE:
            return float(sample["t"])
    return None


def crossings_at_one_replica(run: dict[str, Any]) -> dict[str, float | None]:
    """When each signal first exceeded its target (beyond the tolerance) in this run, while its
    first replica still served alone: every run's timeline is the same until then."""
    first_ready = min((p["ready_at"] for p in run["pods"] if p["index"] > 0 and p["ready_at"] is not None), default=math.inf)
    out: dict[str, float | None] = {}
    for spec in SIGNALS[:3]:
        crossed = first_crossing(run["samples"], spec.key, spec.target)
        out[spec.key] = crossed if crossed is not None and crossed < first_ready else None
    return out


def queue_doubling(run: dict[str, Any]) -> tuple[float | None, float | None, bool]:
    """(idle queue wait in ms, when it first exceeded twice that, whether one replica still served then)."""
    samples = run["samples"]
    idle = [s["queue_wait_ms"] for s in samples if 30 <= s["t"] <= IDLE_MINUTES * 60 and s["queue_wait_ms"] is not None]
    if not idle:
        return None, None, False
    base = statistics.median(idle)
    for sample in samples:
        if sample["t"] > IDLE_MINUTES * 60 and sample["queue_wait_ms"] is not None and sample["queue_wait_ms"] > 2 * base:
            first_ready = min((p["ready_at"] for p in run["pods"] if p["index"] > 0 and p["ready_at"] is not None), default=None)
            return base, float(sample["t"]), first_ready is None or first_ready >= sample["t"]
    return base, None, False


def summarise(spec: SignalSpec, run: dict[str, Any], oracle_seconds: float | None, queue_ref: float | None) -> dict[str, Any]:
    periods = run["periods"]
    offered = sum(p["offered"] for p in periods)
    good = sum(p["good"] for p in periods)
    latencies = sorted(latency for p in periods for latency in p["latencies_ms"])
    crossed = None if spec.key == "oracle" else first_crossing(run["samples"], spec.key, spec.target)
    idle_wait, doubled, at_one = queue_doubling(run)
    return {
        "name": spec.label, "signal": spec.key, "target": spec.target,
        "goodput_pct": 100 * good / offered if offered else None,
        "worst_period_pct": min((p["goodput_pct"] for p in periods if p["goodput_pct"] is not None), default=None),
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else None,
        "refused_pct": 100 * sum(p["refused"] + p["expired"] for p in periods) / max(1, offered),
        "lost": sum(p["other_errors"] for p in periods),
        "replica_seconds": run["replica_seconds"],
        "vs_oracle": run["replica_seconds"] / oracle_seconds if oracle_seconds else None,
        "peak_replicas": max((s["spec"] for s in run["samples"]), default=None),
        "crossed_s": crossed, "queue_doubled_s": doubled, "queue_doubled_at_one_replica": at_one,
        "idle_queue_wait_ms": idle_wait,
        "lead_s": None if crossed is None or queue_ref is None else queue_ref - crossed,
        "requests": offered,
    }


def autoscale(ctx: Context) -> dict[str, Any]:
    """The same ramp with the autoscaler on each signal in turn: goodput, p99, replica-seconds
    against the oracle's, and each signal's lead over the queue wait."""
    measured = measure_capacity(ctx)
    capacity = measured["rows_per_s"]
    ctx.say(f"  autoscale: one replica sustains {capacity:.0f} rows/s (nominal {measured['nominal_rows_per_s']:.0f}), "
            f"mean batch {measured['mean_batch']:.1f}")
    runs: dict[str, dict[str, Any]] = {}
    for seed, spec in enumerate(SIGNALS, start=1):
        ctx.say(f"  autoscale: the ramp with {spec.label}")
        runs[spec.key] = run_signal(ctx, spec, capacity, seed)
    return report(ctx, measured, runs)


def report(ctx: Context, measured: dict[str, Any], runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    capacity = measured["rows_per_s"]
    oracle_seconds = runs["oracle"]["replica_seconds"] if "oracle" in runs else None
    # When the queue wait first doubled while one replica served: the same timeline in every run
    # until its first new replica is ready; the median over the runs where it happened so.
    doubled = [d for run in runs.values() for _, d, one in [queue_doubling(run)] if d is not None and one]
    queue_ref = statistics.median(doubled) if doubled else None
    rows = [summarise(spec, runs[spec.key], oracle_seconds, queue_ref) for spec in SIGNALS if spec.key in runs]
    by_key = {row["signal"]: row for row in rows}
    timelines = []
    for spec in SIGNALS:
        if spec.key in runs:
            run = runs[spec.key]
            _, doubled_at, alone = queue_doubling(run)
            first_ready = min((p["ready_at"] for p in run["pods"] if p["index"] > 0 and p["ready_at"] is not None), default=None)
            timelines.append({"name": spec.label, **crossings_at_one_replica(run),
                              "queue_doubled": doubled_at if alone else None, "first_ready": first_ready})
    scale_up_delay = START_DELAY_S
    checks = []
    load_row, queue_row, cpu_row = by_key.get("load"), by_key.get("queue"), by_key.get("cpu")
    if load_row is not None:
        checks.append(check("(c) gateway_predictor_load: goodput through the ramp", ">= 95%",
                            _pct(load_row["goodput_pct"]), _ge(load_row["goodput_pct"], 95)))
        checks.append(check("(c) replica-seconds vs the oracle's", "<= 1.2x", _x(load_row["vs_oracle"]),
                            None if load_row["vs_oracle"] is None else load_row["vs_oracle"] <= 1.2))
        lead = None if load_row["crossed_s"] is None or queue_row is None or queue_row["crossed_s"] is None \
            else queue_row["crossed_s"] - load_row["crossed_s"]
        checks.append(check("(c) crosses its target before (b) does", f">= one scale-up delay ({scale_up_delay:.0f} s simulated)",
                            "never crossed" if lead is None else f"{lead:.0f} s simulated",
                            None if lead is None else lead >= scale_up_delay))
    if cpu_row is not None:
        checks.append(check("(a) CPU: goodput through the ramp", "info (how CPU fails)", _pct(cpu_row["goodput_pct"]), None))
    columns = [["name", "signal (target)", "s"], ["target", "target", "g"], ["goodput_pct", "goodput within 250 ms %", ".1f"],
               ["worst_period_pct", "worst 15 s %", ".0f"], ["p99_ms", "p99 ms (200s)", ".0f"],
               ["refused_pct", "refused or expired %", ".1f"], ["lost", "lost", "d"], ["replica_seconds", "replica-seconds", ".0f"],
               ["vs_oracle", "vs oracle", ".2f"], ["peak_replicas", "peak replicas", "d"],
               ["crossed_s", "crossed target at s", ".0f"], ["queue_doubled_s", "own queue wait 2x idle at s", ".0f"],
               ["lead_s", "lead over queue 2x, s", ".0f"]]
    minute = ctx.duration
    setup = (
        f"Simulated replicas (tools.simulated_predictor, one call at a time, {CALL_MS:g} ms + {PER_ROW_MS:g} ms per row) "
        f"behind one gateway (KServe v1 over HTTP, max_batch_size {MAX_BATCH}, slo_ms {SLO_MS:g}, one batch in flight per "
        f"replica) whose url list the autoscaler rewrites (SIGHUP). One replica sustains {capacity:.0f} rows/s through the "
        f"gateway (measured, closed loop; nominal {measured['nominal_rows_per_s']:.0f}). Open-loop Poisson single-row v1 "
        f"requests ramp 0.3x -> 3x -> 0.3x that capacity: " + ", ".join(
            f"{length:g} min {low:g}x" + (f"->{high:g}x" if high != low else "") for length, low, high in PHASES)
        + f". Time is compressed: one simulated minute is {minute:g} real seconds (the costs and the 250 ms deadline are "
        f"real; the gateway's demand smoothing, {DEMAND_SMOOTHING_S:g} s, is compressed with the rest). "
        f"The HPA as Kubernetes documents it: desired = ceil(ready x metric / target), tolerance {TOLERANCE:g}, "
        f"sync every {SYNC_S:g} s, scale-up window {UP_WINDOW_S:g} s, scale-down window {DOWN_WINDOW_S:g} s, default "
        f"policies, a pod start delay of {START_DELAY_S:g} s, min {MIN_REPLICAS}, max {MAX_REPLICAS} (simulated seconds). "
        f"Signals: (a) the gateway's CPU over a {RATE_WINDOW_S:g} s window, of a 500m request, target 70% "
        f"(deploy/gateway/hpa.yaml); (b) mean queue wait per request / mean predictor time per call over {RATE_WINDOW_S:g} s, "
        f"target 1 (Triton's chart); (c) gateway_predictor_load, target {LOAD_TARGET:g}; (d) an oracle: ceil(highest "
        f"offered load until a pod started now is ready / (capacity x {LOAD_TARGET:g})), scaling down at once. "
        f"Replica-seconds: each replica from its request to its stop (simulated). Goodput: 200s within 250 ms over all "
        f"requests offered. Lead: when the queue wait (the gateway's histogram, per sync period) first exceeded twice its "
        f"idle value while one replica served (median over the runs: {_num(queue_ref)} s) minus when the signal first "
        f"exceeded its target by more than the tolerance; positive is earlier.")
    return {
        "title": "Autoscaling the predictor fleet on CPU, queue/compute, gateway_predictor_load and an oracle",
        "setup": setup,
        "tables": [{"title": "", "rows": rows, "columns": columns}, {
            "title": "Each run's timeline while its first replica served alone (simulated s): when each signal first "
                     "exceeded its target beyond the tolerance, and when the queue wait first exceeded twice its idle value",
            "rows": timelines, "columns": [["name", "run", "s"], ["cpu", "(a) CPU", ".0f"], ["queue", "(b) queue/compute", ".0f"],
                                           ["load", "(c) load", ".0f"], ["queue_doubled", "queue wait 2x idle", ".0f"],
                                           ["first_ready", "first added replica ready", ".0f"]]}],
        "checks": checks,
        "runs": [{**run, "crossings_at_one_replica": crossings_at_one_replica(run),
                  "periods": [{k: v for k, v in p.items() if k != "latencies_ms"} for p in run["periods"]]}
                 for run in runs.values()],
        "plots": {"autoscale": {
            "capacity": capacity, "minute_s": minute, "slo_ms": SLO_MS,
            "series": {SIGNALS_BY_KEY[key].label: {
                "t_min": [s["t"] / 60 for s in run["samples"]],
                "offered_x": [s["offered_x"] for s in run["samples"]],
                "ready": [s["ready"] for s in run["samples"]],
                "spec": [s["spec"] for s in run["samples"]],
                "period_t_min": [p["t"] / 60 for p in run["periods"]],
                "goodput_pct": [p["goodput_pct"] for p in run["periods"]],
            } for key, run in runs.items()}}},
        "measured_capacity": measured, "queue_doubled_reference_s": queue_ref,
    }


SIGNALS_BY_KEY = {spec.key: spec for spec in SIGNALS}


def _ratio(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}%"


def _x(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def _ge(value: float | None, bound: float) -> bool | None:
    return None if value is None else value >= bound

