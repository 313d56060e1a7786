"""How a run trains, with every default and its help written once: `TrainSettings`, the
recipes that hold them (`Recipe`), the config a run starts from (`load_config`), its warmup
(`warmup_steps`), its budget of updates, epochs and wall time (`Budget`) and the error of a run
that ends short of it (`TrainingStopped`).

Imports no TensorFlow or Keras: the console scripts build their flags from these dataclasses
before anything heavy loads (`tfformer-train --help` stays quick).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import field
from typing import Callable

from tfformer.config import (
    LR_SCHEDULES,
    PAPER_WARMUP_STEPS,
    PRESETS,
    TransformerConfig,
    get_preset,
)
from tfformer.model.precision import CHOICES as PRECISIONS
from tfformer.train.jit import AUTO_PACK_LENGTH
from tfformer.train.jit import CHOICES as JIT_CHOICES
from tfformer.utils.backends import BACKENDS
from tfformer.utils.checks import check_at_least, check_fraction

DEFAULT_CONFIG = "tiny"  # the preset a run trains when it names no config and no init_from
DEFAULT_STEPS = 400
DEFAULT_STEPS_PER_EPOCH = 100  # updates, with `steps`
DEFAULT_VOCAB_SAMPLE = 1_000_000  # sentences: the vocabulary's time and memory stay bounded

# Warmup (§5.3) of a preset's training when the run does not set one: tiny's runs are short.
PRESET_WARMUP_STEPS = {"tiny": 400}
# Continued training (init_from): OPUS-MT's fine-tuning recipe (OPUS-MT-train's
# finetune/Makefile, Marian `--learn-rate 0.0003 --lr-warmup 16000 --lr-decay-inv-sqrt 16000`):
# a fresh inverse-sqrt schedule peaking at 3e-4. Its 16000 warmup updates are for budgets of
# days; ours warms up as the tiny preset does.
FINETUNE_SCHEDULE = "inverse_sqrt"
FINETUNE_LEARNING_RATE = 3e-4
FINETUNE_WARMUP_STEPS = 400
# The parts `freeze` can keep as they are (`tfformer.train.init_from.freeze`).
FREEZABLE = ("embeddings", "encoder", "decoder")


class TrainingStopped(RuntimeError):
    """Training ended before its budget of updates (a NaN loss stopped it)."""


@dataclasses.dataclass
class TrainSettings:
    """How a run trains (the architecture is the `TransformerConfig`).

    Each setting's help is on its field (`metadata["help"]`, with `metavar` and `choices` where
    they help), beside its default, and nowhere else: tfformer-train builds one flag per field
    from them (`tfformer.cli.console.settings_arguments`), --help shows them.
    """

    data: str = field(default="builtin", metadata={
        "help": "builtin[:N] | tsv:TRAIN[,DEV] | tfds:NAME | reverse:SPEC "
                "(`tfformer.data.sources`); TRAIN: files or globs joined by +, .gz read as gzip; "
                "or prepared:DIR, a tfformer-prepare store (no TensorFlow needed, instant "
                "resume)"})
    skip_bad_lines: bool = field(default=False, metadata={
        "help": "skip (and count) malformed data lines instead of failing"})
    vocab_sample: int = field(default=DEFAULT_VOCAB_SAMPLE, metadata={
        "metavar": "SENTENCES",
        "help": "the vocabulary learns from a random sample of this many sentences (source and "
                "target sides), drawn in one pass"})
    shuffle_buffer: int = field(default=100_000, metadata={
        "metavar": "PAIRS",
        "help": "pairs held in the training stream's shuffle buffer (files are shuffled as well)"})
    steps: int | None = field(default=None, metadata={
        "help": f"optimizer updates in all (default: {DEFAULT_STEPS} unless epochs is given)"})
    epochs: int | None = field(default=None, metadata={
        "help": "passes over the training data, instead of steps (counted once per run, see "
                "`tfformer.train.inputs.batches_per_pass`)"})
    steps_per_epoch: int | None = field(default=None, metadata={
        "help": "batches per epoch: checkpoint, history row and dev BLEU after each (default: "
                f"{DEFAULT_STEPS_PER_EPOCH} updates with steps, one data pass with epochs); a "
                "multiple of grad_accum"})
    batch_tokens: int = field(default=4096, metadata={
        "help": "token budget per global batch (§5.1; the paper's batches held about 25000 "
                "source and 25000 target tokens)"})
    bucket_growth: float | None = field(default=None, metadata={
        "metavar": "RATIO",
        "help": "ratio between consecutive lengths of the batches' bucket grid "
                "(`tfformer.data.buckets`): smaller pads less, larger has fewer batch shapes, "
                "each one more program for XLA to compile (default 1.1, or 1.25 where steps are "
                "compiled: jit on, or JAX)"})
    pack_length: int = field(default=0, metadata={
        "metavar": "N",
        "help": "0 batches pairs by length on the bucket grid; N packs several pairs into rows "
                "of N tokens instead (`tfformer.data.packing`): one batch shape, so XLA compiles "
                "the train step once, and less padding; pairs longer than N are dropped (and "
                "counted). At most the config's max_length"})
    label_smoothing: float = field(default=0.1, metadata={
        "help": "epsilon_ls of the loss (§5.4)"})
    init_from: str | None = field(default=None, metadata={
        "metavar": "RUN",
        "help": "fine-tune: a new run that starts from RUN's weights, with RUN's vocabulary and "
                "architecture; RUN is a run directory (an imported one too) or a .keras file "
                "beside its tokenizer. The config may change dropout only. The run records "
                "where it started (init_from.json) and trains with a fresh optimizer and "
                "lr_schedule"})
    lr_schedule: str | None = field(default=None, metadata={
        "choices": LR_SCHEDULES,
        "help": "noam (§5.3, eq. 3), inverse_sqrt (linear warmup to learning_rate, then "
                "learning_rate * sqrt(warmup / step): fairseq's, and Marian's in OPUS-MT's "
                "fine-tuning recipe) or constant (default: noam, or with init_from "
                f"{FINETUNE_SCHEDULE})"})
    learning_rate: float | None = field(default=None, metadata={
        "help": "the peak rate of inverse_sqrt, the rate of constant (default "
                f"{FINETUNE_LEARNING_RATE}, OPUS-MT's fine-tuning recipe's)"})
    freeze: str = field(default="", metadata={
        "metavar": "PARTS",
        "help": "comma-separated parts whose weights training leaves as they are: "
                "embeddings (every embedding matrix, the target's tied to the pre-softmax "
                "projection, and the logits bias), encoder, decoder"})
    warmup_steps: int | None = field(default=None, metadata={
        "help": f"updates of learning-rate warmup (§5.3; default {PAPER_WARMUP_STEPS} as in the "
                "paper, or the preset's own: "
                + ", ".join(f"{preset} {updates}"
                            for preset, updates in PRESET_WARMUP_STEPS.items())
                + f"; {FINETUNE_WARMUP_STEPS} with init_from)"})
    lr_scale: float = field(default=1.0, metadata={
        "help": "factor on the learning rate of §5.3, eq. 3 (1.0 in the paper; noam only)"})
    max_minutes: float | None = field(default=None, metadata={
        "help": "stop after this much wall time, start-up and epoch-end work (validation, dev "
                "BLEU, checkpoints) included, even before steps; the run then ends normally, "
                "with model.keras (one process only: workers would stop at different batches)"})
    vocab_size: int | None = field(default=None, metadata={
        "help": "subword vocabulary size (default: the config's; a soft limit)"})
    mixed_precision: str | None = field(default=None, metadata={
        "choices": PRECISIONS,
        "help": "half-precision matmuls on float32 weights (fp16 with loss scaling); auto: bf16 "
                "where it pays (a GPU or TPU, a CPU with AVX512_BF16 or AMX), else float32 "
                "(default: float32; `tfformer.model.precision`)"})
    jit: str = field(default="off", metadata={
        "choices": JIT_CHOICES, "const": "on",
        "help": "compile TensorFlow's train steps with XLA (JAX compiles every step): on "
                "(--jit alone), off, or auto: compiled steps on packed rows (pack_length "
                f"{AUTO_PACK_LENGTH} unless given) where they pay, a GPU or TPU or a CPU without "
                "AVX-512, else plain (`tfformer.train.jit`)"})
    grad_accum: int = field(default=1, metadata={
        "metavar": "N",
        "help": "accumulate gradients over N batches per optimizer update (steps counts "
                "updates)"})
    devices: int | None = field(default=None, metadata={
        "metavar": "N",
        "help": "split the CPU into N logical devices before the backend starts (multi-device "
                "without GPUs)"})
    coordinator: str | None = field(default=None, metadata={
        "metavar": "HOST:PORT",
        "help": "JAX in several processes (hosts): the address of process 0, which every "
                "process reaches (with num_processes and process_id)"})
    num_processes: int | None = field(default=None, metadata={
        "metavar": "N", "help": "JAX: the processes that train together (with coordinator)"})
    process_id: int | None = field(default=None, metadata={
        "metavar": "I", "help": "JAX: this process' index, 0 to N-1; 0 writes the run directory"})
    coordinator_timeout: float = field(default=300.0, metadata={
        "metavar": "SECONDS",
        "help": "how long a process waits for the coordinator (and process 0 for the others) "
                "before it fails"})
    backend: str | None = field(default=None, metadata={
        "choices": BACKENDS,
        "help": "the Keras backend (default: KERAS_BACKEND's, else tensorflow), chosen before "
                "anything imports Keras (`tfformer.utils.backends`); jax needs the jax extra"})
    keep_checkpoints: int = field(default=5, metadata={
        "metavar": "K",
        "help": "how many epoch checkpoints to keep (the paper averages the last 5, §6.1)"})
    backup_every: int = field(default=50, metadata={
        "metavar": "STEPS",
        "help": "optimizer updates between backups within an epoch (every epoch end is backed "
                "up too)"})
    dev_sentences: int = field(default=200, metadata={
        "help": "dev sentences decoded for BLEU after each epoch (0: none)"})
    patience: int | None = field(default=None, metadata={
        "metavar": "K",
        "help": "stop after K dev-BLEU evaluations (epochs) without a better one; the best "
                "weights are kept (best.weights.h5) and become model.keras, the reason goes to "
                "early_stop.json (needs dev_sentences)"})
    dev_beam_size: int = field(default=1, metadata={
        "metavar": "K",
        "help": "dev BLEU's search: 1 greedy, else beam search with the paper's length penalty "
                "(the same tokens on every backend)"})
    seed: int = field(default=0, metadata={
        "help": "seed of the weights, the data order and the vocabulary's sample"})
    keep_initial_weights: bool = field(default=False, metadata={
        "help": "also save the weights before the first update (initial.weights.h5)"})
    verbose: int = field(default=1, metadata={
        "choices": (0, 1, 2),
        "help": "Keras' progress output: 0 silent, 1 bar, 2 one line per epoch"})

    def __post_init__(self) -> None:
        if isinstance(self.jit, bool):  # before "auto" it was a switch (old train_args.json)
            self.jit = "on" if self.jit else "off"
        if self.jit not in JIT_CHOICES:
            raise ValueError(f"jit must be one of {', '.join(JIT_CHOICES)}, got {self.jit!r}")
        for name in ("steps", "epochs", "steps_per_epoch", "batch_tokens", "vocab_size",
                     "grad_accum", "devices", "keep_checkpoints", "backup_every",
                     "warmup_steps", "shuffle_buffer", "dev_beam_size"):
            check_at_least(name, getattr(self, name))
        check_at_least("vocab_sample", self.vocab_sample, 2)
        check_at_least("dev_sentences", self.dev_sentences, 0)
        self._check_processes()
        if self.patience is not None:
            check_at_least("patience", self.patience)
            if not self.dev_sentences:
                raise ValueError("patience needs dev BLEU: dev_sentences must be > 0")
        if self.pack_length:
            check_at_least("pack_length", self.pack_length, 2, why="a token plus BOS/EOS")
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
        self._resolve_schedule()

    def _resolve_schedule(self) -> None:
        """The schedule and its rate, decided once: train_args.json records them."""
        if self.lr_schedule is None:
            self.lr_schedule = FINETUNE_SCHEDULE if self.init_from else "noam"
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got "
                             f"{self.lr_schedule!r}")
        if self.lr_schedule == "noam":
            if self.learning_rate is not None:
                raise ValueError("learning_rate is the rate of inverse_sqrt and constant: noam's "
                                 "follows from d_model, warmup_steps and lr_scale")
        else:
            if self.lr_scale != 1.0:
                raise ValueError(f"lr_scale scales noam only; lr_schedule {self.lr_schedule} "
                                 "takes learning_rate")
            if self.learning_rate is None:
                self.learning_rate = FINETUNE_LEARNING_RATE
            if not self.learning_rate > 0:
                raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        unknown = [part for part in self.freeze_parts if part not in FREEZABLE]
        if unknown:
            raise ValueError(f"freeze takes {', '.join(FREEZABLE)} (comma-separated), got "
                             f"{', '.join(map(repr, unknown))}")

    @property
    def freeze_parts(self) -> list[str]:
        """The parts named by `freeze`, in its order."""
        return [part.strip() for part in self.freeze.split(",") if part.strip()]

    def _check_processes(self) -> None:
        given = {"coordinator": self.coordinator, "num_processes": self.num_processes,
                 "process_id": self.process_id}
        if all(value is None for value in given.values()):
            return
        missing = [name for name, value in given.items() if value is None]
        if missing:
            raise ValueError(f"several processes need coordinator, num_processes and "
                             f"process_id: {', '.join(missing)} missing")
        check_at_least("num_processes", self.num_processes)
        if not 0 <= self.process_id < self.num_processes:
            raise ValueError(f"process_id must be in [0, {self.num_processes}), got "
                             f"{self.process_id}")
        host, _, port = self.coordinator.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"coordinator must be HOST:PORT, got {self.coordinator!r}")
        if self.num_processes > 1:
            # Every process must compile and run the same program each step, and stop at the
            # same step, so: one batch shape, and no per-process decision to stop.
            if not self.pack_length:
                raise ValueError("several processes need pack_length (one batch shape: each "
                                 "process' batches must have the shape of the others')")
            if self.epochs is not None:
                raise ValueError("several processes count in steps, not epochs (each process' "
                                 "shard has its own number of batches per pass)")
            for name in ("max_minutes", "patience"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} works in one process only: each process would "
                                     "stop at another step")
            if self.dev_sentences:
                raise ValueError("several processes: dev BLEU decodes in one process, which "
                                 "the others would wait for; set dev_sentences 0 (validation "
                                 "loss still runs; score checkpoints with tfformer-evaluate)")


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


def warmup_steps(settings: TrainSettings, config: str | TransformerConfig | None) -> int:
    """The run's warmup updates (§5.3): `settings.warmup_steps` when set, else
    FINETUNE_WARMUP_STEPS with `init_from`, else the preset's own (tiny: 400) when `config` is a
    preset, else the paper's 4000.

    A preset is one by name (whatever its overrides) or by architecture: a TransformerConfig or
    JSON file equal to a preset but for vocab_size (the run's vocabulary sets it) and dropout, so
    that `load_config("tiny")` passed as an object warms up as "tiny" passed by name does.
    """
    if settings.warmup_steps:
        return settings.warmup_steps
    if settings.init_from:
        return FINETUNE_WARMUP_STEPS
    if isinstance(config, str) and config in PRESETS:
        return PRESET_WARMUP_STEPS.get(config, PAPER_WARMUP_STEPS)
    config = load_config(config)
    for name, preset in PRESETS.items():
        if not preset.replace(vocab_size=config.vocab_size).weight_differences(config):
            return PRESET_WARMUP_STEPS.get(name, PAPER_WARMUP_STEPS)
    return PAPER_WARMUP_STEPS


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


@dataclasses.dataclass(frozen=True)
class Budget:
    """How long a run trains: its optimizer updates, the batches of an epoch, a deadline.

    Epochs are counted in batches and end on an optimizer update (`steps_per_epoch` is a
    multiple of `accumulation`); the last epoch ends at `total_steps` and may be shorter.

    Attributes:
        total_steps: optimizer updates in all.
        steps_per_epoch: batches per epoch (checkpoint, history row and dev BLEU after each).
        accumulation: batches per optimizer update (`grad_accum`).
        deadline: when to stop, in seconds of `time.monotonic()`; None: no time limit.
    """

    total_steps: int
    steps_per_epoch: int
    accumulation: int = 1
    deadline: float | None = None

    @classmethod
    def from_settings(cls, settings: TrainSettings, batches_per_pass: Callable[[], int],
                      started: float) -> "Budget":
        """The budget of `settings`, the run having started at `started` (time.monotonic()).

        Args:
            batches_per_pass: the training data's batches per pass; called only when
                `settings.epochs` sets the budget (counting them may scan the data).

        Raises:
            ValueError: steps_per_epoch is not a multiple of grad_accum.
        """
        accumulation = settings.grad_accum
        if settings.steps:
            total_steps = settings.steps
            steps_per_epoch = settings.steps_per_epoch or min(
                DEFAULT_STEPS_PER_EPOCH, total_steps) * accumulation
        else:
            per_pass = batches_per_pass()
            # Passes over the data set the budget; steps_per_epoch only the checkpoint interval.
            total_steps = max(1, settings.epochs * per_pass // accumulation)
            steps_per_epoch = settings.steps_per_epoch or max(
                accumulation, per_pass // accumulation * accumulation)
        if steps_per_epoch % accumulation:
            raise ValueError(f"steps_per_epoch ({steps_per_epoch}) must be a multiple of "
                             f"grad_accum ({accumulation}): epochs end on an update")
        deadline = started + 60 * settings.max_minutes if settings.max_minutes else None
        return cls(total_steps, steps_per_epoch, accumulation, deadline)

    @property
    def epochs(self) -> int:
        """Epochs in all, the last one possibly shorter."""
        return math.ceil(self.total_steps / (self.steps_per_epoch // self.accumulation))

    def describe(self) -> str:
        """For the log: `400 updates of 1 batch(es), 100 per epoch (4 epochs)`."""
        return (f"{self.total_steps} updates of {self.accumulation} batch(es), "
                f"{self.steps_per_epoch // self.accumulation} per epoch ({self.epochs} epochs)")
