"""What every console script shares: how --help shows defaults, the flags of a settings
dataclass, the logging set-up, and TensorFlow's import."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import logging
import os
import sys
import types
import typing
from typing import Callable

from tfformer.utils.backends import HIDDEN_AT_TENSORFLOW_IMPORT, chosen_backend

LOG_FORMAT = "%(asctime)s %(name)s: %(message)s"


class DefaultsOnceFormatter(argparse.HelpFormatter):
    """Adds "(default: X)" to an option's help unless it has no default to show (None), or its
    help names the default already ("1 = greedy (default 4)": one that depends on the model)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or action.default in (None, argparse.SUPPRESS) \
                or "default" in text:
            return text
        return f"{text} (default: %(default)s)".strip()


def settings_arguments(parser: argparse.ArgumentParser, settings_class: type) -> None:
    """Adds one flag per field of the dataclass `settings_class`: `--field-name` (dest
    `field_name`), its default the field's, its help, metavar and choices the field's metadata.

    The type is the field's annotation, `X | None` giving X; a `str` field converts nothing
    (argparse's own), a `bool` field that defaults to False is a switch (store_true); metadata
    "const" is the value of the flag given without one. A recipe's
    values replace the defaults with `parser.set_defaults`, as for any flag.
    """
    hints = typing.get_type_hints(settings_class)
    for field in dataclasses.fields(settings_class):
        kind = hints[field.name]
        if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
            kinds = [arg for arg in typing.get_args(kind) if arg is not type(None)]
            if len(kinds) != 1:
                raise TypeError(f"{settings_class.__name__}.{field.name}: no flag for {kind}")
            kind = kinds[0]
        flag = "--" + field.name.replace("_", "-")
        meta = {key: field.metadata[key] for key in ("help", "metavar", "choices")
                if key in field.metadata}
        if "const" in field.metadata:  # the value of the flag given alone (`--jit`)
            meta.update(nargs="?", const=field.metadata["const"])
        if kind is bool:
            if field.default is not False:
                raise TypeError(f"{settings_class.__name__}.{field.name}: a switch defaults to "
                                "False")
            parser.add_argument(flag, action="store_true", **meta)
        elif kind in (int, float, str):
            parser.add_argument(flag, type=None if kind is str else kind, default=field.default,
                                **meta)
        else:
            raise TypeError(f"{settings_class.__name__}.{field.name}: no flag for {kind}")


def start_logging(level: int | str = logging.INFO, log_format: str = LOG_FORMAT) -> None:
    """The script's log lines on stderr; TensorFlow's C++ start-up lines kept out of them."""
    logging.basicConfig(level=level, format=log_format)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def exit_status(body: Callable[[], object], logger: logging.Logger, *,
                refused: tuple[type[BaseException], ...] = (),
                failed: tuple[type[BaseException], ...] = (),
                describe: Callable[[BaseException], str] = str,
                full_disk_advice: str = "") -> int:
    """Runs a command's `body` and gives its exit status, each error logged as one line
    (`describe`'s):
    - 0 once `body` returns;
    - 2 for an error of `refused`: what was asked for (an argument, a missing file, a line of
      data);
    - 1 for one of `failed` (the command's own checks, a stopped run), or a file the command
      could not write or read at run time (a permission, a read-only file system, a full disk:
      `tfformer.utils.files.file_failure`; a full disk's line then ends in
      `full_disk_advice`).
    Any other error raises: a bug's traceback.
    """
    from tfformer.utils.files import file_failure

    try:
        body()
    except refused as error:
        logger.error("%s", describe(error))
        return 2
    except failed as error:
        logger.error("%s", describe(error))
        return 1
    except Exception as error:
        failure = file_failure(error)
        if failure is None:
            raise
        if failure.full_disk and full_disk_advice:
            logger.error("%sno space left on device. %s",
                         f"{failure.path}: " if failure.path else "", full_disk_advice)
        else:
            logger.error("%s", failure.line())
        return 1
    return 0


def prefer_onednn() -> None:
    """Asks TensorFlow for its oneDNN CPU kernels, unless TF_ENABLE_ONEDNN_OPTS is set already
    (0 keeps Eigen's). TensorFlow turns oneDNN on by itself only on CPUs with AVX-512-class
    features; on AVX2-only ones a training step is faster with it, while decoding gains nothing
    reliable (docs/results.md, "oneDNN"), so only training asks. TensorFlow reads the variable
    once, at its import: once it is imported (tfformer-train's main called from Python) the
    variable is left alone, so that it does not pass to the caller's later subprocesses."""
    if "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def import_tensorflow() -> None:
    """Imports TensorFlow (and with it Keras) when Keras will run on TensorFlow, without the
    packages of HIDDEN_AT_TENSORFLOW_IMPORT, which import as usual afterwards (the training
    history's plot); otherwise (the JAX backend, TensorFlow already imported or not installed)
    does nothing. Call once the script's backend is chosen.

    The import makes hundreds of thousands of objects that live as long as the process, and
    next to no garbage: Python's cyclic garbage collector, whose full collections the growing
    heap would trigger again and again, is off while it runs, and the objects are then frozen
    out of its reach (`gc.freeze`), so that its collections while TensorFlow traces do not walk
    them either."""
    if "tensorflow" in sys.modules or chosen_backend() != "tensorflow" \
            or importlib.util.find_spec("tensorflow") is None:
        return
    hidden = [name for name in HIDDEN_AT_TENSORFLOW_IMPORT if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # `import name` raises ImportError
    collecting = gc.isenabled()
    gc.disable()
    try:
        import tensorflow  # noqa: F401
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
        gc.freeze()
        if collecting:
            gc.enable()
