"""Training throughput on one GPU: tfformer on Keras/JAX (and Keras/PyTorch) against a plain
PyTorch implementation of the same Transformer, in bf16 mixed precision, in one command.

    # GPU machine (no TensorFlow, no Keras, no network): wheels from
    # benchmarks/training/gpu_wheels.sh
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && \
        python3 benchmarks/training/train_gpu.py --preset big --out $OUT/train_gpu.json
    # CPU, tiny (what tests/test_train_gpu.py runs)
    .venv/bin/python benchmarks/training/train_gpu.py --preset tiny --vocab 1000 --batch 8 \
        --length 16 \
        --steps 2 --warmup 1 --out /tmp/train_gpu.json

Contenders (`--contenders`, default all three), each training the same encoder-decoder model
(post-LN, sinusoidal positions, one embedding matrix for source, target and the pre-softmax
projection scaled by sqrt(d_model), label smoothing 0.1, Adam(0.9, 0.98, 1e-9) with the paper's
schedule, the preset's dropout) on fixed-shape [batch, length] batches of random token ids
(no PAD: every position is a real token) in bf16 mixed precision:
    keras-jax    tfformer's `Transformer` + `compile_transformer` (its loss, accuracy and
                 perplexity metrics) with KERAS_BACKEND=jax, policy mixed_bfloat16, `model.fit`
                 on a Python generator of numpy batches (no tf.data).
    keras-torch  the same with KERAS_BACKEND=torch (Keras' default for it: no torch.compile).
    torch        `TorchTransformer` below: plain PyTorch written to be fast: SDPA attention,
                 fused QKV projections, bf16 autocast, torch.compile (`--no-compile`: eager),
                 fused Adam where the device supports it, F.cross_entropy(ignore_index=PAD,
                 label_smoothing=0.1). Same parameters as tfformer's model: biases on every
                 projection, LayerNorm eps 1e-6, the shared embedding. Pads are masked as in
                 tfformer (an additive mask, so SDPA cannot use its Flash kernel);
                 `--torch-no-pad-mask` drops the pad masks and uses is_causal (Flash), which
                 computes the same function on these PAD-free batches.

Each contender runs in its own child process (`--worker NAME`, started one after the other by
this script): Keras' backend is fixed per process at import, JAX preallocates most of the GPU
memory, and peak-memory counters are per process. A child that fails (or exceeds
`--worker-timeout`) is recorded as {"error": ...} and the others still run; the exit status is
1 if any requested contender failed. The JSON (stdout and `--out`, rewritten after every
contender) holds per contender:
    target_tokens_per_s   batch * length / step time of the pipelined window (below).
    pipelined             `--pipelined-steps` more steps after the timed ones, dispatched as a
                          training loop does, without waiting for the device between steps; the
                          window ends when the device has finished the last one. Its
                          step_time_s (window / steps) is the throughput a run gets.
    step_time_s           median, min, max, mean of the timed steps (after `--warmup` steps,
                          which include compilation), each ending with the device work finished
                          (block_until_ready / cuda.synchronize): the host's time between steps
                          shows here as idle device time. first_step_s apart.
    peak_memory           bytes and kind: JAX device peak_bytes_in_use, torch
                          max_memory_allocated, or on CPU the process peak RSS.
    compilations          JAX: backend compilations (event BACKEND_COMPILE_EVENT of jax's
                          dispatch) during the run, and of `train_step` after the warm-up
                          steps (in_timed_steps); torch: Dynamo's unique graphs.
    flops_per_step        the analytic model FLOPs (below), achieved_flops_per_s, and mfu =
                          achieved / matmul_peak, a bf16 n x n matmul (8192 on GPU, 1024 on CPU)
                          timed in the same child with the same framework.
    params, final_loss (mean training loss over all steps, as Keras logs it), device, versions.
The parent adds keras-jax vs torch tokens/s and the issue's targets (preset big: keras-jax MFU
>= 45% of the measured bf16 matmul peak, and >= 1.0x the PyTorch implementation's tokens/s).

FLOPs per training step: 3 x the forward matmul FLOPs (backward = 2 x forward), 2 FLOPs per
multiply-add, with B = batch, S = source length, T = target length, d = d_model, f = d_ff,
V = vocab, N_e / N_d layers; attention over all T x T (causal) and T x S positions, as computed:
    encoder layer   2BS(4d^2 + 2df) + 4BS^2 d          Q,K,V,O projections, FFN; QK^T and AV
    decoder layer   2BT(4d^2 + 2df) + 4BT^2 d          self-attention, FFN
                    + 2BT(2d^2) + 2BS(2d^2) + 4BTS d   cross: Q,O on T; K,V on S; QK^T and AV
    output          2BTdV                              tied pre-softmax projection
    per step        3 (N_e encoder + N_d decoder + output)
Embedding lookups, softmax, LayerNorm, the loss and the optimizer update are not counted.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))  # common
from common import cpu_model  # noqa: E402

CONTENDERS = ("keras-jax", "keras-torch", "torch")
DEFAULT_CONTENDERS = "keras-jax,torch,keras-torch"  # the slowest-to-fail one last
PAD_ID = 0
FIRST_WORD_ID = 4  # after PAD, UNK, BOS, EOS (tfformer.special_tokens)
FLOPS_FORMULA = ("3 * (N_e * [2BS(4d^2 + 2df) + 4BS^2 d] + N_d * [2BT(4d^2 + 2df) + 4BT^2 d "
                 "+ 2BT(2d^2) + 2BS(2d^2) + 4BTSd] + 2BTdV)")
# The targets, for the big preset on the GPU.
TARGET_MFU = 0.45
TARGET_VS_TORCH = 1.0


# ----------------------------------------------------------------------------- shared helpers

def model_config(preset: str, vocab: int, length: int):
    """tfformer's preset with the benchmark's vocabulary (`tfformer.config` imports no Keras, so
    the parent and the torch worker leave Keras' backend alone)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from tfformer.config import get_preset

    base = get_preset(preset)
    return get_preset(preset, vocab_size=vocab, max_length=max(base.max_length, length))


def train_flops_per_step(config, batch: int, source_length: int, target_length: int) -> int:
    """Model FLOPs of one training step (see the module docstring)."""
    b, s, t = batch, source_length, target_length
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    encoder_layer = 2 * b * s * (4 * d * d + 2 * d * f) + 4 * b * s * s * d
    decoder_layer = (2 * b * t * (4 * d * d + 2 * d * f) + 4 * b * t * t * d
                     + 2 * b * t * 2 * d * d + 2 * b * s * 2 * d * d + 4 * b * t * s * d)
    output = 2 * b * t * d * v
    return 3 * (config.num_encoder_layers * encoder_layer
                + config.num_decoder_layers * decoder_layer + output)


def random_batches(config, batch: int, length: int, seed: int, count: int = 4):
    """`count` fixed-shape batches ((source, target_in), target_out) of int32 ids, no PAD."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [tuple(rng.integers(FIRST_WORD_ID, config.vocab_size, (3, batch, length),
                               dtype=np.int32)) for _ in range(count)]


def step_statistics(step_ends: list[float], start: float, warmup: int) -> dict:
    """Per-step wall times from the times each step finished (device work included)."""
    times = [end - previous for previous, end in zip([start] + step_ends[:-1], step_ends)]
    timed = times[warmup:]
    if not timed:
        raise ValueError(f"no timed steps: {len(times)} steps, {warmup} of them warm-up")
    return {"first_step_s": times[0], "timed_steps": len(timed), "warmup_steps": warmup,
            "step_time_s": {"median": statistics.median(timed), "min": min(timed),
                            "max": max(timed), "mean": statistics.fmean(timed)}}


def process_peak_rss() -> dict:
    # ru_maxrss is in KiB on Linux.
    return {"bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "kind": "process peak RSS (resource.getrusage ru_maxrss)"}


def time_matmuls(run, sync, n: int, iterations: int, repeats: int = 3) -> dict:
    """Best per-matmul time of `iterations` back-to-back n x n bf16 matmuls (after a warm-up)."""
    sync(run())
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        outputs = [run() for _ in range(iterations)]
        sync(outputs)
        best = min(best, (time.perf_counter() - start) / iterations)
    return {"flops_per_s": 2 * n ** 3 / best, "n": n, "dtype": "bfloat16",
            "seconds_per_matmul": best, "iterations": iterations}


def pipelined_window(window_start: float, window_end: float, steps: int) -> dict:
    """The pipelined steps' report: their wall time from the end of the synchronized steps to the
    device's end of the last one."""
    if steps < 1:
        raise ValueError(f"no pipelined steps: {steps}")
    return {"steps": steps, "seconds": window_end - window_start,
            "step_time_s": (window_end - window_start) / steps}


def finish_report(report: dict, args, config, params: int) -> dict:
    """Adds throughput (from the pipelined window), FLOPs and MFU to a worker's report."""
    tokens = args.batch * args.length
    median = report["pipelined"]["step_time_s"]
    flops = train_flops_per_step(config, args.batch, args.length, args.length)
    report.update(
        params=params, batch=args.batch, source_length=args.length, target_length=args.length,
        target_tokens_per_step=tokens, target_tokens_per_s=tokens / median,
        flops_per_step=flops, achieved_flops_per_s=flops / median)
    report["mfu"] = report["achieved_flops_per_s"] / report["matmul_peak"]["flops_per_s"]
    return report


# ----------------------------------------------------------------------------- PyTorch model

def make_torch_transformer(config, pad_masks: bool = True):
    """The Transformer of tfformer's `config` in plain PyTorch (see the module docstring).

    forward(source_ids, target_in_ids) -> logits [batch, T, vocab] (in the autocast dtype).
    Weights: `embedding.weight` [V, d] (source, target and output); per attention `qkv`
    (self) or `query` + `key_value` (cross), and `output`, all nn.Linear with bias; per FFN
    `inner`, `outer`; one LayerNorm per sub-layer connection (post-LN).
    """
    import torch
    import torch.nn.functional as F
    from torch import nn

    d, h = config.d_model, config.num_heads
    d_k = d // h

    def glorot(linear: nn.Linear, parts: int = 1) -> nn.Linear:
        # Keras' glorot_uniform per projection (a fused QKV weight holds `parts` of them).
        for chunk in linear.weight.data.chunk(parts, dim=0):
            nn.init.xavier_uniform_(chunk)
        nn.init.zeros_(linear.bias)
        return linear

    class Attention(nn.Module):
        def __init__(self, cross: bool):
            super().__init__()
            if cross:
                self.query = glorot(nn.Linear(d, d))
                self.key_value = glorot(nn.Linear(d, 2 * d), 2)
            else:
                self.qkv = glorot(nn.Linear(d, 3 * d), 3)
            self.output = glorot(nn.Linear(d, d))
            self.dropout = config.attention_dropout

        def forward(self, x, memory=None, mask=None, is_causal=False):
            batch, length = x.shape[0], x.shape[1]
            if memory is None:
                q, k, v = self.qkv(x).view(batch, length, 3, h, d_k).permute(2, 0, 3, 1, 4)
            else:
                q = self.query(x).view(batch, length, h, d_k).transpose(1, 2)
                k, v = self.key_value(memory).view(batch, memory.shape[1], 2, h, d_k).permute(
                    2, 0, 3, 1, 4)
            if mask is not None:  # boolean, True = attend -> additive, finite like tfformer's
                mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(
                    ~mask, -1e9)
            context = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=is_causal,
                dropout_p=self.dropout if self.training else 0.0)
            return self.output(context.transpose(1, 2).reshape(batch, length, d))

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = glorot(nn.Linear(d, config.d_ff))
            self.outer = glorot(nn.Linear(config.d_ff, d))

        def forward(self, x):
            return self.outer(F.relu(self.inner(x)))

    def norm():
        return nn.LayerNorm(d, eps=config.layer_norm_epsilon)

    class EncoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attention, self.feed_forward = Attention(False), FeedForward()
            self.attention_norm, self.feed_forward_norm = norm(), norm()
            self.dropout = nn.Dropout(config.dropout)

        def forward(self, x, mask):
            x = self.attention_norm(x + self.dropout(self.self_attention(x, mask=mask)))
            return self.feed_forward_norm(x + self.dropout(self.feed_forward(x)))

    class DecoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attention, self.cross_attention = Attention(False), Attention(True)
            self.feed_forward = FeedForward()
            self.self_attention_norm, self.cross_attention_norm, self.feed_forward_norm = (
                norm(), norm(), norm())
            self.dropout = nn.Dropout(config.dropout)

        def forward(self, x, memory, self_mask, cross_mask):
            y = self.self_attention(x, mask=self_mask, is_causal=self_mask is None)
            x = self.self_attention_norm(x + self.dropout(y))
            y = self.cross_attention(x, memory, mask=cross_mask)
            x = self.cross_attention_norm(x + self.dropout(y))
            return self.feed_forward_norm(x + self.dropout(self.feed_forward(x)))

    def sinusoids(length: int) -> torch.Tensor:
        column = torch.arange(d)
        inverse_freq = 1.0 / torch.pow(10000.0, (2 * (column // 2)).double() / d)
        angles = torch.arange(length).double()[:, None] * inverse_freq[None, :]
        return torch.where(column % 2 == 0, torch.sin(angles), torch.cos(angles)).float()

    class TorchTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.config, self.pad_masks = config, pad_masks
            self.embedding = nn.Embedding(config.vocab_size, d)
            nn.init.normal_(self.embedding.weight, std=d ** -0.5)
            self.register_buffer("positions", sinusoids(config.max_length), persistent=False)
            self.embedding_dropout = nn.Dropout(config.dropout)
            self.encoder = nn.ModuleList(
                EncoderLayer() for _ in range(config.num_encoder_layers))
            self.decoder = nn.ModuleList(
                DecoderLayer() for _ in range(config.num_decoder_layers))

        def embed(self, ids):
            x = self.embedding(ids) * math.sqrt(d) + self.positions[:ids.shape[1]]
            return self.embedding_dropout(x)

        def forward(self, source_ids, target_ids):
            source_mask = self_mask = None
            if self.pad_masks:
                source_mask = (source_ids != PAD_ID)[:, None, None, :]  # [B, 1, 1, S]
                length = target_ids.shape[1]
                causal = torch.ones(length, length, dtype=torch.bool,
                                    device=target_ids.device).tril()
                self_mask = causal & (target_ids != PAD_ID)[:, None, None, :]  # [B, 1, T, T]
            x = self.embed(source_ids)
            for layer in self.encoder:
                x = layer(x, source_mask)
            y = self.embed(target_ids)
            for layer in self.decoder:
                y = layer(y, x, self_mask, source_mask)
            return F.linear(y, self.embedding.weight)  # tied pre-softmax projection

    return TorchTransformer()


def torch_loss(logits, labels, label_smoothing: float = 0.1):
    """Label-smoothed cross-entropy averaged over non-PAD labels, in float32."""
    import torch.nn.functional as F

    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1).long(),
                           ignore_index=PAD_ID, label_smoothing=label_smoothing)


def noam(step: int, d_model: int, warmup: int) -> float:
    """The paper's learning rate at update `step` (from 1), eq. 3."""
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


# ----------------------------------------------------------------------------- workers

def torch_environment(torch) -> dict:
    cuda = torch.cuda.is_available()
    return {"device": "cuda" if cuda else "cpu",
            "device_name": torch.cuda.get_device_name(0) if cuda else cpu_model(),
            "versions": {"torch": torch.__version__, "cuda": torch.version.cuda,
                         "python": platform.python_version()}}


def torch_matmul_peak(torch, device: str, n: int, iterations: int) -> dict:
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)

    def sync(_):
        if device == "cuda":
            torch.cuda.synchronize()

    return {**time_matmuls(lambda: a @ b, sync, n, iterations), "framework": "torch"}


