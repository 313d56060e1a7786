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


def setting_actions():
    """TrainSettings' fields, each with the tfformer-train actions whose dest is its name."""
    import dataclasses

    from tfformer.cli.train import make_parser
    from tfformer.train.settings import TrainSettings

    actions = make_parser()._actions
    return [(field, [action for action in actions if action.dest == field.name])
            for field in dataclasses.fields(TrainSettings)]


def test_every_training_setting_has_one_flag_whose_help_is_its_fields():
    for field, actions in setting_actions():
        flag = "--" + field.name.replace("_", "-")
        assert len(actions) == 1, f"{len(actions)} flags for {field.name}"
        assert actions[0].option_strings == [flag], field.name
        text = field.metadata.get("help", "")
        assert isinstance(text, str) and text.strip(), f"{field.name}: no help on the field"
        # The very string on the field, not a second text written for the flag.
        assert actions[0].help is text, f"{flag}: help is not {field.name}'s metadata help"


def test_every_setting_flag_takes_type_default_choices_and_metavar_from_its_field():
    import argparse
    import typing

    from tfformer.train.settings import TrainSettings

    hints = typing.get_type_hints(TrainSettings)
    for field, (action,) in setting_actions():
        kind = hints[field.name]
        assert action.default == field.default, field.name
        assert action.choices == field.metadata.get("choices"), field.name
        assert action.metavar == field.metadata.get("metavar"), field.name
        if kind is bool:
            assert isinstance(action, argparse._StoreTrueAction), field.name
            continue
        kind = next(arg for arg in typing.get_args(kind) or (kind,) if arg is not type(None))
        assert (action.type or str) is kind, field.name  # no type: argparse's str
        # A field's "const" is the value of its flag given alone (`--jit`).
        expected = ("?", field.metadata["const"]) if "const" in field.metadata else (None, None)
        assert (action.nargs, action.const) == expected, field.name


def test_settings_arguments_makes_flags_from_any_settings_dataclass():
    import argparse
    import dataclasses

    from tfformer.cli.console import settings_arguments

    @dataclasses.dataclass
    class Toy:
        max_steps: int | None = dataclasses.field(default=None, metadata={"help": "updates"})
        rate: float = dataclasses.field(default=0.5, metadata={"help": "a rate",
                                                               "metavar": "R"})
        mode: str = dataclasses.field(default="a", metadata={"help": "which",
                                                             "choices": ("a", "b")})
        fast: bool = dataclasses.field(default=False, metadata={"help": "go fast"})
        level: str = dataclasses.field(default="off", metadata={
            "help": "how", "choices": ("off", "on", "auto"), "const": "on"})

    parser = argparse.ArgumentParser()
    settings_arguments(parser, Toy)
    assert vars(parser.parse_args([])) == {"max_steps": None, "rate": 0.5, "mode": "a",
                                           "fast": False, "level": "off"}
    given = parser.parse_args(["--max-steps", "7", "--rate", "2", "--mode", "b", "--fast",
                               "--level"])
    assert vars(given) == {"max_steps": 7, "rate": 2.0, "mode": "b", "fast": True, "level": "on"}
    assert parser.parse_args(["--level", "auto"]).level == "auto"
    assert type(given.rate) is float
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "c"])
    assert "--rate R" in parser.format_help()
    parser.set_defaults(rate=0.25)  # a recipe's value, as tfformer-train sets it
    assert parser.parse_args([]).rate == 0.25

    @dataclasses.dataclass
    class Unflaggable:
        sizes: list = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="Unflaggable.sizes: no flag for"):
        settings_arguments(argparse.ArgumentParser(), Unflaggable)
