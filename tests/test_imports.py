"""What `import tfformer` promises: it stays light, a program still chooses the Keras backend
after it, Keras' own `load_model` finds tfformer's classes after it in either import order, and
each module has one name."""

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD_RUN = os.path.join(ROOT, "tests", "data", "run-v0.1")  # saved before the folders existed


def run_python(code: str, backend: str = "tensorflow") -> dict:
    """Runs `code` in a fresh process on `backend`; returns the JSON it prints last."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A copy of the old run directory with an averaged model beside its model.keras."""
    directory = tmp_path_factory.mktemp("imports") / "run"
    shutil.copytree(OLD_RUN, directory)
    averaged = run_python("import json; from tfformer import run; "
                          f"print(json.dumps(run.average({str(directory)!r}, last=1)))")
    assert averaged == str(directory / "model-avg1.keras")
    return directory


LOAD = """
import json, sys
{first}
{second}
model = keras.saving.load_model({model!r})
ckpt = keras.saving.load_model({model!r})
ckpt.load_weights({checkpoint!r})
averaged = keras.saving.load_model({averaged!r})
print(json.dumps({{"backend": keras.backend.backend(), "class": type(model).__module__ + "."
                  + type(model).__name__, "averaged": type(averaged).__name__,
                  "params": model.count_params(), "checkpoint": ckpt.count_params()}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
@pytest.mark.parametrize("keras_first", [False, True], ids=["tfformer-first", "keras-first"])
def test_keras_load_model_finds_tfformer_classes_after_import_tfformer(run_dir, backend,
                                                                       keras_first):
    imports = ["import tfformer", "import keras"]
    if keras_first:
        imports.reverse()
    found = run_python(LOAD.format(
        first=imports[0], second=imports[1], model=str(run_dir / "model.keras"),
        checkpoint=str(next((run_dir / "checkpoints").iterdir())),
        averaged=str(run_dir / "model-avg1.keras")), backend)
    assert found["backend"] == backend
    assert found["class"] == "tfformer.model.transformer.Transformer"
    assert found["averaged"] == "Transformer"
    assert found["params"] == found["checkpoint"] > 0


def test_without_import_tfformer_keras_cannot_load_the_model():
    """The test above is not vacuous: Keras alone does not find the classes."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", "import keras; keras.saving.load_model("
         f"{os.path.join(OLD_RUN, 'model.keras')!r})"],
        capture_output=True, text=True, env=env, cwd="/", timeout=300)
    assert done.returncode != 0
    assert "Transformer" in done.stderr


def test_import_tfformer_is_light_and_the_backend_is_chosen_after_it():
    found = run_python("""
import json, os, sys
import tfformer
light = not any(name in sys.modules for name in ("keras", "tensorflow", "jax"))
os.environ["KERAS_BACKEND"] = "jax"
import keras
print(json.dumps({"light": light, "backend": keras.backend.backend(),
                  "model": tfformer.Transformer.__module__}))
""")
    assert found == {"light": True, "backend": "jax", "model": "tfformer.model.transformer"}


def test_each_module_has_one_name():
    """No forwarding of the names from before the folders (no release shipped them): the old
    name is not found, the module imports under its name."""
    import importlib

    with pytest.raises(ModuleNotFoundError, match="tfformer.search"):
        importlib.import_module("tfformer.search")
    assert importlib.import_module("tfformer.decode.search").__name__ == "tfformer.decode.search"
