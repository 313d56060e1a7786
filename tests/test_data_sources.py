"""Tests of tfformer.data.sources (data specs, the streaming readers and their line rules,
sharding, the hold-out) and tfformer.data.scan (the one pass that samples the vocabulary), which
reads through them."""

import collections
import dataclasses
import gzip
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from tfformer.data.builtin import builtin_pairs
from tfformer.data.scan import MAX_HOLDOUT, _BottomK, scan
from tfformer.data.sources import DataError, open_corpus, read_tfds, read_tsv


def _write(tmp_path, name, data: bytes):
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return str(path)


def _tsv(pairs) -> bytes:
    return "".join(f"{s}\t{t}\n" for s, t in pairs).encode()


def _pairs(n, start=0):
    return [(f"fuente número {i}", f"target number {i}") for i in range(start, start + n)]


def _all(dataset):
    return [(s.decode(), t.decode()) for s, t in dataset.as_numpy_iterator()]


# ---------------------------------------------------------------------------------------------
# Line rules (read_tsv: dev and test files; the training stream uses the same graph function)
# ---------------------------------------------------------------------------------------------


def test_read_tsv_good_file(tmp_path):
    path = _write(tmp_path, "train.tsv",
                  "\ufeffHola mundo\tHello world\r\n  ¿Qué tal? \t How are you?\n".encode())
    text = read_tsv(path)
    assert text.pairs == [("Hola mundo", "Hello world"), ("¿Qué tal?", "How are you?")]
    assert text.skipped == [] and text.path == path


BAD_LINES = [
    (b"a\tb\nno tab here\nc\td\n", 2, "no TAB separator"),
    (b"a\tb\nc\td\ne\tf\tg\n", 3, "2 TAB separators"),
    (b"a\tb\n \tonly target\n", 2, "empty source side"),
    (b"only source\t  \n", 1, "empty target side"),
    (b"a\tb\nc\td\n\xff\xfe\tx\n", 3, "invalid UTF-8"),
    (b"a\tb\n\nc\td\n", 2, "empty line"),
    (b"a\tb\n\xef\xbb\xbfc\td\n", None, None),  # a BOM is accepted on line 1 only: no error
]


@pytest.mark.parametrize("data,line,reason", BAD_LINES)
def test_read_tsv_bad_line_names_file_and_line(tmp_path, data, line, reason):
    path = _write(tmp_path, "train.tsv", data)
    if line is None:
        assert read_tsv(path).pairs[1] == ("\ufeffc", "d")
        return
    with pytest.raises(DataError) as error:
        read_tsv(path)
    assert isinstance(error.value, ValueError)
    assert str(error.value).startswith(f"{path}:{line}: ")
    assert reason in str(error.value)
    assert error.value.line == line and error.value.path == path


@pytest.mark.parametrize("data,line,reason", BAD_LINES[:-1])
def test_the_training_stream_stops_at_the_same_bad_line(tmp_path, data, line, reason):
    # Streamed, gzip, as the second file: the graph check names the same file and line.
    first = _write(tmp_path, "a.tsv", _tsv(_pairs(3)))
    second = _write(tmp_path, "b.tsv.gz", data)
    corpus = open_corpus(f"tsv:{first}+{second},{first}")
    with pytest.raises(tf.errors.OpError) as error:
        _all(corpus.train_pairs())
    found = DataError.from_graph_error(error.value)
    assert (found.path, found.line) == (second, line) and reason in found.reason


ODD_LINES = (b"\xef\xbb\xbfBOM\tline one\r\n"  # a BOM on line 1, a CRLF
             b"a\tb\n\xef\xbb\xbfc\td\n"  # a BOM elsewhere is text
             b"  sp\x0baces \t\x0c tab\r\r\n"  # ASCII whitespace around both sides, two CRs
             b"nbsp\xc2\xa0\t\xc2\xa0kept\n"  # no-break spaces are not stripped
             b"\n \t \n\t\t\nno tab\n1\t2\t3\n\tx\ny\t\n"
             b"\xff\xfe\tx\n\xe2\x82\tcut\n\xed\xa0\x80\tsurrogate\n"
             b"emoji \xf0\x9f\x99\x82\t\xe4\xb8\xad\r\n\r\nlast\tno newline")