def torch_peak_memory(torch, device: str) -> dict:
    if device == "cuda":
        return {"bytes": torch.cuda.max_memory_allocated(),
                "kind": "torch.cuda.max_memory_allocated"}
    return process_peak_rss()


def dynamo_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def run_torch(args, config) -> dict:
    import torch

    env = torch_environment(torch)
    device = env["device"]
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")
    model = make_torch_transformer(config, pad_masks=not args.torch_no_pad_mask).to(device)
    model.train()
    params = sum(p.numel() for p in model.parameters())

    class WithLoss(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, source, target_in, target_out):
            with torch.autocast(device, dtype=torch.bfloat16):
                logits = self.inner(source, target_in)
            return torch_loss(logits, target_out, 0.1)

    step = WithLoss(model)
    if args.compile:
        step = torch.compile(step, mode=args.torch_compile_mode, dynamic=False)
    notes = []
    adam = dict(lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    try:  # a probe step: some devices refuse fused Adam only when it steps
        probe = torch.zeros(1, device=device, requires_grad=True)
        probe.grad = torch.ones_like(probe)
        torch.optim.Adam([probe], fused=True, **adam).step()
        optimizer = torch.optim.Adam(model.parameters(), fused=True, **adam)
        optimizer_kind = "Adam(fused=True)"
    except (RuntimeError, ValueError) as error:
        optimizer = torch.optim.Adam(model.parameters(), foreach=True, **adam)
        optimizer_kind = "Adam(foreach=True)"
        notes.append(f"fused Adam unsupported on {device}: {error}")
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda done: noam(done + 1, config.d_model, args.lr_warmup))
    batches = [tuple(torch.from_numpy(a).to(device) for a in batch)
               for batch in random_batches(config, args.batch, args.length, args.seed)]

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    losses, step_ends = [], []
    graphs_after_warmup = None
    sync()
    start = time.perf_counter()
    synchronized = args.warmup + args.steps
    total = synchronized + args.pipelined_steps
    for i in range(total):
        loss = step(*batches[i % len(batches)])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        losses.append(loss.detach())
        if i < synchronized or i + 1 == total:
            sync()
            step_ends.append(time.perf_counter())
        if i + 1 == args.warmup and args.compile:
            graphs_after_warmup = dynamo_graphs()
    losses = [float(loss) for loss in losses]
    report = step_statistics(step_ends[:synchronized], start, args.warmup)
    report["pipelined"] = pipelined_window(step_ends[synchronized - 1], step_ends[-1],
                                           args.pipelined_steps)
    report["peak_memory"] = torch_peak_memory(torch, device)
    graphs = dynamo_graphs() if args.compile else 0
    report.update(env, framework="torch", final_loss=statistics.fmean(losses),
                  last_loss=losses[-1], optimizer=optimizer_kind,
                  torch_compile=({"mode": args.torch_compile_mode} if args.compile else False),
                  attention=("SDPA, additive PAD masks" if not args.torch_no_pad_mask
                             else "SDPA, is_causal, no PAD masks"),
                  compilations={"count": graphs, "kind": "torch._dynamo unique_graphs",
                                "in_timed_steps": (graphs - graphs_after_warmup
                                                   if graphs_after_warmup is not None else 0)},
                  notes=notes)
    report["matmul_peak"] = torch_matmul_peak(torch, device, args.matmul_size or (
        8192 if device == "cuda" else 1024), args.matmul_iterations)
    return finish_report(report, args, config, params)


