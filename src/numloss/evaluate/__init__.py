"""Evaluation on math benchmarks (the MAmmoTH / DEL protocol): loaders, the two protocols
(`released`, `numloss`), generation, sandboxed programs, scoring, metrics and reports.
`numloss eval` is `numloss.evaluate.cli.main`.

    from numloss.evaluate import evaluate, score_outputs
    report = evaluate("smollm2", "gsm8k,svamp", data_dir="../shared/benchmarks", protocol="both", limit=20)
    print(report.to_markdown())
"""

from numloss.evaluate.answers import (
    extract_choice,
    extract_number,
    math_equal,
    number_matches,
    score,
)
from numloss.evaluate.api import BenchmarkScore, EvalReport, evaluate, score_outputs
from numloss.evaluate.benchmarks import BENCHMARKS, Benchmark, BenchmarkError, Item, load_benchmark
from numloss.evaluate.generate import BackendUnavailable, Generation, HFGenerator, VLLMGenerator
from numloss.evaluate.metrics import (
    DigitStats,
    numeric_distance,
    place_accuracy,
    teacher_forced_digit_stats,
)
from numloss.evaluate.protocol import NUMLOSS, PROTOCOLS, RELEASED, Protocol
from numloss.evaluate.runner import ItemResult, run_benchmark, score_items
from numloss.evaluate.sandbox import (
    ProgramResult,
    SandboxLimits,
    SandboxUnavailable,
    isolation,
    run_program,
    run_programs,
)
from numloss.extras import require

# imported inside the functions that use them; looked up here so a missing one names its extra
require("eval", "numloss.evaluate", "math_verify", "matplotlib")

__all__ = [
    "evaluate", "score_outputs", "EvalReport", "BenchmarkScore",
    "Protocol", "RELEASED", "NUMLOSS", "PROTOCOLS",
    "BENCHMARKS", "Benchmark", "BenchmarkError", "Item", "load_benchmark",
    "extract_choice", "extract_number", "math_equal", "number_matches", "score",
    "BackendUnavailable", "Generation", "HFGenerator", "VLLMGenerator",
    "DigitStats", "numeric_distance", "place_accuracy", "teacher_forced_digit_stats",
    "ItemResult", "run_benchmark", "score_items",
    "ProgramResult", "SandboxLimits", "SandboxUnavailable", "isolation", "run_program", "run_programs",
]
