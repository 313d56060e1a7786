"""The model's precision: Keras' dtype policy for training (mixed bf16 / fp16, "auto" where bf16
pays) and the precision an exported translator computes in.

Under `--mixed-precision bf16|fp16` the matmuls run in half precision on float32 weights
(Keras' mixed policies); the model keeps in float32 what half precision would spoil: the
attention softmax (`tfformer.model.layers.attention`), LayerNorm (Keras computes it in float32), the
logits, their log-softmax and the loss (`tfformer.model.losses`), and so the beam scores. fp16 has
too little range for the gradients: Keras wraps the optimizer in a `LossScaleOptimizer`.

bf16 is only faster where the hardware multiplies in it: a GPU or TPU, or a CPU with
AVX512_BF16 or AMX; elsewhere its casts cost time for nothing. "auto" chooses it there.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

from tfformer.utils.backends import has_accelerator
from tfformer.utils.cpu import BF16_CPU_FLAGS, bf16_flags, cpu_flags

POLICIES = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
CHOICES = ("auto", *POLICIES)
# What an exported translator's weights may be stored and multiplied in
# (`tfformer.decode.translator.in_precision`): no loss scaling or float32 master weights at
# inference.
INFERENCE_PRECISIONS = ("fp32", "bf16")


def resolve(setting: str | None, *, flags: set[str] | None = None,
            accelerator: bool | None = None) -> str | None:
    """The precision a setting means here: "auto" is bf16 on a GPU/TPU or a CPU with
    AVX512_BF16 or AMX, else None (float32); "bf16", "fp16" and None mean themselves."""
    if setting is not None and setting not in CHOICES:
        raise ValueError(f"mixed_precision must be None or one of {', '.join(CHOICES)}, "
                         f"got {setting!r}")
    if setting != "auto":
        return setting
    flags = cpu_flags() if flags is None else flags
    if accelerator is None:
        accelerator = has_accelerator()
    return "bf16" if accelerator or flags & set(BF16_CPU_FLAGS) else None


def policy(precision: str | None) -> contextlib.AbstractContextManager[None]:
    """Keras' global dtype policy for training in `precision` (None: float32) while models are
    built in the block (`dtype_policy`)."""
    return dtype_policy(POLICIES[precision] if precision else "float32")


@contextlib.contextmanager
def dtype_policy(name: str) -> Iterator[None]:
    """Keras' global dtype policy `name` while models are built in the block; the previous
    policy afterwards, so that a run leaves the process as it found it."""
    import keras

    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)


def check_inference_precision(precision: str) -> None:
    """Raises ValueError unless `precision` is one of INFERENCE_PRECISIONS."""
    if precision not in INFERENCE_PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(INFERENCE_PRECISIONS)}, "
                         f"got {precision!r}")


def describe(precision: str | None) -> str:
    flags = bf16_flags() or ["no AVX512_BF16 or AMX"]
    return f"{POLICIES.get(precision, 'float32')} (CPU: {', '.join(flags)}; {os.cpu_count()} cores)"
