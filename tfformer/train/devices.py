"""Where a run trains: one device, several GPUs (or logical CPUs), or workers.

TensorFlow: a tf.distribute strategy (MirroredStrategy, MultiWorkerMirroredStrategy). JAX:
`keras.distribution.DataParallel` over the local devices, the batch split along its rows (on
a CPU, `--devices N` makes N host devices), or over every device of several processes
(`Processes`: JAX's own multi-process runtime, as on a TPU pod slice or several GPU hosts; each
process feeds its own batch, the global batch is theirs together). `place` gives a run what it
needs of either.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import sys
import time
from typing import Any, Callable

from tfformer.utils.checks import check_at_least


@dataclasses.dataclass
class Placement:
    """What a training run needs to know of its devices.

    Attributes:
        scope: a context manager factory under which the model and optimizer are made.
        replicas: devices that split each global batch (batches have a multiple of it as rows).
        chief: whether this process writes the run's shared files.
        num_workers, worker_index: which shard of the data this process reads.
        description: for the log, e.g. "2 replica(s) under MirroredStrategy".
        strategy: the tf.distribute strategy (TensorFlow), else None.
    """

    scope: Callable[[], Any]
    replicas: int
    chief: bool
    num_workers: int
    worker_index: int
    description: str
    strategy: Any = None


@dataclasses.dataclass(frozen=True)
class Processes:
    """JAX processes that train together: process `index` of `count`, all reaching process 0's
    `coordinator` (HOST:PORT) within `timeout` seconds."""

    coordinator: str
    count: int
    index: int
    timeout: float = 300.0


def place(backend: str, devices: int | None, processes: Processes | None = None) -> Placement:
    """Sets up the devices of a run on `backend` ("tensorflow" or "jax"); `devices` > 1 splits
    the CPU into that many devices; `processes`: JAX in several processes. Must run before the
    backend initializes its devices."""
    if processes is not None and processes.count > 1 and backend != "jax":
        raise ValueError("several processes (coordinator, num_processes) train on the JAX "
                         "backend; on TensorFlow, several workers come from TF_CONFIG")
    if backend == "tensorflow":
        if devices and devices > 1:
            split_cpu(devices)
        strategy = select_strategy()
        workers, index = worker_shard(strategy)
        return Placement(strategy.scope, strategy.num_replicas_in_sync, is_chief(strategy),
                         workers, index, f"{strategy.num_replicas_in_sync} replica(s) under "
                         f"{type(strategy).__name__}", strategy)
    if tf_config_workers() > 1:
        raise ValueError("several workers (TF_CONFIG) train on the TensorFlow backend only")
    if devices and devices > 1:
        split_host_devices(devices)
    if processes is not None and processes.count > 1:
        return place_processes(processes)
    import jax
    import keras

    local = jax.local_devices()
    if len(local) > 1:
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=local))
        description = f"{len(local)} replica(s) under keras.distribution.DataParallel"
    else:
        description = f"1 replica on {local[0].platform}"
    return Placement(contextlib.nullcontext, len(local), True, 1, 0, description)


def place_processes(processes: Processes) -> Placement:
    """JAX's multi-process runtime, then data parallelism over every process' devices: each
    process reads its own shard (its batch split over its local devices), process 0 is the
    chief.

    Raises:
        ConnectionError: the coordinator did not answer within the timeout (JAX itself would
            abort the process, with no Python error, once its own deadline passed).
    """
    import jax

    if processes.index:
        wait_for_coordinator(processes.coordinator, processes.timeout)
    # CPU devices of several processes exchange gradients over Gloo (GPUs: NCCL, TPUs: ICI).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(processes.coordinator, processes.count, processes.index,
                               initialization_timeout=int(processes.timeout))
    import keras

    every, local = jax.devices(), jax.local_devices()
    # Each process gives its own shard's batch (auto_shard_dataset=False: nothing to split).
    keras.distribution.set_distribution(keras.distribution.DataParallel(
        devices=every, auto_shard_dataset=False))
    return Placement(contextlib.nullcontext, len(local), processes.index == 0,
                     processes.count, processes.index,
                     f"{len(every)} replica(s) in {processes.count} processes under "
                     f"keras.distribution.DataParallel (process {processes.index}, "
                     f"{len(local)} local)")


def wait_for_coordinator(address: str, timeout: float) -> None:
    """Returns once HOST:PORT accepts a connection; a ConnectionError after `timeout` s."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise ConnectionError(f"the coordinator {address} (process 0) did not answer "
                                      f"within {timeout:g} s: {error}") from None
            time.sleep(0.5)


def split_host_devices(num_devices: int) -> None:
    """JAX: makes the CPU appear as `num_devices` devices (XLA's host platform device count).
    Must run before JAX initializes its backends (before any array is made)."""
    flag = f"--xla_force_host_platform_device_count={num_devices}"
    jax = sys.modules.get("jax")
    if jax is not None and jax._src.xla_bridge.backends_are_initialized():
        if len(jax.devices("cpu")) != num_devices:
            raise RuntimeError(f"cannot split the CPU into {num_devices} devices after JAX "
                               f"has started; set XLA_FLAGS={flag} first")
        return
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    os.environ["XLA_FLAGS"] = " ".join(flags + [flag])


def split_cpu(num_devices: int) -> None:
    """Splits the CPU into `num_devices` logical devices, to exercise multi-device code paths
    without GPUs. Must run before TensorFlow initializes its devices (before any op)."""
    import tensorflow as tf

    check_at_least("num_devices", num_devices)
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices)
    except RuntimeError as error:
        raise RuntimeError(f"cannot split the CPU into {num_devices} devices after TensorFlow "
                           f"has started; call split_cpu first ({error})") from None


def tf_config_workers() -> int:
    """Number of workers (chief included) that the TF_CONFIG environment variable names."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return 1
    try:
        cluster = json.loads(raw).get("cluster", {})
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON: {error}") from None
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def select_strategy():
    """MultiWorkerMirroredStrategy when TF_CONFIG names several workers; MirroredStrategy over
    all GPUs, or over the logical CPU devices made by `split_cpu`, when there are several;
    otherwise the default strategy."""
    import tensorflow as tf

    if tf_config_workers() > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy([d.name for d in gpus])
    cpus = tf.config.list_logical_devices("CPU")
    if not gpus and len(cpus) > 1:
        return tf.distribute.MirroredStrategy([d.name for d in cpus])
    return tf.distribute.get_strategy()


def is_chief(strategy) -> bool:
    """Whether this process writes the run's shared files (always true on one machine)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or tf_config_workers() <= 1:
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "chief" or (not has_chief and task_type == "worker" and task_id == 0)


def worker_shard(strategy) -> tuple[int, int]:
    """(number of workers, this worker's index): which shard of the data this process reads.
    (1, 0) on one machine; a chief, if the cluster has one, is worker 0."""
    workers = tf_config_workers()
    resolver = getattr(strategy, "cluster_resolver", None)
    if workers <= 1 or resolver is None:
        return 1, 0
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    if resolver.task_type == "chief":
        return workers, 0
    return workers, resolver.task_id + (1 if has_chief else 0)