@pytest.mark.parametrize("name", ["odd.tsv", "odd.tsv.gz"])
def test_the_python_line_rules_are_the_graphs(tmp_path, name):
    """tfformer.data.tsv_lines (dev and test sets, no TensorFlow) keeps and refuses the lines the
    training stream's graph rules keep and refuse, for the same reasons."""
    from tfformer.data.records import collect
    from tfformer.data.tsv import tsv_records
    from tfformer.data.tsv_lines import read_pairs

    path = _write(tmp_path, name, ODD_LINES)
    graph = collect(tsv_records([path]), path, skip_bad_lines=True)
    pairs, skipped = read_pairs(path, skip_bad_lines=True)
    assert pairs == graph.pairs and skipped == graph.skipped
    assert len(pairs) >= 5 and len(skipped) >= 9, (pairs, skipped)


def test_read_tsv_skip_bad_lines_counts_them(tmp_path):
    data = b"a\tb\nno tab\nc\td\n\t\n\xffx\ty\ne\tf\tg\nh\ti\n"
    text = read_tsv(_write(tmp_path, "mixed.tsv", data), skip_bad_lines=True)
    assert text.pairs == [("a", "b"), ("c", "d"), ("h", "i")]
    assert [n for n, _ in text.skipped] == [2, 4, 5, 6]
    assert text.num_skipped == 4
    assert "no TAB" in text.skipped[0][1] and "UTF-8" in text.skipped[2][1]


@pytest.mark.parametrize("data", [b"", b"\n", b"  \n\n"])
def test_an_empty_file_is_always_an_error(tmp_path, data):
    path = _write(tmp_path, "empty.tsv", data)
    for skip in (False, True):
        with pytest.raises(DataError, match="empty file") as error:
            read_tsv(path, skip_bad_lines=skip)
        assert path in str(error.value)
    good = _write(tmp_path, "good.tsv", b"a\tb\n")
    with pytest.raises(DataError, match="empty file"):
        open_corpus(f"tsv:{good}+{_write(tmp_path, 'empty.tsv.gz', data)},{good}")


def _truncated_gzip(tmp_path, name, pairs: int) -> str:
    """A gzip of `pairs` pairs cut in half, as an interrupted download leaves it."""
    path = _write(tmp_path, name, _tsv(_pairs(pairs)))
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])
    return path


def test_a_truncated_gzip_is_an_error_naming_the_file(tmp_path):
    cut = _truncated_gzip(tmp_path, "train.tsv.gz", 15000)
    # What tf.data alone does with it: part of the pairs, the last one cut, and no error.
    lines = list(tf.data.TextLineDataset(cut, compression_type="GZIP").as_numpy_iterator())
    assert 0 < len(lines) < 15000
    good = _write(tmp_path, "dev.tsv", b"a\tb\n")
    for read in (lambda: open_corpus(f"tsv:{cut},{good}"),          # scan and training stream
                 lambda: open_corpus(f"tsv:{good}+{cut},{good}"),   # as a later file
                 lambda: open_corpus(f"tsv:{good},{cut}"),           # as the dev file
                 lambda: read_tsv(cut, skip_bad_lines=True)):       # dev and test sets
        with pytest.raises(DataError, match="truncated gzip file") as error:
            read()
        assert error.value.path == cut and error.value.line is None
        assert str(error.value).startswith(f"{cut}: ")


def test_a_gz_name_on_bytes_that_are_not_gzip_is_an_error(tmp_path):
    path = tmp_path / "random.tsv.gz"
    path.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(DataError, match="not a valid gzip file") as error:
        open_corpus(f"tsv:{path}")
    assert error.value.path == str(path)


