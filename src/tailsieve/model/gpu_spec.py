"""A small shipped table of GPUs: the hardware numbers the decode model needs.

Each number is a vendor datasheet figure (peak, not achieved); the decode model applies
efficiencies on top (``tailsieve.model.decode_model.Efficiencies``). ``memory_bytes`` is what
the driver reports as total device memory (``nvidia-smi`` MiB x 2^20), which is what vLLM's
``gpu_memory_utilization`` multiplies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tailsieve.errors import ConfigError

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """Peak figures of one GPU model."""

    name: str  # short key used on the command line (h100, h200, ...)
    description: str  # full product name
    hbm_bytes_per_s: float  # peak HBM bandwidth, bytes/s
    bf16_flop_per_s: float  # peak dense bf16 tensor-core throughput, FLOP/s (no sparsity)
    memory_bytes: int  # total device memory as reported by the driver, bytes
    interconnect_bytes_per_s: float  # GPU-to-GPU bandwidth per direction (NVLink / PCIe), bytes/s
    vllm_max_num_seqs: int  # vLLM's default max_num_seqs for an API server on this GPU
    source: str  # where the figures come from

    def __post_init__(self) -> None:
        for label in ("hbm_bytes_per_s", "bf16_flop_per_s", "interconnect_bytes_per_s"):
            v = getattr(self, label)
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(f"gpu {self.name}: {label} must be positive, got {v!r}")
        if self.memory_bytes <= 0 or self.vllm_max_num_seqs < 1:
            raise ConfigError(f"gpu {self.name}: memory_bytes and vllm_max_num_seqs must be > 0")


def _vllm_default_max_num_seqs(memory_bytes: int, name: str) -> int:
    """vLLM V1 (``EngineArgs._set_default_args``): 1024 running sequences for an API server on
    GPUs with >= 70 GiB that are not A100s, 256 otherwise."""
    return 1024 if memory_bytes >= 70 * GIB and "a100" not in name.lower() else 256


def _gpu(name: str, description: str, hbm: float, flops: float, mem_mib: int, link: float,
         source: str) -> GpuSpec:
    mem = mem_mib * MIB
    return GpuSpec(name, description, hbm, flops, mem, link,
                   _vllm_default_max_num_seqs(mem, name), source)


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        _gpu("h100", "NVIDIA H100 SXM5 80GB", 3.35e12, 989e12, 81559, 450e9,
             "NVIDIA H100 datasheet (SXM5: 3.35 TB/s HBM3, 989 TFLOP/s dense bf16, NVLink 4 "
             "900 GB/s bidirectional); 81,559 MiB as reported by nvidia-smi"),
        _gpu("h200", "NVIDIA H200 SXM 141GB", 4.8e12, 989e12, 143771, 450e9,
             "NVIDIA H200 datasheet (4.8 TB/s HBM3e, 989 TFLOP/s dense bf16 like H100, NVLink 4 "
             "900 GB/s bidirectional); 143,771 MiB as reported by nvidia-smi"),
        _gpu("a100", "NVIDIA A100 SXM4 80GB", 2.039e12, 312e12, 81920, 300e9,
             "NVIDIA A100 datasheet (80GB SXM: 2,039 GB/s HBM2e, 312 TFLOP/s dense bf16, "
             "NVLink 3 600 GB/s bidirectional); 81,920 MiB"),
        _gpu("l40s", "NVIDIA L40S 48GB", 864e9, 362e12, 46068, 32e9,
             "NVIDIA L40S datasheet (864 GB/s GDDR6, 362 TFLOP/s dense bf16 (733 with "
             "sparsity), PCIe Gen4 x16 64 GB/s bidirectional); 46,068 MiB"),
        _gpu("b200", "NVIDIA B200 180GB (HGX)", 8.0e12, 2.25e15, 183359, 900e9,
             "NVIDIA HGX B200 datasheet (8 TB/s HBM3e, 2.25 PFLOP/s dense bf16 (4.5 with "
             "sparsity), NVLink 5 1.8 TB/s bidirectional); 183,359 MiB"),
    )
}


def gpu_spec(name: str) -> GpuSpec:
    """A shipped GPU by its short name (case-insensitive)."""
    key = name.strip().lower()
    if key not in GPUS:
        raise ConfigError(f"unknown gpu {name!r}; choose one of {', '.join(GPUS)}")
    return GPUS[key]
