"""How the console scripts' --help shows defaults: once each, and only where there is one."""

from __future__ import annotations

import argparse


class DefaultsOnceFormatter(argparse.HelpFormatter):
    """Adds "(default: X)" to an option's help unless it has no default to show (None), or its
    help names the default already ("1 = greedy (default 4)": one that depends on the model)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or action.default in (None, argparse.SUPPRESS) \
                or "default" in text:
            return text
        return f"{text} (default: %(default)s)".strip()