def test_read_tsv_all_lines_bad_is_an_error_even_when_skipping(tmp_path):
    path = _write(tmp_path, "bad.tsv", b"no tab\nnone here either\n")
    with pytest.raises(DataError, match=r"no valid line \(2 bad lines skipped\)"):
        read_tsv(path, skip_bad_lines=True)


# ---------------------------------------------------------------------------------------------
# Specs and the training stream
# ---------------------------------------------------------------------------------------------


def test_globs_plus_and_gzip_stream_every_pair_once(tmp_path):
    (tmp_path / "shards").mkdir()
    _write(tmp_path, "shards/part-0.tsv", _tsv(_pairs(50, 0)))
    _write(tmp_path, "shards/part-1.tsv.gz", _tsv(_pairs(70, 50)))
    extra = _write(tmp_path, "extra.tsv", _tsv(_pairs(30, 120)))
    dev = _write(tmp_path, "dev.tsv", _tsv([("hola", "hello")]))
    corpus = open_corpus(f"tsv:{tmp_path}/shards/part-*+{extra},{dev}")
    assert [p.rsplit("/", 1)[1] for p in corpus.files] == ["part-0.tsv", "part-1.tsv.gz",
                                                           "extra.tsv"]
    assert corpus.dev.pairs == [("hola", "hello")] and not corpus.holds_out_dev
    assert sorted(_all(corpus.train_pairs())) == sorted(_pairs(150))
    # Shuffled by file and repeated (passes meet where files interleave): 10 passes' worth of
    # pairs hold every pair 10 times, give or take the pass being read at either end.
    counts = collections.Counter(_all(corpus.train_pairs(shuffle_files=True, seed=3,
                                                         repeat=True).take(1500)))
    assert set(counts) == set(_pairs(150)) and all(9 <= n <= 11 for n in counts.values())
    for spec, message in ((f"tsv:{tmp_path}/nothing-*.tsv", "no file matches"),
                          (f"tsv:{tmp_path}/missing.tsv", "no such file"),
                          (f"tsv:{extra}+", "expected tsv:TRAIN")):
        with pytest.raises(ValueError, match=message):
            open_corpus(spec)


