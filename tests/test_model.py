"""The Transformer model: masking, cached decoding, Keras integration and the paper's sizes.

Backend-neutral: `make test` runs it on TensorFlow and on JAX without TensorFlow
installed (the Makefile's BACKEND_TESTS).
"""

import keras
import numpy as np
import pytest
from keras import ops

from tfformer import Transformer, compile_transformer, get_preset
from tfformer.special_tokens import BOS_ID, EOS_ID

to_numpy = ops.convert_to_numpy


def random_batch(config, batch=4, source_len=9, target_len=7, seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(4, config.vocab_size, size=(batch, source_len)).astype("int32")
    target = rng.integers(4, config.vocab_size, size=(batch, target_len)).astype("int32")
    target[:, 0] = BOS_ID
    source[0, 6:] = 0  # a padded sentence
    target[0, 5:] = 0
    return source, target


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_changing_future_targets_leaves_earlier_logits_unchanged(tiny_config, norm):
    model = Transformer(tiny_config.replace(norm=norm))
    source, target = random_batch(tiny_config)
    logits = to_numpy(model((source, target)))
    changed = target.copy()
    i = 3
    changed[:, i + 1:] = np.where(changed[:, i + 1:] > 0, (changed[:, i + 1:] + 7) % 36 + 4, 0)
    changed_logits = to_numpy(model((source, changed)))
    np.testing.assert_allclose(changed_logits[:, :i + 1], logits[:, :i + 1], atol=1e-5)
    assert np.abs(changed_logits[1:, i + 1:] - logits[1:, i + 1:]).max() > 1e-3  # not vacuous


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_more_padding_leaves_real_positions_unchanged(tiny_config, positional):
    model = Transformer(tiny_config.replace(positional=positional, share_embeddings=False))
    source, target = random_batch(tiny_config)
    logits = to_numpy(model((source, target)))
    longer = to_numpy(model((np.pad(source, [(0, 0), (0, 4)]), np.pad(target, [(0, 0), (0, 3)]))))
    np.testing.assert_allclose(longer[0, :5], logits[0, :5], atol=1e-5)
    np.testing.assert_allclose(longer[1:, :7], logits[1:], atol=1e-5)
    # A sentence alone (no pads) equals the same sentence padded inside the batch.
    alone = to_numpy(model((source[:1, :6], target[:1, :5])))
    np.testing.assert_allclose(alone[0], logits[0, :5], atol=1e-5)


def test_values_under_pad_positions_do_not_reach_real_positions(tiny_config):
    model = Transformer(tiny_config)
    source, target = random_batch(tiny_config)
    memory, source_mask = model.encode(source)
    # Feed the stacks arbitrary vectors at the pad positions, keeping the masks.
    rng = np.random.default_rng(5)
    embedded = to_numpy(model.embedding(source))
    noisy = embedded.copy()
    noisy[0, 6:] = rng.normal(size=noisy[0, 6:].shape) * 10
    clean_memory = to_numpy(model.encoder(embedded, source_mask))
    noisy_memory = to_numpy(model.encoder(noisy, source_mask))
    np.testing.assert_allclose(noisy_memory[0, :6], clean_memory[0, :6], atol=1e-5)
    np.testing.assert_allclose(clean_memory, to_numpy(memory), atol=1e-6)
    # The decoder's cross-attention ignores memory rows under source pads.
    garbage_memory = clean_memory.copy()
    garbage_memory[0, 6:] = rng.normal(size=garbage_memory[0, 6:].shape) * 10
    a = to_numpy(model.decode(target, clean_memory, source_mask))
    b = to_numpy(model.decode(target, garbage_memory, source_mask))
    np.testing.assert_allclose(a, b, atol=1e-5)
    # Without the mask the garbage would matter: the check above is not vacuous.
    unmasked = ops.ones_like(source_mask)
    c = to_numpy(model.decode(target, garbage_memory, unmasked))
    assert np.abs(c[0] - a[0]).max() > 1e-3


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_cached_decoding_step_by_step_equals_full_forward_pass(tiny_config, norm):
    model = Transformer(tiny_config.replace(norm=norm))
    source, target = random_batch(tiny_config, seed=1)
    target[0, 5:] = 7  # no pads inside a target decoded step by step
    full = to_numpy(model((source, target)))
    memory, source_mask = model.encode(source)
    cache = model.init_cache(memory)
    steps = []
    for t in range(target.shape[1]):
        logits, cache = model.decode(target[:, t:t + 1], memory, source_mask, cache=cache)
        steps.append(to_numpy(logits))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-4)
    # Several new positions at once through the cache also match.
    cache = model.init_cache(memory)
    first, cache = model.decode(target[:, :3], memory, source_mask, cache=cache)
    rest, cache = model.decode(target[:, 3:], memory, source_mask, cache=cache)
    np.testing.assert_allclose(np.concatenate([to_numpy(first), to_numpy(rest)], axis=1), full,
                               atol=1e-4)


