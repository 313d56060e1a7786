"""The steps of `tfformer.run.train`, each one a function that can be tested alone.

`run.train` imports this module only once `run.place_devices` has chosen the backend and the
devices: importing it starts Keras, which reads both when it starts. TensorFlow is imported only
where the run needs it (a text corpus's tf.data stream, the TensorFlow backend): a run on a
prepared store (`--data prepared:DIR`) trains where only JAX is installed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Sequence, Union

import keras
import numpy as np

from tfformer.config import TransformerConfig
from tfformer.data.buckets import default_growth
from tfformer.data.store import is_store_spec
from tfformer.model import precision
from tfformer.model.compile_transformer import compile_transformer
from tfformer.model.schedule import paper_optimizer
from tfformer.model.transformer import Transformer
from tfformer.train import init_from, jit, plots, store_inputs
from tfformer.train.callbacks import (
    DevBleu,
    KeepBestDevBleu,
    KeepLastCheckpoints,
    LogBatchShapes,
    LogDataCounters,
    LogThroughput,
    RunState,
    StopAtTime,
    StopOnNaN,
    early_stop,
)
from tfformer.train.checkpoints import WeightsWriter
from tfformer.train.devices import Placement
from tfformer.train.fit import fit_resumable
from tfformer.train.settings import Budget, TrainingStopped, TrainSettings, load_config
from tfformer.utils.files import atomic_write, atomic_write_text
from tfformer.utils.run_dir import RunDir

if TYPE_CHECKING:
    from tfformer.train import inputs

    RunData = Union[inputs.RunData, store_inputs.StoreData]
    RunBatches = Union[inputs.RunBatches, store_inputs.StoreBatches]

# The run's log lines keep the name they are known by (`tfformer.run: ...`).
logger = logging.getLogger("tfformer.run")

DEV_SOURCES_KEPT = 16  # dev sources kept in the run dir for the export check


def run_dirs(out: str | os.PathLike, placement: Placement) -> tuple[RunDir, RunDir]:
    """(shared, own): the run directory, and where this process writes its own files: the run
    directory itself for the chief, `worker-N/` under it for another worker; own is created."""
    shared = RunDir(out)
    if placement.chief:
        own = shared
    elif placement.strategy is not None:  # TensorFlow's workers: by their task id
        own = shared.worker(placement.strategy.cluster_resolver.task_id)
    else:  # JAX's processes
        own = shared.worker(placement.worker_index)
    os.makedirs(own.path, exist_ok=True)
    return shared, own


def starting_point(shared: RunDir, settings: TrainSettings,
                   chief: bool) -> init_from.StartingPoint | None:
    """The run `settings.init_from` names (None without it); the chief gives a new run its
    tokenizer files and init_from.json.

    Raises:
        FileNotFoundError: a missing file of the run to start from.
        ValueError: the run directory started from other weights, from none, or (without
            init_from) from a run that a resume must name again.
    """
    if settings.init_from is None:
        recorded = init_from.started_from(shared)
        if recorded is not None:
            raise ValueError(f"{shared.path} started from {recorded['path']}: give init_from "
                             f"{recorded['path']} again to resume it")
        return None
    start = init_from.StartingPoint.locate(settings.init_from)
    if chief:
        start.start(shared)
    logger.info("init_from: %s (%s, sha256 %s...)", start.path, start.weights, start.sha256[:12])
    return start


def run_config(start: init_from.StartingPoint | None,
               config: str | TransformerConfig | None, overrides: dict | None) -> TransformerConfig:
    """The run's architecture: `config` with `overrides`, or the starting point's, which
    `config` and `overrides` may change in dropout only."""
    if start is None:
        return load_config(config, **(overrides or {}))
    return start.config_for(None if config is None else load_config(config), overrides)


def prepare_data(shared: RunDir, settings: TrainSettings, config: TransformerConfig,
                 chief: bool) -> RunData:
    """The run's corpus, vocabulary and dev set (`tfformer.train.inputs.prepare`), or its
    prepared store's (`tfformer.train.store_inputs.prepare`)."""
    if is_store_spec(settings.data):
        return store_inputs.prepare(shared, chief=chief, spec=settings.data)
    from tfformer.train import inputs

    return inputs.prepare(
        shared, chief=chief, spec=settings.data, skip_bad_lines=settings.skip_bad_lines,
        seed=settings.seed, vocab_size=settings.vocab_size or config.vocab_size,
        vocab_sample=settings.vocab_sample)


