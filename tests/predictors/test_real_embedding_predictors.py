"""The real embedding predictors, talked to DIRECTLY (no gateway), answer what the test
encoder (``embedding_model.embed``: transformers' BertModel, mean pooling, L2 norm) gives
for the same texts: Infinity (its own batching), KServe 0.21.0's ``OpenAIEncoderModel``
(one forward per request) and Triton's ``embed`` (BYTES ``text`` -> FP32 ``embedding``),
as single texts, lists, and base64 where the server speaks OpenAI."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import openai
import pytest
import tritonclient.grpc as triton_grpc

from tests.predictors.harness import (
    EMBEDDING_DIMENSIONS,
    InfinityServer,
    KServeOpenAIServer,
    TritonServer,
    decode_embeddings,
    embedding_model_folder,
    post_embeddings,
    reference_token_counts,
)
from tools.predictor_envs import ensure_env

TOLERANCE = 1e-4
TRITON_TOLERANCE = 1e-5  # numpy forward of the same weights: float32 sums in another order

TEXTS = (
    "Hello world!",
    "x",
    "",  # [CLS] [SEP] alone
    "The gateway batches many small embedding requests into one forward of the model.",
    "Ünïcödé, digits 12345 and punctuation?! (mixed) -- with unknownwords and CamelCase",
    "batching gateway " * 120,  # 242 tokens
    "word " * 700,  # 702 tokens before truncation at 512
)

Reference = dict[str, np.ndarray]


@pytest.fixture(scope="module")
def reference(embedding_reference: Callable[[Sequence[str]], list[list[float]]]) -> Reference:
    """{text: its reference vector}, computed once for all TEXTS in one forward."""
    vectors = np.asarray(embedding_reference(TEXTS), dtype=np.float32)
    assert vectors.shape == (len(TEXTS), EMBEDDING_DIMENSIONS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    return dict(zip(TEXTS, vectors, strict=True))


def expected(reference: Reference, texts: Sequence[str]) -> np.ndarray:
    return np.stack([reference[text] for text in texts])


def vectors_of(answer: dict) -> np.ndarray:
    return np.asarray(decode_embeddings(answer), dtype=np.float32)


def openai_client(base_url: str) -> openai.OpenAI:
    """The official client, unmodified; no proxy from the environment for loopback."""
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60,
                         http_client=openai.DefaultHttpxClient(trust_env=False))


def check_client_answer(base_url: str, reference: Reference, encoding_format: str | None) -> None:
    texts = [TEXTS[0], TEXTS[3], TEXTS[5]]
    options = {} if encoding_format is None else {"encoding_format": encoding_format}
    with openai_client(base_url) as client:
        answer = client.embeddings.create(model="embedding", input=texts, **options)  # type: ignore[arg-type]
    assert [item.index for item in answer.data] == [0, 1, 2] and answer.model == "embedding"
    vectors = np.asarray([item.embedding for item in answer.data], dtype=np.float32)
    np.testing.assert_allclose(vectors, expected(reference, texts), atol=TOLERANCE, rtol=0)


def check_answer(answer: dict, texts: Sequence[str], reference: Reference) -> None:
    assert answer["object"] == "list" and answer["model"] == "embedding"
    assert [item["index"] for item in answer["data"]] == list(range(len(texts)))
    assert all(item["object"] == "embedding" for item in answer["data"])
    np.testing.assert_allclose(vectors_of(answer), expected(reference, texts), atol=TOLERANCE, rtol=0)


# --- Infinity --------------------------------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS[:6], ids=lambda text: f"{len(text)}-chars")
def test_infinity_embeds_a_single_text_as_the_reference(infinity_server: InfinityServer, reference: Reference,
                                                        text: str) -> None:
    status, answer = infinity_server.embed(text)
    assert status == 200, answer
    check_answer(answer, [text], reference)


def test_infinity_embeds_a_list_in_order_and_counts_characters(infinity_server: InfinityServer,
                                                               reference: Reference) -> None:
    texts = list(TEXTS)
    status, answer = infinity_server.embed(texts)
    assert status == 200, answer
    check_answer(answer, texts, reference)
    # As Infinity ships (no --lengths-via-tokenize), usage counts characters of stripped texts.
    assert answer["usage"]["prompt_tokens"] == sum(len(text.strip()) for text in texts)


def test_infinity_answers_base64_little_endian_float32(infinity_server: InfinityServer, reference: Reference) -> None:
    texts = [TEXTS[0], TEXTS[3], TEXTS[5]]
    status, answer = infinity_server.embed(texts, encoding_format="base64")
    assert status == 200, answer
    assert all(isinstance(item["embedding"], str) for item in answer["data"])
    check_answer(answer, texts, reference)


def test_infinity_dimensions_cut_without_normalising_again(infinity_server: InfinityServer,
                                                            reference: Reference) -> None:
    status, answer = infinity_server.embed(TEXTS[3], dimensions=16)
    assert status == 200, answer
    np.testing.assert_allclose(vectors_of(answer)[0], reference[TEXTS[3]][:16], atol=TOLERANCE, rtol=0)
    status, answer = infinity_server.embed(TEXTS[3], dimensions=EMBEDDING_DIMENSIONS + 1)
    assert status == 400 and "matryoshka_dim" in answer["error"]["message"]


# The client asks for base64 unless told otherwise, and decodes it itself.
@pytest.mark.parametrize("encoding_format", [None, "float"])
def test_infinity_with_the_openai_client(infinity_server: InfinityServer, reference: Reference,
                                         encoding_format: str | None) -> None:
    check_client_answer(infinity_server.base_url, reference, encoding_format)


# --- KServe's OpenAIEncoderModel -------------------------------------------------------------


@pytest.mark.parametrize("encoding_format", [None, "float"])
def test_kserve_openai_with_the_openai_client(kserve_openai_server: KServeOpenAIServer, reference: Reference,
                                              encoding_format: str | None) -> None:
    check_client_answer(kserve_openai_server.base_url, reference, encoding_format)



@pytest.mark.parametrize("text", TEXTS[:6], ids=lambda text: f"{len(text)}-chars")
def test_kserve_openai_embeds_a_single_text_as_the_reference(kserve_openai_server: KServeOpenAIServer,
                                                             reference: Reference, text: str) -> None:
    status, answer = kserve_openai_server.embed(text)
    assert status == 200, answer
    check_answer(answer, [text], reference)


def test_kserve_openai_embeds_a_list_in_one_forward_with_token_usage(kserve_openai_server: KServeOpenAIServer,
                                                                      reference: Reference) -> None:
    texts = list(TEXTS)
    calls = len(kserve_openai_server.calls())
    status, answer = kserve_openai_server.embed(texts)
    assert status == 200, answer
    check_answer(answer, texts, reference)
    tokens = sum(reference_token_counts(ensure_env("kserve-openai"), texts))
    assert answer["usage"]["prompt_tokens"] == answer["usage"]["total_tokens"] == tokens
    new_calls = kserve_openai_server.calls()[calls:]
    assert [(call["texts"], call["tokens"], call["padded"]) for call in new_calls] == [
        (texts, tokens, len(texts) * 512)]  # the longest text is cut at 512


def test_kserve_openai_answers_base64_little_endian_float32(kserve_openai_server: KServeOpenAIServer,
                                                            reference: Reference) -> None:
    texts = [TEXTS[0], TEXTS[3], TEXTS[5]]
    status, answer = kserve_openai_server.embed(texts, encoding_format="base64")
    assert status == 200, answer
    assert all(isinstance(item["embedding"], str) for item in answer["data"])
    check_answer(answer, texts, reference)


def test_kserve_openai_dimensions_cut_and_normalise_again(kserve_openai_server: KServeOpenAIServer,
                                                          reference: Reference) -> None:
    status, answer = kserve_openai_server.embed(TEXTS[3], dimensions=16)
    assert status == 200, answer
    cut = reference[TEXTS[3]][:16]
    np.testing.assert_allclose(vectors_of(answer)[0], cut / np.linalg.norm(cut), atol=TOLERANCE, rtol=0)
    status, answer = kserve_openai_server.embed(TEXTS[3], dimensions=0)
    assert status == 400 and answer["error"]["param"] == "dimensions"


def test_kserve_openai_takes_token_ids_as_given(kserve_openai_server: KServeOpenAIServer,
                                               reference: Reference) -> None:
    from tokenizers import Tokenizer  # the gateway's embeddings extra

    folder = embedding_model_folder(ensure_env("kserve-openai"))
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = [tokenizer.encode(text).ids for text in (TEXTS[0], TEXTS[3])]  # [CLS] ... [SEP] included
    calls = len(kserve_openai_server.calls())
    status, answer = kserve_openai_server.embed(ids)
    assert status == 200, answer
    check_answer(answer, [TEXTS[0], TEXTS[3]], reference)
    assert answer["usage"]["prompt_tokens"] == len(ids[0]) + len(ids[1])
    status, answer = kserve_openai_server.embed(ids[0])  # one text's ids
    assert status == 200 and len(answer["data"]) == 1, answer
    check_answer(answer, [TEXTS[0]], reference)
    assert [call["texts"] for call in kserve_openai_server.calls()[calls:]] == [ids, [ids[0]]]


def test_kserve_openai_refuses_an_unknown_model_and_an_empty_list(kserve_openai_server: KServeOpenAIServer) -> None:
    calls = len(kserve_openai_server.calls())
    status, answer = post_embeddings(kserve_openai_server.embeddings_url, "x", model="other")
    assert status == 404 and "other" in str(answer)
    status, answer = kserve_openai_server.embed([])
    assert status == 400 and answer["error"]["param"] == "input"
    assert len(kserve_openai_server.calls()) == calls  # nothing ran


# --- Triton ----------------------------------------------------------------------------------


def test_triton_embed_metadata(triton_server: TritonServer) -> None:
    metadata = triton_server.metadata("embed")
    assert metadata["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1, 1]}]
    assert metadata["outputs"] == [{"name": "embedding", "datatype": "FP32", "shape": [-1, EMBEDDING_DIMENSIONS]}]


def test_triton_embed_over_rest_equals_the_reference_in_one_execution(triton_server: TritonServer,
                                                                      reference: Reference) -> None:
    texts = list(TEXTS)
    executions, inferences = triton_server.execution_count("embed"), triton_server.inference_count("embed")
    vectors = np.asarray(triton_server.embed(texts), dtype=np.float32)
    np.testing.assert_allclose(vectors, expected(reference, texts), atol=TRITON_TOLERANCE, rtol=0)
    assert triton_server.executions_reaching(executions + 1, "embed") == executions + 1
    assert triton_server.inference_count("embed") == inferences + len(texts)


@pytest.mark.parametrize("text", TEXTS[:3], ids=lambda text: f"{len(text)}-chars")
def test_triton_embed_a_single_text(triton_server: TritonServer, reference: Reference, text: str) -> None:
    vectors = np.asarray(triton_server.embed([text]), dtype=np.float32)
    np.testing.assert_allclose(vectors, expected(reference, [text]), atol=TRITON_TOLERANCE, rtol=0)


def test_triton_embed_over_grpc_with_tritonclient(triton_server: TritonServer, reference: Reference) -> None:
    texts = [TEXTS[0], TEXTS[4], TEXTS[5]]
    client = triton_grpc.InferenceServerClient(triton_server.grpc_address)
    try:
        tensor = triton_grpc.InferInput("text", [len(texts), 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[text.encode()] for text in texts], dtype=np.object_))
        vectors = client.infer("embed", [tensor]).as_numpy("embedding")
    finally:
        client.close()
    assert vectors.shape == (len(texts), EMBEDDING_DIMENSIONS) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, expected(reference, texts), atol=TRITON_TOLERANCE, rtol=0)
