"""Shared test setup: quiet TensorFlow logs, deterministic seeds, small model configs."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402


@pytest.fixture
def tiny_config():
    """A model small enough that every numerical test runs in well under a second."""
    from tfformer.config import TransformerConfig

    return TransformerConfig(vocab_size=40, d_model=32, num_heads=4, d_ff=64,
                             num_encoder_layers=2, num_decoder_layers=2, max_length=64,
                             dropout=0.1)


def pytest_collection_modifyitems(config, items):
    """Slow end-to-end tests first: under `pytest -n 2` (make test) the longest tests then start
    at once instead of leaving one worker alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