def check_or_record_config(run: RunDir, config: TransformerConfig, settings: TrainSettings,
                           chief: bool) -> None:
    """Resuming: refuses a config whose weights differ from the saved one, naming the fields,
    and logs the other differences (dropout). Starting: the chief writes train_args.json and,
    last, config.json.

    Raises:
        ValueError: the run directory's config.json has another architecture.
    """
    if os.path.exists(run.config):
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


def keep_dev_sources(run: RunDir, dev_pairs: list[tuple[str, str]]) -> None:
    """Writes the first dev sources to RUN/dev_sources.txt, once: what tfformer-export checks
    the export with by default."""
    if dev_pairs and not os.path.exists(run.dev_sources):
        atomic_write_text(run.dev_sources, "".join(
            source.replace("\n", " ") + "\n" for source, _ in dev_pairs[:DEV_SOURCES_KEPT]))


def choose_jit(run: RunDir, settings: TrainSettings, config: TransformerConfig,
               placement: Placement, backend: str) -> TrainSettings:
    """The settings with `--jit auto` decided for this machine (`tfformer.train.jit`); a resumed
    run keeps the decision its start recorded (train_args.json), so that its batches stay the
    same on another machine."""
    if settings.jit == "auto" and os.path.exists(run.train_args):
        with open(run.train_args, encoding="utf-8") as f:
            recorded = json.load(f)
        if recorded.get("jit") in ("on", "off"):
            logger.info("jit auto: %s, as this run started", recorded["jit"])
            return dataclasses.replace(settings, jit=recorded["jit"],
                                       pack_length=recorded.get("pack_length", 0))
    settings, why = jit.resolve(settings, backend, config.max_length, placement.replicas)
    if why:
        logger.info("jit auto: %s", why)
    return settings


def open_run_state(run: RunDir, settings: TrainSettings, shared: RunDir | None = None,
                   placement: Placement | None = None) -> RunState:
    """The run's backups and history, as the last backup left them. A JAX process other than
    process 0 resumes from process 0's backup in the shared run directory and writes none."""
    if placement is not None and placement.strategy is None and not placement.chief:
        return RunState(shared.path, settings.backup_every, writes=False)
    return RunState(run.path, settings.backup_every,
                    keep_initial_weights=settings.keep_initial_weights)


def assemble_batches(shared: RunDir, data: RunData, settings: TrainSettings,
                     config: TransformerConfig, placement: Placement,
                     backend: str) -> RunBatches:
    """This worker's training stream and dev batches, on the bucket grid of its backend (both
    packed instead, with `pack_length`): the tf.data stream of a text corpus, or the loader's
    batches of a prepared store."""
    if settings.pack_length > config.max_length:
        raise ValueError(f"pack_length ({settings.pack_length}) must be <= the config's "
                         f"max_length ({config.max_length})")
    compiled = settings.jit == "on" or backend != "tensorflow"  # JAX compiles every step
    if isinstance(data, store_inputs.StoreData):
        return store_inputs.assemble(
            shared, data, batch_tokens=settings.batch_tokens, max_length=config.max_length,
            seed=settings.seed, batch_multiple=placement.replicas,
            bucket_growth=settings.bucket_growth or default_growth(compiled),
            pack_length=settings.pack_length, num_workers=placement.num_workers,
            worker_index=placement.worker_index, write_cache=placement.chief,
            fixed_rows=compiled)
    from tfformer.train import inputs

    return inputs.assemble(
        shared, data, batch_tokens=settings.batch_tokens, max_length=config.max_length,
        seed=settings.seed, skip_bad_lines=settings.skip_bad_lines,
        batch_multiple=placement.replicas,
        bucket_growth=settings.bucket_growth or default_growth(compiled),
        pack_length=settings.pack_length, num_workers=placement.num_workers,
        worker_index=placement.worker_index, shuffle_buffer_size=settings.shuffle_buffer,
        write_cache=placement.chief, fixed_rows=compiled)


