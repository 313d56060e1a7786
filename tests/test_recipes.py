"""The training recipes in training/configs: valid, the paper's numbers, usable by the CLI."""

import glob
import json
import os

import pytest

from tfformer.cli.train import parse_args, parse_overrides
from tfformer.train.settings import Recipe, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = sorted(glob.glob(os.path.join(ROOT, "training", "configs", "*.json")))


def test_there_are_paper_and_cpu_recipes():
    assert {os.path.basename(p) for p in RECIPES} >= {
        "wmt14-en-de-base.json", "wmt14-en-de-big.json", "bible-es-en-cpu.json"}


@pytest.mark.parametrize("path", RECIPES, ids=os.path.basename)
def test_recipe_is_a_valid_config_and_settings(path):
    recipe = Recipe.load(path)
    config = load_config(recipe.config, **recipe.overrides)
    assert recipe.train.steps and recipe.train.steps_per_epoch
    assert recipe.average_last <= recipe.train.keep_checkpoints or recipe.average_last <= 5
    assert config.d_model % config.num_heads == 0 and recipe.description


def test_wmt14_recipes_have_the_papers_numbers():
    base = Recipe.load(os.path.join(ROOT, "training", "configs", "wmt14-en-de-base.json"))
    big = Recipe.load(os.path.join(ROOT, "training", "configs", "wmt14-en-de-big.json"))
    assert (base.train.steps, base.train.batch_tokens, base.average_last) == (100_000, 25_000, 5)
    assert (big.train.steps, big.train.batch_tokens, big.average_last) == (300_000, 25_000, 20)
    assert load_config(big.config, **big.overrides).dropout == 0.3  # Table 3, EN-DE big
    assert load_config(base.config, **base.overrides).d_model == 512
    assert base.train.data == big.train.data == "reverse:tfds:wmt14_translate/de-en"


def test_cpu_recipe_reads_the_shared_corpus_from_the_repository_root():
    recipe = Recipe.load(os.path.join(ROOT, "training", "configs", "bible-es-en-cpu.json"))
    for path in recipe.train.data.removeprefix("tsv:").split(","):
        full = os.path.join(ROOT, path)
        if not os.path.exists(full) and not os.environ.get("CI"):
            pytest.skip(f"{full} not present")
        assert os.path.exists(full), full


def test_recipe_gives_the_cli_defaults_and_flags_override_it(tmp_path):
    path = os.path.join(ROOT, "training", "configs", "wmt14-en-de-big.json")
    args = parse_args(["--recipe", path, "--batch-tokens", "8000"], recipe=path)
    assert args.config == "big" and args.steps == 300_000 and args.batch_tokens == 8000
    assert parse_overrides(args.set) == {"vocab_size": 37000, "dropout": 0.3}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"config": "tiny", "train": {"stepz": 3}}))
    with pytest.raises(ValueError, match="stepz"):
        Recipe.load(bad)
