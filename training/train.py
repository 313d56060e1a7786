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
import json
import logging
import os
import sys
import time

logger = logging.getLogger("tfformer.train")

DEFAULT_OUT = os.path.join("runs", "tiny-builtin")
DEV_SOURCES_KEPT = 16  # dev sources kept in the run dir for tfformer-export's check


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tfformer-train", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--config", default="tiny",
                        help="preset name (tiny, base, big) or a JSON file of TransformerConfig")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a config field, e.g. --set dropout=0.2 (repeatable)")
    parser.add_argument("--data", default="builtin",
                        help="builtin | tsv:TRAIN[,DEV] | tfds:NAME")
    parser.add_argument("--skip-bad-lines", action="store_true",
                        help="skip (and count) malformed data lines instead of failing")
    parser.add_argument("--out", default=DEFAULT_OUT, help="run directory")
    parser.add_argument("--steps", type=int, default=None,
                        help="total optimizer updates (default: 400 unless --epochs is given; "
                             "400 tiny-preset steps on the built-in data take ~4 minutes here)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="passes over the training data, instead of --steps")
    parser.add_argument("--steps-per-epoch", type=int, default=None,
                        help="batches between checkpoints and dev BLEU (default: 100 with "
                             "--steps, one data pass with --epochs)")
    parser.add_argument("--batch-tokens", type=int, default=4096,
                        help="token budget per global batch (paper: ~25000 source + target)")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="subword vocabulary size (default: the config's; a soft limit)")
    parser.add_argument("--mixed-precision", choices=("bf16", "fp16"), default=None)
    parser.add_argument("--jit", action="store_true", help="compile train steps with XLA")
    parser.add_argument("--grad-accum", type=int, default=1, metavar="N",
                        help="accumulate gradients over N batches per update (--steps counts "
                             "updates)")
    parser.add_argument("--devices", type=int, default=None, metavar="N",
                        help="split the CPU into N logical devices (multi-device without GPUs)")
    parser.add_argument("--keep-checkpoints", type=int, default=5, metavar="K")
    parser.add_argument("--backup-every", type=int, default=50, metavar="STEPS",
                        help="optimizer updates between backups within an epoch (every epoch "
                             "end is backed up too)")
    parser.add_argument("--keep-initial-weights", action="store_true",
                        help="also save the weights before the first update "
                             "(initial.weights.h5)")
    parser.add_argument("--dev-sentences", type=int, default=200,
                        help="dev sentences decoded for BLEU after each epoch (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2),
                        help="Keras progress output: 0 silent, 1 bar, 2 one line per epoch")
    args = parser.parse_args(argv)
    for name in ("steps", "epochs", "steps_per_epoch", "batch_tokens", "vocab_size",
                 "grad_accum", "devices", "keep_checkpoints", "backup_every"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.dev_sentences < 0:
        parser.error("--dev-sentences must be >= 0")
    if args.steps and args.epochs:
        parser.error("give --steps or --epochs, not both")
    if not args.steps and not args.epochs:
        args.steps = 400
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


def load_config(spec: str, overrides: dict):
    from tfformer.config import PRESETS, TransformerConfig, get_preset

    if spec in PRESETS:
        return get_preset(spec, **overrides)
    if not os.path.exists(spec):
        raise ValueError(f"--config {spec!r} is neither a preset ({', '.join(PRESETS)}) "
                         "nor an existing JSON file")
    with open(spec, encoding="utf-8") as f:
        config = TransformerConfig.from_json(f.read())
    return config.replace(**overrides) if overrides else config


def wait_for_file(path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise FileNotFoundError(f"{path} did not appear within {timeout:.0f} s")
        time.sleep(0.2)


def write_once(path: str, text: str) -> None:
    from tfformer.files import atomic_write_text

    if not os.path.exists(path):
        atomic_write_text(path, text)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return train(args)
    except (ValueError, FileNotFoundError, ImportError) as error:
        logger.error("%s", error)
        return 2


def train(args: argparse.Namespace) -> int:
    # Device layout and strategy first: both must exist before TensorFlow runs any op.
    from tfformer import distribute

    if args.devices and args.devices > 1:
        distribute.split_cpu(args.devices)
    strategy = distribute.select_strategy()

    import keras

    # Seed before any tf-text resource exists: seeding later destroys the tokenizer's resource.
    keras.utils.set_random_seed(args.seed)
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy(
            {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[args.mixed_precision])

    from tfformer import compile_transformer, paper_optimizer
    from tfformer.callbacks import DevBleu, KeepLastCheckpoints
    from tfformer.config import TransformerConfig
    from tfformer.data import load_data, make_dataset, make_eval_dataset
    from tfformer.export import DEV_SOURCES_FILENAME, MODEL_KERAS_FILENAME, Translator
    from tfformer.model import Transformer
    from tfformer.files import atomic_write, atomic_write_text
    from tfformer.run_state import RunState, optimizer_step
    from tfformer.tokenizer import MODEL_FILENAME, Tokenizer
    from tfformer.training import fit_resumable

    chief = distribute.is_chief(strategy)
    run_dir = args.out if chief else os.path.join(
        args.out, f"worker-{strategy.cluster_resolver.task_id}")
    os.makedirs(run_dir, exist_ok=True)
    config_path = os.path.join(run_dir, "config.json")
    tokenizer_path = os.path.join(args.out, MODEL_FILENAME)

    splits = load_data(args.data, skip_bad_lines=args.skip_bad_lines, seed=args.seed)
    for note in splits.notes:
        logger.info("data: %s", note)
    for name, text in (("train", splits.train), ("dev", splits.dev)):
        logger.info("data: %s: %d pairs from %s%s", name, len(text), text.path,
                    f", {text.num_skipped} bad line(s) skipped" if text.num_skipped else "")
        for line_no, reason in text.skipped[:20]:
            logger.warning("data: skipped %s:%d: %s", text.path, line_no, reason)

    config = load_config(args.config, parse_overrides(args.set))
    resuming = os.path.exists(config_path)
    if os.path.exists(tokenizer_path):
        tokenizer = Tokenizer.from_file(tokenizer_path)
        logger.info("tokenizer: reusing %s (%d ids)", tokenizer_path, tokenizer.vocab_size)
    elif not chief:
        # The chief trains the one shared vocabulary; the other workers use the same file.
        wait_for_file(tokenizer_path, timeout=600)
        tokenizer = Tokenizer.from_file(tokenizer_path)
    else:
        # §5.1: one vocabulary shared by source and target, learned from both sides.
        requested = args.vocab_size or config.vocab_size
        tokenizer = Tokenizer.train(
            (s for pair in splits.train.pairs for s in pair), requested, seed=args.seed)
        tokenizer.save(tokenizer_path)
        logger.info("tokenizer: trained %d ids (asked for %d), saved %s",
                    tokenizer.vocab_size, requested, tokenizer_path)
    config = config.replace(vocab_size=tokenizer.vocab_size)
    if resuming:
        with open(config_path, encoding="utf-8") as f:
            saved = TransformerConfig.from_json(f.read())
        if saved != config:
            raise ValueError(
                f"{config_path} differs from this command's config in "
                f"{'; '.join(saved.differences(config))}; use a new --out, or the same "
                "arguments to resume")
    elif chief:
        atomic_write_text(os.path.join(run_dir, "train_args.json"),
                          json.dumps(vars(args), indent=2))
        # Last: its presence is what marks a run directory as one to resume.
        atomic_write_text(config_path, config.to_json())
    if chief and splits.dev.pairs:
        write_once(os.path.join(run_dir, DEV_SOURCES_FILENAME),
                   "".join(source.replace("\n", " ") + "\n"
                           for source, _ in splits.dev.pairs[:DEV_SOURCES_KEPT]))

    run_state = RunState(run_dir, args.backup_every, keep_initial_weights=args.keep_initial_weights)
    replicas = strategy.num_replicas_in_sync
    # A resumed run reshuffles with another seed; the same seed would replay the first batches.
    train_data, info = make_dataset(
        splits.train, tokenizer, batch_tokens=args.batch_tokens, max_length=config.max_length,
        repeat=True, seed=args.seed + run_state.step, batch_multiple=replicas)
    logger.info("train: %d pairs in %d batches per pass; %d dropped as longer than %d tokens",
                info.num_pairs, info.num_batches, info.num_dropped, config.max_length)
    dev_data, dev_info = make_eval_dataset(
        splits.dev, tokenizer, batch_tokens=args.batch_tokens, max_length=config.max_length,
        batch_multiple=replicas)
    if dev_info.num_dropped:
        logger.info("dev: %d pairs dropped as longer than %d tokens", dev_info.num_dropped,
                    config.max_length)

    # Epochs are counted in batches and end on an optimizer update (--steps counts updates).
    accumulation = args.grad_accum
    if args.steps:
        total_steps = args.steps
        steps_per_epoch = args.steps_per_epoch or min(100, total_steps) * accumulation
    else:
        steps_per_epoch = args.steps_per_epoch or max(
            accumulation, info.num_batches // accumulation * accumulation)
        total_steps = max(1, args.epochs * steps_per_epoch // accumulation)
    if steps_per_epoch % accumulation:
        raise ValueError(f"--steps-per-epoch ({steps_per_epoch}) must be a multiple of "
                         f"--grad-accum ({accumulation}): epochs end on an update")

    with strategy.scope():
        model = Transformer(config)
        model.build()
        optimizer = paper_optimizer(config.d_model, config.warmup_steps,
                                    gradient_accumulation_steps=accumulation)
        compile_transformer(model, optimizer=optimizer, jit_compile=args.jit)
    logger.info("model: %s parameters, %d replica(s) under %s", f"{model.count_params():,}",
                replicas, type(strategy).__name__)

    callbacks = [
        keras.callbacks.TerminateOnNaN(),
        KeepLastCheckpoints(os.path.join(run_dir, "checkpoints"), keep=args.keep_checkpoints),
    ]
    if args.dev_sentences and chief:
        callbacks.append(DevBleu(tokenizer, splits.dev.pairs, max_sentences=args.dev_sentences))
    model_path = os.path.join(run_dir, MODEL_KERAS_FILENAME)
    with strategy.scope():
        logger.info("starting at step %d of %d", run_state.step, total_steps)
        step = fit_resumable(model, train_data, run_state=run_state, total_steps=total_steps,
                             steps_per_epoch=steps_per_epoch, validation_data=dev_data,
                             callbacks=callbacks, verbose=args.verbose)
    if step < total_steps:
        logger.error("training stopped early at step %d (NaN loss?)", step)
        return 1
    atomic_write(model_path, model.save)
    logger.info("saved %s after %d steps", model_path, step)

    if chief and splits.dev.pairs:
        final = run_state.history[-1] if run_state.history else {}
        translator = Translator(model, tokenizer)
        samples = splits.dev.pairs[:5]
        print("\nSample translations (dev, beam search):")
        for (source, reference), (hypothesis, score) in zip(
                samples, translator.translate_texts([s for s, _ in samples])):
            print(f"  src: {source}\n  hyp: {hypothesis}\n  ref: {reference}\n")
        summary = {**{k: round(float(v), 4) for k, v in final.items()},
                   "steps": optimizer_step(model)}
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
