"""A `[[models]]` table and its `[models.simulated]`: which predictor serves the model, how
it is reached, and what kind of model it is (tensors, texts embedded, pairs scored).

Each key is declared once, in its table here: its values land in backends' PredictorSettings
and Cost, which know no config (a default of theirs is read from them). The rules between
keys (backend, protocol and api naming one predictor protocol; replicas found by DNS; the
base path of a JSON API) are the functions here; the model's other tables are read by their
own modules, a kind's table by its kind (`gateway.kinds`: whichever kinds are defined). It knows no
tenant and no server key.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from backends.settings import Cost, PredictorProtocol, PredictorSettings
from gateway.batching.config import BatchingConfig, TextSpec
from gateway.config.batching import batching, token_budget
from gateway.config.tensors import INPUTS, OUTPUTS, padding, tensor_specs
from gateway.config_keys import ConfigError, Key, Kind, Table, default_of, read, table, value
from gateway.kinds import KINDS, Embeddings, Rerank, Tensors
from gateway.kinds.base import ModelKind
from wire.tensors import ModelSignature

# The user-facing choices; `_predictor_protocol` resolves them into one PredictorProtocol.
BACKENDS = ("triton", "kserve", "torchserve", "simulated")
PROTOCOLS = ("http", "grpc")
SIMULATED_TASKS = ("double", "embed", "rerank")
# KServe's: its route prefix (KSERVE_OPENAI_ROUTE_PREFIX, default /openai) and /v1.
DEFAULT_BASE_PATH: str = default_of(PredictorSettings, "base_path")

# The JSON APIs of a kserve backend over HTTP beside v1 and v2: their protocol and what they are.
_HTTP_APIS = {
    "openai": (PredictorProtocol.OPENAI_HTTP, "KServe's OpenAI endpoint (or any OpenAI-compatible embeddings server)"),
    "score": (PredictorProtocol.SCORE_HTTP, "vLLM's score API"),
    "rerank": (PredictorProtocol.RERANK_HTTP, "Cohere's rerank API (Infinity, vLLM, any Cohere-compatible server)"),
}

MODELS = Table("models[]", "[[models]]", (
    Key("name", Kind.STRING, "The name clients use (required, unique).", required=True),
    Key("backend", Kind.STRING, "The predictor's software: triton, kserve, torchserve, or simulated (in the gateway's "
                                "process).", BACKENDS[3], choices=BACKENDS),
    Key("protocol", Kind.STRING, "What carries the calls to the predictor: http or grpc.", PROTOCOLS[0],
        choices=PROTOCOLS),
    Key("url", Kind.STRING_OR_ARRAY, "The predictor's address (http://host:port, or host:port for gRPC), or a list of "
                                     "replicas' addresses; required but for simulated."),
    Key("dns_replicas", Kind.BOOLEAN, "Every address the url's host name resolves to is a replica (a Kubernetes "
                                      "headless Service), looked up again every dns_refresh_ms: new ones join once "
                                      "ready, vanished ones drain and leave. Not with TLS.", False),
    Key("dns_refresh_ms", Kind.NUMBER, "dns_replicas: the time between lookups.", 5000, minimum=100, per=1000,
        apart=True),
    Key("backend_model", Kind.STRING, "The model's name at the predictor.", "", shown="the model's name"),
    Key("api", Kind.STRING, "v1: KServe v1 (TorchServe: its own API); v2: the Open Inference Protocol; openai: an "
                            "OpenAI-compatible embeddings server; score: vLLM's score API; rerank: Cohere's rerank "
                            "API, one query per call (these three: backend kserve, HTTP).",
        shown="v1 for kserve over HTTP and torchserve, else v2", choices=("v1", "v2", *_HTTP_APIS)),
    Key("base_path", Kind.STRING, "api = \"openai\", \"score\" or \"rerank\": the path before /embeddings, /score or "
                                  "/rerank (Infinity: \"\", TEI and vLLM: /v1).", DEFAULT_BASE_PATH, apart=True),
    Key("binary_data", Kind.BOOLEAN, "OIP over HTTP with the binary tensor extension.", shown="true for triton"),
    Key("tls", Kind.BOOLEAN, "gRPC to the predictor over TLS.", shown="true for an https:// url"),
    Key("ca_file", Kind.STRING, "A CA bundle to verify the predictor (default: the system's).", "", file=True),
    Key("inputs", Kind.TABLES, "The model's inputs ([[models.inputs]]); unset: learned from the predictor's "
                               "metadata."),
    Key("outputs", Kind.TABLES, "The model's outputs ([[models.outputs]]), with inputs."),
    Key("batching", Kind.TABLE, "How its requests are batched ([models.batching])."),
    Key("simulated", Kind.TABLE, "The simulated predictor's model and cost ([models.simulated])."),
    # The built-in kinds' tables ([models.embeddings], [models.rerank]); a kind defined later
    # is read all the same (`model`), and shown on no reference page.
    *(kind.table_key for kind in (Embeddings, Rerank) if kind.table_key is not None),
))
SIMULATED = Table("models[].simulated", "[models.simulated]", (
    Key("task", Kind.STRING, "double (OUTPUT0 = 2 x INPUT0), embed (texts to unit vectors) or rerank ((query, "
                             "document) pairs to scores).", default_of(PredictorSettings, "simulated_task"),
        choices=SIMULATED_TASKS),
    *(Key(name, kind, meaning, default_of(Cost, name), minimum=minimum) for name, kind, meaning, minimum in (
        ("call_ms", Kind.NUMBER, "Each call's fixed cost.", 0),
        ("per_instance_ms", Kind.NUMBER, "Each call's cost per row.", 0),
        ("per_element_us", Kind.NUMBER, "Each call's cost per element of its input (tokens for embed).", 0),
        ("slots", Kind.INTEGER, "Calls computing at once; others wait their turn.", 1),
    )),
))


@dataclass(frozen=True, slots=True)
class ModelConfig:
    name: str
    predictor: PredictorSettings     # how to reach the model's predictor (backends.settings)
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    # Its kind's settings (gateway.kinds: EmbeddingsConfig, RerankConfig, ...); None: the default
    # kind, tensors or instances as clients send them.
    kind: Any = None

    @property
    def signature(self) -> ModelSignature | None:
        """The declared signature (None: read from the predictor's metadata). It lives in
        the predictor settings, which need it too (TorchServe's OIP outputs)."""
        return self.predictor.signature


def model(raw: Any, key: str) -> ModelConfig:
    """One `[[models]]` table (`key`: "models[0]")."""
    if not isinstance(raw, dict):
        raise ConfigError(key, "must be a table")
    kinds = [kind for kind in KINDS.values() if kind.table_key is not None]
    values = read(MODELS, raw, key, also={kind.name for kind in kinds})
    inputs = tensor_specs(raw.get("inputs"), f"{key}.inputs", INPUTS)
    outputs = tensor_specs(raw.get("outputs"), f"{key}.outputs", OUTPUTS)
    if outputs and not inputs:
        raise ConfigError(f"{key}.inputs", "declare inputs too when declaring outputs")
    predictor = _predictor(raw, key, values, ModelSignature(inputs, outputs) if inputs else None)
    kind, settings = _kind(raw, key, predictor, kinds)
    batching_raw = table(raw, "batching", f"{key}.batching")
    config = batching(batching_raw, f"{key}.batching")
    if issubclass(kind.rows, TextSpec):
        texts = token_budget(batching_raw, f"{key}.batching", config)
        assert isinstance(texts.rows, TextSpec)  # token_budget sets it
        config = replace(texts, rows=kind.spec(settings, texts.rows))
    else:
        config = padding(raw, key, inputs, outputs, batching_raw, config)
    return ModelConfig(name=values["name"], predictor=predictor, batching=config, kind=settings)


def _kind(raw: dict, key: str, predictor: PredictorSettings,
          kinds: list[type[ModelKind]]) -> tuple[type[ModelKind], Any]:
    """The one kind that claims the model (by its table, or by what its predictor implies),
    and its settings; the default kind when none does."""
    claimed = [(kind, settings) for kind in kinds if (settings := kind.configure(raw, key, predictor)) is not None]
    if len(claimed) > 1:
        tables = " and ".join(f"[models.{kind.name}]" for kind, _ in claimed)
        both = "both" if len(claimed) == 2 else "all of"
        raise ConfigError(f"{key}.{claimed[-1][0].name}", f"a model is of one kind, not {both} "
                                                          f"{' and '.join(kind.what for kind, _ in claimed)}: "
                                                          f"keep one of {tables}")
    return claimed[0] if claimed else (Tensors, None)


def _predictor(raw: dict, key: str, values: dict[str, Any], signature: ModelSignature | None) -> PredictorSettings:
    """How the model's predictor is reached (and its declared signature, which it needs too)."""
    backend, transport = values["backend"], values["protocol"]
    addresses = _addresses(raw, key, required=backend != "simulated")
    protocol = _predictor_protocol(values["api"], key, backend, transport)
    for address in addresses:
        if protocol.transport == "http" and not address.startswith(("http://", "https://")):
            raise ConfigError(f"{key}.url", f"an HTTP predictor address looks like http://host:port, got '{address}'")
    tls = values["tls"] if values["tls"] is not None else bool(addresses) and addresses[0].startswith("https://")
    simulated = read(SIMULATED, table(raw, "simulated", f"{key}.simulated"), f"{key}.simulated")
    task = simulated.pop("task")
    return PredictorSettings(
        protocol=protocol, server=backend, model=values["backend_model"] or values["name"], addresses=addresses,
        binary_data=values["binary_data"] if values["binary_data"] is not None else backend == "triton",
        tls=tls, ca_file=values["ca_file"], signature=signature,
        simulated_cost=Cost(**simulated), simulated_task=task, base_path=_base_path(raw, key, protocol),
        dns_refresh_s=_dns_replicas(raw, key, addresses, tls, values["dns_replicas"]))


def _predictor_protocol(api: str | None, key: str, backend: str, transport: str) -> PredictorProtocol:
    """The one protocol that `backend`, `protocol` (the transport) and `api` name together.

    `api = "v1"` means KServe v1 REST for kserve over HTTP, and TorchServe's own
    Predictions API for torchserve over gRPC; "v2" means the Open Inference Protocol."""
    if api is None:
        api = "v1" if (backend == "kserve" and transport == "http") or backend == "torchserve" else "v2"
    if api in _HTTP_APIS:
        if backend != "kserve" or transport != "http":
            raise ConfigError(f"{key}.api", f"api = \"{api}\" is {_HTTP_APIS[api][1]} over HTTP: use it with "
                                            f"backend = \"kserve\"")
        return _HTTP_APIS[api][0]
    if api == "v1" and transport != "http" and backend != "torchserve":  # torchserve grpc v1: its Predictions API
        raise ConfigError(f"{key}.api", "KServe v1 is HTTP only; use api = \"v2\" with protocol = \"grpc\"")
    if backend == "torchserve" and transport == "http" and api != "v1":
        raise ConfigError(f"{key}.api", "TorchServe over HTTP is spoken through its KServe envelope (api = \"v1\"); "
                                        "for the Open Inference Protocol use protocol = \"grpc\" with api = \"v2\"")
    if api == "v1" and backend == "triton":
        raise ConfigError(f"{key}.api", "Triton speaks only the Open Inference Protocol (v2)")
    if backend == "simulated":
        return PredictorProtocol.SIMULATED
    if backend == "torchserve":
        if transport == "http":
            return PredictorProtocol.TORCHSERVE_KSERVE_HTTP
        return PredictorProtocol.TORCHSERVE_PREDICTIONS_GRPC if api == "v1" else PredictorProtocol.TORCHSERVE_OIP_GRPC
    if transport == "grpc":
        return PredictorProtocol.OIP_GRPC  # api is "v2": v1 over gRPC was refused above
    return PredictorProtocol.KSERVE_V1_HTTP if api == "v1" else PredictorProtocol.OIP_HTTP


def _addresses(raw: dict, key: str, required: bool) -> tuple[str, ...]:
    """`url`: one address, or a list of replica addresses of the same model."""
    given = raw.get("url")
    if given is None:
        if required:
            raise ConfigError(f"{key}.url", "is required")
        return ()
    values = given if isinstance(given, list) else [given]
    if not values or not all(isinstance(v, str) and v for v in values):
        raise ConfigError(f"{key}.url", f"must be an address or a non-empty list of addresses, got {given!r}")
    if len(set(values)) != len(values):
        raise ConfigError(f"{key}.url", "lists the same replica twice")
    return tuple(values)


def _dns_replicas(raw: dict, key: str, addresses: tuple[str, ...], tls: bool, wanted: bool) -> float | None:
    """`dns_replicas`: every address the url's host name resolves to is a replica, found
    again every `dns_refresh_ms`; the seconds between lookups, or None (the url as it is)."""
    if not wanted:
        if "dns_refresh_ms" in raw:
            raise ConfigError(f"{key}.dns_refresh_ms", "applies only with dns_replicas = true")
        return None
    if len(addresses) != 1:
        raise ConfigError(f"{key}.url", "with dns_replicas = true, name one host name, whose addresses are the replicas")
    url = addresses[0]
    try:
        port = urlsplit(url if "://" in url else f"//{url}").port
    except ValueError:
        port = None
    if port is None:
        raise ConfigError(f"{key}.url", f"with dns_replicas = true, name a host name and a port, got '{url}'")
    if tls:
        # Each replica is reached by its IP address, which a certificate for the name does not cover.
        raise ConfigError(f"{key}.dns_replicas", "cannot be used with TLS to the predictor: each replica is reached "
                                                 "by its IP address, which the predictor's certificate does not name")
    return value(MODELS["dns_refresh_ms"], raw, key)


_WITH_BASE_PATH = frozenset({PredictorProtocol.OPENAI_HTTP, PredictorProtocol.SCORE_HTTP, PredictorProtocol.RERANK_HTTP})


def _base_path(raw: dict, key: str, protocol: PredictorProtocol) -> str:
    """Where a JSON API server's routes start: `<base_path>/embeddings`, `/score`, `/rerank`.
    An empty one is the server's root, not the default: read apart."""
    if "base_path" not in raw:
        return DEFAULT_BASE_PATH
    if protocol not in _WITH_BASE_PATH:
        raise ConfigError(f"{key}.base_path", "applies only to api = \"openai\", \"score\" or \"rerank\"")
    path = raw["base_path"]
    if not isinstance(path, str):
        raise ConfigError(f"{key}.base_path", f"must be a non-empty string, got {path!r}")
    path = path.rstrip("/")
    if path and not path.startswith("/"):
        raise ConfigError(f"{key}.base_path", f"must start with / (or be empty, the server's root), got {path!r}")
    return path
