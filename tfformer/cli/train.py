"""tfformer-train: train a Transformer on parallel text, resumably, on one or many devices.

With no arguments it trains the `tiny` preset on the built-in corpus into runs/tiny-builtin.
Running the same command again continues the run from its last backup, so a killed run loses at
most --backup-every updates, keeps one history row per finished epoch, and ends at the same step
as an uninterrupted one. Every file is written aside and renamed, so a kill never leaves one torn.

With --init-from RUN it fine-tunes: a new run starts from RUN's weights, vocabulary and
architecture (a tfformer run, an imported OPUS-MT model), on any --data, with a fresh optimizer and
the continued-training schedule (--lr-schedule, --learning-rate; --freeze keeps parts as they are).

The run directory holds config.json, train_args.json, tokenizer.model, dev_sources.txt (the
sentences tfformer-export checks by default), metrics.csv (one row per epoch), checkpoints/
(the last K epochs' weights), backup/, logs/ (TensorBoard) and model.keras.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys

from tfformer.cli.console import (
    DefaultsOnceFormatter,
    exit_status,
    import_tensorflow,
    prefer_onednn,
    settings_arguments,
    start_logging,
)
from tfformer.train.settings import (  # no TensorFlow: --help stays quick
    Recipe,
    TrainingStopped,
    TrainSettings,
)

logger = logging.getLogger("tfformer.cli.train")

DEFAULT_OUT = os.path.join("runs", "tiny-builtin")


def make_parser() -> argparse.ArgumentParser:
    """tfformer-train's flags: four of its own, then one per `TrainSettings` field."""
    parser = argparse.ArgumentParser(
        prog="tfformer-train", description=__doc__.split("\n\n")[0],
        formatter_class=DefaultsOnceFormatter)
    parser.add_argument("--recipe", default=None, metavar="JSON",
                        help="a recipe (training/configs/*.json): config, overrides and "
                             "training settings, as defaults for the other flags")
    parser.add_argument("--config", default=None,
                        help="preset name (tiny, base, big) or a JSON file of TransformerConfig "
                             "(default: tiny, or with --init-from the architecture of the run "
                             "it starts from)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a config field, e.g. --set dropout=0.2 (repeatable)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="run directory")
    # One flag per TrainSettings field, its help written once on the field.
    settings_arguments(parser, TrainSettings)
    return parser


def parse_args(argv=None, recipe: str | None = None) -> argparse.Namespace:
    parser = make_parser()
    if recipe:
        try:
            loaded = Recipe.load(recipe)
        except (OSError, ValueError, KeyError, TypeError) as error:
            parser.error(f"--recipe {recipe}: {error}")
        parser.set_defaults(config=loaded.config, **dataclasses.asdict(loaded.train),
                            set=[f"{k}={json.dumps(v)}" for k, v in loaded.overrides.items()])
    args = parser.parse_args(argv)
    try:
        # Every training setting has its flag of the same name; TrainSettings checks them.
        args.settings = TrainSettings(**{field.name: getattr(args, field.name)
                                         for field in dataclasses.fields(TrainSettings)})
    except ValueError as error:
        parser.error(str(error))
    return args


def parse_overrides(items: list[str]) -> dict:
    """--set FIELD=VALUE pairs; VALUE is JSON (numbers, true/false, "strings") or a bare string."""
    overrides = {}
    for item in items:
        field, sep, raw = item.partition("=")
        if not sep or not field:
            raise ValueError(f"--set expects FIELD=VALUE, got {item!r}")
        try:
            overrides[field] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[field] = raw
    return overrides


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.recipe:
        # The recipe gives the defaults; flags given on the command line override them.
        args = parse_args(argv, recipe=args.recipe)
    start_logging()
    from tfformer import run
    from tfformer.utils.backends import select_backend

    def train() -> None:
        select_backend(args.settings.backend)  # before TensorFlow's import, which loads Keras
        prefer_onednn()
        import_tensorflow()
        result = run.train(args.out, args.config, args.settings, parse_overrides(args.set))
        if result.dev_pairs and result.run_dir.path == args.out:
            print_samples(result)

    return exit_status(train, logger, refused=(ValueError, FileNotFoundError, ImportError),
                       failed=(TrainingStopped, ConnectionError),  # another process's
                       full_disk_advice="Finished work is kept: free some space and run the "
                                        "same command again to resume.")


def print_samples(result) -> None:
    """A few dev translations (beam search) and the last history row as JSON."""
    from tfformer.decode.keras_translator import translator_for

    samples = result.dev_pairs[:5]
    sources = [source for source, _ in samples]
    translations = translator_for(result.model, result.tokenizer).translate_texts(sources)
    print("\nSample translations (dev, beam search):")
    for (source, reference), (hypothesis, _) in zip(samples, translations):
        print(f"  src: {source}\n  hyp: {hypothesis}\n  ref: {reference}\n")
    final = result.history[-1] if result.history else {}
    print(json.dumps({**{k: round(float(v), 4) for k, v in final.items()},
                      "steps": result.step}))


if __name__ == "__main__":
    sys.exit(main())
