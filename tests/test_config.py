"""TransformerConfig (the architecture) and DecodingConfig: presets, validation naming the field,
JSON round trip, configs saved before the split.

Backend-neutral: `make test` runs it on TensorFlow and on JAX without TensorFlow
installed (the Makefile's BACKEND_TESTS).
"""

import json
import os

import pytest

from tfformer.config import PRESETS, DecodingConfig, TransformerConfig, get_preset

LEGACY_RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "run-v0.1")


def test_presets_hold_the_papers_table_3_values():
    base, big = PRESETS["base"], PRESETS["big"]
    assert (base.d_model, base.num_heads, base.d_ff, base.num_encoder_layers,
            base.num_decoder_layers, base.dropout) == (512, 8, 2048, 6, 6, 0.1)
    assert (big.d_model, big.num_heads, big.d_ff, big.num_encoder_layers,
            big.num_decoder_layers, big.dropout) == (1024, 16, 4096, 6, 6, 0.3)
    decoding = DecodingConfig()
    assert (decoding.beam_size, decoding.length_penalty, decoding.max_output_extra) == (
        4, 0.6, 50)  # §6.1
    for config in (base, big):
        assert config.positional == "sinusoidal" and config.norm == "post"
        assert config.share_embeddings
    assert PRESETS["tiny"].d_model < base.d_model


def test_json_round_trip_is_exact():
    config = get_preset("big", vocab_size=123, positional="learned", norm="pre")
    assert TransformerConfig.from_json(config.to_json()) == config


def test_d_model_not_divisible_by_heads_names_both_numbers():
    with pytest.raises(ValueError, match=r"d_model \(500\).*num_heads \(3\)"):
        TransformerConfig(d_model=500, num_heads=3)


@pytest.mark.parametrize("field, value", [
    ("vocab_size", 0), ("d_model", -8), ("num_heads", 0), ("d_ff", 0),
    ("num_encoder_layers", 0), ("num_decoder_layers", 1.5), ("dropout", 1.0),
    ("attention_dropout", -0.1), ("layer_norm_epsilon", -1e-6), ("max_length", 1),
    ("positional", "rotary"), ("norm", "sandwich"), ("share_embeddings", "yes"),
])
def test_invalid_values_raise_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        TransformerConfig(**{field: value})


@pytest.mark.parametrize("field, value", [
    ("beam_size", 0), ("beam_size", 2.0), ("length_penalty", -1), ("max_output_extra", -1)])
def test_invalid_decoding_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        DecodingConfig(**{field: value})


def test_a_config_saved_before_the_split_loads_as_its_architecture():
    with open(os.path.join(LEGACY_RUN, "config.json")) as f:
        text = f.read()
    assert {"warmup_steps", "beam_size", "label_smoothing"} <= set(json.loads(text))
    config = TransformerConfig.from_json(text)
    assert (config.vocab_size, config.d_model, config.d_ff) == (120, 16, 32)
    assert not hasattr(config, "warmup_steps")


def test_weight_differences_leave_out_dropout():
    config = get_preset("tiny")
    changed = config.replace(dropout=0.3, attention_dropout=0.1, d_ff=256)
    assert config.weight_differences(changed) == ["d_ff: 512 -> 256"]
    assert len(config.differences(changed)) == 3


def test_unknown_fields_and_presets_are_named():
    with pytest.raises(ValueError, match="d_modle"):
        TransformerConfig.from_dict({"d_modle": 4})
    with pytest.raises(ValueError, match="huge"):
        get_preset("huge")
    with pytest.raises(ValueError, match="not valid JSON"):
        TransformerConfig.from_json("{")


def test_marians_options_default_to_the_papers_and_are_checked_by_field():
    paper = TransformerConfig()
    assert (paper.activation, paper.sinusoid_layout, paper.final_logits_bias,
            paper.source_vocab_size) == ("relu", "interleaved", False, 0)
    old = {k: v for k, v in paper.to_dict().items()
           if k not in ("activation", "sinusoid_layout", "final_logits_bias", "source_vocab_size")}
    assert TransformerConfig.from_dict(old) == paper  # configs written before them load
    for field, value in (("activation", "tanh"), ("sinusoid_layout", "mixed"),
                         ("final_logits_bias", 1), ("source_vocab_size", 3)):
        with pytest.raises(ValueError, match=field):
            paper.replace(share_embeddings=False, **{field: value})
    with pytest.raises(ValueError, match="source_vocab_size needs share_embeddings false"):
        paper.replace(source_vocab_size=100)
    assert paper.replace(share_embeddings=False, source_vocab_size=100).source_vocabulary_size \
        == 100