def build_model(config: TransformerConfig, settings: TrainSettings, placement: Placement,
                backend: str, warmup_steps: int,
                start: init_from.StartingPoint | None = None) -> Transformer:
    """The Transformer, built and compiled under the placement's scope and the run's precision:
    the paper's optimizer (§5.3) with the run's schedule, and label-smoothed loss (§5.4). With
    `start`, its weights are the starting point's (a resume's backup replaces them later), and
    the `freeze` parts are not trained."""
    if settings.jit == "on" and backend == "tensorflow" and placement.replicas > 1:
        # Keras 3.15 puts `strategy.run` itself inside the jit-compiled function: one XLA
        # cluster over every replica's variables, which TensorFlow refuses at the first step
        # ("Trying to access resource ... located in device ...:1 from device ...:0",
        # keras-team/keras#19005).
        raise ValueError(f"jit (XLA) does not work with {placement.replicas} TensorFlow "
                         "replicas in Keras 3 (keras-team/keras#19005): leave out jit, or "
                         "train under JAX (backend jax), which compiles every step")
    mixed_precision = precision.resolve(settings.mixed_precision)
    with placement.scope(), precision.policy(mixed_precision):
        model = Transformer(config)
        model.build()
        if start is not None:
            model.load_weights(start.weights)
        init_from.freeze(model, settings.freeze_parts)
        optimizer = paper_optimizer(config.d_model, warmup_steps, scale=settings.lr_scale,
                                    gradient_accumulation_steps=settings.grad_accum,
                                    schedule=settings.lr_schedule,
                                    learning_rate=settings.learning_rate)
        # JAX always compiles its steps (jit_compile=False would run every op eagerly).
        jit_compile = settings.jit == "on" if backend == "tensorflow" else "auto"
        compile_transformer(model, optimizer=optimizer, label_smoothing=settings.label_smoothing,
                            jit_compile=jit_compile)
    logger.info("model: %s parameters, Keras on %s, %s; %s", f"{model.count_params():,}",
                backend, placement.description, precision.describe(mixed_precision))
    if settings.freeze_parts:
        frozen = sum(int(np.prod(w.shape)) for w in model.non_trainable_weights)
        logger.info("frozen: %s (%s non-trainable parameters)", ", ".join(settings.freeze_parts),
                    f"{frozen:,}")
    schedule = settings.lr_schedule
    logger.info("schedule: %s, %s", schedule, f"peak {settings.learning_rate:g} after "
                f"{warmup_steps} updates" if schedule == "inverse_sqrt" else
                f"rate {settings.learning_rate:g}" if schedule == "constant" else
                f"warmup {warmup_steps}, scale {settings.lr_scale:g}")
    return model


@dataclasses.dataclass
class Callbacks:
    """The run's callbacks (`all`, in order), with the two whose state the run reads after
    training."""

    all: list[keras.callbacks.Callback]
    batch_shapes: LogBatchShapes
    stop_at_time: StopAtTime | None
    early_stop: KeepBestDevBleu | None = None


def make_callbacks(settings: TrainSettings, run: RunDir, data: RunData,
                   batches: RunBatches, max_length: int, backend: str, chief: bool,
                   budget: Budget, history: Sequence[dict] = (),
                   weights: WeightsWriter | None = None) -> Callbacks:
    """Stop on NaN, keep the last epoch checkpoints, log the stream's counters and batch
    shapes; dev BLEU on the chief when `dev_sentences`, and with `patience` the best weights kept
    and the stop it decides (from the run's `history` so far); a deadline when the budget has
    one. `weights`: the run state's writer (`RunState.weights`), so that an epoch's checkpoint,
    backup and best weights are saved once."""
    batch_shapes = LogBatchShapes(batches.stats, backend)
    callbacks = [
        StopOnNaN(),
        KeepLastCheckpoints(run.checkpoints, keep=settings.keep_checkpoints, weights=weights),
        LogDataCounters(batches.counters, settings.pack_length or max_length),
        batch_shapes,
        LogThroughput(batches.stats, backend),
    ]
    if settings.dev_sentences and chief:
        callbacks.append(DevBleu(data.tokenizer, data.dev.pairs,
                                 max_sentences=settings.dev_sentences,
                                 beam_size=settings.dev_beam_size))
    early_stop = None
    if settings.patience is not None and chief:
        early_stop = KeepBestDevBleu(run, settings.patience, list(history), weights=weights)
        callbacks.append(early_stop)
    stop_at_time = None
    if budget.deadline is not None:
        stop_at_time = StopAtTime(budget.deadline)
        callbacks.append(stop_at_time)
    return Callbacks(callbacks, batch_shapes, stop_at_time, early_stop)


