"""A training run's directory: every file name in it, defined once.

    RUN/config.json         the architecture (TransformerConfig), written before training
    RUN/train_args.json     the training settings the run was started with
    RUN/tokenizer.model     the shared SentencePiece vocabulary (§5.1)
    RUN/vocabulary.json     or, for an imported model (tfformer-import), its pieces in id order,
    RUN/source.spm            with the SentencePiece models of its source
    RUN/target.spm            and its target (tfformer.data.marian_pieces)
    RUN/pretrained.json     where an imported model came from, and what the import mapped
    RUN/init_from.json      where a fine-tuned run started (--init-from): the path, its hash
    RUN/dev_sources.txt     a few dev sources: what tfformer-export checks by default
    RUN/dev.tsv             the dev pairs held out of a training file given without DEV
    RUN/data.json           what the one scan of the training data found; batches per pass
    RUN/metrics.csv         one row per finished epoch (a view of backup/state.json)
    RUN/checkpoints/        ckpt-EPOCH.weights.h5, the last K epochs (for averaging, §6.1)
    RUN/backup/             state.json + step-N.weights.h5: where a killed run resumes
    RUN/logs/               TensorBoard scalars (train/, validation/)
    RUN/model.keras         the final model
    RUN/model-avgK.keras    the average of the last K checkpoints (tfformer-average)
    RUN/history.png         loss, accuracy and dev BLEU per epoch (when matplotlib is installed)
"""

from __future__ import annotations

import dataclasses
import json
import os

from tfformer.utils.files import atomic_write_text


@dataclasses.dataclass(frozen=True)
class RunDir:
    """Paths inside one run directory.

    Args:
        path: the run directory (it need not exist yet).
    """

    path: str

    def __post_init__(self):
        object.__setattr__(self, "path", os.fspath(self.path))

    def _join(self, *names: str) -> str:
        return os.path.join(self.path, *names)

    @property
    def config(self) -> str:
        return self._join("config.json")

    @property
    def train_args(self) -> str:
        return self._join("train_args.json")

    @property
    def tokenizer(self) -> str:
        return self._join("tokenizer.model")

    @property
    def vocabulary(self) -> str:
        return self._join("vocabulary.json")

    @property
    def source_spm(self) -> str:
        return self._join("source.spm")

    @property
    def target_spm(self) -> str:
        return self._join("target.spm")

    @property
    def pretrained(self) -> str:
        return self._join("pretrained.json")

    @property
    def init_from(self) -> str:
        return self._join("init_from.json")

    @property
    def tokenizer_files(self) -> list[str]:
        """The tokenizer's files: tokenizer.model, or an imported model's vocabulary.json and its
        two SentencePiece models."""
        if os.path.exists(self.vocabulary):
            return [self.vocabulary, self.source_spm, self.target_spm]
        return [self.tokenizer]

    def has_tokenizer(self) -> bool:
        """Whether all of the tokenizer's files are there."""
        return all(os.path.exists(path) for path in self.tokenizer_files)

    @property
    def dev_sources(self) -> str:
        return self._join("dev_sources.txt")

    @property
    def held_out_dev(self) -> str:
        return self._join("dev.tsv")

    @property
    def data_stats(self) -> str:
        return self._join("data.json")

    @property
    def metrics(self) -> str:
        return self._join("metrics.csv")

    @property
    def checkpoints(self) -> str:
        return self._join("checkpoints")

    @property
    def backup(self) -> str:
        return self._join("backup")

    @property
    def logs(self) -> str:
        return self._join("logs")

    @property
    def model(self) -> str:
        return self._join("model.keras")

    @property
    def history_plot(self) -> str:
        return self._join("history.png")

    @property
    def initial_weights(self) -> str:
        return self._join("initial.weights.h5")

    @property
    def best_weights(self) -> str:
        """The weights of the best dev BLEU so far (with --patience)."""
        return self._join("best.weights.h5")

    @property
    def early_stop(self) -> str:
        """Why and where --patience stopped the run."""
        return self._join("early_stop.json")

    def require_model(self) -> None:
        """Raises FileNotFoundError naming whichever of model.keras and the tokenizer's files
        (what a translator loads) is missing."""
        for path in (self.model, *self.tokenizer_files):
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path} not found: a run dir needs "
                                        f"{os.path.basename(self.model)} and "
                                        f"{os.path.basename(self.tokenizer)} (or an imported "
                                        "model's vocabulary.json, source.spm and target.spm)")

    def averaged_model(self, count: int) -> str:
        return self._join(f"model-avg{count}.keras")

    def worker(self, task_id: int) -> "RunDir":
        """The directory of a non-chief worker's own files (multi-worker training)."""
        return RunDir(self._join(f"worker-{task_id}"))


def read_data_stats(run: RunDir) -> dict:
    """RUN/data.json: what the scan found, and the cached batches per pass ({} if absent)."""
    if not os.path.exists(run.data_stats):
        return {}
    with open(run.data_stats, encoding="utf-8") as f:
        return json.load(f)


def write_data_stats(run: RunDir, stats: dict) -> None:
    """Writes RUN/data.json atomically."""
    atomic_write_text(run.data_stats, json.dumps(stats, indent=2))
