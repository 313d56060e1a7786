"""The one batch-translate loop: batch sizes, lazy reading, and a translator that drops rows."""

import pytest

from tfformer.decode.batch_translate import translate_in_batches


def test_batches_are_full_but_the_last_and_keep_the_order():
    calls = []

    def translate(batch):
        calls.append(list(batch))
        return [s.upper() for s in batch]

    got = list(translate_in_batches(translate, ["a", "b", "c", "d", "e"], 2))
    assert calls == [["a", "b"], ["c", "d"], ["e"]]
    assert got == [["A", "B"], ["C", "D"], ["E"]]


def test_a_stream_is_translated_while_it_is_read():
    read = []

    def stream():
        for line in ("x", "y", "z"):
            read.append(line)
            yield line

    batches = translate_in_batches(lambda batch: batch, stream(), 2)
    assert next(batches) == ["x", "y"] and read == ["x", "y"]  # z not read yet


def test_a_translator_that_drops_a_sentence_fails_loudly():
    with pytest.raises(RuntimeError, match="1 translations for 2 sentences"):
        list(translate_in_batches(lambda batch: batch[:1], ["a", "b"], 2))


def test_batch_size_must_be_positive():
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        list(translate_in_batches(lambda batch: batch, [], 0))