def fit(model: Transformer, batches: RunBatches, run_state: RunState, budget: Budget,
        callbacks: Callbacks, placement: Placement, verbose: int) -> int:
    """Trains from the last backup to the budget (`tfformer.train.fit.fit_resumable`); returns
    the optimizer step reached.

    Raises:
        DataError: the training stream met a bad line (naming file and line).
    """
    with placement.scope():
        if callbacks.early_stop is not None and early_stop.exhausted(
                run_state.history, callbacks.early_stop.patience):
            logger.info("the run stopped early at step %d (%s): nothing to train",
                        run_state.step, os.path.basename(run_state.run.early_stop))
            return run_state.restore(model)
        logger.info("starting at step %d of %d", run_state.step, budget.total_steps)
        try:
            return fit_resumable(model, batches.train, run_state=run_state,
                                 total_steps=budget.total_steps,
                                 steps_per_epoch=budget.steps_per_epoch,
                                 validation_data=batches.dev, callbacks=callbacks.all,
                                 verbose=verbose)
        except Exception as error:
            # A bad line the tf.data stream met (the scan of a new run would have named it
            # first); TensorFlow is loaded wherever such a stream runs.
            tf = sys.modules.get("tensorflow")
            if tf is None or not isinstance(error, tf.errors.OpError):
                raise
            from tfformer.data.records import DataError

            bad_line = DataError.from_graph_error(error)
            if bad_line is None:
                raise
            raise bad_line from None


def finish(model: Transformer, run: RunDir, step: int, budget: Budget, callbacks: Callbacks,
           settings: TrainSettings, chief: bool, history: Sequence[dict] = ()) -> None:
    """Saves RUN/model.keras once the budget is spent or its deadline stopped training, and
    the chief's history plot.

    Raises:
        TrainingStopped: training stopped before the budget for another reason (a NaN loss).
    """
    early = callbacks.early_stop
    if early is not None and (early.stopped or early_stop.exhausted(list(history),
                                                                    early.patience)):
        # The best dev BLEU's weights become the run's model.
        model.load_weights(run.best_weights)
        record = early_stop.record_stop(run, list(history), early.patience, step)
        logger.info("stopped early at step %d of %d: %s; model.keras holds epoch %d's weights "
                    "(dev BLEU %.2f)", step, budget.total_steps, record["reason"],
                    record["best_epoch"], record["best_dev_bleu"])
    elif callbacks.stop_at_time is not None and callbacks.stop_at_time.stopped:
        logger.info("stopped at step %d of %d: %g minutes of wall time used", step,
                    budget.total_steps, settings.max_minutes)
    elif step < budget.total_steps:
        raise TrainingStopped(f"training stopped early at step {step} of {budget.total_steps} "
                              "(NaN loss?)")
    atomic_write(run.model, model.save)
    logger.info("saved %s after %d steps", run.model, step)
    if chief:
        save_history_plot(run)


def save_history_plot(run: RunDir) -> None:
    """RUN/history.png when matplotlib is installed (the `plot` extra); a drawing failure is
    logged, never fatal: the trained model is already saved."""
    if not plots.available():
        logger.info("no %s: install the plot extra (matplotlib) for it",
                    os.path.basename(run.history_plot))
        return
    try:
        logger.info("wrote %s", plots.save_history_plot(run.path))
    except Exception as error:  # noqa: BLE001 - a plot must never fail a finished run
        logger.warning("could not draw %s: %s", run.history_plot, error)
