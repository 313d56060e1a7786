"""The prepared store and its loader: ids equal to the in-graph tokenizer's, the same batches as
the tf.data pipeline's, a seeded order, shards, and batch n found without reading the n before
it (instant, exact resume)."""

import collections
import json
import os

import numpy as np
import pytest

from tfformer.data.loader import Loader
from tfformer.data.records import DataError
from tfformer.data.store import MANIFEST, Store
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID
from tfformer.train.prepare import prepare_store

ODD_PAIRS = [
    ("¿Dónde está el niño? Ñandú, pingüino, façade.", "Where is the child? Rhea, penguin."),
    ("  espacios   múltiples\u00a0y no-break  ", "multiple   spaces"),
    ("emoji 🙂 y 中文 y ελληνικά", "emoji 🙂 and Chinese and Greek"),
    ("palabra " * 300, "word " * 300),  # a very long line: kept in the store, dropped by length
    ("x", "y"),
]


@pytest.fixture(scope="module")
def builtin_store(tmp_path_factory):
    out = tmp_path_factory.mktemp("store") / "builtin"
    return Store.open(prepare_store("builtin:1500", out, vocab_size=400).path)


def tf_ids(tokenizer, texts):
    return [list(ids) for ids in tokenizer.tokenize(list(texts)).to_list()]


def test_store_ids_equal_the_in_graph_tokenizers_for_train_and_dev(builtin_store):
    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_file(builtin_store.tokenizer_path)
    train = builtin_pairs("train", 1500)
    assert len(builtin_store.train) == len(train)
    for side, column in (("source", 0), ("target", 1)):
        expected = tf_ids(tokenizer, [pair[column] for pair in train])
        assert [list(builtin_store.train.sentence(side, i))
                for i in range(len(train))] == expected
    dev = builtin_store.dev_pairs()
    assert [list(builtin_store.dev.sentence("target", i)) for i in range(len(dev))] == \
        tf_ids(tokenizer, [t for _, t in dev])
    manifest = builtin_store.manifest
    assert manifest["splits"]["train"]["pairs"] == 1500 and manifest["ids_dtype"] == "uint16"
    assert manifest["splits"]["train"]["target_tokens"] == sum(
        len(ids) for ids in tf_ids(tokenizer, [t for _, t in train]))


def test_odd_text_gets_the_in_graph_ids_and_an_empty_side_is_refused_naming_the_line(tmp_path):
    from tfformer.data.tokenizer import Tokenizer

    corpus = tmp_path / "odd.tsv"
    lines = [f"{s}\t{t}\n" for s, t in ODD_PAIRS]
    corpus.write_text("".join(lines * 4), encoding="utf-8")
    dev = tmp_path / "dev.tsv"
    dev.write_text("".join(lines[:2]), encoding="utf-8")
    store = Store.open(prepare_store(f"tsv:{corpus},{dev}", tmp_path / "odd", vocab_size=120).path)
    tokenizer = Tokenizer.from_file(store.tokenizer_path)
    for side, column in (("source", 0), ("target", 1)):
        assert [list(store.train.sentence(side, i)) for i in range(len(store.train))] == \
            tf_ids(tokenizer, [pair[column].strip() for pair in ODD_PAIRS] * 4)
    assert store.dev_pairs() == [(s.strip(), t.strip()) for s, t in ODD_PAIRS[:2]]

    bad = tmp_path / "bad.tsv"
    bad.write_text("uno\tone\ndos\t\ntres\tthree\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.tsv:2: "):
        prepare_store(f"tsv:{bad},{dev}", tmp_path / "bad", vocab_size=60)
    assert not os.path.exists(tmp_path / "bad" / MANIFEST)


def test_a_given_tokenizer_is_used_and_a_complete_store_is_not_overwritten(builtin_store,
                                                                          tmp_path):
    out = tmp_path / "again"
    given = builtin_store.tokenizer_path
    store = Store.open(prepare_store("builtin:300", out, tokenizer=given).path)
    with open(store.tokenizer_path, "rb") as a, open(builtin_store.tokenizer_path, "rb") as b:
        assert a.read() == b.read()
    first = [list(s.train.sentence("source", 0)) for s in (store, builtin_store)]
    assert first[0] == first[1]
    with pytest.raises(FileExistsError, match="holds a prepared corpus already"):
        prepare_store("builtin:300", out)


