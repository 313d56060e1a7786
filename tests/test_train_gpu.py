"""benchmarks/training/train_gpu.py: its PyTorch model is tfformer's model, and the benchmark runs
end to end at tiny size on CPU (the GPU run is in benchmarks/results/train_gpu.json when there
is one)."""

import importlib
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.benchmark_script import load_benchmark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "training", "train_gpu.py")


def require(module: str):
    """Imports `module`; in CI (CI set) a missing one fails the test instead of skipping it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"{module} is required in CI (pip install -e '.[test,torch]')")
        pytest.skip(f"{module} is not installed")


def matmul_flops(config, batch, source_length, target_length):
    """Training FLOPs of one step from every matmul's [m, k] x [k, n] (2mkn), forward x 3."""
    b, s, t, d, h = batch, source_length, target_length, config.d_model, config.num_heads
    d_k, f, v = d // h, config.d_ff, config.vocab_size
    encoder = [(b * s, d, d)] * 4 + [(b * s, d, f), (b * s, f, d)] + [(s, d_k, s)] * (b * h) \
        + [(s, s, d_k)] * (b * h)
    decoder = ([(b * t, d, d)] * 4 + [(t, d_k, t)] * (b * h) + [(t, t, d_k)] * (b * h)  # self
               + [(b * t, d, d)] * 2 + [(b * s, d, d)] * 2  # cross: Q, O; K, V
               + [(t, d_k, s)] * (b * h) + [(t, s, d_k)] * (b * h)
               + [(b * t, d, f), (b * t, f, d)])
    output = [(b * t, d, v)]
    matmuls = (encoder * config.num_encoder_layers + decoder * config.num_decoder_layers
               + output)
    return 3 * sum(2 * m * k * n for m, k, n in matmuls)


def param_count(config):
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    attention = 4 * (d * d + d)
    feed_forward = d * f + f + f * d + d
    return (v * d + config.num_encoder_layers * (attention + feed_forward + 2 * 2 * d)
            + config.num_decoder_layers * (2 * attention + feed_forward + 3 * 2 * d))


def copy_tfformer_weights(keras_model, torch_model, config):
    """Copies tfformer's weights (by their saved paths) into the PyTorch model."""
    import keras
    import torch

    d = config.d_model
    values = {w.path.split("/", 1)[1]: keras.ops.convert_to_numpy(w) for w in keras_model.weights}
    used, targets = set(), {}

    def take(path):
        used.add(path)
        return values[path]

    def kernel(path):  # [d_in, h, d_k] / [h, d_k, d_out] / [d_in, d_out] -> torch [out, in]
        value = take(path)
        return value.reshape(d, -1).T if value.ndim == 3 and value.shape[0] == d else \
            value.reshape(-1, value.shape[-1]).T

    def bias(path):
        return take(path).reshape(-1)

    targets["embedding.weight"] = take("embedding/embeddings")
    for stack, layers in (("encoder", config.num_encoder_layers),
                          ("decoder", config.num_decoder_layers)):
        for i in range(layers):
            source, target = f"{stack}/layer_{i}", f"{stack}.{i}"
            attentions = ["self_attention"] + (["cross_attention"] if stack == "decoder" else [])
            for name in attentions:
                a = f"{source}/{name}"
                parts = [(kernel(f"{a}/{p}_kernel"), bias(f"{a}/{p}_bias"))
                         for p in ("query", "key", "value")]
                if name == "self_attention":
                    targets[f"{target}.{name}.qkv.weight"] = np.concatenate(
                        [k for k, _ in parts])
                    targets[f"{target}.{name}.qkv.bias"] = np.concatenate([b for _, b in parts])
                else:
                    targets[f"{target}.{name}.query.weight"], \
                        targets[f"{target}.{name}.query.bias"] = parts[0]
                    targets[f"{target}.{name}.key_value.weight"] = np.concatenate(
                        [parts[1][0], parts[2][0]])
                    targets[f"{target}.{name}.key_value.bias"] = np.concatenate(
                        [parts[1][1], parts[2][1]])
                targets[f"{target}.{name}.output.weight"] = kernel(f"{a}/output_kernel")
                targets[f"{target}.{name}.output.bias"] = bias(f"{a}/output_bias")
            for dense in ("inner", "outer"):
                targets[f"{target}.feed_forward.{dense}.weight"] = take(
                    f"{source}/feed_forward/{dense}/kernel").T
                targets[f"{target}.feed_forward.{dense}.bias"] = take(
                    f"{source}/feed_forward/{dense}/bias")
            connections = (["attention", "feed_forward"] if stack == "encoder" else
                           ["self_attention", "cross_attention", "feed_forward"])
            for name in connections:
                for keras_name, torch_name in (("gamma", "weight"), ("beta", "bias")):
                    targets[f"{target}.{name}_norm.{torch_name}"] = take(
                        f"{source}/{name}_connection/layer_norm/{keras_name}")
    assert used == set(values), f"tfformer weights not copied: {sorted(set(values) - used)}"
    parameters = dict(torch_model.named_parameters())
    assert set(targets) == set(parameters), set(targets) ^ set(parameters)
    with torch.no_grad():
        for name, value in targets.items():
            assert tuple(parameters[name].shape) == value.shape, name
            parameters[name].copy_(torch.from_numpy(np.ascontiguousarray(value)))


