"""Config: defaults, the documented keys, and errors that name the key and the problem."""
from __future__ import annotations

import pytest

from backends.settings import PredictorProtocol
from gateway import config
from gateway.batching.config import PairSpec, PlainSpec


def test_embedded_default_serves_demo_on_the_simulated_predictor():
    default = config.embedded_default()
    assert [m.name for m in default.models] == ["demo"]
    assert default.models[0].predictor.server == "simulated"
    assert (default.server.http_port, default.server.grpc_port) == (8080, 8081)


def test_a_full_model_entry_parses_with_its_defaults():
    parsed = config.parse({"models": [{
        "name": "double", "backend": "triton", "protocol": "grpc", "url": "127.0.0.1:8001",
        "batching": {"policy": "window", "max_batch_size": 16, "max_latency_ms": 250, "timeout_s": 5,
                     "max_inflight": 2, "max_queue": 100},
    }]})
    model = parsed.models[0]
    assert model.predictor.model == "double"
    assert model.batching.policy == "window" and model.batching.max_latency_s == 0.25
    assert (model.batching.max_batch_size, model.batching.max_inflight, model.batching.max_queue) == (16, 2, 100)


def test_kserve_http_defaults_to_v1_and_can_choose_v2():
    v1 = config.parse({"models": [{"name": "m", "backend": "kserve", "url": "http://127.0.0.1:1"}]})
    v2 = config.parse({"models": [{"name": "m", "backend": "kserve", "url": "http://127.0.0.1:1", "api": "v2"}]})
    assert (v1.models[0].predictor.protocol, v2.models[0].predictor.protocol) == (
        PredictorProtocol.KSERVE_V1_HTTP, PredictorProtocol.OIP_HTTP)


def test_declared_signature():
    parsed = config.parse({"models": [{"name": "m", "backend": "kserve", "url": "http://x:1",
                                       "inputs": [{"name": "X", "datatype": "INT64", "shape": [-1, 3]}],
                                       "outputs": [{"name": "Y", "datatype": "FP32"}]}]})
    signature = parsed.models[0].signature
    assert signature.inputs[0].shape == (-1, 3) and signature.outputs[0].shape == (-1, -1)


def test_connection_limits_have_production_defaults_and_can_be_set():
    defaults = config.parse({"models": [{"name": "m"}]}).server
    assert (defaults.header_timeout_s, defaults.body_timeout_s, defaults.idle_timeout_s) == (10.0, 60.0, 75.0)
    assert defaults.max_connections == 0  # from the open-files limit
    assert defaults.max_concurrent_streams == 256
    assert defaults.http_listen_backlog == 4096  # somaxconn's usual value and gRPC's, not Tornado's 128
    server = config.parse({"models": [{"name": "m"}], "server": {
        "header_timeout_s": 2, "body_timeout_s": 30.5, "idle_timeout_s": 5, "max_connections": 100,
        "max_concurrent_streams": 64, "http_listen_backlog": 512}}).server
    assert (server.header_timeout_s, server.body_timeout_s, server.idle_timeout_s) == (2, 30.5, 5)
    assert (server.max_connections, server.max_concurrent_streams, server.http_listen_backlog) == (100, 64, 512)