def test_reordered_cache_continues_each_row_it_took(tiny_config):
    # Two copies of one sentence with different prefixes, as two beams: after reordering the
    # cache to rows [1, 1], both rows continue prefix 1, as a full pass over it computes.
    model = Transformer(tiny_config)
    source, target = random_batch(tiny_config, seed=2)
    target[:, :] = np.maximum(target, 4)
    sources = np.repeat(source[:1], 2, axis=0)
    prefixes = target[:2, :4]
    memory, source_mask = model.encode(sources)
    _, cache = model.decode(prefixes[:, :3], memory, source_mask, cache=model.init_cache(memory))
    cache = model.reorder_cache(cache, ops.convert_to_tensor(np.array([1, 1], "int32")))
    step, _ = model.decode(prefixes[[1, 1], 3:4], None, source_mask, cache=cache)
    full = to_numpy(model((sources, prefixes[[1, 1]])))[:, 3]
    np.testing.assert_allclose(to_numpy(step)[:, 0], full, atol=1e-4)
    assert model.decoder.cached_length(cache) == 3


@pytest.mark.parametrize("bad, message", [
    ((np.zeros((2, 3, 4), "int32"), np.zeros((2, 3), "int32")), "source_ids must be a rank-2"),
    ((np.zeros((2, 3), "int32"), np.zeros((2,), "int32")), "target_in_ids must be a rank-2"),
    ((np.zeros((2, 3), "float32"), np.zeros((2, 3), "int32")), "integer tensor of token ids"),
])
def test_wrong_rank_or_dtype_raises_value_error_naming_expectation(tiny_config, bad, message):
    model = Transformer(tiny_config)
    with pytest.raises(ValueError, match=message):
        model(bad)


def test_inputs_must_be_a_pair(tiny_config):
    with pytest.raises(ValueError, match=r"inputs=\(source_ids, target_in_ids\)"):
        Transformer(tiny_config)(np.zeros((2, 3), "int32"))
    ids = np.ones((2, 3), "int32")
    with pytest.raises(ValueError, match="target_segment_ids\\) for packed rows, got tuple of 3"):
        Transformer(tiny_config)((ids, ids, ids))


def pack(pairs, length):
    """NumPy packing, written out: each row's pairs one after the other, segment ids from 1."""
    rows = {side: np.zeros((len(pairs), length), "int32") for side in range(4)}
    for row, row_pairs in enumerate(pairs):
        start = [0, 0]
        for segment, (source, target) in enumerate(row_pairs, 1):
            for side, ids in ((0, source), (1, target)):
                rows[side][row, start[side]:start[side] + len(ids)] = ids
                rows[side + 2][row, start[side]:start[side] + len(ids)] = segment
                start[side] += len(ids)
    return tuple(rows[side] for side in range(4))


@pytest.mark.parametrize("norm,positional", [("post", "sinusoidal"), ("pre", "learned")])
def test_a_packed_row_gives_each_pair_the_logits_it_has_alone(tiny_config, norm, positional):
    model = Transformer(tiny_config.replace(norm=norm, positional=positional))
    rng = np.random.default_rng(3)

    def sentence(length, bos=False):
        ids = rng.integers(4, tiny_config.vocab_size, size=length).astype("int32")
        if bos:
            ids[0] = BOS_ID
        return ids

    # Row 0 holds three pairs, row 1 one pair and more padding.
    pairs = [[(sentence(s), sentence(t, bos=True)) for s, t in row]
             for row in ([(4, 6), (7, 3), (2, 5)], [(9, 8)])]
    packed = to_numpy(model(pack(pairs, 16)))
    for row, row_pairs in enumerate(pairs):
        start = 0
        for source, target in row_pairs:
            alone = to_numpy(model((source[None], target[None])))[0]
            np.testing.assert_allclose(packed[row, start:start + len(target)], alone, atol=1e-5)
            start += len(target)
    # Not vacuous: the same row read as one long pair gives other logits.
    source, target, _, _ = pack(pairs, 16)
    unpacked = to_numpy(model((source, target)))
    assert np.abs(unpacked[0, 6:9] - packed[0, 6:9]).max() > 1e-3


