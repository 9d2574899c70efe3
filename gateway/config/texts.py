"""The `[models.embeddings]` and `[models.rerank]` tables: a model whose rows are texts,
embedded into vectors (`gateway.embeddings`), or (query, document) pairs, scored
(`gateway.rerank`).

Each key is declared once, on its field of EmbeddingsConfig or RerankConfig. The rules
between keys and the predictor (which predictors take texts or score pairs, token ids
passed as they are, a tokenizer or an encoding readable now) are the functions here. It
knows the predictor protocols, not how a predictor is reached.
"""
from __future__ import annotations

from dataclasses import dataclass

from backends.settings import PredictorProtocol
from gateway.config.read import ConfigError, only, read, table
from gateway.config_keys import Kind, Table, declared, key
from gateway.tokens import (
    DEFAULT_TOKEN_ENCODING,
    TOKEN_ENCODINGS,
    EncodingUnavailable,
    TokenCounter,
    TokenizerUnavailable,
    token_decoder,
)
from wire.rerank import DEFAULT_MAX_TOKENS_PER_DOC, DOCUMENT_INPUT, QUERY_INPUT

TOKEN_IDS_AS_IS = "as_is"  # [models.embeddings] token_ids: the predictor's own vocabulary, passed on


@dataclass(frozen=True, slots=True)
class EmbeddingsConfig:
    """The `[models.embeddings]` table: a model whose rows are texts, embedded into vectors
    (`gateway.embeddings`). Set on every model of an OpenAI-compatible predictor."""
    # "" = the estimate (gateway.tokens).
    tokenizer: str = key(Kind.STRING, "", "The model's tokenizer.json: exact token counts (the embeddings extra); "
                                          "unset: an estimate.", file=True)
    input: str = key(Kind.STRING, "", "The BYTES input the texts travel in.", shown="the only input, else text")
    output: str = key(Kind.STRING, "", "The FP32 output holding the vectors.", shown="the only FP32 output")
    deduplicate: bool = key(Kind.BOOLEAN, True, "Identical texts in one batch are sent once.")
    # An OpenAI client's token ids: decoded back to text in this tiktoken encoding
    # (gateway.tokens), or TOKEN_IDS_AS_IS: sent to an OpenAI-compatible predictor as they are.
    token_ids: str = key(Kind.STRING, DEFAULT_TOKEN_ENCODING,
                         "What an OpenAI client's token ids (LangChain's default) mean: a tiktoken encoding "
                         f"({', '.join(TOKEN_ENCODINGS)}) they are decoded in, back to their text; "
                         f"{TOKEN_IDS_AS_IS}: the predictor's own ids, sent to it as they are (api = \"openai\").",
                         choices=(*TOKEN_ENCODINGS, TOKEN_IDS_AS_IS))
    token_ids_file: str = key(Kind.STRING, "", "The encoding's .tiktoken file; unset: tiktoken's cache "
                                               "(TIKTOKEN_CACHE_DIR, else its default). Never downloaded.",
                              shown="tiktoken's cache", file=True)


@dataclass(frozen=True, slots=True)
class RerankConfig:
    """The `[models.rerank]` table: a cross-encoder whose rows are (query, document) pairs,
    scored (`gateway.rerank`). Set on every model of a score or rerank predictor."""
    tokenizer: str = key(Kind.STRING, "", "The model's tokenizer.json: exact token counts of each pair (the "
                                          "embeddings extra); unset: an estimate.", file=True)
    query_input: str = key(Kind.STRING, QUERY_INPUT, "OIP: the BYTES input holding each pair's query.")
    document_input: str = key(Kind.STRING, DOCUMENT_INPUT, "OIP: the BYTES input holding each pair's document.")
    output: str = key(Kind.STRING, "", "OIP: the FP32 output holding the scores, [rows, 1].",
                      shown="the only FP32 output")
    # A query is cut, not refused, as Cohere cuts what is too long (docs/rerank.md says why).
    max_tokens_per_doc: int = key(Kind.INTEGER, DEFAULT_MAX_TOKENS_PER_DOC,
                                  "The most tokens of a Cohere client's query or document the predictor is sent: a "
                                  "longer query is cut to it, each document to the request's max_tokens_per_doc, "
                                  "at most this.", minimum=1)


EMBEDDINGS = Table("models[].embeddings", "[models.embeddings]", declared(EmbeddingsConfig))
RERANK = Table("models[].rerank", "[models.rerank]", declared(RerankConfig))

# The predictors that take texts as a BYTES tensor: OIP (Triton, KServe v2), OpenAI's API.
_TAKE_TEXTS = frozenset({PredictorProtocol.OIP_HTTP, PredictorProtocol.OIP_GRPC, PredictorProtocol.OPENAI_HTTP,
                         PredictorProtocol.SIMULATED})