@pytest.mark.parametrize("document, key, problem", [
    ({}, "models", "at least one"),
    ({"models": [{"backend": "triton", "url": "http://x:1"}]}, "models[0].name", "required"),
    ({"models": [{"name": "m", "backend": "onnx"}]}, "models[0].backend", "must be one of"),
    ({"models": [{"name": "m", "backend": "triton"}]}, "models[0].url", "required"),
    ({"models": [{"name": "m", "backend": "triton", "url": "127.0.0.1:8000"}]}, "models[0].url", "http://"),
    ({"models": [{"name": "m", "batching": {"max_batch_size": 0}}]}, "models[0].batching.max_batch_size", ">= 1"),
    ({"models": [{"name": "m", "batching": {"max_batch_size": "big"}}]}, "models[0].batching.max_batch_size",
     "integer"),
    ({"models": [{"name": "m", "batching": {"policy": "eager"}}]}, "models[0].batching.policy", "adaptive"),
    ({"models": [{"name": "m", "batching": {"max_latency": 5}}]}, "models[0].batching.max_latency", "unknown key"),
    ({"models": [{"name": "m"}, {"name": "m"}]}, "models[1].name", "duplicate"),
    ({"models": [{"name": "m", "backend": "kserve", "protocol": "grpc", "url": "x:1", "api": "v1"}]}, "models[0].api",
     "HTTP only"),
    ({"models": [{"name": "m", "inputs": [{"name": "X", "datatype": "FLOAT"}]}]}, "models[0].inputs[0].datatype",
     "unknown"),
    ({"models": [{"name": "m"}], "server": {"http_port": 70000}}, "server.http_port", "<= 65535"),
    ({"models": [{"name": "m"}], "server": {"header_timeout_s": 0}}, "server.header_timeout_s", "positive"),
    ({"models": [{"name": "m", "batching": {"policy": "deadline"}}]}, "models[0].batching.policy", "slo_ms"),
    ({"models": [{"name": "m", "batching": {"policy": "window", "slo_ms": 100}}]}, "models[0].batching.slo_ms",
     "go together"),
    ({"models": [{"name": "m", "batching": {"slo_ms": 0}}]}, "models[0].batching.slo_ms", "positive"),
    ({"models": [{"name": "m", "batching": {"priority_levels": 2, "default_priority_level": 3}}]},
     "models[0].batching.default_priority_level", "<= 2"),
    ({"models": [{"name": "m", "batching": {"default_priority_level": 1}}]},
     "models[0].batching.default_priority_level", "<= 0"),
    ({"models": [{"name": "m", "batching": {"max_inflight": "many"}}]}, "models[0].batching.max_inflight",
     'or "auto"'),
    ({"models": [{"name": "m", "batching": {"max_inflight": 2, "inflight_ceiling": 4}}]},
     "models[0].batching.inflight_ceiling", 'only to max_inflight = "auto"'),
    ({"models": [{"name": "m", "batching": {"max_inflight": "auto", "inflight_ceiling": 0}}]},
     "models[0].batching.inflight_ceiling", ">= 1"),
    ({"models": [{"name": "m"}], "server": {"idle_timeout_s": float("nan")}}, "server.idle_timeout_s", "positive"),
    ({"models": [{"name": "m"}], "server": {"body_timeout_s": "1m"}}, "server.body_timeout_s", "a number"),
    ({"models": [{"name": "m"}], "server": {"max_connections": -1}}, "server.max_connections", ">= 0"),
    ({"models": [{"name": "m"}], "server": {"max_concurrent_streams": 0}}, "server.max_concurrent_streams", ">= 1"),
    ({"models": [{"name": "m"}], "server": {"http_listen_backlog": 0}}, "server.http_listen_backlog", ">= 1"),
    ({"models": [{"name": "m"}], "server": {"http_listen_backlog": 1 << 20}}, "server.http_listen_backlog", "<= 65535"),
    ({"models": [{"name": "m"}], "server": {"http_listen_backlog": "4k"}}, "server.http_listen_backlog", "an integer"),
    ({"models": [{"name": "m"}], "extra": 1}, "extra", "unknown key"),
])
def test_errors_name_the_key_and_the_problem(document, key, problem):
    with pytest.raises(config.ConfigError) as caught:
        config.parse(document)
    assert caught.value.key == key
    assert problem in caught.value.problem


def test_load_reports_bad_toml_and_missing_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[models]\nname=")
    with pytest.raises(config.ConfigError, match="not valid TOML"):
        config.load(bad)
    with pytest.raises(config.ConfigError, match="file not found"):
        config.load(tmp_path / "absent.toml")


