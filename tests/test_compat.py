"""Each workaround in tfformer.model.compat, and a check that fails when Keras changes what it works
around (then the workaround can go, or must change)."""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.backend.tensorflow import trainer as tf_trainer

from tfformer import Transformer, TransformerConfig, compile_transformer
from tfformer.model import compat


def test_keras_still_calls_the_symbolic_build_hook_we_override():
    assert list(inspect.signature(keras.Model._maybe_symbolic_build).parameters) == [
        "self", "iterator", "data_batch"]
    source = inspect.getsource(tf_trainer.TensorFlowTrainer._maybe_symbolic_build)
    assert '"MEAN"' in source  # reduces a distributed batch of ids to learn its shapes
    assert "self._maybe_symbolic_build(iterator=epoch_iterator)" in inspect.getsource(
        tf_trainer.TensorFlowTrainer.fit)


def test_keras_still_reduces_multi_worker_step_outputs_along_axis_0():
    source = inspect.getsource(tf_trainer.reduce_per_replica)
    assert 'strategy.reduce("MEAN", v, axis=0)' in source


def test_build_from_int_ids_builds_under_a_strategy_without_data():
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = Transformer(TransformerConfig(vocab_size=20, d_model=8, num_heads=2, d_ff=8,
                                              num_encoder_layers=1, num_decoder_layers=1))
        compile_transformer(model)
    compat.build_from_int_ids(model)
    assert model.built and model.optimizer.built
    x = np.full((2, 3), 5, np.int32)
    history = model.fit(tf.data.Dataset.from_tensors(((x, x), x)), verbose=0, shuffle=False)
    assert np.isfinite(history.history["loss"][0])


def test_without_a_strategy_the_optimizer_is_built_first_and_the_step_traced_once():
    model = Transformer(TransformerConfig(vocab_size=20, d_model=8, num_heads=2, d_ff=8,
                                          num_encoder_layers=1, num_decoder_layers=1))
    compile_transformer(model)
    traced = []
    train_step = model.train_step
    model.train_step = lambda data: (traced.append(1), train_step(data))[1]  # runs per trace
    x = np.full((2, 3), 5, np.int32)
    history = model.fit(tf.data.Dataset.from_tensors(((x, x), x)).repeat(3), verbose=0,
                        shuffle=False)  # a dataset keeps its own order (Keras warns otherwise)
    assert model.optimizer.built and int(model.optimizer.iterations) == 3
    # Keras' own deferred build creates the optimizer's variables in the first trace, and
    # TensorFlow then traces the step a second time.
    assert len(traced) == 1 and np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("multi_worker", [False, True])
def test_reducible_logs_adds_an_axis_only_for_multi_worker(multi_worker):
    class Fake(tf.distribute.MultiWorkerMirroredStrategy):
        def __init__(self):  # no cluster needed to test the dispatch
            pass

    strategy = Fake() if multi_worker else tf.distribute.get_strategy()
    logs = compat.reducible_logs(strategy, {"loss": tf.constant(2.0)})
    assert logs["loss"].shape == ((1,) if multi_worker else ())


def test_layer_norm_computes_what_keras_does_without_keras_reshapes_of_gamma_and_beta():
    """tfformer's LayerNorm is Keras' LayerNormalization (same weights, bit-identical outputs),
    but Keras reshapes gamma and beta at every call for axis -1 and it does not. When Keras
    stops reshaping, the subclass (tfformer/model/layers/layer_norm.py) can go."""
    from tfformer.model.layers.layer_norm import LayerNorm

    rng = np.random.default_rng(0)
    ours = LayerNorm(epsilon=1e-6)
    theirs = keras.layers.LayerNormalization(epsilon=1e-6)
    x = rng.normal(size=(3, 5, 8)).astype("float32")
    gamma, beta = rng.normal(size=(2, 8)).astype("float32")
    for layer in (ours, theirs):
        layer.build(x.shape)
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
    assert [w.path.split("/")[-1] for w in ours.weights] == ["gamma", "beta"]
    np.testing.assert_array_equal(ours(x).numpy(), theirs(x).numpy())
    reshapes = {}
    for name, layer in (("ours", ours), ("keras", theirs)):
        graph = tf.function(layer).get_concrete_function(
            tf.TensorSpec([None, None, 8], tf.float32)).graph
        reshapes[name] = sum(op.type == "Reshape" for op in graph.get_operations())
    assert reshapes == {"ours": 0, "keras": 2}