# The predictors that score pairs: OIP (two BYTES inputs), vLLM's score API, Cohere's rerank API.
_SCORE_PAIRS = frozenset({PredictorProtocol.OIP_HTTP, PredictorProtocol.OIP_GRPC, PredictorProtocol.SCORE_HTTP,
                          PredictorProtocol.RERANK_HTTP, PredictorProtocol.SIMULATED})
_OIP = frozenset({PredictorProtocol.OIP_HTTP, PredictorProtocol.OIP_GRPC})


def embeddings(raw: dict, key: str, protocol: PredictorProtocol, simulated_task: str) -> EmbeddingsConfig | None:
    """The `[models.embeddings]` table; a model of an OpenAI-compatible predictor (or the
    simulated encoder) is an embedding model even without it."""
    implied = protocol is PredictorProtocol.OPENAI_HTTP or simulated_task == "embed"
    if "embeddings" not in raw and not implied:
        return None
    where = f"{key}.embeddings"
    if protocol not in _TAKE_TEXTS or (protocol is PredictorProtocol.SIMULATED and not implied):
        raise ConfigError(where, "an embedding model's texts travel as a BYTES tensor: it needs a tensor predictor "
                                 "(Triton, KServe v2, an OpenAI-compatible server with api = \"openai\", or "
                                 "the simulated model with task = \"embed\")")
    given = table(raw, "embeddings", where)
    config = EmbeddingsConfig(**read(EMBEDDINGS, given, where))
    _tokenizer(config.tokenizer, where)
    _token_ids(given, where, config, protocol)
    return config


def rerank(raw: dict, key: str, protocol: PredictorProtocol, simulated_task: str) -> RerankConfig | None:
    """The `[models.rerank]` table; a model of a score or rerank predictor (or the simulated
    reranker) is a rerank model even without it."""
    implied = protocol in (PredictorProtocol.SCORE_HTTP, PredictorProtocol.RERANK_HTTP) or simulated_task == "rerank"
    if "rerank" not in raw and not implied:
        return None
    where = f"{key}.rerank"
    if protocol not in _SCORE_PAIRS or (protocol is PredictorProtocol.SIMULATED and not implied):
        raise ConfigError(where, "a rerank model's pairs travel as two BYTES tensors or a score API: it needs "
                                 "Triton, KServe v2, api = \"score\" or \"rerank\", or the simulated model "
                                 "with task = \"rerank\"")
    given = table(raw, "rerank", where)
    only(given, where, RERANK.names())
    if protocol not in _OIP:  # said before what is wrong with the value: no value would do
        for name in sorted({"query_input", "document_input", "output"} & given.keys()):
            raise ConfigError(f"{where}.{name}", "names a tensor of an Open Inference Protocol predictor "
                                                 "(Triton, KServe v2); this one's are fixed")
    config = RerankConfig(**read(RERANK, given, where))
    if config.query_input == config.document_input:
        raise ConfigError(f"{where}.document_input", f"the query and the document travel in two inputs; both "
                                                     f"are named '{config.query_input}'")
    _tokenizer(config.tokenizer, where)
    return config


def _tokenizer(path: str, where: str) -> None:
    """A tokenizer named must load now, not when its first text arrives."""
    if path:
        try:
            TokenCounter(path)
        except TokenizerUnavailable as exc:
            raise ConfigError(f"{where}.tokenizer", str(exc)) from None


def _token_ids(given: dict, where: str, config: EmbeddingsConfig, protocol: PredictorProtocol) -> None:
    """`token_ids` and `token_ids_file`: an encoding named here must be readable now; the
    default one is looked for when the model starts, and token ids are refused without it."""
    if config.token_ids == TOKEN_IDS_AS_IS:
        if protocol is not PredictorProtocol.OPENAI_HTTP:
            raise ConfigError(f"{where}.token_ids", "only an OpenAI-compatible predictor (api = \"openai\") takes "
                                                    "token ids; this one takes texts: name the tiktoken encoding "
                                                    "the ids are decoded in")
        if config.token_ids_file:
            raise ConfigError(f"{where}.token_ids_file", "token ids passed as they are are not decoded: "
                                                         "no encoding file is read")
        return
    if "token_ids" in given or "token_ids_file" in given:
        try:
            token_decoder(config.token_ids, config.token_ids_file)
        except EncodingUnavailable as exc:
            raise ConfigError(f"{where}.{'token_ids_file' if config.token_ids_file else 'token_ids'}",
                              str(exc)) from None