def torchserve(**fields) -> config.ModelConfig:
    return config.parse({"models": [{"name": "m", "backend": "torchserve", **fields}]}).models[0]


@pytest.mark.parametrize("fields, key, message", [
    ({"url": "http://127.0.0.1:1", "api": "v2"}, "models[0].api", "KServe envelope"),
    ({"url": "127.0.0.1:1"}, "models[0].url", "http://host:port"),
])
def test_torchserve_config_errors_name_the_key(fields, key, message):
    with pytest.raises(config.ConfigError) as caught:
        torchserve(**fields)
    assert caught.value.key == key and message in caught.value.problem


def test_the_kserve_v1_rule_still_holds_for_kserve():
    with pytest.raises(config.ConfigError, match="HTTP only"):
        config.parse({"models": [{"name": "m", "backend": "kserve", "protocol": "grpc", "url": "x:1", "api": "v1"}]})


def test_slo_ms_turns_deadline_aware_batching_on():
    batching = config.parse({"models": [{"name": "m", "batching": {"slo_ms": 250}}]}).models[0].batching
    assert batching.policy == "deadline" and batching.slo_s == 0.25
    assert config.parse({"models": [{"name": "m"}]}).models[0].batching.slo_s is None


def test_max_inflight_auto_is_learned_up_to_a_ceiling():
    batching = config.parse({"models": [{"name": "m", "batching": {"max_inflight": "auto"}}]}).models[0].batching
    assert batching.auto_inflight and batching.inflight_ceiling == 8
    batching = config.parse({"models": [{"name": "m", "batching": {"max_inflight": "auto", "inflight_ceiling": 3}}]}
                            ).models[0].batching
    assert batching.auto_inflight and batching.inflight_ceiling == 3
    assert not config.parse({"models": [{"name": "m", "batching": {"max_inflight": 2}}]}).models[0].batching.auto_inflight


def test_priority_levels_default_to_the_lowest_level():
    batching = config.parse({"models": [{"name": "m", "batching": {"priority_levels": 3}}]}).models[0].batching
    assert (batching.priority_levels, batching.default_priority_level) == (3, 3)


# -- variable-length inputs ---------------------------------------------------------------------------

SEQUENCE = {"name": "m", "backend": "triton", "protocol": "grpc", "url": "127.0.0.1:1",
            "inputs": [{"name": "IDS", "datatype": "INT64", "shape": [-1, -1], "pad": {"dim": 1, "value": 0}},
                       {"name": "LEN", "datatype": "INT32", "shape": [-1, 1], "generate": "length"}],
            "outputs": [{"name": "HIDDEN", "datatype": "FP32", "shape": [-1, -1, 8], "follows_pad": 1},
                        {"name": "POOLED", "datatype": "FP32", "shape": [-1, 8]}],
            "batching": {"buckets": [32, 64, 128], "max_batch_cost": 4096}}


def test_padded_inputs_buckets_generated_inputs_and_cost_are_read_into_batching():
    from gateway.batching.config import GeneratedInput, PaddedInput, PaddedSpec

    batching = config.parse({"models": [SEQUENCE]}).models[0].batching
    assert batching.max_batch_cost == 4096
    assert batching.rows == PaddedSpec(inputs=(PaddedInput("IDS", 1, 0),), buckets=(32, 64, 128),
                                             outputs=(("HIDDEN", 1),), generated=(GeneratedInput("LEN", "INT32", "length"),))
    assert config.parse({"models": [{**SEQUENCE, "batching": {}}]}).models[0].batching.rows.buckets == ()
    assert config.parse({"models": [{"name": "m"}]}).models[0].batching.rows == PlainSpec()


def _with(inputs=None, outputs=None, **batching):
    return {**SEQUENCE, "inputs": inputs or SEQUENCE["inputs"], "outputs": outputs or SEQUENCE["outputs"],
            "batching": batching}


