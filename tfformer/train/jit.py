"""`--jit auto`: XLA-compiled train steps on packed rows where they pay, chosen for the machine at
hand, as `--mixed-precision auto` chooses bf16 (`tfformer.model.precision`).

Where they pay (docs/results.md, "Batch shapes and XLA"):
- a GPU or TPU: compiled steps are the rule there, and one batch shape is one compilation;
- a CPU without AVX-512 (AVX2): packed rows with `--jit` train faster than plain TensorFlow.
Where they do not: a CPU with AVX-512, where TensorFlow's own kernels (oneDNN) train as fast
in float32, and faster in bf16. Several TensorFlow replicas cannot compile their step in Keras 3
(keras-team/keras#19005), so they train plain too.

Imports no TensorFlow or Keras (the settings are resolved before the model is built).
"""

from __future__ import annotations

import dataclasses

from tfformer.utils.backends import has_accelerator
from tfformer.utils.cpu import cpu_flags

CHOICES = ("off", "on", "auto")
# The row length auto packs into when the run gives none: the one measured above. Pairs longer
# than a row are dropped and counted, as with any --pack-length.
AUTO_PACK_LENGTH = 128


def compiled_steps_pay(backend: str, replicas: int = 1, *, flags: set[str] | None = None,
                       accelerator: bool | None = None) -> tuple[bool, str]:
    """(whether compiled steps on packed rows pay here, why), for `--jit auto`."""
    if accelerator is None:
        accelerator = has_accelerator()
    if accelerator:
        return True, "an accelerator"
    if backend == "tensorflow" and replicas > 1:
        return False, f"{replicas} TensorFlow replicas cannot compile their step in Keras 3"
    flags = cpu_flags() if flags is None else flags
    if "avx512f" in flags:
        return False, "a CPU with AVX-512, where TensorFlow's own kernels are as fast"
    return True, "a CPU without AVX-512"


def resolve(settings, backend: str, max_length: int, replicas: int = 1, *,
            flags: set[str] | None = None, accelerator: bool | None = None):
    """The settings with `jit` "auto" decided: "on" with packed rows (the run's pack_length, or
    AUTO_PACK_LENGTH within max_length) where compiled steps pay, else "off"; and the reason
    (None when jit was not "auto")."""
    if settings.jit != "auto":
        return settings, None
    pays, why = compiled_steps_pay(backend, replicas, flags=flags, accelerator=accelerator)
    if not pays:
        return dataclasses.replace(settings, jit="off"), f"plain steps: {why}"
    pack_length = settings.pack_length or min(AUTO_PACK_LENGTH, max_length)
    return (dataclasses.replace(settings, jit="on", pack_length=pack_length),
            f"compiled steps on packed rows of {pack_length} tokens: {why}")
