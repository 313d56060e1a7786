"""What every console script shares: how --help shows defaults, and the logging set-up."""

from __future__ import annotations

import argparse
import logging
import os

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


def start_logging(level: int | str = logging.INFO, log_format: str = LOG_FORMAT) -> None:
    """The script's log lines on stderr; TensorFlow's C++ start-up lines kept out of them."""
    logging.basicConfig(level=level, format=log_format)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
