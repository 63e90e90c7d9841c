"""Evaluation on math benchmarks (the MAmmoTH / DEL protocol): loaders, the two protocols
(`released`, `numloss`), generation, sandboxed programs, scoring, metrics and reports.
`numloss eval` is `numloss.evaluate.cli.main`.

    from numloss.evaluate import evaluate, score_outputs
    report = evaluate(
        "smollm2", "gsm8k,svamp", data_dir="../shared/benchmarks", protocol="both", limit=20
    )
    print(report.to_markdown())

The names below are loaded on first use: a process that needs only one part (the sandbox, whose
programs run in processes of their own; the answer reader) does not pay for transformers.
"""

from __future__ import annotations

from numloss.extras import load_on_first_use, require

# imported inside the functions that use them; looked up here so a missing one names its extra
require("eval", "numloss.evaluate", "math_verify", "matplotlib")

#: each submodule and the public names it defines
_PUBLIC = {
    "answers": "CORRECTIONS read extract_number math_equal number_matches score",
    "api": "evaluate score_outputs EvalReport BenchmarkScore",
    "benchmarks": "BENCHMARKS Benchmark BenchmarkError Item load_benchmark",
    "generate": "BackendUnavailable Generation HFGenerator VLLMGenerator",
    "metrics": "DigitStats numeric_distance place_accuracy teacher_forced_digit_stats",
    "protocol": "NUMLOSS PROTOCOLS RELEASED Protocol",
    "runner": "ItemResult run_benchmark score_items",
    "sandbox": "ProgramResult SandboxLimits SandboxUnavailable isolation run_program run_programs",
}
_HOME = {name: module for module, names in _PUBLIC.items() for name in names.split()}

__all__ = list(_HOME)

__getattr__, __dir__ = load_on_first_use(__name__, _HOME)
