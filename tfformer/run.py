"""The run API: train, average and export a run directory from Python.

The console scripts (`tfformer.cli`) only parse their arguments and call these; a notebook or a
Keras user calls them the same way:

    from tfformer import run
    result = run.train("runs/mine", "tiny", run.TrainSettings(steps=400))   # rerun to resume
    run.average("runs/mine", last=5)
    run.export("runs/mine", model_base_path="models")
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import time
from typing import Any, Sequence

from tfformer.backends import BACKENDS
from tfformer.buckets import default_growth
from tfformer.config import (
    PAPER_WARMUP_STEPS,
    PRESET_WARMUP_STEPS,
    PRESETS,
    TransformerConfig,
    check_fraction,
    get_preset,
)
from tfformer.precision import CHOICES as PRECISIONS
from tfformer.run_dir import RunDir

logger = logging.getLogger(__name__)

DEFAULT_STEPS = 400
DEFAULT_STEPS_PER_EPOCH = 100
DEFAULT_VOCAB_SAMPLE = 1_000_000  # sentences: the vocabulary's time and memory stay bounded
DEV_SOURCES_KEPT = 16  # dev sources kept in the run dir for the export check


class TrainingStopped(RuntimeError):
    """Training ended before its step budget (a NaN loss stopped it)."""


@dataclasses.dataclass
class TrainSettings:
    """How a run trains (the architecture is the `TransformerConfig`).

    Args:
        data: "builtin[:N]", "tsv:TRAIN[,DEV]" or "tfds:NAME" (see `tfformer.corpus`).
        skip_bad_lines: skip and count malformed data lines instead of failing.
        vocab_sample: sentences (both sides) of the random sample the vocabulary learns from.
        shuffle_buffer: pairs in the training stream's shuffle buffer (files are shuffled too).
        steps: optimizer updates in all (default 400 unless `epochs` is given).
        epochs: passes over the training data, instead of `steps` (counted once per run, see
            `tfformer.run_data.batches_per_pass`).
        steps_per_epoch: batches per epoch: checkpoint, history row and dev BLEU after each
            (default 100 updates with `steps`, one data pass with `epochs`); a multiple of
            `grad_accum`.
        batch_tokens: token budget per global batch (§5.1).
        bucket_growth: ratio between consecutive lengths of the batches' bucket grid
            (`tfformer.buckets`): smaller pads less, larger has fewer batch shapes, each one
            more program for XLA to compile (default 1.1, or 1.25 where steps are compiled:
            `jit`, or JAX).
        label_smoothing: epsilon_ls of the loss (§5.4).
        warmup_steps: updates of learning-rate warmup (§5.3; default 4000 as in the paper, or
            the preset's own: tiny 400).
        lr_scale: factor on the learning rate of §5.3, eq. 3 (1.0 in the paper).
        max_minutes: stop after this much wall time, epoch-end work (validation, dev BLEU,
            checkpoints) and start-up included, even before `steps`; the run then ends normally,
            with model.keras (one process only: workers would stop at different batches).
        vocab_size: subword vocabulary size (default: the config's; a soft limit).
        mixed_precision: None (float32), "bf16", "fp16" (with loss scaling), or "auto": bf16
            where it pays (a GPU or TPU, a CPU with AVX512_BF16 or AMX), else float32
            (`tfformer.precision`).
        jit: compile train steps with XLA.
        grad_accum: batches per optimizer update.
        devices: split the CPU into this many devices (before the backend starts).
        backend: the Keras backend, "tensorflow" or "jax" (None: KERAS_BACKEND's, else
            TensorFlow); chosen before anything imports Keras (`tfformer.backends`).
        keep_checkpoints: how many epoch checkpoints to keep (the paper averages 5, §6.1).
        backup_every: updates between backups within an epoch.
        dev_sentences: dev sentences decoded for BLEU after each epoch (0: none).
        seed: seed of the weights, the data order and the vocabulary.
        keep_initial_weights: also save the weights before the first update.
        verbose: Keras' progress output (0, 1, 2).
    """

    data: str = "builtin"
    skip_bad_lines: bool = False
    vocab_sample: int = DEFAULT_VOCAB_SAMPLE
    shuffle_buffer: int = 100_000
    steps: int | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    batch_tokens: int = 4096
    bucket_growth: float | None = None
    label_smoothing: float = 0.1
    warmup_steps: int | None = None
    lr_scale: float = 1.0
    max_minutes: float | None = None
    vocab_size: int | None = None
    mixed_precision: str | None = None
    jit: bool = False
    grad_accum: int = 1
    devices: int | None = None
    backend: str | None = None
    keep_checkpoints: int = 5
    backup_every: int = 50
    dev_sentences: int = 200
    seed: int = 0
    keep_initial_weights: bool = False
    verbose: int = 1

    def __post_init__(self) -> None:
        for name in ("steps", "epochs", "steps_per_epoch", "batch_tokens", "vocab_size",
                     "grad_accum", "devices", "keep_checkpoints", "backup_every",
                     "warmup_steps", "shuffle_buffer"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.vocab_sample < 2:
            raise ValueError(f"vocab_sample must be >= 2, got {self.vocab_sample}")
        if self.dev_sentences < 0:
            raise ValueError(f"dev_sentences must be >= 0, got {self.dev_sentences}")
        check_fraction("label_smoothing", self.label_smoothing)
        if self.bucket_growth is not None and not self.bucket_growth > 1:
            raise ValueError(f"bucket_growth must be > 1, got {self.bucket_growth}")
        for name in ("lr_scale", "max_minutes"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if self.steps and self.epochs:
            raise ValueError("give steps or epochs, not both")
        if self.mixed_precision not in (None, *PRECISIONS):
            raise ValueError(f"mixed_precision must be None or one of {', '.join(PRECISIONS)}, "
                             f"got {self.mixed_precision!r}")
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {sorted(BACKENDS)}, got {self.backend!r}")
        if not self.steps and not self.epochs:
            self.steps = DEFAULT_STEPS


@dataclasses.dataclass
class TrainResult:
    """What `train` leaves: the trained model and where everything was written."""

    model: Any
    tokenizer: Any
    run_dir: RunDir
    step: int
    history: list[dict]
    dev_pairs: list[tuple[str, str]]
    batches: dict  # the training batches' shapes, padding, compilations (LogBatchShapes)


def load_config(spec: str | TransformerConfig, **overrides) -> TransformerConfig:
    """A preset name (tiny, base, big) or a JSON file of TransformerConfig, with overrides."""
    if isinstance(spec, TransformerConfig):
        return spec.replace(**overrides) if overrides else spec
    if spec in PRESETS:
        return get_preset(spec, **overrides)
    if not os.path.exists(spec):
        raise ValueError(f"config {spec!r} is neither a preset ({', '.join(PRESETS)}) "
                         "nor an existing JSON file")
    with open(spec, encoding="utf-8") as f:
        config = TransformerConfig.from_json(f.read())
    return config.replace(**overrides) if overrides else config


@dataclasses.dataclass
class Recipe:
    """A training recipe (`training/configs/*.json`): a config, its overrides, the training
    settings and how many checkpoints to average."""

    config: str
    overrides: dict
    train: TrainSettings
    average_last: int = 5
    description: str = ""

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Recipe":
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        unknown = sorted(set(raw) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"{path}: unknown recipe field(s) {', '.join(unknown)}")
        known = {f.name for f in dataclasses.fields(TrainSettings)}
        bad = sorted(set(raw.get("train", {})) - known)
        if bad:
            raise ValueError(f"{path}: unknown training setting(s) {', '.join(bad)}")
        return cls(config=raw["config"], overrides=raw.get("overrides", {}),
                   train=TrainSettings(**raw.get("train", {})),
                   average_last=raw.get("average_last", 5),
                   description=raw.get("description", ""))


def train(out: str | os.PathLike, config: str | TransformerConfig = "tiny",
          settings: TrainSettings | None = None, overrides: dict | None = None) -> TrainResult:
    """Trains (or resumes) the run in `out` until its step budget; resumable after any kill.

    Args:
        out: the run directory (see `tfformer.run_dir`).
        config: a preset name, a JSON file or a TransformerConfig (vocab_size is set from the
            trained vocabulary).
        settings: how to train (default: `TrainSettings()`).
        overrides: config fields to change, e.g. {"dropout": 0.3}.

    Returns:
        a TrainResult with the trained model, also saved to `RUN/model.keras`.

    Raises:
        ValueError: bad settings or data (naming the field, file and line), or a run directory
            whose saved config differs from `config` (naming the fields).
        TrainingStopped: training stopped before its step budget (NaN loss).
    """
    settings = settings or TrainSettings()
    started = time.monotonic()
    # Backend, device layout and strategy first: Keras and TensorFlow read them when they start.
    from tfformer import backends, distribute

    backend = backends.select_backend(settings.backend)
    if settings.max_minutes and distribute.tf_config_workers() > 1:
        raise ValueError("max_minutes works in one process only: each worker would stop at "
                         "another batch; give steps or epochs")
    placement = distribute.place(backend, settings.devices)

    import keras

    # Seed before any tf-text resource exists: seeding later destroys the tokenizer's resource.
    keras.utils.set_random_seed(settings.seed)

    import tensorflow as tf

    from tfformer import precision, run_data
    from tfformer.callbacks import DevBleu, KeepLastCheckpoints, StopAtTime
    from tfformer.corpus import Counters, DataError
    from tfformer.data import BatchStats, make_eval_dataset
    from tfformer.files import atomic_write, atomic_write_text
    from tfformer.model import Transformer
    from tfformer.run_state import RunState
    from tfformer.schedule import paper_optimizer
    from tfformer.training import compile_transformer, fit_resumable

    shared = RunDir(out)
    chief = placement.chief
    run = shared if chief else shared.worker(placement.strategy.cluster_resolver.task_id)
    os.makedirs(run.path, exist_ok=True)

    warmup_steps = settings.warmup_steps or (
        PRESET_WARMUP_STEPS.get(config, PAPER_WARMUP_STEPS) if isinstance(config, str)
        else PAPER_WARMUP_STEPS)
    config = load_config(config, **(overrides or {}))
    resuming = os.path.exists(run.config)
    data = run_data.prepare(
        shared, chief=chief, data=settings.data, skip_bad_lines=settings.skip_bad_lines,
        seed=settings.seed, vocab_size=settings.vocab_size or config.vocab_size,
        vocab_sample=settings.vocab_sample)
    tokenizer, dev = data.tokenizer, data.dev
    config = config.replace(vocab_size=tokenizer.vocab_size)
    if resuming:
        with open(run.config, encoding="utf-8") as f:
            saved = TransformerConfig.from_json(f.read())
        changed = saved.weight_differences(config)
        if changed:
            raise ValueError(
                f"{run.config} differs from this command's config in {'; '.join(changed)}: "
                "the saved weights would not fit; use a new --out, or the same architecture "
                "to resume")
        if saved != config:
            logger.info("resuming with %s", "; ".join(saved.differences(config)))
    elif chief:
        atomic_write_text(run.train_args, json.dumps(dataclasses.asdict(settings), indent=2))
        # Last: its presence is what marks a run directory as one to resume.
        atomic_write_text(run.config, config.to_json())
    if chief and dev.pairs and not os.path.exists(run.dev_sources):
        atomic_write_text(run.dev_sources, "".join(
            source.replace("\n", " ") + "\n" for source, _ in dev.pairs[:DEV_SOURCES_KEPT]))

    run_state = RunState(run.path, settings.backup_every,
                         keep_initial_weights=settings.keep_initial_weights)
    replicas = placement.replicas
    num_workers, worker_index = placement.num_workers, placement.worker_index
    counters, batch_stats = Counters(), BatchStats()
    compiled = settings.jit or backend != "tensorflow"  # JAX compiles every step
    bucket_growth = settings.bucket_growth or default_growth(compiled)
    # The same seed on every start, the batches trained on skipped: a resumed run goes on with
    # the data order where it stopped.
    train_data = functools.partial(
        run_data.training_batches, data, batch_tokens=settings.batch_tokens,
        max_length=config.max_length, seed=settings.seed,
        skip_bad_lines=settings.skip_bad_lines,
        batch_multiple=replicas, bucket_growth=bucket_growth,
        num_workers=num_workers, worker_index=worker_index,
        shuffle_buffer_size=settings.shuffle_buffer, counters=counters, stats=batch_stats)
    if num_workers > 1:
        logger.info("train: worker %d reads shard %d of %d (by %s)", worker_index,
                    worker_index, num_workers, data.corpus.shard_unit(num_workers))
    dev_data, dev_info = make_eval_dataset(
        dev, tokenizer, batch_tokens=settings.batch_tokens, max_length=config.max_length,
        batch_multiple=replicas, bucket_growth=bucket_growth)
    if dev_info.num_dropped:
        logger.info("dev: %d pairs dropped as longer than %d tokens", dev_info.num_dropped,
                    config.max_length)

    # Epochs are counted in batches and end on an optimizer update (steps count updates).
    accumulation = settings.grad_accum
    if settings.steps:
        total_steps = settings.steps
        steps_per_epoch = settings.steps_per_epoch or min(
            DEFAULT_STEPS_PER_EPOCH, total_steps) * accumulation
    else:
        per_pass = run_data.batches_per_pass(
            shared, data, batch_tokens=settings.batch_tokens, max_length=config.max_length,
            skip_bad_lines=settings.skip_bad_lines, batch_multiple=replicas,
            bucket_growth=bucket_growth, write_cache=chief)
        # Passes over the data set the budget; steps_per_epoch only the checkpoint interval.
        total_steps = max(1, settings.epochs * per_pass // accumulation)
        steps_per_epoch = settings.steps_per_epoch or max(
            accumulation, per_pass // accumulation * accumulation)
    if steps_per_epoch % accumulation:
        raise ValueError(f"steps_per_epoch ({steps_per_epoch}) must be a multiple of "
                         f"grad_accum ({accumulation}): epochs end on an update")
    logger.info("%d updates of %d batch(es), %d per epoch (%d epochs)", total_steps,
                accumulation, steps_per_epoch // accumulation,
                math.ceil(total_steps / (steps_per_epoch // accumulation)))

    mixed_precision = precision.resolve(settings.mixed_precision)
    with placement.scope(), precision.policy(mixed_precision):
        model = Transformer(config)
        model.build()
        optimizer = paper_optimizer(config.d_model, warmup_steps, scale=settings.lr_scale,
                                    gradient_accumulation_steps=accumulation)
        # JAX always compiles its steps (jit_compile=False would run every op eagerly).
        compile_transformer(model, optimizer=optimizer, label_smoothing=settings.label_smoothing,
                            jit_compile=settings.jit if backend == "tensorflow" else "auto")
    logger.info("model: %s parameters, Keras on %s, %s; %s", f"{model.count_params():,}",
                backend, placement.description, precision.describe(mixed_precision))

    batch_shapes = run_data.LogBatchShapes(batch_stats, backend)
    callbacks = [
        keras.callbacks.TerminateOnNaN(),
        KeepLastCheckpoints(run.checkpoints, keep=settings.keep_checkpoints),
        run_data.LogDataCounters(counters, config.max_length),
        batch_shapes,
    ]
    if settings.dev_sentences and chief:
        callbacks.append(DevBleu(tokenizer, dev.pairs,
                                 max_sentences=settings.dev_sentences))
    stop_at_time = None
    if settings.max_minutes:
        stop_at_time = StopAtTime(started + 60 * settings.max_minutes)
        callbacks.append(stop_at_time)
    with placement.scope():
        logger.info("starting at step %d of %d", run_state.step, total_steps)
        try:
            step = fit_resumable(model, train_data, run_state=run_state,
                                 total_steps=total_steps, steps_per_epoch=steps_per_epoch,
                                 validation_data=dev_data, callbacks=callbacks,
                                 verbose=settings.verbose)
        except tf.errors.OpError as error:
            # A bad line the stream met (the scan of a new run would have named it first).
            bad_line = DataError.from_graph_error(error)
            if bad_line is None:
                raise
            raise bad_line from None
    if stop_at_time is not None and stop_at_time.stopped:
        logger.info("stopped at step %d of %d: %g minutes of wall time used", step, total_steps,
                    settings.max_minutes)
    elif step < total_steps:
        raise TrainingStopped(f"training stopped early at step {step} of {total_steps} "
                              "(NaN loss?)")
    atomic_write(run.model, model.save)
    logger.info("saved %s after %d steps", run.model, step)
    if chief:
        _save_history_plot(run)
    return TrainResult(model, tokenizer, run, step, list(run_state.history), dev.pairs,
                       batch_shapes.summary)


def _save_history_plot(run: RunDir) -> None:
    """RUN/history.png when matplotlib is installed (the `plot` extra); a drawing failure is
    logged, never fatal: the trained model is already saved."""
    from tfformer import plots

    if not plots.available():
        logger.info("no %s: install the plot extra (matplotlib) for it",
                    os.path.basename(run.history_plot))
        return
    try:
        logger.info("wrote %s", plots.save_history_plot(run.path))
    except Exception as error:  # noqa: BLE001 - a plot must never fail a finished run
        logger.warning("could not draw %s: %s", run.history_plot, error)


def average(run_dir: str | os.PathLike, last: int = 5, out: str | None = None) -> str:
    """Averages the weights of the run's last `last` epoch checkpoints (§6.1) into a `.keras`
    model (default `RUN/model-avgK.keras`, K the number averaged); returns its path."""
    if last < 1:
        raise ValueError(f"last must be >= 1, got {last}")
    from tfformer.callbacks import average_checkpoints, list_checkpoints
    from tfformer.files import atomic_write
    from tfformer.model import Transformer

    run = RunDir(run_dir)
    paths = list_checkpoints(run.checkpoints)[-last:]
    if not os.path.exists(run.config) or not paths:
        raise FileNotFoundError(f"{run.path} needs {os.path.basename(run.config)} and "
                                f"{os.path.basename(run.checkpoints)}/ckpt-*.weights.h5")
    if len(paths) < last:
        logger.warning("only %d checkpoint(s) to average, not %d", len(paths), last)
    with open(run.config, encoding="utf-8") as f:
        model = Transformer(TransformerConfig.from_json(f.read()))
    model.build()
    average_checkpoints(model, paths)
    out = out or run.averaged_model(len(paths))
    atomic_write(out, model.save)
    logger.info("averaged %s into %s", ", ".join(os.path.basename(p) for p in paths), out)
    return out


FALLBACK_CHECK_SENTENCES = (
    "Los tres perros rojos comen manzanas verdes.",
    "Una hermana visita el puente azul.",
    "¿Dónde está la biblioteca?",
    "",
)


@dataclasses.dataclass
class ExportResult:
    export_dir: str
    version: int
    check_sentences: str  # where the checked sentences came from


def export(run_dir: str | os.PathLike, model_base_path: str = "models", name: str = "tfformer",
           version: int | None = None, *, beam_size: int | None = None,
           length_penalty: float | None = None, max_output_extra: int | None = None,
           check_sentences: str | Sequence[str] | None = None) -> ExportResult:
    """Exports the run's model.keras as `model_base_path/name/VERSION` for TF Serving, checked
    op by op and in a fresh process (see `tfformer.export.export_saved_model`).

    Args:
        version: default one above the highest present.
        beam_size, length_penalty, max_output_extra: the exported search (default: the
            paper's, `DecodingConfig`).
        check_sentences: sentences, or a file of them, for the fresh-process check (default:
            the run's dev sources, else a few fixed Spanish sentences).
    """
    from tfformer.contract import next_version
    from tfformer.export import export_saved_model
    from tfformer.translator import load_translator

    run = RunDir(run_dir)
    translator = load_translator(run.path, beam_size=beam_size, length_penalty=length_penalty,
                                 max_output_extra=max_output_extra)
    version = version or next_version(os.path.join(model_base_path, name))
    if check_sentences is None and os.path.exists(run.dev_sources):
        check_sentences = run.dev_sources
    if check_sentences is None:
        sentences, origin = list(FALLBACK_CHECK_SENTENCES), "built-in examples"
    elif isinstance(check_sentences, (str, os.PathLike)):
        with open(check_sentences, encoding="utf-8") as f:
            sentences, origin = [line.rstrip("\n") for line in f], os.fspath(check_sentences)
    else:
        sentences, origin = list(check_sentences), "given sentences"
    path = export_saved_model(translator, model_base_path, name, version,
                              check_sentences=sentences)
    logger.info("exported %s; it translates %d check sentences (%s) in a fresh process exactly "
                "as in memory", path, len(sentences), origin)
    return ExportResult(path, version, origin)
