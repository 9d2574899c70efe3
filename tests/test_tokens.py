"""gateway/tokens.py: a text's tokens, counted exactly by the model's own tokenizer.json,
or estimated (a quarter of its UTF-8 bytes, rounded up, plus [CLS] and [SEP])."""
from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from gateway.tokens import TokenCounter, TokenizerUnavailable, estimate

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
