"""tfformer-train: train a Transformer on parallel text, resumably, on one or many devices.

With no arguments it trains the `tiny` preset on the built-in corpus into runs/tiny-builtin.
Running the same command again continues the run from its last backup, so a killed run loses at
most --backup-every updates, keeps one history row per finished epoch, and ends at the same step
as an uninterrupted one. Every file is written aside and renamed, so a kill never leaves one torn.

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

from tfformer.cli.console import DefaultsOnceFormatter, start_logging
from tfformer.model.precision import CHOICES as PRECISIONS
from tfformer.train.settings import (  # no TensorFlow: --help stays quick
    Recipe,
    TrainingStopped,
    TrainSettings,
)
from tfformer.utils.backends import BACKENDS

# Every flag of a training setting takes its default from TrainSettings, written once there.
SETTINGS = {field.name: field.default for field in dataclasses.fields(TrainSettings)}

logger = logging.getLogger("tfformer.cli.train")

DEFAULT_OUT = os.path.join("runs", "tiny-builtin")


def parse_args(argv=None, recipe: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tfformer-train", description=__doc__.split("\n\n")[0],
        formatter_class=DefaultsOnceFormatter)
    parser.add_argument("--recipe", default=None, metavar="JSON",
                        help="a recipe (training/configs/*.json): config, overrides and "
                             "training settings, as defaults for the other flags")
    parser.add_argument("--config", default="tiny",
                        help="preset name (tiny, base, big) or a JSON file of TransformerConfig")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a config field, e.g. --set dropout=0.2 (repeatable)")
    parser.add_argument("--data", default=SETTINGS["data"],
                        help="builtin[:N] | tsv:TRAIN[,DEV] | tfds:NAME | reverse:SPEC; TRAIN: "
                             "files or globs joined by +, .gz read as gzip")
    parser.add_argument("--skip-bad-lines", action="store_true",
                        help="skip (and count) malformed data lines instead of failing")
    parser.add_argument("--vocab-sample", type=int, default=SETTINGS["vocab_sample"],
                        metavar="SENTENCES",
                        help="the vocabulary learns from a random sample of this many "
                             "sentences (source and target sides), drawn in one pass")
    parser.add_argument("--shuffle-buffer", type=int, default=SETTINGS["shuffle_buffer"],
                        metavar="PAIRS",
                        help="pairs held in the training stream's shuffle buffer (files are "
                             "shuffled as well)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="run directory")
    parser.add_argument("--steps", type=int, default=SETTINGS["steps"],
                        help="total optimizer updates (default: 400 unless --epochs is given; "
                             "400 tiny-preset steps on the built-in data take ~4 minutes here)")
    parser.add_argument("--epochs", type=int, default=SETTINGS["epochs"],
                        help="passes over the training data, instead of --steps")
    parser.add_argument("--steps-per-epoch", type=int, default=SETTINGS["steps_per_epoch"],
                        help="batches between checkpoints and dev BLEU (default: 100 with "
                             "--steps, one data pass with --epochs)")
    parser.add_argument("--batch-tokens", type=int, default=SETTINGS["batch_tokens"],
                        help="token budget per global batch (paper: ~25000 source + target)")
    parser.add_argument("--bucket-growth", type=float, default=SETTINGS["bucket_growth"],
                        metavar="RATIO",
                        help="ratio between the lengths of the batches' bucket grid: smaller "
                             "pads less, larger has fewer batch shapes for XLA to compile "
                             "(default 1.1, or 1.25 with --jit or JAX)")
    parser.add_argument("--pack-length", type=int, default=SETTINGS["pack_length"],
                        metavar="N",
                        help="pack several pairs into training rows of N tokens: one batch "
                             "shape (XLA compiles the step once) and less padding; pairs "
                             "longer than N are dropped (default 0: batches by length)")
    parser.add_argument("--label-smoothing", type=float, default=SETTINGS["label_smoothing"],
                        help="epsilon_ls of the loss (§5.4)")
    parser.add_argument("--warmup-steps", type=int, default=SETTINGS["warmup_steps"],
                        help="updates of learning-rate warmup (§5.3; default 4000, tiny: 400)")
    parser.add_argument("--lr-scale", type=float, default=SETTINGS["lr_scale"],
                        help="factor on the learning rate of §5.3 (paper: 1)")
    parser.add_argument("--max-minutes", type=float, default=SETTINGS["max_minutes"],
                        help="stop after this much wall time (start-up and epoch ends "
                             "included) even before --steps, and save the model")
    parser.add_argument("--vocab-size", type=int, default=SETTINGS["vocab_size"],
                        help="subword vocabulary size (default: the config's; a soft limit)")
    parser.add_argument("--mixed-precision", choices=PRECISIONS,
                        default=SETTINGS["mixed_precision"],
                        help="half-precision matmuls on float32 weights (fp16 with loss "
                             "scaling); auto: bf16 on a GPU/TPU or a CPU with AVX512_BF16 or "
                             "AMX, else float32 (default: float32)")
    parser.add_argument("--jit", action="store_true", help="compile train steps with XLA")
    parser.add_argument("--grad-accum", type=int, default=SETTINGS["grad_accum"],
                        metavar="N",
                        help="accumulate gradients over N batches per update (--steps counts "
                             "updates)")
    parser.add_argument("--devices", type=int, default=SETTINGS["devices"],
                        metavar="N",
                        help="split the CPU into N logical devices (multi-device without GPUs)")
    parser.add_argument("--backend", choices=BACKENDS, default=SETTINGS["backend"],
                        help="Keras backend (default: KERAS_BACKEND's, else tensorflow); "
                             "jax needs the jax extra")
    parser.add_argument("--keep-checkpoints", type=int, default=SETTINGS["keep_checkpoints"],
                        metavar="K")
    parser.add_argument("--backup-every", type=int, default=SETTINGS["backup_every"],
                        metavar="STEPS",
                        help="optimizer updates between backups within an epoch (every epoch "
                             "end is backed up too)")
    parser.add_argument("--keep-initial-weights", action="store_true",
                        help="also save the weights before the first update "
                             "(initial.weights.h5)")
    parser.add_argument("--dev-sentences", type=int, default=SETTINGS["dev_sentences"],
                        help="dev sentences decoded for BLEU after each epoch (0: none)")
    parser.add_argument("--seed", type=int, default=SETTINGS["seed"])
    parser.add_argument("--verbose", type=int, default=SETTINGS["verbose"], choices=(0, 1, 2),
                        help="Keras progress output: 0 silent, 1 bar, 2 one line per epoch")
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

    try:
        result = run.train(args.out, args.config, args.settings, parse_overrides(args.set))
    except (ValueError, FileNotFoundError, ImportError) as error:
        logger.error("%s", error)
        return 2
    except TrainingStopped as error:
        logger.error("%s", error)
        return 1
    except Exception as error:  # noqa: BLE001 (a full disk is named in one line; others raise)
        from tfformer.utils.files import full_disk_path

        path = full_disk_path(error)
        if path is None:
            raise
        logger.error("%sno space left on device. Finished work is kept: free some space and run "
                     "the same command again to resume.", f"{path}: " if path else "")
        return 1
    if result.dev_pairs and result.run_dir.path == args.out:
        print_samples(result)
    return 0


def print_samples(result) -> None:
    """A few dev translations (beam search; greedy off TensorFlow) and the last history row as
    JSON."""
    from tfformer.utils.backends import on_tensorflow

    samples = result.dev_pairs[:5]
    sources = [source for source, _ in samples]
    if on_tensorflow():
        from tfformer.decode.translator import Translator

        translations = Translator(result.model, result.tokenizer).translate_texts(sources)
    else:  # the in-graph search is TensorFlow's; the model runs on another backend here
        from tfformer.decode.eager_search import translate_texts

        translations = translate_texts(result.model, result.tokenizer, sources)
    print(f"\nSample translations (dev, {'beam' if on_tensorflow() else 'greedy'} search):")
    for (source, reference), (hypothesis, _) in zip(samples, translations):
        print(f"  src: {source}\n  hyp: {hypothesis}\n  ref: {reference}\n")
    final = result.history[-1] if result.history else {}
    print(json.dumps({**{k: round(float(v), 4) for k, v in final.items()},
                      "steps": result.step}))


if __name__ == "__main__":
    sys.exit(main())
