"""Tests of tfformer.data.batching (the tf.data pipeline: tokenized in the graph, bucketed by
length under a token budget) and of the bucket grid, tfformer.data.buckets."""

import collections
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tfformer
from tfformer.data.batching import BatchStats, make_dataset, make_eval_dataset, make_stream
from tfformer.data.buckets import bucket_lengths
from tfformer.data.builtin import builtin_pairs
from tfformer.data.tokenizer import Tokenizer
from tfformer.special_tokens import BOS_ID, EOS_ID, PAD_ID


@pytest.fixture(scope="module")
def tokenizer():
    pairs = builtin_pairs("train", 1500, seed=0)
    return Tokenizer.train([side for pair in pairs for side in pair], 300, seed=0)


@pytest.fixture(scope="module")
def pairs():
    # Short and long pairs, so that some exceed max_length on either side.
    long_source = " ".join(["los perros rojos comen manzanas verdes"] * 8)
    return builtin_pairs("dev", 300, seed=0) + [
        (long_source, "The dogs eat."), ("El perro come.", long_source), (long_source, long_source)]


def _expected_rows(pairs, tokenizer, max_length):
    """Independent reference: the model-side ids of every pair, and how many are too long."""
    sources = tokenizer.tokenize(tf.constant([s for s, _ in pairs])).to_list()
    targets = tokenizer.tokenize(tf.constant([t for _, t in pairs])).to_list()
    rows, dropped = [], 0
    for s, t in zip(sources, targets):
        if len(s) + 1 > max_length or len(t) + 1 > max_length:
            dropped += 1
        else:
            rows.append((tuple(s + [EOS_ID]), tuple([BOS_ID] + t), tuple(t + [EOS_ID])))
    return rows, dropped


def _rows(dataset, batch_tokens, max_length, multiple=1):
    """Un-pads every batch, checking that its shape is its bucket's: both sides padded to the
    grid length that holds its longest pair, and the bucket's rows under the budget."""
    grid = bucket_lengths(max_length)
    rows, pad_rows, batches = [], 0, 0
    for (source, target_in), target_out in dataset.as_numpy_iterator():
        batches += 1
        assert source.dtype == target_in.dtype == target_out.dtype == np.int32
        assert source.shape == target_in.shape == target_out.shape
        size, length = source.shape
        assert length in grid and size == batch_tokens // length // multiple * multiple
        real = source[:, 0] != PAD_ID
        pad_rows += int((~real).sum())
        assert (source[~real] == PAD_ID).all() and (target_out[~real] == PAD_ID).all()
        lengths = []
        for s, ti, to in zip(source[real], target_in[real], target_out[real]):
            s_len, t_len = int((s != PAD_ID).sum()), int((to != PAD_ID).sum())
            assert (s[s_len:] == PAD_ID).all() and (to[t_len:] == PAD_ID).all()  # PAD at end only
            rows.append((tuple(s[:s_len]), tuple(ti[:t_len]), tuple(to[:t_len])))
            lengths.append(max(s_len, t_len))
        # The bucket is the first grid length that holds the batch's pairs.
        index = grid.index(length)
        assert index == 0 or grid[index - 1] < min(lengths)
    return rows, pad_rows, batches