class FirstImport:
    """Records where `name` is first imported from (or tried: it may not be installed)."""

    def __init__(self, name: str):
        self.name, self.by = name, None
        sys.meta_path.insert(0, self)

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name and self.by is None:
            frames = [f"{os.path.relpath(f.filename, ROOT)}:{f.lineno}"
                      for f in traceback.extract_stack()[:-1]
                      if "importlib" not in f.filename and "module_utils" not in f.filename]
            self.by = " <- ".join(reversed(frames[-3:]))
        return None  # the regular finders import it

    def report(self) -> dict:
        return {"imported": self.name in sys.modules, "first_import_from": self.by}


class JaxCompilations:
    """Counts XLA backend compilations (jax.monitoring's backend-compile duration event)."""

    def __init__(self):
        import jax
        try:
            from jax._src.dispatch import BACKEND_COMPILE_EVENT as event
        except ImportError:  # moved: match any backend-compile duration event
            event = None
        self.event = event
        self.functions = collections.Counter()
        self.events = collections.Counter()  # every compile-related event, for diagnosis
        jax.monitoring.register_event_duration_secs_listener(self)

    def __call__(self, event, duration, **kwargs):
        if "compil" in event:
            self.events[event] += 1
        if event == self.event or (self.event is None and "backend_compile" in event):
            self.functions[str(kwargs.get("fun_name", "?"))] += 1

    @property
    def count(self) -> int:
        return sum(self.functions.values())

    @property
    def train_steps(self) -> int:
        """Compilations of the training step itself (a new shape or a retrace)."""
        return self.functions["jit(train_step)"]