@pytest.mark.parametrize("model, key, problem", [
    (_with([{"name": "IDS", "datatype": "INT64", "shape": [-1, 4], "pad": {"dim": 1}}]), "models[0].inputs[0].pad.dim",
     "dimension 1 of shape [-1, 4] must be -1"),
    (_with([{"name": "IDS", "datatype": "INT64", "shape": [-1, -1], "pad": {"dim": 2}}]), "models[0].inputs[0].pad.dim",
     "dimension 2 of shape [-1, -1] must be -1"),
    (_with([{"name": "IDS", "datatype": "INT64", "shape": [-1, -1], "pad": {"dim": 1, "value": 0.5}}]),
     "models[0].inputs[0].pad.value", "must be a value of INT64"),
    (_with([{"name": "IDS", "datatype": "UINT8", "shape": [-1, -1], "pad": {"dim": 1, "value": 300}}]),
     "models[0].inputs[0].pad.value", "must be a value of UINT8"),
    (_with([{"name": "IDS", "datatype": "BYTES", "shape": [-1, -1], "pad": {"dim": 1}}]), "models[0].inputs[0].pad",
     "BYTES inputs cannot be padded"),
    (_with([{"name": "IDS", "datatype": "INT64", "shape": [-1, -1], "pad": {"dim": 1, "fill": 0}}]),
     "models[0].inputs[0].pad.fill", "unknown key"),
    (_with([SEQUENCE["inputs"][0], {"name": "LEN", "datatype": "INT32", "shape": [-1, -1], "generate": "length"}]),
     "models[0].inputs[1].generate", "a generated length has shape [-1, 1]"),
    (_with([SEQUENCE["inputs"][0], {"name": "LEN", "datatype": "INT32", "shape": [-1, 1], "generate": "count"}]),
     "models[0].inputs[1].generate", "must be one of length, mask"),
    (_with(outputs=[{"name": "HIDDEN", "datatype": "FP32", "shape": [-1, 4], "follows_pad": 1}]),
     "models[0].outputs[0].follows_pad", "dimension 1 of shape [-1, 4] must be -1"),
    (_with(buckets=[64, 32]), "models[0].batching.buckets", "ascending"),
    (_with(buckets=[0]), "models[0].batching.buckets", "ascending lengths >= 1"),
    (_with(max_batch_cost=0), "models[0].batching.max_batch_cost", "must be >= 1"),
    ({"name": "m", "batching": {"buckets": [8]}}, "models[0].batching.buckets", "needs an input with a variable dimension"),
    ({"name": "m", "batching": {"max_batch_cost": 8}}, "models[0].batching.max_batch_cost", "needs an input"),
])
def test_variable_length_config_errors_name_the_key(model, key, problem):
    with pytest.raises(config.ConfigError) as error:
        config.parse({"models": [model]})
    assert error.value.key == key and problem in error.value.problem


def test_workers_default_to_one_and_take_a_count_or_auto_for_the_cores():
    import os

    def server(**keys):
        return config.parse({"server": keys, "models": [{"name": "m", "backend": "simulated"}]}).server

    assert server().workers == 1 and server(workers=4).workers == 4
    assert server(workers="auto").workers == len(os.sched_getaffinity(0))
    for bad in (0, -1, 65, "many", 2.5, True):
        with pytest.raises(config.ConfigError, match="server.workers"):
            server(workers=bad)
    assert config.workers("3", "--workers") == 3  # the command line's form


# -- text-embedding models ---------------------------------------------------------------------------

OPENAI = {"name": "e", "backend": "kserve", "api": "openai", "url": "http://127.0.0.1:1"}


