"""Every console script answers --help at once: without importing TensorFlow (or Keras, or
gRPC's TF Serving protos), each default shown once."""

import configparser
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def console_scripts() -> dict[str, str]:
    """name -> module, from setup.cfg's entry points."""
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    scripts = {}
    for line in config["options.entry_points"]["console_scripts"].strip().splitlines():
        name, target = (part.strip() for part in line.split("="))
        scripts[name] = target.split(":")[0]
    return scripts


HELP_WITHOUT_TENSORFLOW = """
import sys
from {module} import main
try:
    main(["--help"])
except SystemExit as exit:
    assert exit.code == 0, exit.code
heavy = sorted(name for name in ("tensorflow", "keras", "jax", "tensorflow_serving", "grpc")
               if name in sys.modules)
print("LOADED", heavy)
"""


@pytest.mark.parametrize("name,module", sorted(console_scripts().items()))
def test_help_answers_without_tensorflow_and_shows_each_default_once(name, module):
    result = subprocess.run([sys.executable, "-c", HELP_WITHOUT_TENSORFLOW.format(module=module)],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": ROOT})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LOADED []" in result.stdout, result.stdout[-2000:]
    assert result.stderr == ""  # no start-up log lines before the usage
    text = result.stdout
    assert text.startswith(f"usage: {name}")
    for option in re.split(r"\n  (?=-)", text):
        assert len(re.findall(r"\(default", option)) <= 1, option
        assert "(default: None)" not in option, option


def test_every_training_setting_has_a_flag_whose_default_is_the_dataclass_default():
    import dataclasses

    from tfformer.cli.train import parse_args
    from tfformer.train.settings import TrainSettings

    args = parse_args([])
    for field in dataclasses.fields(TrainSettings):
        assert hasattr(args, field.name), f"no --{field.name.replace('_', '-')} flag"
        assert getattr(args, field.name) == field.default, field.name
    assert args.settings == TrainSettings()
