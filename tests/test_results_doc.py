"""docs/results.md quotes the records: every generated block is what scripts/results_doc.py
computes from results/ now, and the page keeps its reference shape."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import results_doc  # scripts/ (pytest's pythonpath): the write-up is not installed
from grid_analysis import ENDPOINTS, Comparison
from grid_driver import BASELINE, baseline_hash, run_order

from numloss.compare.config import load_compare_config
from numloss.compare.paired import paired_t


def test_every_generated_block_matches_the_records() -> None:
    names = []
    for doc in results_doc.DOCS:
        text = doc.read_text()
        names += re.findall(r"<!-- results:([a-z0-9-]+):begin -->", text)
        rendered = results_doc.render(text)
        if rendered != text:  # name the first block that differs
            for match in results_doc.BLOCK.finditer(text):
                again = results_doc.BLOCK.search(rendered, match.start())
                assert again and again["body"] == match["body"], (
                    f"{doc.name} block {match['name']!r} differs from the records; "
                    "run python scripts/results_doc.py")
        assert rendered == text
    assert sorted(names) == sorted(results_doc.RENDERERS), "every renderer has one block and no block is unknown"


def test_the_pages_read_as_a_reference() -> None:
    """Issue 49: a percentage the pages print (one run's or a mean over seeds) is followed by its
    interval; no bare range over runs ("77.4-89.5 %") and no mean ± SD stands in for one. The
    first screen answers the question; no design heading carries a time (git holds the commits)."""
    for doc in results_doc.DOCS:
        for block in results_doc.BLOCK.finditer(doc.read_text()):
            bare = re.findall(r".{0,40}\d\.\d %(?! \[)|.{0,20}±.{0,20}", block["body"])
            assert not bare, f"{doc.name} block {block['name']!r} prints {bare[0]!r} without its interval"
    text = results_doc.DOC.read_text()
    assert len(text.splitlines()) <= 295, "the grids, each with its design and what it shows (grids a-d link out): no more"
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Does DEL help?", "the first screen answers the question"
    assert "## SmolLM2-135M-Instruct, LoRA, on arithmetic word problems" in headings, "the pretrained arm's section"
    assert not re.search(r"\bissue \d+|\bsession", text, re.I), "no internal issue numbers or sessions"
    for page in (results_doc.PRETRAINED_DOC, results_doc.MUL_CENTERED_DOC):
        headings = [line for line in page.read_text().splitlines() if line.startswith("#")]
        assert not [h for h in headings if re.search(r"\d\d:\d\d", h)], "design headings name no time"


MACHINE = {"accelerator": None, "cores": 2, "cpu": "AMD EPYC", "date": "2026-12-04", "torch": "2.13.0+cpu",
           "torch_cpu_capability": "AVX512", "vector_extension": "AVX-512"}  # every synthetic record's


def _configs(root: Path) -> Path:
    """A repository root holding the configs of the grids the answer reads, and no record."""
    (root / "configs").mkdir(parents=True, exist_ok=True)
    for name in (results_doc.PRETRAINED_GRID, results_doc.ALPHA_GRID, results_doc.REPLICATE_GRID, results_doc.FRESH_GRID,
                 results_doc.SEEDS8_GRID, results_doc.CENTERED_GRID, results_doc.GENTLE_GRID, results_doc.DOSE_GRID):
        shutil.copy(results_doc.ROOT / "configs" / f"{name}.yaml", root / "configs")
    return root


def _pretrained_root(tmp_path: Path, drop: tuple[str, ...] = (), grid: str = results_doc.PRETRAINED_GRID,
                     items_of: dict[str, Any] | None = None) -> Path:
    """A repository root with a pretrained grid's config and synthetic records under its real
    hashes: by default MLE right on items 0-599 of 1,000 every seed, DEL on items 0-(499 + 10 s),
    NTL-WAS on items 50-649 (as many as MLE, other items), the untrained model on none."""
    records = _configs(tmp_path) / "results" / grid
    records.mkdir(parents=True)
    compare = load_compare_config(tmp_path / "configs" / f"{grid}.yaml")

    def bits(first: int, last: int) -> str:
        return "".join("1" if first <= i < last else "0" for i in range(1000))

    def write(name: str, run_hash: str, label: str, seed: int, items: str) -> None:
        record = {"hash": run_hash, "label": label, "seed": seed, "machine": MACHINE, "steps": 100, "objective": None,
                  "seconds": {}, "curve": {}, "train_metrics": {}, "learning": None,
                  "evaluation": {"heldout": {"n": 1000, "correct": items.count("1"),
                                            "exact_match": items.count("1") / 1000, "items": items,
                                            "generation_check": {"n": 32, "agree": 32 - (label == "ntl-was"),
                                                                 "generated": items[:32]}}}}
        (records / f"{name}-{run_hash}.json").write_text(json.dumps(record))

    for key in run_order(compare):
        if key.name in drop:
            continue
        config = compare.run_config(key.spec, key.seed, compare.output_dir / "runs" / key.name, Path("t.jsonl"))
        spans = items_of or {"mle": (0, 600), "del-a0.3": (0, 500 + 10 * key.seed), "ntl-was": (50, 650)}
        span = spans[key.spec.label]  # (first, last) of every seed, or seed -> (first, last)
        items = bits(*(span(key.seed) if callable(span) else span))
        write(key.name, compare.run_hash(config), key.spec.label, key.seed, items)
    write(f"{BASELINE}-s0", baseline_hash(compare), BASELINE, 0, bits(0, 0))
    return tmp_path


#: per multiplication grid, each arm's (exact match %, signed-log MAE) of a seed from MLE's exact match and
#: a wiggle of +-0.5 alternating over the seeds
MUL_ARMS = {
    # DEL alpha 0.3 1 point below MLE with a signed-log MAE 0.01 higher, DEL without place weights MLE +-1
    # (mean near 0), NTL-WAS 3 points above MLE with a MAE 0.01 lower
    "compare-mul": lambda base, w: {"mle": (base, 0.04), "del-a0.3": (base - 1 + w, 0.05 + w / 100),
                                    "del-noplace": (base + 2 * w, 0.04 + w / 50), "ntl-was": (base + 3 + w, 0.03 + w / 100)},
    # grid c: centred DEL 1 point below MLE, raw DEL at 1.28 3 points above it with a signed-log MAE 0.01 lower
    results_doc.MUL_CENTERED_GRID: lambda base, w: {"mle": (base, 0.04), "del-centered-a0.3": (base - 1 + w, 0.04),
                                                    "del-a1.28": (base + 3 + w, 0.03 + w / 100)},
}


def _mul_root(tmp_path: Path, drop: tuple[str, ...] = (), grid: str = "compare-mul") -> Path:
    """A repository root with a synthetic multiplication grid of 17 seeds, its arms' exact match (%)
    and signed-log MAE as MUL_ARMS says, less the runs (<label>-s<seed>) in `drop`; the pilot MLE
    seeds (0-3) give the pre-registered plan's 17 seeds."""
    folder = tmp_path / "results" / grid
    folder.mkdir(parents=True)
    pilot = [14.1, 15.3, 16.75, 11.85]
    places = {"0": [1900, 2000], "1": [500, 2000], "2": [1000, 2000], "3": [1500, 1600]}
    for seed in range(17):
        base = pilot[seed] if seed < 4 else 12.0 + (seed * 7) % 9
        for label, (em, mae) in MUL_ARMS[grid](base, 0.5 if seed % 2 == 0 else -0.5).items():
            if f"{label}-s{seed}" not in drop:
                record = {"label": label, "seed": seed, "curve": {}, "machine": MACHINE,
                          "learning": {"checks": [[200, 0.0], [3200, em / 100]]}, "evaluation": {"in_distribution": {
                              "exact_match": em / 100, "correct": round(em * 20), "n": 2000, "signed_log_mae": mae,
                              "digit_entropy": 0.8, "missing": 0, "place_accuracy": places}}}
                (folder / f"{label}-s{seed}-0000.json").write_text(json.dumps(record))
    return tmp_path


def test_verdict_reads_the_endpoints_direction() -> None:
    """Better and worse on both endpoints' directions are the multiplication case's verdicts
    (test_a_grid_reads_as_its_design_says); here the Holm threshold and a missing p."""
    def verdict(p_holm: float) -> str:
        return results_doc.verdict(Comparison("a", ENDPOINTS[0], [0, 1, 2], 10.0, 12.0, paired_t([2.0, 2.1, 1.9]), 0.05,
                                              p_holm=p_holm))

    assert (verdict(0.05), verdict(0.0501), verdict(float("nan"))) == ("better", "not told apart", "no test yet")


def test_the_detached_share_is_worked_by_hand() -> None:
    """Grid d's why line: each arm's rise over MLE paired by seed with its t interval, and the share that goes with p
    held constant; a seed without both measures, or with a NaN, is left out; one seed gives no line."""
    def run(entropy: float, *nll: float) -> dict:
        return {"evaluation": {"heldout": {"digit_entropy": entropy} | ({"answer_nll": nll[0]} if nll else {})}}

    found = {"mle": {s: run(1.0, 0.5) for s in range(4)}, "del-centered-a0.3": {0: run(1.2, 0.6), 1: run(1.4, 0.6), 2: run(9, 9), 3: run(9, 9)},
             "del-centered-detached-a0.3": {0: run(1.15, 0.5), 1: run(1.25, 0.5), 2: run(9.0), 3: run(9.0, float("nan"))}}
    # entropy +0.2 / +0.4 attached (0.3 +- 12.706 x 0.1), +0.15 / +0.25 detached (0.2 +- 12.706 x 0.05): 1 - 0.2 / 0.3
    assert results_doc.detached_share(found) == [
        "Where the rise comes from, centred DEL at 0.3 minus MLE, paired by seed over 2 seeds (95 % intervals; described, not "
        "tested): digit entropy +0.300 nats [-0.971, +1.571] with p attached, +0.200 [-0.435, +0.835] with p held constant "
        "(holding p removes 33 % of the rise); answer NLL +0.100 nats [+0.100, +0.100] with p attached, +0.000 [0.000, 0.000] "
        "with p held constant (holding p removes 100 % of the rise)."]
    assert results_doc.detached_share({arm: {0: seeds[0]} for arm, seeds in found.items()}) == []


def test_pretrained_terms_quote_the_logged_sizes() -> None:
    def run(aux: list[float], ce: list[float], entropy: float) -> dict:
        return {"curve": {"step": [1, 10, 20], "aux": aux, "ce": ce}, "evaluation": {"heldout": {"digit_entropy": entropy}}}

    found = {"mle": {0: run([0, 0, 0], [5.0, 2.0, 1.0], 0.9)},
             "del-a0.3": {0: run([8.0, 5.0, 0.2], [5.0, 2.0, 1.0], 1.1), 1: run([10.0, 5.0, 0.1], [4.0, 2.0, 1.0], 1.3)}}
    term, entropy = results_doc.pretrained_terms(found, {0: run([0.4, 0.4, 0.4], [4.6, 4.3, 3.5], 0.8)})
    assert "8.00-10.00 per digit at the first logged step, beside a cross-entropy of 4.00-5.00" in term
    assert "adds 2.40-3.00 to the loss); by step 20 it is 0.10-0.20. On the multiplication testbed, from scratch, it starts at 0.40." in term
    assert entropy.endswith("mle 0.90, del-a0.3 1.10-1.30.")
    assert results_doc.pretrained_terms({"mle": found["mle"]}, {}) == []


def test_the_machine_line_names_each_machine_with_its_own_dates() -> None:
    def run(cpu: str, date: str, seed: int) -> dict:
        return {"seed": seed, "machine": {**MACHINE, "cpu": cpu, "date": date}}

    runs = {"a": {0: run("AMD EPYC", "2026-12-03", 0), 1: run("AMD EPYC", "2026-12-04", 1)},
            "b": {0: run("Intel Xeon", "2026-12-04", 0)}}
    assert results_doc.machine(runs) == (
        "_Machine: runs made on AMD EPYC (AVX-512; torch kernels AVX512), 2 cores, torch 2.13.0+cpu, 2026-12-03 to "
        "2026-12-04 (2 runs); Intel Xeon (AVX-512; torch kernels AVX512), 2 cores, torch 2.13.0+cpu, 2026-12-04 (1 runs); "
        "3 runs._")
    assert results_doc.machine({"b": runs["b"]}).startswith("_Machine: Intel Xeon (AVX-512; torch kernels AVX512), 2 cores")


def test_the_figures_are_drawn_from_the_records(tmp_path: Path) -> None:
    """The README's multiplication figure, and grid a's digit diagnostics once records carry them."""
    path = results_doc.mul_figure(results_doc.Records(_mul_root(tmp_path)), tmp_path / "figure.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    assert results_doc.MUL_FIGURE.is_file(), "the README's figure is committed"
    root = _pretrained_root(tmp_path, grid=results_doc.CENTERED_GRID, items_of=GRID_A)
    assert results_doc.diagnostics_figure(results_doc.Records(root), tmp_path / "none.png") is None  # no curves yet
    for record_path in (root / "results" / results_doc.CENTERED_GRID).glob("del-*.json"):
        record = json.loads(record_path.read_text())
        falls = record["label"] == "del-a0.3"
        record["curve"] = {"step": [5, 10, 15], "digit_logit_mean": [30.0, 5.0, -2.5] if falls else [30.0, 30.0, 29.0],
                           "pushdown_share": [0.0, 0.4, 0.9] if falls else [0.0, 0.0, 0.0]}
        record_path.write_text(json.dumps(record))
    drawn = results_doc.diagnostics_figure(results_doc.Records(root), tmp_path / "d.png")
    assert drawn is not None and drawn.stat().st_size > 10_000


class Case(NamedTuple):
    """A grid's synthetic records and what its generated block and answer line say of them."""

    build: Callable[[Path, tuple[str, ...]], Path]  # a root with the records, less the runs named
    block: str  # the RENDERERS names of its blocks, space-separated
    answer: Callable[[results_doc.Records], list[str]] | None
    verdicts: tuple[str, ...]  # said once every run is in, and not while `cut` is missing
    facts: tuple[str, ...] = ()  # said once every run is in
    cut: tuple[str, ...] = ()  # the runs left out for the interim look (none: no look)
    interim: tuple[str, ...] = ()  # said while `cut` is missing
    empty: str | None = None  # the whole block before any run is recorded
    never: tuple[str, ...] = ()  # never said once every run is in


def _words(grid: str, spans: dict[str, Any] | None = None,
           first: tuple[str, str] | None = None) -> Callable[[Path, tuple[str, ...]], Path]:
    """A word-problem grid's records; `first`: another follow-up's (grid, run left out), its arm 2 points below MLE."""
    def build(path: Path, drop: tuple[str, ...]) -> Path:
        if first:
            _pretrained_root(path, first[1:], first[0], {"mle": (0, 600), first[1].rsplit("-s", 1)[0]: (0, 580)})
        return _pretrained_root(path, drop, grid, spans)
    return build


def _dose(spans: dict[str, Any]) -> Callable[[Path, tuple[str, ...]], Path]:
    """Grid d's records beside grid b's, whose 1.28 arm and MLE end the trend over alpha."""
    def build(path: Path, drop: tuple[str, ...]) -> Path:
        _pretrained_root(path, grid=results_doc.GENTLE_GRID,
                         items_of={"mle": (0, 400), "del-a1.28": (0, 100), "del-centered-a1.28": (0, 380)})
        return _pretrained_root(path, drop, results_doc.DOSE_GRID, spans)
    return build


GRID_A = {"mle": (0, 600), "del-a0.3": (0, 500), "del-centered-a0.3": (0, 590)}
GRID_B = {"mle": (0, 400), "del-a1.28": (0, 380), "del-centered-a1.28": (0, 420)}
DOSE = {"mle": (0, 400),
        "del-centered-a0.03": lambda s: (0, 410 + s),  # +1.0 to +1.7 points every seed
        "del-centered-a0.1": lambda s: (0, 400 - s),  # 0 to -0.7
        "del-centered-a0.3": lambda s: (0, 399 + 2 * (s % 2)),  # -0.1 / +0.1
        "del-centered-detached-a0.3": lambda s: (0, 430 if s % 2 else 390)}  # +3 / -1: items only
ALL_ARMS_HOLM_TABLE = "| arm vs mle |"  # a summary table Holm-adjusted over every arm: not a three-arm design's family

CASES = {
    # DEL 1 point below MLE every seed, NTL-WAS 3 above, DEL without place weights MLE +-0.5
    "multiplication": Case(
        lambda path, drop: _mul_root(path, drop), "mul-plan", results_doc.mul_answer,
        ("**Complete: all 17 seeds of every arm are in.**", "complete, 17 seeds per arm",
         "DEL alpha 0.3 minus MLE in exact match -1.0 points … **Worse.**",
         # lower signed-log MAE is better: NTL-WAS's -0.0100 reads as better, DEL's +0.0100 as worse;
         # 9 even seeds (+0.005) and 8 odd ones (-0.005): the wiggle's mean is 0.005 / 17 = 0.0003
         "`del-a0.3`: exact match -1.0 [ … **worse** (detects … signed-log MAE +0.0103 [ … **worse** (detects",
         "`ntl-was`: exact match +3.0 [ … **better** (detects … signed-log MAE -0.0097 [ … **better** (detects",
         # every verdict, "not told apart" included, stands beside what the seeds detect
         "`del-noplace`: exact match … not told apart (detects … not told apart (detects"),
        cut=("ntl-was-s16",), interim=("**Incomplete: 16 of 17 seeds have every arm**", "interim: 17 of 17 seeds")),
    # grid c: each DEL arm against MLE on both primary endpoints, Holm over the two arms, the
    # realised power for +2.6 points beside exact match
    "grid-c": Case(
        lambda path, drop: _mul_root(path, drop, results_doc.MUL_CENTERED_GRID), "mul-centered",
        results_doc.mul_centered_answer,
        ("**Complete: all 17 seeds of every arm are in.**",
         "| `del-centered-a0.3` | exact match | … | -1.0 [ … | worse | … power for +2.6 points",
         "| `del-a1.28` | exact match | … | +3.0 [ … | better | … power for +2.6 points",
         "| `del-a1.28` | signed-log MAE | … | better |",
         "complete): exact match `del-centered-a0.3` minus MLE -1.0 [ … **worse** … `del-a1.28` minus MLE +3.0 [ … **better**"),
        cut=("del-a1.28-s16",), interim=("**Interim (", "interim: 16 of 17 seeds", "no verdict until every run is in."),
        empty="No run is recorded yet."),
    # MLE right on items 0-599 of 1,000 every seed, raw DEL on 0-(499 + 10 s), NTL-WAS on 50-649;
    # DEL - MLE per seed: -10, -9, -8, -7 points; mean -8.5, SD 1.291, t(0.975, 3) = 3.182:
    # half-width 3.182 x 1.291 / 2 = 2.05 -> [-10.6, -6.4]; items: b = 0, c = 100 + 90 + 80 + 70 = 340
    "pretrained": Case(
        _words(results_doc.PRETRAINED_GRID), "pretrained pretrained-grid", lambda rec: [results_doc.pretrained_answer(rec)],
        ("**13 of 13 runs recorded (complete).**", "**13 of 13 runs recorded, the grid is complete.**",
         "(SmolLM2 … complete): ",
         "**Raw DEL is worse on these items under this recipe.** The seed-level interval excludes 0 as well."),
        facts=(  # MLE 60 % every seed: no spread, [60.0, 60.0]; DEL 50-53 %: SD 1.291, 51.5 +- 2.05 -> [49.4, 53.6]
            "MLE -8.5 points [-10.6, -6.4] over seeds (MLE 60.0 % [60.0, 60.0] over seeds)",
            "LoRA r16 at lr 1e-3 for 100 steps … When DEL works against CE", "del-a0.3 51.5 % [49.4, 53.6] over seeds",
            "untrained 0.0 [0.0, 0.4] % over items (one seed: no spread)", "only under MLE 0 / 340",
            # 13 runs x 32 items decoded; each NTL-WAS run disagrees once
            "teacher-forced verdict on 412 of 416 items decoded (the first 32 held-out problems of each of 13 runs)",
            # NTL-WAS: 50 items each way every seed: no difference, McNemar p 1 (Holm keeps it 1)
            "ntl-was minus MLE 0.0 points [0.0, 0.0] over 4 seeds, sign-flip p 1.00", "200 / 200, McNemar Holm p 1.00",
            # each seed's Wilson interval over its 1,000 items (500 right: [46.9, 53.1]), the mean's over seeds
            "| del-a0.3 | 4 | 50.0 [46.9, 53.1], 51.0 [47.9, 54.1], 52.0 [48.9, 55.1], 53.0 [49.9, 56.1] | 51.5 [49.4, 53.6] |",
            "| untrained | 1 | 0.0 [0.0, 0.4] | 0.0 (one seed: no spread) |", "| del-a0.3 | -8.5 | [-10.6, -6.4] |",
            "_Machine: AMD EPYC"),
        cut=tuple(f"{label}-s{seed}" for seed in (1, 2, 3) for label in ("mle", "del-a0.3", "ntl-was")),
        interim=("**4 of 13 runs recorded, 1 of 4 seeds with every arm: an interim result.**",
                 "**4 of 13 runs recorded; left: mle-s1, del-a0.3-s1, ntl-was-s1, mle-s2, del-a0.3-s2, ntl-was-s2, mle-s3, "
                 "del-a0.3-s3, ntl-was-s3.**", "interim: 1 of 4 seeds): DEL alpha 0.3 minus MLE -10.0 points",
                 "(one seed: no seed-level interval yet)", "| del-a0.3 | -10.0 | n/a (1 seed) | n/a |")),
    # grid a: centred DEL against MLE and against raw DEL (Holm over the two), raw DEL against
    # MLE beside them; centred - MLE: -1 point every seed (c = 10 x 8 = 80, b = 0); centred - raw: +9
    "grid-a": Case(
        _words(results_doc.CENTERED_GRID, GRID_A), "pretrained-centered", results_doc.centered_answer,
        ("**24 of 24 runs recorded, complete.**",
         "- `del-centered-a0.3` vs `mle`: -1.0 points, McNemar Holm p < 0.001: **worse than MLE**.",
         "- `del-centered-a0.3` vs `del-a0.3`: +9.0 points, McNemar Holm p < 0.001: **centring removes (part of) "
         "raw DEL's harm**.",
         "| del-a0.3 vs mle | -10.0 | [-10.0, -10.0] | 0.008 | 0 / 800 | < 0.001 | beside (not in Holm) |",
         "**Against MLE: worse than MLE; against raw DEL: centring removes (part of) raw DEL's harm.**"),
        facts=("- **Does centring DEL's sigmoid remove the harm?**",
               "centred DEL minus MLE -1.0 points [-1.0, -1.0] over seeds, McNemar Holm p < 0.001",
               "no seed with two arms recorded yet"),  # grid b's line
        cut=("del-centered-a0.3-s7", "mle-s6"),
        interim=("**22 of 24 runs recorded; left: 2 runs: an interim result, no verdict.**",
                 "interim: 22 of 24 runs", "no verdict until every run is in."),
        empty="**0 of 24 runs recorded.**", never=(ALL_ARMS_HOLM_TABLE,)),
    # the same items both ways: not told apart, with what the items detect
    "grid-a-even": Case(
        _words(results_doc.CENTERED_GRID, {**GRID_A, "del-centered-a0.3": (50, 650)}), "pretrained-centered", None,
        ("`del-centered-a0.3` vs `mle`: 0.0 points, McNemar Holm p 1.00: **not told apart (the items detect",)),
    # +2.5 points twice, -3 six times: the items tell it, the seeds do not
    "grid-a-seeds-hold-0": Case(
        _words(results_doc.CENTERED_GRID, {**GRID_A, "del-centered-a0.3": lambda s: (0, 625 if s < 2 else 570)}),
        "pretrained-centered", None,
        ("`del-centered-a0.3` vs `mle`: -1.6 points, McNemar Holm p < 0.001: **worse than MLE on these items (its "
         "seed-level interval holds 0: training randomness alone could give it)**",), never=(ALL_ARMS_HOLM_TABLE,)),
    # grid b: both DEL arms against MLE; centred - raw (+4 points every seed) described beside them, no verdict
    "grid-b": Case(
        _words(results_doc.GENTLE_GRID, GRID_B), "pretrained-gentle", lambda rec: results_doc.centered_answer(rec)[1:],
        ("- `del-centered-a1.28` vs `mle`: +2.0 points, McNemar Holm p < 0.001: **better than MLE**.",
         "- `del-a1.28` vs `mle`: -2.0 points, McNemar Holm p < 0.001: **worse than MLE**.",
         "**Centred DEL: better than MLE; raw DEL: worse than MLE.** Beside them (outside Holm, no verdict "
         "pre-registered): centred DEL minus raw DEL +4.0 points [+4.0, +4.0] over seeds, McNemar p < 0.001."),
        cut=("mle-s7",), interim=("interim: 23 of 24 runs", "no verdict until every run is in. Beside them"),
        empty="**0 of 24 runs recorded.**"),
    # grid d: each arm one-sided against MLE by items (McNemar) and by seeds (t), Holm over the arms;
    # "helps" needs both, the items alone say "not shown to help"; the trend reads grid b's 1.28 arm
    "grid-d": Case(
        _dose(DOSE), "pretrained-dose", results_doc.dose_answer,
        ("**40 of 40 runs recorded, complete.**", "| `del-centered-a0.03` | … | helps |",
         "| `del-centered-a0.1` | … | did not help |", "| `del-centered-a0.3` | … | did not help |",
         "| `del-centered-detached-a0.3` | … | the items favour it, the seeds do not show it beyond training "
         "randomness: not shown to help |", "**del-centered-a0.03 helped.**"),
        facts=("the trend over alpha 0, 0.03, 0.1, 0.3 and 1.28 (grid b), per seed",
               "detached minus attached centred DEL at 0.3: +1.0 points"),
        cut=("mle-s7",),
        interim=("**39 of 40 runs recorded; left: 1 runs: an interim result, no verdict.**", "no verdict (interim)",
                 "no verdict until every run is in."),
        empty="**0 of 40 runs recorded.**"),
    "grid-d-none-helps": Case(
        _dose({**DOSE, "del-centered-a0.03": (0, 400)}), "pretrained-dose", results_doc.dose_answer,
        ("(did not help; detects", "**No form of DEL tried helped this model at this recipe.** Beside them (outside Holm)")),
}
FOLLOWUPS = {  # block: grid, the arm against MLE, its seeds, the seed to leave out, the deciding test's name and
    # its p at 20 items fewer every seed, all seeds and one short (the 8 pairs: every sign negative, p 2 / 2^8), the readings
    "pretrained-alpha": (results_doc.ALPHA_GRID, "del-a0.03", 4, 3, "McNemar p", ("< 0.001",) * 2, results_doc.ALPHA_READINGS),
    "pretrained-replicate": (results_doc.REPLICATE_GRID, "del-a0.3", 4, 3, "McNemar p", ("< 0.001",) * 2,
                             results_doc.REPLICATE_READINGS),
    "pretrained-fresh": (results_doc.FRESH_GRID, "del-a0.3", 4, 7, "McNemar p", ("< 0.001",) * 2, results_doc.FRESH_READINGS),
    "pretrained-seeds8": (results_doc.SEEDS8_GRID, "del-a0.3", 8, 7, "sign-flip p", ("0.008", "0.016"),
                          results_doc.SEEDS8_READINGS),
}
ANSWERS = {  # each follow-up's part of the answer: its renderer, the follow-up whose line it closes (built first,
    # its last run short: no verdict in bold), its words before the difference, complete and with a run short
    "pretrained-alpha": (results_doc.followup_answer, None, "**Follow-up on the pretrained model, a tenth of the alpha** "
                         "(pre-registered, 4 seeds on another CPU; {}): DEL alpha 0.03 minus MLE",
                         ("complete", "interim: 7 of 8 runs")),
    "pretrained-replicate": (results_doc.followup_answer, (results_doc.ALPHA_GRID, "del-a0.03-s3"),
                             "Its control, DEL alpha 0.3 on that machine{}:", ("", " (interim: 7 of 8 runs)")),
    "pretrained-fresh": (partial(results_doc.followup_answer, which="seeds"), None, "**Four more seeds of the pretrained comparison** "
                         "(pre-registered, seeds 4-7 on the follow-up's CPU; {}): DEL alpha 0.3 minus MLE",
                         ("complete", "interim: 7 of 8 runs")),
    "pretrained-seeds8": (partial(results_doc.followup_answer, which="seeds"), (results_doc.FRESH_GRID, "del-a0.3-s7"),
                          "Over the {} seed pairs on that CPU:", ("8", "7")),
}
for _block, (_grid, _arm, _seeds, _last, _test, (_p, _p_cut), (_worse, _otherwise)) in FOLLOWUPS.items():
    _render, _first, _words_before, (_done, _short) = ANSWERS[_block]
    _diff = "-2.0 points [-2.0, -2.0] over seeds"
    # 20 items fewer every seed: c = 20 per seed, b = 0
    CASES[_block] = Case(
        _words(_grid, {"mle": (0, 600), _arm: (0, 580)}, _first), _block, _render,
        (f"**{2 * _seeds} of {2 * _seeds} runs recorded, complete.**", f"`{_arm}` minus MLE -2.0 points, {_test} {_p}: {_worse}",
         f"{_words_before.format(_done)} {_diff}, {_test} {_p}; {_worse}"),
        facts=(f"| {_arm} | {_seeds} | " + ", ".join(["58.0 [54.9, 61.0]"] * _seeds) + " | 58.0 [58.0, 58.0] |",
               f"0 / {20 * _seeds}"),
        cut=(f"{_arm}-s{_last}",),
        interim=(f"**{2 * _seeds - 1} of {2 * _seeds} runs recorded; left: {_arm}-s{_last}: an interim result, "
                 "no verdict.**", f"{_words_before.format(_short)} {_diff}, {_test} {_p_cut}."),
        empty=f"**0 of {2 * _seeds} runs recorded.**")
    # the same number of items each way (50 / 50 a seed): not told apart; 20 items more: better
    CASES[f"{_block}-even"] = Case(
        _words(_grid, {"mle": (0, 600), _arm: (50, 650)}), _block, None,
        (f"{_test} 1.00: " + _otherwise.split("{mde")[0].format(verdict="not told apart from MLE"),))
    CASES[f"{_block}-better"] = Case(
        _words(_grid, {"mle": (0, 600), _arm: (0, 620)}), _block, None,
        (_otherwise.split("{mde")[0].format(verdict="better than MLE"),))


def _says(text: str, phrase: str) -> bool:
    """Whether a line of `text` holds `phrase`, each ' … ' in it standing for any characters."""
    return re.search(".*".join(map(re.escape, phrase.split(" … "))), text) is not None


@pytest.mark.parametrize("case", CASES.values(), ids=CASES)
def test_a_grid_reads_as_its_design_says(case: Case, tmp_path: Path) -> None:
    """Every grid's block and answer line on synthetic records: its design's verdicts once every
    run is in; with a run missing, an interim result, none of those verdicts and no bold verdict
    in the answer; before any run, the count alone."""
    def read(root: Path) -> tuple[str, list[str]]:
        rec = results_doc.Records(root)
        blocks = [line for name in case.block.split() for line in results_doc.RENDERERS[name](rec)]
        return "\n".join(blocks), case.answer(rec) if case.answer else []

    block, answer = read(case.build(tmp_path / "done", ()))
    text = "\n".join([block, *answer])
    assert [p for p in case.verdicts + case.facts if not _says(text, p)] == [], text
    assert not [p for p in case.never if _says(text, p)]
    if case.cut:
        block, answer = read(case.build(tmp_path / "cut", case.cut))
        text = "\n".join([block, *answer])
        assert [p for p in case.interim if not _says(text, p)] == [], text
        assert [p for p in case.verdicts if _says(text, p)] == [], "no verdict before every run is in"
        for line in answer:  # no verdict in bold after the line's head
            assert "**" not in (line.split("): ", 1)[1] if "): " in line else line), line
    if case.empty:  # before any run: the count alone, and no difference in the answer (a follow-up: no line)
        rec = results_doc.Records(_configs(tmp_path / "none"))
        assert results_doc.RENDERERS[case.block](rec) == [case.empty]
        answer = case.answer(rec) if case.answer else []
        assert not [line for line in answer if "minus" in line]