def test_a_model_of_an_openai_predictor_embeds_texts_with_a_token_budget_by_default():
    from backends.settings import PredictorProtocol
    from gateway.batching.config import TextSpec

    model = config.parse({"models": [OPENAI]}).models[0]
    assert model.predictor.protocol is PredictorProtocol.OPENAI_HTTP and model.predictor.base_path == "/openai/v1"
    assert model.kind == config.EmbeddingsConfig()
    assert model.batching.max_batch_cost == config.DEFAULT_MAX_BATCH_TOKENS
    assert model.batching.rows == TextSpec()
    assert config.parse({"models": [{"name": "m"}]}).models[0].kind is None


def test_embedding_keys_are_read(tmp_path):
    from tests.kinds.test_tokens import wordpiece_file

    tokenizer = wordpiece_file(tmp_path)
    model = config.parse({"models": [{
        **OPENAI, "base_path": "/v1/",
        "embeddings": {"tokenizer": tokenizer, "deduplicate": False},
        "batching": {"max_batch_tokens": 8192, "token_cost": "sum", "buckets": [64, 512]}}]}).models[0]
    assert model.predictor.base_path == "/v1"
    assert model.kind == config.EmbeddingsConfig(tokenizer=tokenizer, deduplicate=False)
    assert model.batching.max_batch_cost == 8192
    assert model.batching.rows.summed and model.batching.rows.buckets == (64, 512)
    triton = config.parse({"models": [{"name": "t", "backend": "triton", "url": "127.0.0.1:1", "protocol": "grpc",
                                       "embeddings": {"input": "TEXT", "output": "EMBEDDING"}}]}).models[0]
    assert (triton.kind.input, triton.kind.output) == ("TEXT", "EMBEDDING")
    simulated = config.parse({"models": [{"name": "s", "simulated": {"task": "embed"}}]}).models[0]
    assert isinstance(simulated.kind, config.EmbeddingsConfig) and simulated.predictor.simulated_task == "embed"


def test_token_ids_keys_are_read_and_an_encoding_named_is_read_at_once():
    from tests.kinds.test_tokens import cl100k_file

    default = config.parse({"models": [OPENAI]}).models[0].kind
    assert (default.token_ids, default.token_ids_file) == ("cl100k_base", "")  # looked for when it starts
    named = config.parse({"models": [{**OPENAI, "embeddings": {"token_ids_file": cl100k_file()}}]}).models[0]
    assert (named.kind.token_ids, named.kind.token_ids_file) == ("cl100k_base", cl100k_file())
    as_is = config.parse({"models": [{**OPENAI, "embeddings": {"token_ids": "as_is"}}]}).models[0]
    assert as_is.kind.token_ids == "as_is"


def test_token_ids_errors_name_the_key(tmp_path, monkeypatch):
    from tests.kinds.test_tokens import cl100k_file

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty: nothing is downloaded
    cases = [
        ({"token_ids": "gpt2"}, "token_ids", "must be one of cl100k_base"),
        ({"token_ids": "o200k_base"}, "token_ids", "no o200k_base file at"),
        ({"token_ids": "o200k_base", "token_ids_file": cl100k_file()}, "token_ids_file",
         "is not tiktoken's o200k_base file"),
        ({"token_ids_file": str(tmp_path / "absent.tiktoken")}, "token_ids_file", "no such file"),
        ({"token_ids": "as_is", "token_ids_file": cl100k_file()}, "token_ids_file", "are not decoded"),
    ]
    for embeddings, key, problem in cases:
        with pytest.raises(config.ConfigError) as error:
            config.parse({"models": [{**OPENAI, "embeddings": embeddings}]})
        assert error.value.key == f"models[0].embeddings.{key}" and problem in str(error.value), error.value
    with pytest.raises(config.ConfigError) as error:
        config.parse({"models": [{"name": "s", "simulated": {"task": "embed"}, "embeddings": {"token_ids": "as_is"}}]})
    assert error.value.key == "models[0].embeddings.token_ids" and "only an OpenAI-compatible predictor" in str(error.value)


