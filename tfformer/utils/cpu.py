"""What this CPU can multiply fast: its feature flags, named beside every measurement, and
whether it multiplies bf16 natively (AVX512_BF16 or AMX; elsewhere bf16's casts cost time)."""

from __future__ import annotations

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# The flags that set a CPU's matmul speed, named beside the measurements.
MATMUL_CPU_FLAGS = ("avx2", "avx512f", *BF16_CPU_FLAGS, "amx_tile")


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo does not exist)."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def matmul_flags(path: str = "/proc/cpuinfo") -> list[str]:
    """Which of MATMUL_CPU_FLAGS this CPU has, sorted (what a benchmark reports)."""
    return sorted(cpu_flags(path) & set(MATMUL_CPU_FLAGS))


def bf16_flags(flags: set[str] | None = None) -> list[str]:
    """Which of BF16_CPU_FLAGS the CPU (or `flags`) has, sorted."""
    return sorted((cpu_flags() if flags is None else flags) & set(BF16_CPU_FLAGS))


def describe_bf16_support(flags: set[str] | None = None) -> str:
    """Whether this CPU multiplies bf16 natively, for a bf16 export's log line."""
    found = bf16_flags(flags)
    if found:
        return (f"this CPU multiplies them natively ({', '.join(found)}): decoding reads half "
                "the bytes of float32 and multiplies faster")
    return ("this CPU has neither AVX512_BF16 nor AMX: it converts bf16 to float32 to multiply, "
            "which can be slower than a float32 export; bf16 pays off on CPUs with AVX512_BF16 "
            "or AMX, GPUs and TPUs")
