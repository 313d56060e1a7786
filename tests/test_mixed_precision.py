"""Mixed precision (bf16, fp16): half-precision matmuls, float32 where the numerics need it.

Backend-neutral: `make test` runs it on TensorFlow and on JAX without TensorFlow
installed (the Makefile's BACKEND_TESTS). The reference is the same model in float32 with the
same weights.
"""

import keras
import numpy as np
import pytest
from keras import ops

from tfformer import Transformer, compile_transformer
from tfformer.config import TransformerConfig
from tfformer.model import precision
from tfformer.special_tokens import BOS_ID
from tfformer.utils import cpu

HALF = {"bf16": "bfloat16", "fp16": "float16"}


def compiled_model(config, mixed_precision: str | None, weights=None) -> Transformer:
    with precision.policy(mixed_precision):
        model = Transformer(config)
        model.build()
    if weights is not None:
        model.set_weights(weights)
    return compile_transformer(model)


def batch(config, rows=8, length=12, seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(4, config.vocab_size, size=(rows, length)).astype("int32")
    target = rng.integers(4, config.vocab_size, size=(rows, length + 1)).astype("int32")
    target[:, 0] = BOS_ID
    source[0, 7:] = 0  # padded sentences: the masks must hold in half precision too
    target[0, 6:] = 0
    return (source, target[:, :-1]), target[:, 1:]


@pytest.fixture
def config():
    # No dropout: the two precisions must see the same function, not two random masks.
    return TransformerConfig(vocab_size=300, d_model=64, num_heads=4, d_ff=128,
                             num_encoder_layers=2, num_decoder_layers=2, max_length=64,
                             dropout=0.0)


@pytest.mark.parametrize("half", ["bf16", "fp16"])
def test_one_step_in_half_precision_gives_the_fp32_loss(config, half):
    fp32 = compiled_model(config, None)
    mixed = compiled_model(config, half, fp32.get_weights())
    inputs, labels = batch(config)
    loss32 = float(fp32.train_on_batch(inputs, labels)[0])
    loss16 = float(mixed.train_on_batch(inputs, labels)[0])
    assert abs(loss16 - loss32) < 1e-2, (loss16, loss32)
    # The step updated the float32 master weights, in the fp32 step's direction.
    assert all(v.dtype == "float32" for v in mixed.trainable_variables)
    moved = [np.asarray(ops.convert_to_numpy(v)) for v in mixed.trainable_variables]
    reference = [np.asarray(ops.convert_to_numpy(v)) for v in fp32.trainable_variables]
    assert max(np.abs(a - b).max() for a, b in zip(moved, reference)) < 2e-3
    # The layers compute in half precision; the logits leave the model in float32.
    source, target_in = inputs
    memory, _ = mixed.encode(source)
    assert keras.backend.standardize_dtype(memory.dtype) == HALF[half]
    assert keras.backend.standardize_dtype(mixed((source, target_in)).dtype) == "float32"
    # fp16 needs loss scaling (its gradients underflow); bf16 has float32's range.
    scaled = isinstance(mixed.optimizer, keras.optimizers.LossScaleOptimizer)
    assert scaled == (half == "fp16")


@pytest.mark.parametrize("half", ["bf16", "fp16"])
def test_half_precision_logits_follow_fp32_and_masks_hold(config, half):
    fp32 = compiled_model(config, None)
    mixed = compiled_model(config, half, fp32.get_weights())
    inputs, _ = batch(config)
    logits32 = ops.convert_to_numpy(fp32(inputs))
    logits16 = ops.convert_to_numpy(mixed(inputs))
    assert np.isfinite(logits16).all()
    # Half precision keeps about 3 (bf16) or 4 (fp16) significant digits of each logit.
    scale = np.abs(logits32).max()
    assert np.abs(logits16 - logits32).max() < (0.05 if half == "bf16" else 0.01) * scale
    # The same argmax almost everywhere (ties within half-precision rounding aside).
    agree = (logits16.argmax(-1) == logits32.argmax(-1)).mean()
    assert agree > 0.95
    # Padding in the source changes nothing for the other sentences (the mask's fill value
    # is representable in half precision).
    source, target_in = inputs
    changed = source.copy()
    changed[0, 7:] = 0
    changed[1:, -1] = 0
    again = ops.convert_to_numpy(mixed((changed, target_in)))
    np.testing.assert_array_equal(again[0], logits16[0])


def test_auto_precision_is_bf16_only_where_the_hardware_multiplies_in_it(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n")
    assert cpu.cpu_flags(str(cpuinfo)) >= {"avx2", "avx512_bf16"}
    assert cpu.cpu_flags(str(tmp_path / "missing")) == set()
    assert precision.resolve("auto", flags={"avx512_bf16"}, accelerator=False) == "bf16"
    assert precision.resolve("auto", flags={"amx_bf16"}, accelerator=False) == "bf16"
    assert precision.resolve("auto", flags={"avx2", "avx512f"}, accelerator=False) is None
    assert precision.resolve("auto", flags=set(), accelerator=True) == "bf16"
    assert precision.resolve("fp16", flags=set(), accelerator=False) == "fp16"
    assert precision.resolve(None) is None
    with pytest.raises(ValueError, match="mixed_precision"):
        precision.resolve("int8")
    # The policy is set while models are built and put back afterwards.
    before = keras.config.dtype_policy().name
    with precision.policy("bf16"):
        assert keras.config.dtype_policy().name == "mixed_bfloat16"
    assert keras.config.dtype_policy().name == before
    # What a bf16 export logs about this CPU.
    assert "natively (amx_bf16, avx512_bf16)" in cpu.describe_bf16_support(
        {"avx2", "avx512_bf16", "amx_bf16"})
    assert "neither AVX512_BF16 nor AMX" in cpu.describe_bf16_support({"avx2", "avx512f"})