@pytest.mark.parametrize("model, key, problem", [
    ({**OPENAI, "backend": "triton"}, "models[0].api", "use it with backend = \"kserve\""),
    ({**OPENAI, "protocol": "grpc", "url": "127.0.0.1:1"}, "models[0].api", "over HTTP"),
    ({"name": "m", "base_path": "/x"}, "models[0].base_path", "applies only to api = \"openai\""),
    ({**OPENAI, "base_path": "v1"}, "models[0].base_path", "must start with /"),
    ({**OPENAI, "embeddings": {"tokenizer": "/nonexistent/tokenizer.json"}}, "models[0].embeddings.tokenizer",
     "no such file"),
    ({"name": "m", "backend": "kserve", "url": "http://127.0.0.1:1", "embeddings": {}}, "models[0].embeddings",
     "a tensor predictor"),
    ({**OPENAI, "embeddings": {"pooling": "mean"}}, "models[0].embeddings.pooling", "unknown key"),
    ({**OPENAI, "batching": {"max_batch_cost": 10}}, "models[0].batching.max_batch_cost", "use max_batch_tokens"),
    ({**OPENAI, "batching": {"max_batch_tokens": 0}}, "models[0].batching.max_batch_tokens", "must be >= 1"),
    ({**OPENAI, "batching": {"token_cost": "max"}}, "models[0].batching.token_cost", "must be one of"),
    ({"name": "m", "batching": {"max_batch_tokens": 10}}, "models[0].batching.max_batch_tokens",
     "add its [models.embeddings] table"),
    ({"name": "m", "simulated": {"task": "classify"}}, "models[0].simulated.task", "must be one of"),
])
def test_embedding_config_errors_name_the_key(model, key, problem):
    with pytest.raises(config.ConfigError) as error:
        config.parse({"models": [model]})
    assert error.value.key == key and problem in error.value.problem


def test_the_demand_smoothing_is_read_in_milliseconds_and_must_be_positive():
    parsed = config.parse({"models": [{"name": "m", "batching": {"demand_smoothing_ms": 30000}}]})
    assert parsed.models[0].batching.demand_smoothing_s == 30.0
    with pytest.raises(config.ConfigError, match="demand_smoothing_ms"):
        config.parse({"models": [{"name": "m", "batching": {"demand_smoothing_ms": 0}}]})


# -- rerank models ([models.rerank]) --------------------------------------------------------

SCORE = {"name": "r", "backend": "kserve", "api": "score", "url": "http://127.0.0.1:1", "base_path": "/v1"}


def test_a_rerank_model_batches_pairs_by_their_tokens_whatever_its_predictor():
    parsed = config.parse({"models": [
        SCORE, {**SCORE, "name": "c", "api": "rerank", "base_path": ""},
        {"name": "t", "backend": "triton", "url": "127.0.0.1:1", "protocol": "grpc",
         "rerank": {"query_input": "q", "document_input": "d", "output": "s"}},
        {"name": "s", "simulated": {"task": "rerank"}, "batching": {"max_batch_tokens": 4096, "token_cost": "sum"}}]})
    score, cohere, triton, simulated = parsed.models
    assert isinstance(score.kind, config.RerankConfig) and score.predictor.protocol.value == "score-http"
    assert score.predictor.base_path == "/v1" and cohere.predictor.base_path == ""
    # One query a batch is the predictor's to say (Backend.one_query_per_call: tests/kinds/test_rerank.py).
    assert all(type(m.batching.rows) is PairSpec and not m.batching.rows.one_query for m in parsed.models)
    assert triton.batching.rows.query_input == "q" and triton.kind.document_input == "d"
    assert score.batching.rows.query_input == "query" and score.batching.max_batch_cost == 16384
    assert simulated.batching.max_batch_cost == 4096 and simulated.batching.rows.summed


