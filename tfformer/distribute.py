"""Choosing a tf.distribute strategy: one device, several GPUs (or logical CPUs), or workers."""

from __future__ import annotations

import json
import os

import tensorflow as tf


def split_cpu(num_devices: int) -> None:
    """Splits the CPU into `num_devices` logical devices, to exercise multi-device code paths
    without GPUs. Must run before TensorFlow initializes its devices (before any op)."""
    if num_devices < 1:
        raise ValueError(f"num_devices must be >= 1, got {num_devices}")
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


def select_strategy() -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy when TF_CONFIG names several workers; MirroredStrategy over
    all GPUs, or over the logical CPU devices made by `split_cpu`, when there are several;
    otherwise the default strategy."""
    if tf_config_workers() > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy([d.name for d in gpus])
    cpus = tf.config.list_logical_devices("CPU")
    if not gpus and len(cpus) > 1:
        return tf.distribute.MirroredStrategy([d.name for d in cpus])
    return tf.distribute.get_strategy()


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's shared files (always true on one machine)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or tf_config_workers() <= 1:
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "chief" or (not has_chief and task_type == "worker" and task_id == 0)


def worker_shard(strategy: tf.distribute.Strategy) -> tuple[int, int]:
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
