"""The console scripts' TensorFlow import: without the packages TensorFlow would load for
integrations no script uses, on the TensorFlow backend only, and with those packages usable
afterwards."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REPORT = """
import json, sys
from tfformer.cli.console import import_tensorflow
from tfformer.utils.backends import chosen_backend
backend = chosen_backend()
import_tensorflow()
report = {"backend": backend,
          "imported": sorted(name for name in ("tensorflow", "keras", "matplotlib", "jax")
                             if name in sys.modules)}
if "tensorflow" in sys.modules:
    import jax
    import keras
    import matplotlib.pyplot
    report["then"] = [keras.backend.backend(), jax.numpy.add(1, 2).item(),
                      matplotlib.pyplot.figure().number]
print("REPORT", json.dumps(report))
"""


def report(tmp_path, **env) -> dict:
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("KERAS_BACKEND", "KERAS_HOME")}
    environment.update(PYTHONPATH=ROOT, KERAS_HOME=str(tmp_path / "keras-home"),
                       MPLBACKEND="Agg", TF_CPP_MIN_LOG_LEVEL="2", **env)
    result = subprocess.run([sys.executable, "-c", REPORT], env=environment, cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    [line] = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    return json.loads(line[len("REPORT "):])


def test_tensorflow_is_imported_without_matplotlib_and_jax_which_still_import_after(tmp_path):
    got = report(tmp_path)
    assert got["backend"] == "tensorflow"
    assert got["imported"] == ["keras", "tensorflow"]
    assert got["then"] == ["tensorflow", 3, 1]


def test_on_another_backend_nothing_is_imported(tmp_path):
    """KERAS_BACKEND, else keras.json in KERAS_HOME, as Keras reads them: a JAX run of
    tfformer-train imports TensorFlow only if it needs it, and then as usual."""
    assert report(tmp_path, KERAS_BACKEND="jax") == {"backend": "jax", "imported": []}
    (tmp_path / "keras-home").mkdir()
    (tmp_path / "keras-home" / "keras.json").write_text(json.dumps({"backend": "jax"}))
    assert report(tmp_path) == {"backend": "jax", "imported": []}
    assert report(tmp_path, KERAS_BACKEND="tensorflow")["imported"] == ["keras", "tensorflow"]


def test_without_tensorflow_installed_nothing_is_imported(tmp_path):
    """On a machine with JAX only (the GPU machine), where Keras' default backend cannot load:
    the script goes on as it would have, to its own error if it needs TensorFlow."""
    script = ("import importlib.util, sys\n"
              "find_spec = importlib.util.find_spec\n"
              "importlib.util.find_spec = lambda name, *args: (\n"
              "    None if name == 'tensorflow' else find_spec(name, *args))\n"
              "from tfformer.cli.console import import_tensorflow\n"
              "import_tensorflow()\n"
              "print('IMPORTED', sorted(n for n in ('tensorflow', 'keras', 'jax')\n"
              "                         if n in sys.modules))\n")
    environment = {name: value for name, value in os.environ.items() if name != "KERAS_BACKEND"}
    result = subprocess.run([sys.executable, "-c", script], env={**environment, "PYTHONPATH": ROOT},
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "IMPORTED []" in result.stdout