def test_torch_model_matches_tfformer_numerically():
    torch = require("torch")
    from tfformer.config import TransformerConfig
    from tfformer.model.losses import MaskedLabelSmoothedCrossEntropy
    from tfformer.model.transformer import Transformer

    benchmark = load_benchmark("train_gpu")
    config = TransformerConfig(vocab_size=50, d_model=32, num_heads=4, d_ff=64,
                               num_encoder_layers=2, num_decoder_layers=2, max_length=64,
                               dropout=0.0)
    rng = np.random.default_rng(0)
    source = rng.integers(4, 50, (3, 9)).astype("int32")
    target_in = rng.integers(4, 50, (3, 7)).astype("int32")
    target_in[:, 0] = 2  # BOS
    source[1, 5:], target_in[1, 4:] = 0, 0  # pads: masked keys in all three attentions
    source[2, 8:], target_in[2, 6:] = 0, 0
    labels = rng.integers(4, 50, (3, 7)).astype("int32")
    labels[1, 4:], labels[2, 6:] = 0, 0

    ours = Transformer(config)
    ours.build()
    expected = np.array(ours((source, target_in), training=False))
    model = benchmark.make_torch_transformer(config).eval()
    assert sum(p.numel() for p in model.parameters()) == ours.count_params() \
        == param_count(config)
    copy_tfformer_weights(ours, model, config)
    with torch.no_grad():
        logits = model(torch.from_numpy(source), torch.from_numpy(target_in))
    assert logits.dtype == torch.float32 and logits.shape == (3, 7, 50)
    np.testing.assert_allclose(logits.numpy(), expected, rtol=1e-5, atol=1e-5)

    # The same objective: label smoothing 0.1 over all V classes, mean over non-PAD labels.
    expected_loss = float(MaskedLabelSmoothedCrossEntropy(0.1)(labels, expected))
    loss = benchmark.torch_loss(torch.from_numpy(expected), torch.from_numpy(labels), 0.1)
    assert float(loss) == pytest.approx(expected_loss, rel=1e-5)

    # Without PAD masks (is_causal): the same function on PAD-free ids.
    fast = benchmark.make_torch_transformer(config, pad_masks=False).eval()
    fast.load_state_dict(model.state_dict())
    with torch.no_grad():
        np.testing.assert_allclose(fast(torch.from_numpy(source[:1]),
                                        torch.from_numpy(target_in[:1])).numpy(),
                                   expected[:1], rtol=1e-5, atol=1e-5)


def test_flops_formula_counts_every_matmul():
    benchmark = load_benchmark("train_gpu")
    for preset in ("tiny", "base", "big"):
        config = benchmark.model_config(preset, 32000, 64)
        for batch, length in ((384, 64), (8, 16)):
            assert benchmark.train_flops_per_step(config, batch, length, length) == \
                matmul_flops(config, batch, length, length)
    config = benchmark.model_config("base", 32000, 64)
    assert benchmark.train_flops_per_step(config, 2, 5, 7) == matmul_flops(config, 2, 5, 7)
    # Dominated by 6 * params * target tokens (the usual estimate), within attention's share.
    estimate = 6 * param_count(config) * 384 * 64
    assert 0.9 < benchmark.train_flops_per_step(config, 384, 64, 64) / estimate < 1.3


