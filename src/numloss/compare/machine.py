"""Where a comparison ran: CPU model and vector extension, accelerator, torch version, date.

A run's outcome depends on the kernels the CPU (or GPU) picks: the same seed learns the task on
one machine and not on another (measured: AVX2 against AVX-512). So every table a
comparison writes names the machine, and claims about objectives rest on seed distributions, never
on one seed's number.
"""

from __future__ import annotations

import os
import platform
import time
from collections import Counter
from pathlib import Path
from typing import Any


def _cpuinfo(field: str) -> str | None:
    """The value of the first `field` line of /proc/cpuinfo (None where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith(field):
                return line.split(":", 1)[1]
    except OSError:
        pass
    return None


def vector_extension(flags: set[str] | None = None) -> str:
    """The widest x86 vector extension the CPU reports ("AVX-512", "AVX2", "AVX", "SSE"), the
    ARM one ("SVE", "NEON"), or "unknown"."""
    flags = set((_cpuinfo("flags") or "").split()) if flags is None else flags
    for flag, name in (
        ("avx512f", "AVX-512"),
        ("avx2", "AVX2"),
        ("avx", "AVX"),
        ("sve", "SVE"),
        ("asimd", "NEON"),
        ("sse2", "SSE"),
    ):
        if flag in flags:
            return name
    return "unknown"


def machine_info() -> dict[str, Any]:
    """{cpu, vector_extension, torch_cpu_capability, cores, accelerator, torch, date}."""
    import torch

    capability = getattr(
        getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "n/a"
    )()
    accelerator = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    model = _cpuinfo("model name")
    return {
        "cpu": model.strip() if model is not None else platform.processor() or platform.machine(),
        "vector_extension": vector_extension(),
        "torch_cpu_capability": capability,
        "cores": os.cpu_count(),
        "accelerator": accelerator,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }


def machine_line(info: dict[str, Any]) -> str:
    """One line for under a table: 'AMD EPYC (AVX-512; torch kernels AVX512), 2 cores, torch 2.13.0,
    2026-12-03'."""
    where = (
        f"{info.get('cpu')} ({info.get('vector_extension')}; torch kernels"
        f" {info.get('torch_cpu_capability')})"
    )
    if info.get("accelerator"):
        where = f"{info['accelerator']}, host {where}"
    return f"{where}, {info.get('cores')} cores, torch {info.get('torch')}, {info.get('date')}"


def runs_machine_line(results: list[dict[str, Any]], current: dict[str, Any]) -> str:
    """The machines the runs of a report were made on, with run counts, for under its tables.

    Runs carry their machine (records pooled across sessions); runs without one were made before
    that was recorded. One machine: its `machine_line`, as before."""
    counts = Counter(
        machine_line(r["machine"]) if r.get("machine") else "machine not recorded" for r in results
    )
    if not counts:
        return machine_line(current)
    if len(counts) == 1:
        return next(iter(counts))
    return "runs made on " + "; ".join(f"{line} ({n} runs)" for line, n in counts.items())