def test_packed_rows_train_to_the_loss_of_the_same_pairs_unpacked(tiny_config):
    """The masked loss of a packed batch is the loss of its pairs in an ordinary padded batch."""
    rng = np.random.default_rng(4)
    sizes = [(5, 4), (3, 6), (6, 5), (4, 3)]
    pairs = [(rng.integers(4, 40, s).astype("int32"),
              np.concatenate([[BOS_ID], rng.integers(4, 40, t - 1)]).astype("int32"))
             for s, t in sizes]
    outs = [np.concatenate([target[1:], [EOS_ID]]).astype("int32") for _, target in pairs]
    packed = pack([pairs[:2], pairs[2:]], 12)
    packed_out = pack([[(o, o) for o in outs[:2]], [(o, o) for o in outs[2:]]], 12)[0]
    padded = tuple(np.stack([np.pad(p[side], (0, 6 - len(p[side]))) for p in pairs])
                   for side in range(2))
    padded_out = np.stack([np.pad(o, (0, 6 - len(o))) for o in outs])
    losses = []
    for inputs, out in ((packed, packed_out), (padded, padded_out)):
        keras.utils.set_random_seed(0)
        model = compile_transformer(Transformer(tiny_config.replace(dropout=0.0)))
        losses.append(float(model.evaluate(inputs, out, verbose=0, return_dict=True)["loss"]))
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)


def paper_count(config):
    model = Transformer(config)
    model.build()
    return model.count_params()


def test_parameter_counts_match_the_paper_within_5_percent():
    base = paper_count(get_preset("base", vocab_size=37000))
    big = paper_count(get_preset("big", vocab_size=37000))
    assert abs(base - 65e6) / 65e6 <= 0.05, base
    assert abs(big - 213e6) / 213e6 <= 0.05, big
    # Independent count from the architecture: tied embedding + 6 + 6 layers of §3.
    d, f, v = 512, 2048, 37000
    attention = 4 * d * d + 4 * d
    ffn = 2 * d * f + f + d
    norm = 2 * d
    assert base == v * d + 6 * (attention + ffn + 2 * norm) + 6 * (2 * attention + ffn + 3 * norm)


