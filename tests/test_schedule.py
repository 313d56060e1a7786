"""The learning-rate schedule and optimizer of §5.3.

Backend-neutral: `make test` runs it on TensorFlow and on JAX without TensorFlow
installed (the Makefile's BACKEND_TESTS).
"""

import keras
import numpy as np
import pytest

from tfformer.model.adam import Adam
from tfformer.model.schedule import NoamSchedule, paper_optimizer


def paper_lrate(step, d_model=512, warmup=4000):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("paper_step", [1, 4000, 100000])
def test_noam_equals_formula_at_paper_steps(paper_step):
    schedule = NoamSchedule(512, 4000)
    # Keras passes optimizer.iterations, 0 before the first update: update k uses paper step k.
    assert float(schedule(paper_step - 1)) == pytest.approx(paper_lrate(paper_step), rel=1e-6)


def test_step_zero_is_finite_and_positive_and_peak_is_at_warmup():
    schedule = NoamSchedule(512, 4000)
    first = float(schedule(0))
    assert np.isfinite(first) and first > 0
    values = [float(schedule(i)) for i in (3000, 3999, 5000)]
    assert values[1] > values[0] and values[1] > values[2]
    assert values[1] == pytest.approx(512 ** -0.5 * 4000 ** -0.5, rel=1e-6)


def test_schedule_round_trips_through_config():
    schedule = NoamSchedule(256, warmup_steps=100, scale=2.0)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(clone(10)) == pytest.approx(float(schedule(10)))


def test_paper_optimizer_has_the_papers_adam_and_uses_the_schedule():
    optimizer = paper_optimizer(512, warmup_steps=4000, gradient_accumulation_steps=2)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    assert isinstance(optimizer._learning_rate, NoamSchedule) and isinstance(optimizer, Adam)
    assert optimizer.gradient_accumulation_steps == 2
    assert float(optimizer.learning_rate) == pytest.approx(paper_lrate(1), rel=1e-6)


def test_schedule_counts_updates_not_micro_batches_under_gradient_accumulation():
    # With a constant gradient, Adam's bias-corrected update is lr * g / (|g| + eps): each
    # update moves the weight by exactly the learning rate it applied.
    accumulation, d_model, warmup = 4, 16, 3
    optimizer = paper_optimizer(d_model, warmup_steps=warmup,
                                gradient_accumulation_steps=accumulation)
    weight = keras.Variable(np.zeros([1], np.float32))
    optimizer.build([weight])
    gradient = keras.ops.ones([1])
    for update in range(1, 8):
        before = float(keras.ops.convert_to_numpy(weight)[0])
        for _ in range(accumulation):
            optimizer.apply([gradient], [weight])
        applied = before - float(keras.ops.convert_to_numpy(weight)[0])
        assert int(optimizer.iterations) == update
        assert applied == pytest.approx(paper_lrate(update, d_model, warmup), rel=1e-4), update


def test_schedule_without_accumulation_is_unchanged_by_the_new_field():
    plain = NoamSchedule(64, 10)
    explicit = NoamSchedule(64, 10, micro_batches_per_update=1)
    assert [float(plain(i)) for i in range(20)] == [float(explicit(i)) for i in range(20)]
    with pytest.raises(ValueError, match="micro_batches_per_update"):
        NoamSchedule(64, 10, micro_batches_per_update=0)


def adam_steps(optimizer_class, steps=6, seed=0, **kwargs):
    """Weights, moments and velocities after `steps` updates with random gradients, with the
    paper's betas and epsilon and the Noam schedule."""
    rng = np.random.default_rng(seed)
    shapes = [(7, 5), (5,), (30, 4)]
    weights = [keras.Variable(rng.normal(size=shape).astype("float32")) for shape in shapes]
    optimizer = optimizer_class(learning_rate=NoamSchedule(16, 3), beta_1=0.9, beta_2=0.98,
                                epsilon=1e-9, **kwargs)
    optimizer.build(weights)
    for _ in range(steps):
        optimizer.apply([keras.ops.convert_to_tensor(rng.normal(size=shape).astype("float32"))
                         for shape in shapes], weights)
    return [keras.ops.convert_to_numpy(v)
            for v in weights + optimizer._momentums + optimizer._velocities]


@pytest.mark.parametrize("kwargs", [{}, {"amsgrad": True}, {"gradient_accumulation_steps": 2}])
def test_our_adam_updates_as_keras_adam_does(kwargs):
    ours, keras_own = adam_steps(Adam, **kwargs), adam_steps(keras.optimizers.Adam, **kwargs)
    assert len(ours) == 9
    for got, expected in zip(ours, keras_own):
        # The same arithmetic in another kernel: float32 rounding apart.
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert not np.allclose(ours[0], adam_steps(Adam, steps=5, **kwargs)[0])  # the steps moved it


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow's fused op")
def test_on_tensorflow_an_update_is_one_fused_op_per_variable_and_takes_embedding_rows():
    import tensorflow as tf

    table = keras.Variable(np.arange(12, dtype="float32").reshape(4, 3))
    dense = keras.Variable(np.ones([3], "float32"))
    optimizer = Adam(learning_rate=0.1)
    optimizer.build([table, dense])

    @tf.function
    def update(rows, values, gradient):
        # A gather's gradient: tf.IndexedSlices of two of the table's four rows.
        optimizer.apply([tf.IndexedSlices(values, rows, tf.constant([4, 3])), gradient],
                        [table, dense])

    args = (tf.constant([1, 3]), tf.ones([2, 3]), tf.ones([3]))
    ops = [op.type for op in update.get_concrete_function(*args).graph.get_operations()]
    assert ops.count("ResourceApplyAdam") == 2 and "Sqrt" not in ops
    update(*args)
    # The first update moves every weight with a gradient by lr (sign of g) and no other.
    np.testing.assert_allclose(table.numpy(), np.arange(12).reshape(4, 3)
                               - 0.1 * np.array([[0], [1], [0], [1]]), rtol=1e-6)
    np.testing.assert_allclose(dense.numpy(), 0.9, rtol=1e-6)


def test_inverse_sqrt_warms_up_linearly_to_its_peak_then_decays_as_fairseqs():
    from tfformer.model.schedule import InverseSqrtSchedule

    schedule = InverseSqrtSchedule(3e-4, warmup_steps=400, micro_batches_per_update=2)
    for update in (1, 200, 400, 1600, 10000):
        # fairseq's inverse_sqrt from 0: lr * step / warmup, then lr * sqrt(warmup / step).
        expected = 3e-4 * min(update / 400, (400 / update) ** 0.5)
        counter = (update - 1) * 2 + 1  # the second micro-batch of update `update`
        assert float(schedule(counter)) == pytest.approx(expected, rel=1e-6)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(clone(799)) == pytest.approx(3e-4, rel=1e-6)  # update 400: the peak


def test_the_optimizer_takes_each_schedule_by_name():
    from tfformer.model.schedule import InverseSqrtSchedule

    assert isinstance(paper_optimizer(512, 100, schedule="inverse_sqrt",
                                      learning_rate=1e-4)._learning_rate, InverseSqrtSchedule)
    constant = paper_optimizer(512, 100, schedule="constant", learning_rate=5e-5)
    assert float(keras.ops.convert_to_numpy(constant.learning_rate)) == pytest.approx(5e-5)
    with pytest.raises(ValueError, match="learning_rate"):
        paper_optimizer(512, 100, schedule="constant")
    with pytest.raises(ValueError, match="lr_schedule"):
        paper_optimizer(512, 100, schedule="cosine", learning_rate=1e-4)
