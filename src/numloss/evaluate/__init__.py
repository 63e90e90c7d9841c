"""Evaluation on math benchmarks (MAmmoTH protocol): loaders, prompts, generation, sandboxed
programs, answer matching, metrics and reports. `numloss eval` is `numloss.evaluate.cli.main`.

    from numloss.evaluate import load_benchmark, HFGenerator, evaluate_benchmark
    bench = load_benchmark("gsm8k", data_dir="data/")
    results = evaluate_benchmark(bench, HFGenerator(model, tokenizer))
"""

from numloss.evaluate.answers import extract_choice, extract_number, math_equal, score
from numloss.evaluate.benchmarks import BENCHMARKS, Benchmark, BenchmarkError, Item, load_benchmark
from numloss.evaluate.generate import BackendUnavailable, Generation, HFGenerator, VLLMGenerator
from numloss.evaluate.metrics import (
    DigitStats,
    numeric_distance,
    place_accuracy,
    teacher_forced_digit_stats,
)
from numloss.evaluate.runner import ItemResult, evaluate_benchmark
from numloss.evaluate.sandbox import (
    ProgramResult,
    SandboxLimits,
    SandboxUnavailable,
    isolation,
    run_program,
    run_programs,
)

__all__ = [
    "BENCHMARKS", "Benchmark", "BenchmarkError", "Item", "load_benchmark",
    "extract_choice", "extract_number", "math_equal", "score",
    "BackendUnavailable", "Generation", "HFGenerator", "VLLMGenerator",
    "DigitStats", "numeric_distance", "place_accuracy", "teacher_forced_digit_stats",
    "ItemResult", "evaluate_benchmark",
    "ProgramResult", "SandboxLimits", "SandboxUnavailable", "isolation", "run_program", "run_programs",
]