def test_keras_file_round_trip_gives_identical_logits_and_resumes_step_count(tiny_config,
                                                                            tmp_path):
    tiny_config = tiny_config.replace(dropout=0.0)  # identical continued training below
    model = compile_transformer(Transformer(tiny_config))
    source, target = random_batch(tiny_config)
    labels = np.concatenate([target[:, 1:], np.full((4, 1), 3, "int32")], axis=1) * (target > 0)
    model.fit((source, target), labels, epochs=3, batch_size=2, verbose=0)
    assert int(model.optimizer.iterations) == 6
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_array_equal(to_numpy(restored((source, target))),
                                  to_numpy(model((source, target))))
    assert int(restored.optimizer.iterations) == 6
    assert restored.transformer_config == tiny_config
    # Training continues from step 6 with the restored optimizer state, as the original would.
    restored.fit((source, target), labels, epochs=1, batch_size=2, verbose=0, shuffle=False)
    model.fit((source, target), labels, epochs=1, batch_size=2, verbose=0, shuffle=False)
    assert int(restored.optimizer.iterations) == 8
    for a, b in zip(restored.get_weights(), model.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_predict_and_evaluate_work_on_tuple_inputs(tiny_config):
    model = compile_transformer(Transformer(tiny_config))
    source, target = random_batch(tiny_config)
    predicted = model.predict((source, target), batch_size=2, verbose=0)
    assert predicted.shape == (4, 7, tiny_config.vocab_size)
    results = model.evaluate((source, target), target, batch_size=2, verbose=0,
                             return_dict=True)
    assert set(results) >= {"loss", "accuracy", "perplexity"}
    assert np.isfinite(results["loss"]) and results["perplexity"] > 1


def numpy_sinusoids(length, d_model):
    """PE(pos, 2i) = sin(pos / 10000^(2i / d_model)), PE(pos, 2i + 1) = cos(...) (§3.5)."""
    pos = np.arange(length)[:, None]
    i = np.arange(d_model)[None, :]
    angles = pos / np.power(10000.0, (2 * (i // 2)) / d_model)
    return np.where(i % 2 == 0, np.sin(angles), np.cos(angles))


def test_first_encoder_layer_attention_weights_match_numpy_from_the_paper(tiny_config):
    model = Transformer(tiny_config)
    source, target = random_batch(tiny_config)
    weights = model.attention_weights(source, target)
    d, h = tiny_config.d_model, tiny_config.num_heads
    # The first layer's input: E[ids] * sqrt(d_model) + PE (§3.4, §3.5; no dropout at inference).
    x = to_numpy(model.embedding.embeddings)[source] * np.sqrt(d) + numpy_sinusoids(9, d)
    attention = model.encoder.stack[0].self_attention
    q = np.einsum("btd,dhk->bhtk", x, to_numpy(attention.query_kernel)) \
        + to_numpy(attention.query_bias)[None, :, None, :]
    k = np.einsum("btd,dhk->bhtk", x, to_numpy(attention.key_kernel)) \
        + to_numpy(attention.key_bias)[None, :, None, :]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d // h)  # eq. 1
    scores = np.where((source != 0)[:, None, None, :], scores, -np.inf)
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(to_numpy(weights["encoder_self"][0]), expected, atol=1e-5)


def test_attention_weights_have_every_layer_and_head_and_respect_the_masks(tiny_config):
    model = Transformer(tiny_config)
    source, target = random_batch(tiny_config)
    logits = to_numpy(model((source, target)))
    variables = [v.path for v in model.variables]
    weights = model.attention_weights(source, target)
    # Asking for weights changes nothing: no new variables, the same logits (the TF-only test
    # below checks that the traced training graph is unchanged too).
    assert [v.path for v in model.variables] == variables
    np.testing.assert_array_equal(to_numpy(model((source, target))), logits)
    shapes = {"encoder_self": (4, 4, 9, 9), "decoder_self": (4, 4, 7, 7),
              "decoder_cross": (4, 4, 7, 9)}
    for kind, shape in shapes.items():
        assert len(weights[kind]) == 2, kind  # one per layer
        for layer in weights[kind]:
            assert layer.shape == shape, kind
            np.testing.assert_allclose(np.sum(to_numpy(layer), axis=-1), 1.0, atol=1e-5)
    for layer in range(2):
        # Sentence 0's source pads (from position 6) get no weight from the encoder or decoder.
        assert np.all(to_numpy(weights["encoder_self"][layer])[0, :, :, 6:] == 0)
        assert np.all(to_numpy(weights["decoder_cross"][layer])[0, :, :, 6:] == 0)
        # No target position attends to a later one (§3.2.3), nor to target pads.
        self_weights = to_numpy(weights["decoder_self"][layer])
        assert np.all(np.triu(np.ones((7, 7)), k=1)[None, None] * self_weights == 0)
        assert np.all(self_weights[0, :, :, 5:] == 0)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="inspects the tf.function graph of the training call")
def test_asking_for_attention_weights_leaves_the_traced_training_graph_unchanged(tiny_config):
    import tensorflow as tf

    model = Transformer(tiny_config)
    source, target = random_batch(tiny_config)
    call_graph = lambda: sorted(  # noqa: E731 - the op types of the traced training call
        op.type for op in tf.function(lambda s, t: model((s, t), training=True))
        .get_concrete_function(tf.TensorSpec([None, None], tf.int32),
                               tf.TensorSpec([None, None], tf.int32)).graph.get_operations())
    before = call_graph()
    weights = model.attention_weights(source, target)
    assert len(weights["encoder_self"]) == 2
    assert call_graph() == before  # asking for weights leaves the training graph as it was
