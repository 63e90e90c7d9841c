"""Running the programs of one evaluation: isolation checked once, results cached by source.

A thin layer over `numloss.evaluate.sandbox`. Without kernel isolation and without the opt-in
(`allow_unisolated=True`, `--allow-unisolated-exec`, NUMLOSS_ALLOW_UNISOLATED_EXEC=1) every
program is "refused" and those items fall back to chain of thought.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from numloss.evaluate import sandbox
from numloss.evaluate.sandbox import Isolation, ProgramResult, SandboxLimits

REFUSED = "refused"
isolation = sandbox.isolation  # looked up here at each use: tests replace it with a fake machine's


class ProgramRunner:
    """Runs scripts in the sandbox at most once each (a cache keyed by the script's text)."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        workers: int | None = None,
        allow_unisolated: bool | None = None,
    ) -> None:
        self.limits, self.workers = limits, workers
        self.allow = sandbox.opted_in(allow_unisolated)  # one rule for the flag and the variable
        self.isolation = isolation(self.allow)
        self.cache: dict[tuple[str, int, int, str], ProgramResult] = {}

    def run(
        self,
        scripts: Sequence[str],
        output_bytes: int | None = None,
        memory_bytes: int | None = None,
        clock: str | None = None,
    ) -> list[ProgramResult]:
        """One result per script, in order; "refused" ones (not run) when isolation is unavailable.

        `output_bytes` / `memory_bytes` / `clock` override this runner's limits for these scripts
        (each protocol names its own: `Protocol.program_output_bytes`, `program_memory_bytes`,
        `program_clock`)."""
        if not self.isolation.available:
            return [ProgramResult(REFUSED, "", None, 0.0, self.isolation.detail) for _ in scripts]
        given = dict(output_bytes=output_bytes, memory_bytes=memory_bytes, clock=clock)
        given = {k: v for k, v in given.items() if v is not None}
        limits = replace(self.limits or SandboxLimits(), **given)
        keys = [(s, limits.output_bytes, limits.memory_bytes, limits.clock) for s in scripts]
        todo = list(dict.fromkeys(k for k in keys if k not in self.cache))
        if todo:
            try:
                results = sandbox.run_programs(
                    [k[0] for k in todo], limits, self.workers, allow_unisolated=self.allow
                )
            except sandbox.SandboxUnavailable as error:  # isolation went away mid-run
                self.isolation = Isolation("unavailable", str(error))
                return self.run(scripts, output_bytes, memory_bytes, clock)
            self.cache.update(zip(todo, results, strict=True))
        return [self.cache[k] for k in keys]

    def forget(self) -> None:
        """Drop the cached results (the runner calls this after each batch of items)."""
        self.cache.clear()
