"""Gradient accumulation is the same training as one larger batch (§5.3's step = an update)."""

import numpy as np
import tensorflow as tf

from tfformer import (
    Transformer,
    TransformerConfig,
    compile_transformer,
    paper_optimizer,
)


def fit_weights(batches, accumulation, initial_weights, config):
    model = Transformer(config)
    model.build()
    model.set_weights(initial_weights)
    compile_transformer(model, optimizer=paper_optimizer(
        config.d_model, warmup_steps=5, gradient_accumulation_steps=accumulation))
    dataset = tf.data.Dataset.from_tensor_slices(batches)
    model.fit(dataset, epochs=1, shuffle=False, verbose=0)
    return model


def test_four_accumulated_batches_equal_one_batch_of_four_times_the_size():
    config = TransformerConfig(vocab_size=30, d_model=16, num_heads=2, d_ff=32,
                               num_encoder_layers=1, num_decoder_layers=1, dropout=0.0,
                               attention_dropout=0.0)
    reference = Transformer(config)
    reference.build()
    initial = reference.get_weights()
    rng = np.random.default_rng(3)
    updates, accumulation, batch = 3, 4, 2
    # No padding: every micro-batch holds the same number of target tokens, so the mean of the
    # four micro-batch means is the mean over their concatenation.
    count = updates * accumulation * batch
    source = rng.integers(4, 30, size=(count, 7)).astype(np.int32)
    target = rng.integers(4, 30, size=(count, 6)).astype(np.int32)
    target_in, target_out = target[:, :-1], target[:, 1:]

    def batched(size):
        split = lambda a: a.reshape(-1, size, a.shape[1])  # noqa: E731
        return (split(source), split(target_in)), split(target_out)

    accumulated = fit_weights(batched(batch), accumulation, initial, config)
    concatenated = fit_weights(batched(batch * accumulation), None, initial, config)
    assert int(accumulated.optimizer.iterations) == int(concatenated.optimizer.iterations) == 3
    moved = max(np.abs(a - b).max() for a, b in zip(concatenated.get_weights(), initial))
    assert moved > 1e-3
    # fp32 sums in another order: Adam's first updates, lr * g / |g|, turn a rounding difference
    # in a near-zero gradient into up to ~1e-5 here, 1/1000 of one update; the schedule counting
    # micro-batches instead of updates changes weights by ~1e-2.
    # The key biases are left out: softmax is invariant to the constant q.b_k they add to every
    # score, so their true gradient is 0 and Adam turns the rounding noise into +-lr steps.
    compared = 0
    for got, want in zip(accumulated.weights, concatenated.weights):
        if not got.path.endswith("key_bias"):
            np.testing.assert_allclose(got.numpy(), want.numpy(), atol=5e-5, rtol=0,
                                       err_msg=got.path)
            compared += 1
    assert compared == len(initial) - 3