def test_an_unfinished_or_damaged_store_does_not_open(builtin_store, tmp_path):
    with pytest.raises(FileNotFoundError, match="preparation did not finish"):
        Store.open(tmp_path)
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(builtin_store.path, copy)
    with open(copy / "train.target.ids", "r+b") as f:
        f.truncate(10)
    with pytest.raises(ValueError, match="do not match .*manifest.json"):
        Store.open(copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    (copy / MANIFEST).write_text(json.dumps({**manifest, "format_version": 99}))
    with pytest.raises(ValueError, match="format_version 99"):
        Store.open(copy)


def rows_of(batch):
    """Each row's (source, target_in, target_out) as tuples, PAD cut."""
    (source, target_in), target_out = batch
    return [(tuple(s[s != PAD_ID]), tuple(i[i != PAD_ID]), tuple(o[o != PAD_ID]))
            for s, i, o in zip(source, target_in, target_out) if (s != PAD_ID).any()]


def test_bucketed_batches_are_the_tf_data_pipelines(builtin_store):
    """The same pairs in the same shapes of the grid, with EOS and BOS where the pipeline puts
    them; the loader's order is its own (seeded), so the rows are compared as multisets."""
    from tfformer.data.batching import make_eval_dataset
    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_file(builtin_store.tokenizer_path)
    shapes = dict(batch_tokens=1024, max_length=24, bucket_growth=1.25)
    dataset, info = make_eval_dataset(builtin_pairs("train", 1500), tokenizer, **shapes)
    expected_rows, expected_shapes = collections.Counter(), collections.Counter()
    for (source, target_in), target_out in dataset.as_numpy_iterator():
        expected_rows.update(rows_of(((source, target_in), target_out)))
        expected_shapes[source.shape] += 1
    loader = Loader(builtin_store.train, **shapes, seed=3)
    rows, found_shapes = collections.Counter(), collections.Counter()
    for batch in loader.epoch(0):
        (source, target_in), target_out = batch
        assert source.shape == target_in.shape == target_out.shape
        assert source.shape[0] * source.shape[1] <= 1024
        rows.update(rows_of(batch))
        found_shapes[source.shape] += 1
    assert loader.num_dropped == info.num_dropped > 0
    assert rows == expected_rows and sum(rows.values()) == info.num_pairs
    assert found_shapes == expected_shapes  # one pass: the same batches of the same shapes
    for (source, target_in, target_out) in list(rows)[:50]:
        assert source[-1] == EOS_ID and target_in[0] == BOS_ID and target_out[-1] == EOS_ID
        assert target_in[1:] == target_out[:-1]


def unpacked(batch):
    """The pairs in packed rows, by segment id."""
    (source, target_in, source_segments, target_segments), target_out = batch
    pairs = []
    for row in range(source.shape[0]):
        for segment in range(1, int(source_segments[row].max(initial=0)) + 1):
            s, t = source_segments[row] == segment, target_segments[row] == segment
            # Each pair's tokens lie in one run of its row on both sides.
            assert np.ptp(np.flatnonzero(s)) == s.sum() - 1
            pairs.append((tuple(source[row][s]), tuple(target_in[row][t]),
                          tuple(target_out[row][t])))
    return pairs


def test_packed_batches_hold_every_pair_once_like_the_tf_data_packing(builtin_store):
    from tfformer.data.batching import make_eval_dataset
    from tfformer.data.builtin import builtin_pairs
    from tfformer.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_file(builtin_store.tokenizer_path)
    shapes = dict(batch_tokens=1024, max_length=32, pack_length=32)
    dataset, info = make_eval_dataset(builtin_pairs("train", 1500), tokenizer, **shapes)
    expected = collections.Counter(p for batch in dataset.as_numpy_iterator()
                                   for p in unpacked(batch))
    loader = Loader(builtin_store.train, **shapes, seed=5)
    found = collections.Counter()
    for batch in loader.epoch(0):
        assert all(x.shape == (32, 32) for x in batch[0]) and batch[1].shape == (32, 32)
        found.update(unpacked(batch))
    assert found == expected and loader.num_dropped == info.num_dropped
    # The first batch waits for one block of windows, not for the whole epoch.
    lazy = Loader(builtin_store.train, **shapes, seed=5, window=4)
    lazy.batch(0, 0)
    assert 0 < lazy.plan(0).rows_planned and not lazy.plan(0).complete
    assert collections.Counter(p for batch in lazy.epoch(0) for p in unpacked(batch)) == expected
    # First fit within the same windows: within a batch or two of the pipeline's count.
    assert abs(loader.epoch_size(0) - info.num_batches) <= 2


@pytest.mark.parametrize("pack_length", [0, 32])
def test_the_order_is_seeded_and_batch_n_comes_without_the_ones_before(builtin_store,
                                                                      pack_length):
    def fingerprints(batches):
        return [hash(tuple(np.concatenate([x.ravel() for x in (*inputs, target)]).tolist()))
                for inputs, target in batches]

    shapes = dict(batch_tokens=1024, max_length=32, pack_length=pack_length)
    loader = Loader(builtin_store.train, **shapes, seed=7)
    stream = loader.batches(0)
    total = 3 * loader.epoch_size(0) + 5  # across epoch ends
    uninterrupted = fingerprints(next(stream) for _ in range(total))
    stream.close()
    again = Loader(builtin_store.train, **shapes, seed=7)
    assert fingerprints(again.epoch(0)) == uninterrupted[:again.epoch_size(0)]
    other = Loader(builtin_store.train, **shapes, seed=8)
    assert fingerprints(other.epoch(0)) != uninterrupted[:other.epoch_size(0)]
    assert len(set(uninterrupted)) > total - 3  # epochs differ from each other

    sizes = loader.epoch_sizes
    for start in (1, sizes[0] - 1, sizes[0], sizes[0] + sizes[1] + 2):  # resumes
        resumed = Loader(builtin_store.train, **shapes, seed=7, known_epoch_sizes=sizes)
        stream = resumed.batches(start, prefetch=0)
        assert fingerprints(next(stream) for _ in range(4)) == uninterrupted[start:start + 4]
        first_epoch = resumed.position(start)[0]
        # Only the epoch the resume lands in (and the next) is planned, never those before.
        assert set(resumed.planned) <= {first_epoch, first_epoch + 1}


def test_shards_split_every_pair_once_and_rows_split_across_replicas(builtin_store):
    seen = []
    for shard in range(3):
        loader = Loader(builtin_store.train, batch_tokens=1024, max_length=32, seed=1,
                        num_shards=3, shard_index=shard, batch_multiple=2)
        pairs = loader.plan(0).pairs
        assert len(pairs) == len(set(pairs.tolist()))
        seen += pairs.tolist()
        for (source, _), _ in loader.epoch(0):
            assert source.shape[0] % 2 == 0
    kept = Loader(builtin_store.train, batch_tokens=1024, max_length=32).num_pairs
    assert sorted(seen) == sorted(Loader(builtin_store.train, batch_tokens=1024,
                                         max_length=32).plan(0).pairs.tolist())
    assert len(seen) == kept


def test_a_failure_in_the_loader_thread_reaches_the_consumer(builtin_store):
    loader = Loader(builtin_store.train, batch_tokens=1024, max_length=32)

    def broken(epoch, index):
        raise OSError("disk gone")

    loader.batch = broken
    with pytest.raises(OSError, match="disk gone"):
        next(loader.batches(0))


def test_bad_loader_arguments_name_the_field(builtin_store):
    with pytest.raises(ValueError, match="batch_tokens .* must be >= max_length"):
        Loader(builtin_store.train, batch_tokens=16, max_length=32)
    with pytest.raises(ValueError, match="pack_length .* must be <= max_length"):
        Loader(builtin_store.train, batch_tokens=1024, max_length=32, pack_length=64)
    with pytest.raises(ValueError, match="no pair of shard 0 of 1 is within 3 tokens"):
        Loader(builtin_store.train, batch_tokens=1024, max_length=3)


def sequential_first_fit(source_lengths, target_lengths, length, window):
    """First fit one pair at a time (the rule of tfformer.data.packing, in plain Python)."""
    row, slot, at, first_row = [], [], [], 0
    for start in range(0, len(source_lengths), window):
        used, segments = [], []
        for need in zip(source_lengths[start:start + window],
                        target_lengths[start:start + window]):
            r = next((i for i, u in enumerate(used)
                      if u[0] + need[0] <= length and u[1] + need[1] <= length), len(used))
            if r == len(used):
                used.append([0, 0])
                segments.append(0)
            at.append(list(used[r]))
            used[r] = [used[r][0] + need[0], used[r][1] + need[1]]
            segments[r] += 1
            slot.append(segments[r])
            row.append(first_row + r)
        first_row += len(used)
    return row, slot, at, first_row


@pytest.mark.parametrize("count, window", [(1000, 64), (777, 100), (5, 8)])
def test_packing_all_windows_at_once_is_first_fit_pair_by_pair(count, window):
    from tfformer.data.loader import first_fit

    rng = np.random.default_rng(count)
    source, target = rng.integers(2, 30, count), rng.integers(2, 30, count)
    row, slot, at, rows = first_fit(source, target, 32, window)
    expected = sequential_first_fit(source.tolist(), target.tolist(), 32, window)
    assert (row.tolist(), slot.tolist(), at.tolist(), rows) == expected


def test_prepare_program_writes_a_store_and_exits_2_on_bad_input(tmp_path, caplog):
    """tfformer-prepare end to end (a subprocess, as a user runs it), then its refusals: the same
    directory again, a malformed line (file and line), a missing file."""
    import subprocess
    import sys

    from tests.test_training import env
    from tfformer.cli.prepare import main as prepare_main

    out = tmp_path / "store"
    result = subprocess.run([sys.executable, "-m", "tfformer.cli.prepare", "--data", "builtin:300",
                             "--out", str(out), "--vocab-size", "200"],
                            capture_output=True, text=True, timeout=300, env=env())
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    store = Store.open(str(out))
    assert report["store"] == str(out) and report["splits"] == store.manifest["splits"]
    assert len(store.train) == report["splits"]["train"]["pairs"] > 200

    assert prepare_main(["--data", "builtin:300", "--out", str(out)]) == 2
    assert "holds a prepared corpus already" in caplog.text
    bad = tmp_path / "bad.tsv"
    bad.write_text("uno\tone\ndos sin tabulador\ntres\tthree\n", encoding="utf-8")
    assert prepare_main(["--data", f"tsv:{bad}", "--out", str(tmp_path / "b")]) == 2
    assert f"{bad}:2" in caplog.text
    assert prepare_main(["--data", f"tsv:{tmp_path / 'none.tsv'}",
                         "--out", str(tmp_path / "c")]) == 2
    assert "none.tsv" in caplog.text