def test_failed_contender_is_recorded_and_exits_nonzero(tmp_path):
    out = tmp_path / "result.json"
    result = subprocess.run(
        [sys.executable, SCRIPT, "--preset", "tiny", "--vocab", "100", "--batch", "2",
         "--length", "4", "--steps", "1", "--warmup", "1", "--contenders", "torch",
         "--no-compile", "--worker-timeout", "0.1", "--out", str(out)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report == json.loads(out.read_text())
    assert report["failed"] == ["torch"]
    assert report["contenders"]["torch"]["error"].startswith("timed out after")


@pytest.mark.slow
def test_benchmark_runs_every_contender_at_tiny_size(tmp_path):
    require("torch")
    require("jax")
    out = tmp_path / "results" / "train_gpu.json"
    batch, length, vocab = 8, 16, 1000
    result = subprocess.run(
        [sys.executable, SCRIPT, "--preset", "tiny", "--vocab", str(vocab), "--batch",
         str(batch), "--length", str(length), "--steps", "2", "--warmup", "1",
         "--pipelined-steps", "3",
         # A small peak matmul: without AVX512_BF16 or AMX, torch's CPU bf16 matmul of the
         # default 1024 runs at ~1 GFLOP/s (3 s each, 61 per contender).
         "--matmul-size", "128",
         "--contenders", "keras-jax,torch,keras-torch", "--no-compile", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-5000:]
    report = json.loads(result.stdout)
    assert report == json.loads(out.read_text())
    assert report["failed"] == []

    benchmark = load_benchmark("train_gpu")
    config = benchmark.model_config("tiny", vocab, length)
    flops = matmul_flops(config, batch, length, length)
    assert report["flops_per_step"] == flops
    contenders = report["contenders"]
    assert set(contenders) == {"keras-jax", "torch", "keras-torch"}
    for name, run in contenders.items():
        assert "error" not in run, (name, run.get("error"))
        # Random ids over V classes: the label-smoothed loss starts near log V.
        assert math.isfinite(run["final_loss"]) and 0.5 * math.log(vocab) < run["final_loss"] \
            < 2 * math.log(vocab), name
        assert run["timed_steps"] == 2 and run["warmup_steps"] == 1
        times = run["step_time_s"]
        assert 0 < times["min"] <= times["median"] <= times["max"]
        pipelined = run["pipelined"]
        assert pipelined["steps"] == 3 and pipelined["seconds"] > 0
        assert pipelined["step_time_s"] == pytest.approx(pipelined["seconds"] / 3)
        assert run["target_tokens_per_s"] == pytest.approx(
            batch * length / pipelined["step_time_s"])
        assert run["flops_per_step"] == flops
        assert run["achieved_flops_per_s"] == pytest.approx(flops / pipelined["step_time_s"])
        peak = run["matmul_peak"]
        assert peak["n"] == 128 and peak["dtype"] == "bfloat16"
        assert peak["flops_per_s"] == pytest.approx(2 * 128 ** 3 / peak["seconds_per_matmul"])
        assert run["mfu"] == pytest.approx(run["achieved_flops_per_s"] / peak["flops_per_s"])
        assert run["peak_memory"]["bytes"] > 0 and run["peak_memory"]["kind"]
        assert run["device"] == "cpu" and run["device_name"]
        assert run["params"] == param_count(config), name
    assert contenders["keras-jax"]["params"] == contenders["torch"]["params"]

    jax_run = contenders["keras-jax"]
    assert jax_run["keras_backend"] == "jax" and jax_run["versions"]["jax"]
    assert jax_run["compilations"]["count"] >= 1
    assert jax_run["compilations"]["in_timed_steps"] == 0  # fixed shapes: no recompilation
    assert contenders["keras-torch"]["keras_backend"] == "torch"
    torch_run = contenders["torch"]
    assert torch_run["torch_compile"] is False and torch_run["compilations"]["count"] == 0
    assert torch_run["optimizer"].startswith("Adam(")

    comparison = report["comparison"]
    assert comparison["keras-jax_vs_torch_tokens_per_s"] == pytest.approx(
        jax_run["target_tokens_per_s"] / torch_run["target_tokens_per_s"])
    assert comparison["mfu"] == {name: run["mfu"] for name, run in contenders.items()}
    assert comparison["targets"]["keras_jax_mfu_at_least"] == 0.45
    assert "keras_jax_mfu_met" not in comparison["targets"]  # only for the big preset