def test_batches_honour_budget_and_hold_every_pair_once(tokenizer, pairs):
    dataset, info = make_dataset(pairs, tokenizer, batch_tokens=200, max_length=40, seed=1)
    rows, pad_rows, batches = _rows(dataset, 200, 40)
    expected, dropped = _expected_rows(pairs, tokenizer, 40)
    assert collections.Counter(rows) == collections.Counter(expected)
    assert batches == info.num_batches
    # Only each bucket's last batch is filled up with PAD rows.
    per_bucket = collections.Counter(
        next(i for i, n in enumerate(info.bucket_lengths) if max(len(s), len(to)) <= n)
        for s, _, to in expected)
    full_rows = sum(info.bucket_batch_sizes[i] * -(-count // info.bucket_batch_sizes[i])
                    for i, count in per_bucket.items())
    assert pad_rows == full_rows - len(rows) > 0
    assert info.num_dropped == dropped >= 3 and info.num_pairs == len(pairs) - dropped
    assert info.num_input_pairs == len(pairs)
    assert info.num_source_tokens == sum(len(s) for s, _, _ in expected)
    assert batches > 1  # several batches, so the budget was actually binding


def test_bos_and_eos_placement(tokenizer, pairs):
    dataset, _ = make_eval_dataset(pairs[:50], tokenizer, batch_tokens=400, max_length=64)
    rows, _, _ = _rows(dataset, 400, 64)
    assert len(rows) == 50
    for source, target_in, target_out in rows:
        assert source[-1] == EOS_ID and EOS_ID not in source[:-1] and BOS_ID not in source
        assert target_in[0] == BOS_ID and BOS_ID not in target_in[1:] and EOS_ID not in target_in
        assert target_out[-1] == EOS_ID and target_in[1:] == target_out[:-1]


def test_overlength_pairs_are_dropped_and_counted_exactly(tokenizer, pairs):
    lengths = [len(t) + 1 for t in tokenizer.tokenize(tf.constant([s for s, _ in pairs])).to_list()]
    max_length = int(np.median(lengths))  # about half of the pairs are too long
    dataset, info = make_eval_dataset(pairs, tokenizer, batch_tokens=512, max_length=max_length)
    expected, dropped = _expected_rows(pairs, tokenizer, max_length)
    rows, _, _ = _rows(dataset, 512, max_length)
    assert collections.Counter(rows) == collections.Counter(expected)
    assert info.num_dropped == dropped and dropped > len(pairs) // 4
    assert all(len(s) <= max_length and len(to) <= max_length for s, _, to in rows)


def test_stream_batches_every_pair_once_and_counts_the_dropped_ones(tokenizer, pairs):
    lengths = [len(t) + 1 for t in tokenizer.tokenize(tf.constant([s for s, _ in pairs])).to_list()]
    max_length = int(np.median(lengths))
    dropped = tf.Variable(0, dtype=tf.int64)
    strings = tf.data.Dataset.from_tensor_slices(([s for s, _ in pairs], [t for _, t in pairs]))
    dataset = make_stream(strings, tokenizer, batch_tokens=512, max_length=max_length,
                          dropped=dropped, seed=2, shuffle_buffer_size=64)
    rows, pad_rows, _ = _rows(dataset, 512, max_length)
    expected, expected_dropped = _expected_rows(pairs, tokenizer, max_length)
    assert collections.Counter(rows) == collections.Counter(expected) and pad_rows > 0
    assert int(dropped.numpy()) == expected_dropped and expected_dropped > len(pairs) // 4
    # Counted as they go by: a second pass counts them again.
    _rows(dataset, 512, max_length)
    assert int(dropped.numpy()) == 2 * expected_dropped
    with pytest.raises(ValueError, match="batch_tokens"):
        make_stream(strings, tokenizer, batch_tokens=30, max_length=40)


def _packed_rows(dataset, rows_per_batch, length):
    """Every pair of packed batches, read back by its segment id, checking that each batch has
    the one shape and that a pair's tokens lie together, in one row, on both sides."""
    pairs, used_rows = [], 0
    for (source, target_in, source_segments, target_segments), target_out in \
            dataset.as_numpy_iterator():
        assert source.shape == target_out.shape == source_segments.shape == (rows_per_batch,
                                                                              length)
        for row in range(rows_per_batch):
            segments = sorted(set(source_segments[row]) - {0})
            assert segments == sorted(set(target_segments[row]) - {0})
            assert segments == list(range(1, len(segments) + 1))
            used_rows += bool(segments)
            assert np.all((source[row] == PAD_ID) == (source_segments[row] == 0))
            assert np.all((target_in[row] == PAD_ID) == (target_segments[row] == 0))
            for segment in segments:
                s, t = (np.flatnonzero(source_segments[row] == segment),
                        np.flatnonzero(target_segments[row] == segment))
                assert np.all(np.diff(s) == 1) and np.all(np.diff(t) == 1)  # contiguous
                pairs.append((tuple(source[row, s]), tuple(target_in[row, t]),
                              tuple(target_out[row, t])))
    return pairs, used_rows


def test_packed_stream_holds_every_pair_once_in_one_shape_and_pads_less(tokenizer, pairs):
    strings = tf.data.Dataset.from_tensor_slices(([s for s, _ in pairs], [t for _, t in pairs]))
    dropped = tf.Variable(0, dtype=tf.int64)
    packed_stats, bucketed_stats = BatchStats(), BatchStats()
    dataset = make_stream(strings, tokenizer, batch_tokens=1024, max_length=80, dropped=dropped,
                          seed=2, shuffle_buffer_size=64, pack_length=64, stats=packed_stats)
    rows, used_rows = _packed_rows(dataset, 1024 // 64, 64)
    expected, expected_dropped = _expected_rows(pairs, tokenizer, 64)
    assert collections.Counter(rows) == collections.Counter(expected)
    assert int(dropped.numpy()) == expected_dropped > 0  # longer than the rows: counted
    assert used_rows < len(rows) / 2  # rows hold several pairs
    packed = packed_stats.read()
    assert list(packed["shapes"]) == ["16x64"]
    for _ in make_stream(strings, tokenizer, batch_tokens=1024, max_length=64,
                         shuffle_buffer_size=0, stats=bucketed_stats):
        pass
    assert packed["padding"] < bucketed_stats.read()["padding"]
    # Under several replicas, the rows are a multiple of them (each replica's share alike).
    (inputs, _), = make_stream(strings, tokenizer, batch_tokens=1024, max_length=80,
                               pack_length=64, batch_multiple=3).take(1).as_numpy_iterator()
    assert inputs[0].shape == inputs[3].shape == (15, 64)
    with pytest.raises(ValueError, match=r"pack_length \(48\) must be <= max_length \(40\)"):
        make_stream(strings, tokenizer, batch_tokens=512, max_length=40, pack_length=48)
    with pytest.raises(ValueError, match=r"batch_tokens \(512\) must be >= pack_length"):
        make_stream(strings, tokenizer, batch_tokens=512, max_length=40, pack_length=40,
                    batch_multiple=16)


def test_packing_a_pair_longer_than_the_row_is_an_error_naming_pack_length():
    from tfformer.data.packing import pack_pairs

    def pairs(source_length):
        source = tf.ragged.constant([[5] * source_length, [6, 7]], dtype=tf.int32)
        target = tf.ragged.constant([[8, 9], [10]], dtype=tf.int32)
        return tf.data.Dataset.from_tensor_slices(((source, target), target)).map(
            lambda inputs, out: ((inputs[0], inputs[1]), out))

    (inputs, _), = pack_pairs(pairs(8), length=8, rows=2).as_numpy_iterator()  # fits exactly
    assert inputs[2].tolist() == [[1] * 8, [1, 1, 0, 0, 0, 0, 0, 0]]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"longer than pack_length \(8\) tokens"):
        list(pack_pairs(pairs(9), length=8, rows=2))


def test_packed_eval_dataset_has_every_pair_once_and_its_exact_count(tokenizer, pairs):
    dataset, info = make_eval_dataset(pairs, tokenizer, batch_tokens=1024, max_length=80,
                                      pack_length=64)
    rows, _ = _packed_rows(dataset, 16, 64)
    expected, dropped = _expected_rows(pairs, tokenizer, 64)
    assert collections.Counter(rows) == collections.Counter(expected)
    assert (info.num_dropped, info.num_pairs) == (dropped, len(expected)) and dropped > 0
    assert (info.bucket_lengths, info.bucket_batch_sizes) == ((64,), (16,))
    assert info.num_batches == int(dataset.cardinality()) == sum(1 for _ in dataset)


def test_shuffle_is_seeded_and_eval_is_deterministic(tokenizer, pairs):
    def first_batches(**kwargs):
        dataset, _ = make_dataset(pairs, tokenizer, batch_tokens=300, max_length=40, **kwargs)
        return [batch[1].tolist() for batch in dataset.take(3).as_numpy_iterator()]

    assert first_batches(seed=3) == first_batches(seed=3)
    assert first_batches(seed=3) != first_batches(seed=4)
    assert first_batches(shuffle=False) == first_batches(shuffle=False, seed=9)


def test_repeat_streams_past_one_pass(tokenizer, pairs):
    dataset, info = make_dataset(pairs, tokenizer, batch_tokens=300, max_length=40, repeat=True)
    count = sum(1 for _ in dataset.take(info.num_batches + 5))
    assert count == info.num_batches + 5


def test_batch_multiple_pads_partial_batches_with_pad_rows(tokenizer, pairs):
    dataset, info = make_eval_dataset(pairs, tokenizer, batch_tokens=300, max_length=40,
                                      batch_multiple=4)
    assert all(size % 4 == 0 for size in info.bucket_batch_sizes)
    sizes = [batch[1].shape[0] for batch in dataset.as_numpy_iterator()]
    assert all(size % 4 == 0 for size in sizes)
    rows, pad_rows, _ = _rows(dataset, 300, 40, multiple=4)
    expected, _ = _expected_rows(pairs, tokenizer, 40)
    assert collections.Counter(rows) == collections.Counter(expected)
    assert pad_rows == sum(sizes) - len(expected) > 0


@pytest.mark.parametrize("multiple", [1, 4])
def test_without_fixed_rows_a_last_batch_is_filled_only_to_the_replicas_multiple(
        tokenizer, pairs, multiple):
    fixed, info = make_eval_dataset(pairs, tokenizer, batch_tokens=300, max_length=40,
                                    batch_multiple=multiple)
    free, free_info = make_eval_dataset(pairs, tokenizer, batch_tokens=300, max_length=40,
                                        batch_multiple=multiple, fixed_rows=False)
    assert free_info == info
    fixed_batches, free_batches = list(fixed.as_numpy_iterator()), list(free.as_numpy_iterator())
    assert len(free_batches) == len(fixed_batches) == info.num_batches
    full = 0
    for ((source, _), target), ((free_source, _), free_target) in zip(fixed_batches,
                                                                       free_batches):
        real = source[:, 0] != PAD_ID
        rows = -(-int(real.sum()) // multiple) * multiple  # the real rows, up to the multiple
        assert free_source.shape == (rows, source.shape[1])  # same bucket length, fewer rows
        np.testing.assert_array_equal(free_source, source[:rows])
        np.testing.assert_array_equal(free_target, target[:rows])
        full += free_source.shape[0] == source.shape[0]
    assert 0 < full < len(fixed_batches)  # only the buckets' last batches shrink


def test_bucket_lengths_are_a_geometric_grid_ending_at_max_length():
    grid = bucket_lengths(256, min_length=8, growth=1.1)
    assert grid[0] == 8 and grid[-1] == 256 and grid == sorted(set(grid))
    assert all(b <= max(a + 1, int(a * 1.1)) for a, b in zip(grid, grid[1:-1]))
    assert len(bucket_lengths(256, growth=1.25)) < len(grid)
    assert bucket_lengths(6, min_length=8) == [6]
    with pytest.raises(ValueError, match="growth"):
        bucket_lengths(64, growth=1.0)


def test_batch_stats_count_shapes_and_padding(tokenizer, pairs):
    stats = BatchStats()
    dataset, info = make_dataset(pairs, tokenizer, batch_tokens=300, max_length=40, seed=5,
                                 stats=stats)
    shapes, real, slots = collections.Counter(), 0, 0
    for (source, target_in), _ in dataset.as_numpy_iterator():
        shapes[f"{source.shape[0]}x{source.shape[1]}"] += 1
        real += int((source != PAD_ID).sum() + (target_in != PAD_ID).sum())
        slots += source.size + target_in.size
    found = stats.read()
    assert found["shapes"] == dict(shapes) and found["batches"] == info.num_batches
    assert found["tokens"] == real == info.num_source_tokens + info.num_target_tokens
    assert found["padding"] == pytest.approx(1 - real / slots) and 0 < found["padding"] < 1
    # A bounded set: at most one shape per bucket, however many batches.
    assert len(shapes) <= len(info.bucket_lengths) < info.num_batches


def test_invalid_pipeline_arguments(tokenizer, pairs):
    with pytest.raises(ValueError, match="batch_tokens"):
        make_dataset(pairs, tokenizer, batch_tokens=30, max_length=40)
    with pytest.raises(ValueError, match="batch_tokens"):
        make_dataset(pairs, tokenizer, batch_tokens=60, max_length=40, batch_multiple=2)
    with pytest.raises(ValueError, match="longer than max_length"):
        make_dataset(pairs[-3:], tokenizer, batch_tokens=100, max_length=10)
    with pytest.raises(ValueError, match="at least one pair"):
        make_dataset([], tokenizer, batch_tokens=100, max_length=10)


@pytest.mark.slow
def test_pipeline_works_with_fit_under_mirrored_strategy(tmp_path):
    # A subprocess, because the two logical CPU devices must exist before TF initializes.
    script = textwrap.dedent("""
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        import keras
        keras.utils.set_random_seed(0)  # before the tokenizer exists (tf-text resource)
        from tfformer.data.batching import make_dataset, make_eval_dataset
        from tfformer.data.builtin import builtin_pairs
        from tfformer.data.tokenizer import Tokenizer
        pairs = builtin_pairs("train", 400)
        tok = Tokenizer.train([s for p in pairs for s in p], 200)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        n = strategy.num_replicas_in_sync
        train, _ = make_dataset(pairs, tok, batch_tokens=512, max_length=48, repeat=True,
                                batch_multiple=n)
        dev, _ = make_eval_dataset(builtin_pairs("dev", 15), tok, batch_tokens=512,
                                   max_length=48, batch_multiple=n)
        with strategy.scope():
            src = keras.Input((None,), dtype="int32")
            tgt = keras.Input((None,), dtype="int32")
            emb = keras.layers.Embedding(tok.vocab_size, 8)
            out = keras.layers.Dense(tok.vocab_size)(
                emb(tgt) + keras.ops.mean(emb(src), axis=1, keepdims=True))
            model = keras.Model([src, tgt], out)
            model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(train, steps_per_epoch=3, epochs=1, verbose=0)
        print("OK", model.evaluate(dev, verbose=0))
    """)
    root = os.path.dirname(os.path.dirname(os.path.abspath(tfformer.__file__)))
    python_path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, timeout=300, cwd=tmp_path)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_an_eval_dataset_is_batched_once_and_read_from_memory_on_later_passes(tokenizer, pairs):
    stats = BatchStats()  # counts the batches the pipeline makes, before the cache
    dataset, info = make_eval_dataset(pairs, tokenizer, batch_tokens=300, max_length=40,
                                      stats=stats)
    passes = [[batch[1].tolist() for batch in dataset.as_numpy_iterator()] for _ in range(3)]
    assert passes[0] == passes[1] == passes[2] and len(passes[0]) == info.num_batches
    assert stats.read()["batches"] == info.num_batches  # made in the first pass only
    with pytest.raises(ValueError, match="cache needs repeat=False"):
        make_dataset(pairs, tokenizer, batch_tokens=300, max_length=40, repeat=True, cache=True)
