"""Where a fine-tuning run starts (`TrainSettings.init_from`): another run's weights, vocabulary
and architecture.

`StartingPoint.locate` finds them: a run directory (its model.keras, config.json and tokenizer
files; an imported one too), or a .keras file in a run directory (an average, a copy) beside
the tokenizer files. The new run is a run like any other from there: its own optimizer and
schedule, any data, resumable; it records where it started in RUN/init_from.json, and a resume
refuses a source whose weights have changed since (a run killed before its first backup would
start again from other weights).
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile

from tfformer.config import TRAINING_ONLY, TransformerConfig
from tfformer.utils.files import atomic_copy, atomic_write_text, sha256_of
from tfformer.utils.run_dir import RunDir


@dataclasses.dataclass(frozen=True)
class StartingPoint:
    """The weights a fine-tuning run starts from.

    Attributes:
        path: as given (`init_from`).
        run: the run directory that holds the tokenizer files.
        weights: the .keras file of the weights.
        config: its architecture.
        sha256: the hash of `weights`.
    """

    path: str
    run: RunDir
    weights: str
    config: TransformerConfig
    sha256: str

    @classmethod
    def locate(cls, path: str) -> "StartingPoint":
        """Raises FileNotFoundError naming a missing file, ValueError for a .keras file that
        holds no tfformer Transformer."""
        if os.path.isdir(path):
            run = RunDir(path)
            weights = run.model
        elif path.endswith(".keras") and os.path.isfile(path):
            run = RunDir(os.path.dirname(path) or ".")
            weights = path
        else:
            raise FileNotFoundError(f"init_from {path}: neither a run directory nor a .keras "
                                    "file")
        for needed in (weights, *run.tokenizer_files):
            if not os.path.exists(needed):
                raise FileNotFoundError(
                    f"init_from {path}: {needed} not found (a run to start from needs its "
                    "model.keras, or the .keras file given, and its tokenizer: tokenizer.model, "
                    "or an imported model's vocabulary.json, source.spm and target.spm)")
        return cls(path, run, weights, _read_config(weights), sha256_of(weights))

    def config_for(self, requested: TransformerConfig | None,
                   overrides: dict | None = None) -> TransformerConfig:
        """The new run's config: the starting point's, with the training-only fields
        (dropout) of `requested` (a preset or config file the caller named) and `overrides`.

        Raises:
            ValueError: `requested` or `overrides` change the architecture, naming the fields.
        """
        config = self.config
        if requested is not None:
            # The vocabulary comes with the weights: a preset's vocab_size is no request.
            requested = requested.replace(vocab_size=config.vocab_size,
                                          source_vocab_size=config.source_vocab_size)
            self._refuse(config.weight_differences(requested), "the config")
            config = config.replace(**{name: getattr(requested, name) for name in TRAINING_ONLY})
        changed = config.replace(**(overrides or {}))
        self._refuse(config.weight_differences(changed), "the overrides")
        return changed

    def _refuse(self, differences: list[str], what: str) -> None:
        if differences:
            raise ValueError(
                f"init_from {self.path}: {what} would change the architecture the weights have "
                f"({'; '.join(differences)}); fine-tuning may change "
                f"{' and '.join(TRAINING_ONLY)} only")

    def record(self) -> dict:
        """What RUN/init_from.json holds."""
        return {"path": os.path.abspath(self.path), "weights": os.path.abspath(self.weights),
                "sha256": self.sha256}

    def start(self, run: RunDir) -> None:
        """Gives the new run directory `run` the tokenizer files and init_from.json (a run
        directory that has them already is a resume: its record must match). Call before
        config.json is written.

        Raises:
            ValueError: `run` started from other weights, or from none.
        """
        recorded = started_from(run)
        if recorded is not None and recorded.get("sha256") != self.sha256:
            raise ValueError(
                f"{run.path} started from {recorded.get('weights')} (sha256 "
                f"{str(recorded.get('sha256'))[:12]}...), not {self.weights} (sha256 "
                f"{self.sha256[:12]}...): its weights changed since, or this is another model; "
                "give a new run directory")
        if recorded is None and os.path.exists(run.config):
            raise ValueError(f"{run.path} is a run that did not start with init_from: give a new "
                             "run directory to fine-tune")
        os.makedirs(run.path, exist_ok=True)
        # vocabulary.json last: its presence is what marks an imported model's tokenizer.
        for source in sorted(self.run.tokenizer_files, key=lambda p: p == self.run.vocabulary):
            target = os.path.join(run.path, os.path.basename(source))
            if not os.path.exists(target):
                atomic_copy(source, target)
        if recorded is None:
            atomic_write_text(run.init_from, json.dumps(self.record(), indent=2))


def started_from(run: RunDir) -> dict | None:
    """RUN/init_from.json, or None for a run that did not start with init_from."""
    if not os.path.exists(run.init_from):
        return None
    with open(run.init_from, encoding="utf-8") as f:
        return json.load(f)


def _read_config(weights: str) -> TransformerConfig:
    """The TransformerConfig inside a .keras file (its config.json)."""
    try:
        with zipfile.ZipFile(weights) as archive:
            saved = json.loads(archive.read("config.json"))
        return TransformerConfig.from_dict(saved["config"]["config"])
    except (zipfile.BadZipFile, KeyError, TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"init_from: {weights} holds no tfformer Transformer ({error})") from None


def freeze(model, parts: list[str]) -> None:
    """Makes `parts` of the model (`tfformer.train.settings.FREEZABLE`) non-trainable, before it
    is compiled: the optimizer then holds no slots for them and never updates them."""
    layers = {"embeddings": [model.embedding, model.source_embedding],
              "encoder": [model.encoder], "decoder": [model.decoder]}
    for part in parts:
        for layer in layers[part]:
            if layer is not None:
                layer.trainable = False
