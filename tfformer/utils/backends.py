"""Choosing a process's Keras backend: TensorFlow (the default), or JAX.

Keras reads KERAS_BACKEND once, when it is first imported, so a program (tfformer-train
--backend, `run.train`) chooses before anything imports Keras; asking for another backend once
Keras runs, or for one whose package is missing, is an error that says what to do.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

# Backend -> (the package it needs, the tfformer extra that installs it).
BACKENDS = {"tensorflow": ("tensorflow", None), "jax": ("jax", "jax")}

# Installed packages that `import tensorflow` loads for integrations tfformer never uses: Keras'
# image-gallery plot imports matplotlib.pyplot, and TFLite's converter imports jax. Both imports
# are guarded (ImportError turns the integration off), so the console scripts and the export's
# fresh-process check hide the packages while TensorFlow imports and start sooner.
HIDDEN_AT_TENSORFLOW_IMPORT = ("matplotlib", "jax")


def chosen_backend() -> str:
    """The backend Keras runs on, or, before anything imports Keras, the one it will take, read
    as Keras reads it: KERAS_BACKEND, else the `backend` of its keras.json (in KERAS_HOME, else
    ~/.keras, else /tmp/.keras), else TensorFlow. Imports nothing."""
    if "keras" in sys.modules:
        return sys.modules["keras"].backend.backend()
    if "KERAS_BACKEND" in os.environ:
        return os.environ["KERAS_BACKEND"]
    home = os.path.expanduser("~")
    directory = os.environ.get("KERAS_HOME") or os.path.join(
        home if os.access(home, os.W_OK) else "/tmp", ".keras")
    try:
        with open(os.path.join(directory, "keras.json")) as f:
            return json.load(f).get("backend", "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def select_backend(name: str | None) -> str:
    """Makes `name` this process's Keras backend (None: the one Keras takes, `chosen_backend`);
    returns the backend in use.

    Raises:
        ValueError: an unknown backend, or Keras already running on another one.
        ImportError: the backend's package is not installed (naming the extra to install).
    """
    if name is None:
        return chosen_backend()
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {sorted(BACKENDS)}, got {name!r}")
    package, extra = BACKENDS[name]
    if importlib.util.find_spec(package) is None:
        install = f"pip install 'tfformer[{extra}]'" if extra else f"pip install {package}"
        raise ImportError(f"the {name} backend needs the {package} package, which is not "
                          f"installed: {install}")
    if "keras" in sys.modules:
        running = sys.modules["keras"].backend.backend()
        if running != name:
            raise ValueError(f"Keras already runs on the {running} backend in this process; "
                             f"set KERAS_BACKEND={name} before anything imports Keras")
        return name
    os.environ["KERAS_BACKEND"] = name
    return name


def on_tensorflow() -> bool:
    """The one check of which backend runs: whether Keras computes with TensorFlow (where the
    model takes TensorFlow's fast forms, `tfformer.model.layers.kernels`, and the translator's
    graph search and the export are available). Imports Keras."""
    import keras

    return keras.backend.backend() == "tensorflow"


def has_accelerator() -> bool:
    """Whether Keras' backend sees a GPU or TPU (asks the backend, so Keras must be chosen)."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.default_backend() in ("gpu", "tpu")
    if backend == "tensorflow":
        import tensorflow as tf

        return bool(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))
    return False