@pytest.mark.parametrize("model, key, problem", [
    ({**SCORE, "backend": "triton"}, "models[0].api", "use it with backend = \"kserve\""),
    ({**SCORE, "api": "rerank", "protocol": "grpc", "url": "127.0.0.1:1"}, "models[0].api", "over HTTP"),
    ({**SCORE, "rerank": {"query_input": "q"}}, "models[0].rerank.query_input", "Open Inference Protocol"),
    ({**SCORE, "rerank": {"nope": 1}}, "models[0].rerank.nope", "unknown key"),
    ({"name": "t", "backend": "triton", "url": "http://127.0.0.1:1", "rerank": {"document_input": "query"}},
     "models[0].rerank.document_input", "both are named 'query'"),
    ({"name": "t", "backend": "triton", "url": "http://127.0.0.1:1", "rerank": {}, "embeddings": {}}, "models[0].rerank",
     "not both"),
    ({"name": "k", "backend": "kserve", "url": "http://127.0.0.1:1", "rerank": {}}, "models[0].rerank",
     "two BYTES tensors"),
    ({"name": "s", "rerank": {}}, "models[0].rerank", "task = \"rerank\""),
    ({**SCORE, "rerank": {"tokenizer": "/absent/tokenizer.json"}}, "models[0].rerank.tokenizer", "no such file"),
    ({**SCORE, "batching": {"max_batch_cost": 10}}, "models[0].batching.max_batch_cost", "use max_batch_tokens"),
    ({"name": "t", "backend": "triton", "url": "http://127.0.0.1:1", "base_path": "/v1"}, "models[0].base_path",
     "applies only to api"),
])
def test_rerank_config_errors_name_the_key(model, key, problem):
    with pytest.raises(config.ConfigError) as error:
        config.parse({"models": [model]})
    assert error.value.key == key and problem in error.value.problem, error.value


DEMO_MODEL = {"name": "demo", "backend": "simulated"}


def test_shared_is_off_without_its_table_and_read_in_milliseconds_with_it(monkeypatch):
    assert not config.parse({"models": [DEMO_MODEL]}).shared.enabled
    shared = config.parse({"models": [DEMO_MODEL], "shared": {"url": "redis://127.0.0.1:6379/2", "timeout_ms": 50,
                                                             "on_unavailable": "refuse"}}).shared
    assert (shared.enabled, shared.timeout_s, shared.slot_expiry_s, shared.on_unavailable, shared.slice) == (
        True, 0.05, 10.0, "refuse", 0.1)
    monkeypatch.setenv("GATEWAY_REDIS_URL", "rediss://:s3cr3t-pass@redis.internal:6380/0")
    from_env = config.parse({"models": [DEMO_MODEL], "shared": {"url_env": "GATEWAY_REDIS_URL"}}).shared
    assert from_env.url == "rediss://:s3cr3t-pass@redis.internal:6380/0"
    assert "s3cr3t-pass" not in repr(from_env) and "redis.internal:6380" in repr(from_env)


@pytest.mark.parametrize(("shared", "key", "problem"), [
    ({}, "shared", "exactly one of url and url_env"),
    ({"url": "redis://h:1/0", "url_env": "X"}, "shared", "exactly one of url and url_env"),
    ({"url": "http://:hunter2@h:1/0"}, "shared.url", "must be redis://"),
    ({"url_env": "GATEWAY_UNSET_REDIS_URL"}, "shared.url_env", "GATEWAY_UNSET_REDIS_URL is unset"),
    ({"url": "redis://h:1/0", "on_unavailable": "wait"}, "shared.on_unavailable", ""),
    ({"url": "redis://h:1/0", "slice": 0}, "shared.slice", ""),
])
def test_shared_config_errors_name_the_key_and_never_repeat_the_url(shared, key, problem):
    with pytest.raises(config.ConfigError) as error:
        config.parse({"models": [DEMO_MODEL], "shared": shared})
    assert str(error.value).startswith(key) and problem in str(error.value)
    assert "hunter2" not in str(error.value)
