"""How many programs XLA compiled for Keras' train and test steps.

JAX compiles a jitted function once per new input shape, and says so through `jax.monitoring`
(each backend compile, or load from JAX's compilation cache, is one event naming the
function); Keras' JAX trainer jits `train_step` and `test_step`. TensorFlow's jit_compile keeps
one XLA program per input shape too, but tells no Python listener, so there the count is None
and the batch shapes stand for it (`tfformer.data.batching.BatchStats`).
"""

from __future__ import annotations

import collections

STEP_FUNCTIONS = ("train_step", "test_step")
_BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

_counts: collections.Counter = collections.Counter()
_listening = False


def _on_event(event: str, duration: float, **kwargs) -> None:
    name = str(kwargs.get("fun_name", ""))
    if name.startswith("jit(") and name.endswith(")"):  # how JAX names a jitted function
        name = name[4:-1]
    if event == _BACKEND_COMPILE_EVENT and name in STEP_FUNCTIONS:
        _counts[name] += 1


def start_counting(backend: str) -> bool:
    """Counts the step functions' compilations from now on, where the backend tells (JAX);
    returns whether it does."""
    global _listening
    if backend != "jax":
        return False
    if not _listening:
        import jax

        jax.monitoring.register_event_duration_secs_listener(_on_event)
        _listening = True
    return True


def step_compilations() -> dict[str, int] | None:
    """{"train_step": n, "test_step": m} compiled since counting started (None if not)."""
    if not _listening:
        return None
    return {name: _counts[name] for name in STEP_FUNCTIONS}