def keras_environment(keras, backend: str) -> dict:
    versions = {"keras": keras.__version__, "python": platform.python_version()}
    if backend == "jax":
        import jax
        import jaxlib

        device = jax.devices()[0]
        versions.update(jax=jax.__version__, jaxlib=jaxlib.__version__)
        return {"device": device.platform, "device_name": (
            device.device_kind if device.platform != "cpu" else cpu_model()), "versions": versions}
    import torch

    env = torch_environment(torch)
    env["versions"].update(versions)
    return env


def run_keras(args, config, backend: str) -> dict:
    if os.environ.get("KERAS_BACKEND") != backend:
        raise RuntimeError(f"KERAS_BACKEND must be {backend!r} before keras is imported")
    tensorflow = FirstImport("tensorflow")
    compilations = JaxCompilations() if backend == "jax" else None
    import keras

    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from tfformer.model.compile_transformer import compile_transformer
    from tfformer.model.transformer import Transformer

    env = keras_environment(keras, backend)
    keras.utils.set_random_seed(args.seed)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = compile_transformer(Transformer(config.to_dict()), warmup_steps=args.lr_warmup)
    batches = random_batches(config, args.batch, args.length, args.seed)

    def generator():
        for i in range(args.warmup + args.steps + args.pipelined_steps):
            source, target_in, target_out = batches[i % len(batches)]
            yield (source, target_in), target_out

    if backend == "jax":
        import jax

        def sync(logs):
            jax.block_until_ready(logs)
    else:
        import torch

        def sync(logs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()

    class StepTimer(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.step_ends, self.compiled_after_warmup = [], None
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            sync(logs)
            self.step_ends.append(time.perf_counter())
            self.loss = float(logs["loss"])
            if len(self.step_ends) == args.warmup and compilations is not None:
                self.compiled_after_warmup = compilations.train_steps

    class WindowTimer(keras.callbacks.Callback):
        """Times a whole fit() without waiting between steps: a callback with a batch hook
        that is not `async_safe` makes Keras wait for every step's logs."""

        async_safe = True

        def on_train_begin(self, logs=None):
            self.start = time.perf_counter()  # the device is idle: the last fit() waited

        def on_train_end(self, logs=None):
            sync(logs)  # Keras has read the last step's logs: the device has finished
            self.end = time.perf_counter()
            if compilations is not None:
                self.compiled, self.train_steps = compilations.count, compilations.train_steps

    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
    timer = StepTimer()
    batches_left = generator()
    model.fit(batches_left, steps_per_epoch=args.warmup + args.steps, epochs=1, verbose=0,
              callbacks=[timer])
    report = step_statistics(timer.step_ends, timer.start, args.warmup)
    window = WindowTimer()
    model.fit(batches_left, steps_per_epoch=args.pipelined_steps, epochs=1, verbose=0,
              callbacks=[window])
    report["pipelined"] = pipelined_window(window.start, window.end, args.pipelined_steps)
    report.update(env, framework="keras", keras_backend=backend, final_loss=timer.loss,
                  jit_compile=model.jit_compile,
                  tensorflow=tensorflow.report(),
                  metrics=[m.name for m in model.metrics])
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        stats = jax.local_devices()[0].memory_stats() or {}
        report["peak_memory"] = ({"bytes": stats["peak_bytes_in_use"],
                                  "kind": "jax memory_stats peak_bytes_in_use"}
                                 if "peak_bytes_in_use" in stats else process_peak_rss())
        report["compilations"] = {
            "count": window.compiled,
            "kind": f"jax backend compilations ({compilations.event or 'backend_compile'})",
            "in_timed_steps": window.train_steps - timer.compiled_after_warmup,
            "functions": dict(compilations.functions.most_common(10)),
            "events": dict(compilations.events)}
        n = args.matmul_size or (8192 if report["device"] != "cpu" else 1024)
        key_a, key_b = jax.random.split(jax.random.key(args.seed))
        a = jax.random.normal(key_a, (n, n), jnp.bfloat16)
        b = jax.random.normal(key_b, (n, n), jnp.bfloat16)
        matmul = jax.jit(jnp.matmul)
        report["matmul_peak"] = {**time_matmuls(lambda: matmul(a, b), jax.block_until_ready, n,
                                                args.matmul_iterations), "framework": "jax"}
    else:
        import torch

        report["peak_memory"] = torch_peak_memory(torch, report["device"])
        report["compilations"] = {"count": dynamo_graphs(),
                                  "kind": "torch._dynamo unique_graphs"}
        report["matmul_peak"] = torch_matmul_peak(torch, report["device"], args.matmul_size or (
            8192 if report["device"] == "cuda" else 1024), args.matmul_iterations)
    return finish_report(report, args, config, model.count_params())


def worker(args) -> int:
    """Runs one contender and writes its report (or {"error": ...}) to `args.result`."""
    start = time.perf_counter()
    try:
        config = model_config(args.preset, args.vocab, args.length)
        if args.worker == "torch":
            report = run_torch(args, config)
        else:
            report = run_keras(args, config, args.worker.split("-")[1])
        status = 0
    except BaseException as error:  # noqa: BLE001 (recorded, and the parent goes on)
        traceback.print_exc()
        report = {"error": f"{type(error).__name__}: {error}"[:2000],
                  "traceback": traceback.format_exc()[-4000:]}
        status = 1
    report["wall_s"] = time.perf_counter() - start
    with open(args.result, "w") as f:
        json.dump(report, f, indent=1, default=str)
    return status


# ----------------------------------------------------------------------------- parent

def worker_argv(args, name: str, result: str) -> list[str]:
    argv = [sys.executable, os.path.abspath(__file__), "--worker", name, "--result", result,
            "--preset", args.preset, "--vocab", str(args.vocab), "--batch", str(args.batch),
            "--length", str(args.length), "--steps", str(args.steps), "--pipelined-steps",
            str(args.pipelined_steps), "--warmup",
            str(args.warmup), "--seed", str(args.seed), "--lr-warmup", str(args.lr_warmup),
            "--matmul-size", str(args.matmul_size), "--matmul-iterations",
            str(args.matmul_iterations), "--torch-compile-mode", args.torch_compile_mode]
    if not args.compile:
        argv.append("--no-compile")
    if args.torch_no_pad_mask:
        argv.append("--torch-no-pad-mask")
    return argv


def run_child(argv: list[str], env: dict, timeout: float) -> tuple[int | None, str]:
    """Runs a worker (its stdout and stderr go to our stderr); returns (exit status or None on
    timeout, the last lines of its stderr)."""
    process = subprocess.Popen(argv, env=env, stdout=sys.stderr, stderr=subprocess.PIPE,
                               text=True, errors="replace", start_new_session=True)
    tail = collections.deque(maxlen=40)

    def pump():
        for line in process.stderr:
            sys.stderr.write(line)
            tail.append(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        status = process.wait(timeout=timeout if timeout > 0 else None)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the worker's own process group
        process.wait()
        status = None
    reader.join(timeout=10)
    return status, "".join(tail)


def comparison(contenders: dict, preset: str) -> dict:
    ok = {name: r for name, r in contenders.items() if "error" not in r}
    result = {"mfu": {name: r["mfu"] for name, r in ok.items()},
              "target_tokens_per_s": {name: r["target_tokens_per_s"] for name, r in ok.items()}}
    for name in ("keras-jax", "keras-torch"):
        if name in ok and "torch" in ok:
            result[f"{name}_vs_torch_tokens_per_s"] = (
                ok[name]["target_tokens_per_s"] / ok["torch"]["target_tokens_per_s"])
    targets = {"applies_to": "preset big on the GPU",
               "keras_jax_mfu_at_least": TARGET_MFU,
               "keras_jax_vs_torch_at_least": TARGET_VS_TORCH}
    if preset == "big" and "keras-jax" in ok:
        targets["keras_jax_mfu_met"] = ok["keras-jax"]["mfu"] >= TARGET_MFU
        if "keras-jax_vs_torch_tokens_per_s" in result:
            targets["keras_jax_vs_torch_met"] = (
                result["keras-jax_vs_torch_tokens_per_s"] >= TARGET_VS_TORCH)
    result["targets"] = targets
    return result


def write(report: dict, path: str | None) -> None:
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(report, f, indent=1, default=str)
        os.replace(path + ".tmp", path)


def parent(args) -> int:
    import tempfile

    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    unknown = sorted(set(names) - set(CONTENDERS))
    if unknown or not names:
        raise SystemExit(f"unknown contender(s) {unknown}; choose from {CONTENDERS}")
    config = model_config(args.preset, args.vocab, args.length)
    report = {
        "benchmark": "train_gpu", "argv": sys.argv[1:],
        "settings": {"preset": args.preset, "config": config.to_dict(), "batch": args.batch,
                     "source_length": args.length, "target_length": args.length,
                     "steps": args.steps, "pipelined_steps": args.pipelined_steps,
                     "warmup": args.warmup, "seed": args.seed,
                     "precision": "bf16 mixed (float32 weights)", "label_smoothing": 0.1,
                     "optimizer": "Adam(0.9, 0.98, 1e-9), Noam schedule",
                     "lr_warmup": args.lr_warmup, "data": "random ids, no PAD"},
        "flops_per_step": train_flops_per_step(config, args.batch, args.length, args.length),
        "flops_formula": FLOPS_FORMULA, "contenders": {}}
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            result = os.path.join(tmp, f"{name}.json")
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
            env.pop("KERAS_BACKEND", None)
            # Compile for real: a persistent cache's hits would hide compile time and count.
            env.pop("JAX_COMPILATION_CACHE_DIR", None)
            if name.startswith("keras-"):
                env["KERAS_BACKEND"] = name.split("-")[1]
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            print(f"[train_gpu] {name} ...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            status, tail = run_child(worker_argv(args, name, result), env, args.worker_timeout)
            try:
                with open(result) as f:
                    outcome = json.load(f)
            except (OSError, ValueError):
                outcome = {"error": (f"timed out after {args.worker_timeout:g} s"
                                     if status is None else f"worker exited with {status}")
                           + " without a report", "stderr_tail": tail[-4000:]}
            if status is None and "error" not in outcome:
                outcome = {"error": f"timed out after {args.worker_timeout:g} s"}
            outcome["process_wall_s"] = time.perf_counter() - start
            if "error" in outcome:
                failed.append(name)
            report["contenders"][name] = outcome
            report["failed"] = failed
            report["comparison"] = comparison(report["contenders"], args.preset)
            write(report, args.out)
            print(f"[train_gpu] {name}: " + (outcome["error"] if "error" in outcome else
                  f"{outcome['target_tokens_per_s']:.0f} target tokens/s, "
                  f"MFU {outcome['mfu']:.3f}"), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=1, default=str))
    return 1 if failed else 0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="big", choices=("tiny", "base", "big"))
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--batch", type=int, default=384)
    parser.add_argument("--length", type=int, default=64,
                        help="source and target length of every batch")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5,
                        help="untimed steps first (compilation); at least 1")
    parser.add_argument("--pipelined-steps", type=int, default=20,
                        help="steps timed as one window, without waiting between them")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr-warmup", type=int, default=4000,
                        help="warmup of the paper's learning-rate schedule")
    parser.add_argument("--contenders", default=DEFAULT_CONTENDERS,
                        help=f"comma-separated, run in this order; of {', '.join(CONTENDERS)}")
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="torch contender: eager, no torch.compile")
    parser.add_argument("--torch-compile-mode", default="default",
                        help="torch.compile mode (default, reduce-overhead, max-autotune)")
    parser.add_argument("--torch-no-pad-mask", action="store_true",
                        help="torch contender: no PAD masks, is_causal (Flash attention)")
    parser.add_argument("--matmul-size", type=int, default=0,
                        help="n of the n x n bf16 peak matmul (0: 8192 on GPU, 1024 on CPU)")
    parser.add_argument("--matmul-iterations", type=int, default=20)
    parser.add_argument("--worker-timeout", type=float, default=420,
                        help="seconds a contender may take (0: no limit)")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be >= 1 (the first step compiles)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    return worker(args) if args.worker else parent(args)


if __name__ == "__main__":
    sys.exit(main())