def test_files_are_shuffled_differently_on_each_pass_and_by_seed(tmp_path):
    paths = [_write(tmp_path, f"f{i}.tsv", _tsv(_pairs(8, 8 * i))) for i in range(8)]
    corpus = open_corpus("tsv:" + "+".join(paths) + f",{paths[0]}")

    def first_files(seed):  # the file each pass starts with, over 6 passes
        stream = _all(corpus.train_pairs(shuffle_files=True, seed=seed, repeat=True).take(384))
        return [int(stream[p * 64][0].split()[-1]) // 8 for p in range(6)]

    orders = first_files(0)
    assert len(set(orders)) > 1  # not the same file first on every pass
    assert first_files(0) == orders and first_files(1) != orders  # seeded


def test_shards_are_disjoint_and_cover_the_data_by_file_or_by_line(tmp_path):
    a = _write(tmp_path, "a.tsv", _tsv(_pairs(40, 0)))
    b = _write(tmp_path, "b.tsv.gz", _tsv(_pairs(40, 40)))
    for spec, by_file in ((f"tsv:{a}+{b},{a}", True), (f"tsv:{a},{a}", False)):
        corpus = open_corpus(spec)
        shards = [_all(corpus.train_pairs(num_shards=2, shard_index=i, shuffle_files=True))
                  for i in range(2)]
        assert not set(shards[0]) & set(shards[1])
        assert sorted(shards[0] + shards[1]) == sorted(_all(corpus.train_pairs()))
        if by_file:  # each worker reads whole files of its own
            assert {int(s.split()[-1]) // 40 for s, _ in shards[0]} != \
                {int(s.split()[-1]) // 40 for s, _ in shards[1]}
        else:  # every other line
            assert abs(len(shards[0]) - len(shards[1])) <= 1


def test_skipped_lines_are_counted_by_the_stream(tmp_path):
    path = _write(tmp_path, "mixed.tsv.gz", b"a\tb\nno tab\nc\td\n\t\ne\tf\tg\nh\ti\n")
    corpus = open_corpus(f"tsv:{path},{path}", skip_bad_lines=True)
    skipped = tf.Variable(0, dtype=tf.int64)
    pairs = _all(corpus.train_pairs(skip_bad_lines=True, skipped=skipped))
    assert pairs == [("a", "b"), ("c", "d"), ("h", "i")]
    assert int(skipped.numpy()) == 3


def test_reverse_swaps_the_stream_and_the_dev_set(tmp_path):
    train = _write(tmp_path, "train.tsv", _tsv(_pairs(5)))
    dev = _write(tmp_path, "dev.tsv", b"de\ten\n")
    corpus = open_corpus(f"reverse:tsv:{train},{dev}")
    assert _all(corpus.train_pairs()) == [(t, s) for s, t in _pairs(5)]
    assert corpus.dev.pairs == [("en", "de")]


def test_builtin_and_bad_specs():
    corpus = open_corpus("builtin:40")
    assert _all(corpus.train_pairs()) == builtin_pairs("train", 40)
    assert len(corpus.dev) == 500
    for spec in ("", "csv:x", "tsv:", "tsv:a,b,c", "tfds:", "builtin:zero", "builtin:0"):
        with pytest.raises(ValueError):
            open_corpus(spec)


def test_tfds_missing_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # makes the import fail
    with pytest.raises(ImportError, match="pip install tensorflow-datasets"):
        open_corpus("tfds:ted_hrlr_translate/pt_to_en")


def test_read_tfds_streams_supervised_pairs(monkeypatch):
    examples = ([b"ol\xc3\xa1", b"  ", b"tchau"], [b"hello", b"empty source", b"bye"])
    calls = []

    def load(name, split, as_supervised, data_dir=None):
        calls.append((name, split, as_supervised))
        return tf.data.Dataset.from_tensor_slices(examples)

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", types.SimpleNamespace(load=load))
    text = read_tfds("ted_hrlr_translate/pt_to_en", "validation", skip_bad_lines=True)
    assert calls == [("ted_hrlr_translate/pt_to_en", "validation", True)]
    assert text.pairs == [("olá", "hello"), ("tchau", "bye")]
    assert text.skipped == [(2, "empty source side")]
    with pytest.raises(DataError, match=r"tfds:ted_hrlr_translate/pt_to_en\[train\]:2: empty"):
        read_tfds("ted_hrlr_translate/pt_to_en")
    corpus = open_corpus("tfds:ted_hrlr_translate/pt_to_en", skip_bad_lines=True)
    assert _all(corpus.train_pairs(skip_bad_lines=True)) == [("olá", "hello"), ("tchau", "bye")]


# ---------------------------------------------------------------------------------------------
# The scan: first bad line, hold-out, bounded vocabulary sample
# ---------------------------------------------------------------------------------------------


def test_scan_names_the_first_bad_line_before_training(tmp_path):
    good = _write(tmp_path, "a.tsv", _tsv(_pairs(20)))
    bad = _write(tmp_path, "b.tsv.gz", _tsv(_pairs(5)) + b"oops\n" + _tsv(_pairs(5)))
    corpus = open_corpus(f"tsv:{good}+{bad},{good}")
    with pytest.raises(DataError, match=rf"^{bad}:6: no TAB separator$"):
        scan(corpus, sample_sentences=100)
    found = scan(corpus, sample_sentences=100, skip_bad_lines=True)
    assert (found.num_pairs, found.num_bad) == (30, 1)
    assert found.bad_lines == [(f"{bad}:6", "no TAB separator")]


def test_held_out_dev_is_excluded_from_the_stream(tmp_path):
    path = _write(tmp_path, "train.tsv", _tsv(_pairs(3000)))
    corpus = open_corpus(f"tsv:{path}", seed=5)
    assert corpus.holds_out_dev
    with pytest.raises(ValueError, match="holdout_threshold"):
        corpus.train_pairs()
    found = scan(corpus, sample_sentences=100, seed=5)
    held = set(found.dev.pairs)
    assert len(held) == found.num_held_out == 30  # 1% of 3000
    corpus = dataclasses.replace(corpus, holdout_threshold=found.holdout_threshold)
    stream = _all(corpus.train_pairs())
    assert len(stream) == found.num_pairs == 2970
    assert not held & set(stream) and held | set(stream) == set(_pairs(3000))
    assert scan(open_corpus(f"tsv:{path}", seed=5), sample_sentences=100, seed=5).dev == found.dev
    other = scan(open_corpus(f"tsv:{path}", seed=6), sample_sentences=100, seed=6).dev
    assert set(other.pairs) != held  # seeded
    # At least one pair, at most MAX_HOLDOUT.
    small = _write(tmp_path, "small.tsv", _tsv(_pairs(20)))
    assert len(scan(open_corpus(f"tsv:{small}"), sample_sentences=10).dev) == 1
    big = _write(tmp_path, "big.tsv.gz", _tsv(_pairs(150_000)))
    found = scan(open_corpus(f"tsv:{big}"), sample_sentences=10)
    assert len(found.dev) == found.num_held_out == MAX_HOLDOUT == 1000


def test_vocabulary_sample_is_bounded_uniform_and_seeded(tmp_path):
    path = _write(tmp_path, "train.tsv.gz", _tsv(_pairs(20000)))
    corpus = open_corpus(f"tsv:{path},{path}")
    spill = tmp_path / "sample"
    spill.mkdir()
    found = scan(corpus, sample_sentences=1000, seed=1, sample_dir=str(spill))
    assert found.num_pairs == 20000 and len(found.sample) == 1000
    # The sample's text waits on disk in a file unlinked from the start: nothing is left behind.
    assert list(spill.iterdir()) == []
    # Pairs stay together (source then target) and come from all over the file.
    numbers = [int(s.split()[-1]) for s in found.sample[::2]]
    assert numbers == [int(t.split()[-1]) for t in found.sample[1::2]]
    assert len(set(numbers)) == 500
    quarters = collections.Counter(n * 4 // 20000 for n in numbers)
    assert all(90 <= quarters[q] <= 160 for q in range(4)), quarters  # ~125 each
    assert scan(corpus, sample_sentences=1000, seed=1).sample[:] == found.sample[:]
    assert scan(corpus, sample_sentences=1000, seed=2).sample[:] != found.sample[:]
    # A sample larger than the corpus is the whole corpus.
    assert len(scan(corpus, sample_sentences=10**6).sample) == 40000


def test_bottom_k_keeps_the_smallest_keys_holding_little_more_than_k():
    # The vocabulary sample's text is most of the scan's memory: at no point may the sampler
    # hold much more than k items (a compaction only once k more were pending held 2 k).
    rng = np.random.default_rng(0)
    k, batch = 4000, 512
    sampler, everything, most_held = _BottomK(k, 2), [], 0
    for _ in range(200):
        keys = rng.random(batch)
        texts = np.array([f"{key:.17f}".encode() for key in keys], dtype=object)
        sampler.offer(keys, texts, texts)
        everything.append(keys)
        most_held = max(most_held, len(sampler.keys) + sampler._pending_size)
    assert most_held <= k + k // 16 + batch
    keys, sources, targets = sampler.sorted()
    assert np.array_equal(keys, np.sort(np.concatenate(everything))[:k])
    assert [float(s) for s in sources] == pytest.approx(list(keys), abs=1e-15)
