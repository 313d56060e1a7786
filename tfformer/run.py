"""The run API: train, average, export and import a run directory from Python.

The console scripts (`tfformer.cli`) only parse their arguments and call these; a notebook or a
Keras user calls them the same way:

    from tfformer import run
    from tfformer.train.settings import TrainSettings

    result = run.train("runs/mine", "tiny", TrainSettings(steps=400))   # rerun to resume
    run.average("runs/mine", last=5)
    run.export("runs/mine", model_base_path="models")
    run.import_pretrained("opus-mt-es-en", "runs/opus-es-en")           # then export it too
    run.train("runs/opus-es-en-bible", settings=TrainSettings(           # fine-tune it
        init_from="runs/opus-es-en", data="tsv:bible.tsv", steps=2000))
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any, Sequence

from tfformer.config import TransformerConfig
from tfformer.train import devices as distribute
from tfformer.train.settings import DEFAULT_CONFIG, Budget, TrainSettings, warmup_steps
from tfformer.utils import backends
from tfformer.utils.checks import check_at_least
from tfformer.utils.run_dir import RunDir

logger = logging.getLogger(__name__)


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


def train(out: str | os.PathLike, config: str | TransformerConfig | None = None,
          settings: TrainSettings | None = None, overrides: dict | None = None) -> TrainResult:
    """Trains (or resumes) the run in `out` until its step budget; resumable after any kill.

    Args:
        out: the run directory (see `tfformer.utils.run_dir`).
        config: a preset name, a JSON file or a TransformerConfig (vocab_size is set from the
            trained vocabulary); default "tiny", or with `settings.init_from` the architecture
            of the run it starts from (a config given then may change dropout only).
        settings: how to train (default: `TrainSettings()`); `init_from` fine-tunes another
            run's model (`tfformer.train.init_from`).
        overrides: config fields to change, e.g. {"dropout": 0.3}.

    Returns:
        a TrainResult with the trained model, also saved to `RUN/model.keras`.

    Raises:
        ValueError: bad settings or data (naming the field, file and line), or a run directory
            whose saved config differs from `config` (naming the fields).
        tfformer.train.settings.TrainingStopped: training stopped before its step budget (NaN loss).
    """
    settings = settings or TrainSettings()
    started = time.monotonic()
    backend, placement = place_devices(settings)
    from tfformer.train import steps  # Keras starts here, on the backend placed

    shared, run = steps.run_dirs(out, placement)
    start = steps.starting_point(shared, settings, placement.chief)
    if config is None and start is None:
        config = DEFAULT_CONFIG
    warmup = warmup_steps(settings, config)
    config = steps.run_config(start, config, overrides)
    settings = steps.choose_jit(run, settings, config, placement, backend)
    data = steps.prepare_data(shared, settings, config, placement.chief)
    config = config.replace(vocab_size=data.tokenizer.vocab_size)
    steps.check_or_record_config(run, config, settings, placement.chief)
    if placement.chief:
        steps.keep_dev_sources(run, data.dev.pairs)
    run_state = steps.open_run_state(run, settings, shared, placement)
    batches = steps.assemble_batches(shared, data, settings, config, placement, backend)
    budget = Budget.from_settings(settings, batches.batches_per_pass, started)
    logger.info("%s", budget.describe())
    model = steps.build_model(config, settings, placement, backend, warmup, start)
    callbacks = steps.make_callbacks(settings, run, data, batches, config.max_length, backend,
                                     placement.chief, budget, history=run_state.history,
                                     weights=run_state.weights)
    step = steps.fit(model, batches, run_state, budget, callbacks, placement, settings.verbose)
    steps.finish(model, run, step, budget, callbacks, settings, placement.chief,
                 history=run_state.history)
    return TrainResult(model, data.tokenizer, run, step, list(run_state.history), data.dev.pairs,
                       callbacks.batch_shapes.summary)


def place_devices(settings: TrainSettings) -> tuple[str, distribute.Placement]:
    """Chooses the backend, the device layout and the strategy, then seeds: the first step, as
    Keras and TensorFlow read them when they start. Returns (backend, placement).

    Raises:
        ValueError: max_minutes with several worker processes (each would stop elsewhere).
    """
    backend = backends.select_backend(settings.backend)
    if settings.max_minutes and distribute.tf_config_workers() > 1:
        raise ValueError("max_minutes works in one process only: each worker would stop at "
                         "another batch; give steps or epochs")
    if settings.patience is not None and distribute.tf_config_workers() > 1:
        raise ValueError("patience works in one process only: dev BLEU is the chief's, so "
                         "the other workers would not stop with it")
    processes = None
    if settings.num_processes is not None:
        processes = distribute.Processes(settings.coordinator, settings.num_processes,
                                         settings.process_id, settings.coordinator_timeout)
    placement = distribute.place(backend, settings.devices, processes)

    import keras

    # Seed before any tf-text resource exists: seeding later destroys the tokenizer's resource.
    keras.utils.set_random_seed(settings.seed)
    return backend, placement


def average(run_dir: str | os.PathLike, last: int = 5, out: str | None = None) -> str:
    """Averages the weights of the run's last `last` epoch checkpoints (§6.1) into a `.keras`
    model (default `RUN/model-avgK.keras`, K the number averaged); returns its path."""
    check_at_least("last", last)
    from tfformer.model.transformer import Transformer
    from tfformer.train.checkpoints import CHECKPOINT_GLOB, average_last, list_checkpoints
    from tfformer.utils.files import atomic_write

    run = RunDir(run_dir)
    if not os.path.exists(run.config) or not list_checkpoints(run.checkpoints):
        raise FileNotFoundError(f"{run.path} needs {os.path.basename(run.config)} and "
                                f"{os.path.basename(run.checkpoints)}/{CHECKPOINT_GLOB}")
    with open(run.config, encoding="utf-8") as f:
        model = Transformer(TransformerConfig.from_json(f.read()))
    model.build()
    paths = average_last(model, run.path, last)
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
    precision: str = "fp32"  # of the weights and matmuls


def export(run_dir: str | os.PathLike, model_base_path: str = "models", name: str = "tfformer",
           version: int | None = None, *, beam_size: int | None = None,
           length_penalty: float | None = None, max_output_extra: int | None = None,
           no_repeat_ngram: int | None = None,
           check_sentences: str | Sequence[str] | None = None,
           precision: str = "fp32", length_penalty_form: str | None = None) -> ExportResult:
    """Exports the run's model.keras as `model_base_path/name/VERSION` for TF Serving, checked
    op by op and in a fresh process (see `tfformer.export.saved_model.export_saved_model`).

    Args:
        version: default one above the highest present.
        beam_size, length_penalty, max_output_extra, no_repeat_ngram, length_penalty_form: the
            exported search (default: the paper's, `DecodingConfig`).
        check_sentences: sentences, or a file of them, for the fresh-process check (default:
            the run's dev sources, else a few fixed Spanish sentences).
        precision: "fp32", or "bf16": weights stored and multiplied in bfloat16, LayerNorm,
            softmax, log-probabilities and beam scores in float32
            (`tfformer.decode.translator.in_precision`). It pays off on CPUs with AVX512_BF16 or AMX
            (logged), a GPU or a TPU.
    """
    from tfformer.contract import next_version
    from tfformer.decode.translator import load_translator
    from tfformer.export.saved_model import export_saved_model

    run = RunDir(run_dir)
    translator = load_translator(run.path, beam_size=beam_size, length_penalty=length_penalty,
                                 max_output_extra=max_output_extra,
                                 no_repeat_ngram=no_repeat_ngram, precision=precision,
                                 length_penalty_form=length_penalty_form)
    if precision == "bf16":
        from tfformer.utils.cpu import describe_bf16_support

        logger.info("bf16 weights: %s", describe_bf16_support())
    if version is None:  # 0 is refused (export_saved_model), not taken for "the next"
        version = next_version(os.path.join(model_base_path, name))
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
    logger.info("exported %s (%s); it translates %d check sentences (%s) in a fresh process "
                "exactly as in memory", path, precision, len(sentences), origin)
    return ExportResult(path, version, origin, precision)


def import_pretrained(directory: str | os.PathLike, out: str | os.PathLike, *,
                      progress=None):
    """Writes another toolkit's checkpoint directory as the run directory `out`, which every
    command takes as a run of its own (translate, evaluate, export, serve, train from it).

    Today's family: a Hugging Face Marian directory (OPUS-MT's models;
    `tfformer.pretrained.marian`), as `huggingface-cli download Helsinki-NLP/opus-mt-es-en
    --local-dir DIR` writes it.

    Args:
        progress: called with a line at each stage (reading, mapping, writing).

    Returns:
        a `tfformer.pretrained.marian.ImportResult`.

    Raises:
        FileNotFoundError, FileExistsError, ValueError: naming the file or field (nothing
            written).
    """
    from tfformer.pretrained.marian import import_marian

    return import_marian(directory, out, progress=progress)
