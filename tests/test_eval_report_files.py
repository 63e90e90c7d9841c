"""What `numloss eval` writes, read back as a person reads it: report.md, results.json, the
console summary and the plots' metadata (each PNG carries what it draws, read back from its
artists: `numloss.evaluate.report.drawn`), for lm-eval samples and for outputs with no answer.
Saved outputs are scored; no model runs (the progress-bar test runs a two-layer tiny model)."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
from PIL import Image
from tqdm import tqdm

from numloss.evaluate.api import evaluate, score_outputs
from numloss.evaluate.cli import print_summary
from numloss.evaluate.generate import HFGenerator
from numloss.evaluate.metrics import wilson_interval
from numloss.evaluate.report import PLACE_NAMES, write_report
from test_eval_generate import scrambled_tiny_model
from test_eval_lmeval import DATA, GSM8K_SAMPLES

PERCENT = re.compile(r"(\d+\.\d) %")
INTERVAL = re.compile(r"\d+\.\d % \(\d+\.\d-\d+\.\d\)")


def plot(path: Path) -> dict:
    """What the PNG at `path` draws (its "numloss" text chunk)."""
    return json.loads(Image.open(path).text["numloss"])


def scored(out: Path, source: Path = GSM8K_SAMPLES, entropy: bool = False) -> tuple[dict, str]:
    """(results.json, report.md) of the lm-eval samples at `source` scored under both protocols and
    written to `out`; `entropy`: with a teacher-forced entropy histogram, as a model run has."""
    report = score_outputs(source, data_dir=DATA)
    for per in report.scores.values() if entropy else ():
        per["gsm8k"].digit_entropy, per["gsm8k"].digit_entropy_histogram = 1.5, [0] * 12 + [3, 1] + [0] * 6
    write_report(out, report)
    return json.loads((out / "results.json").read_text()), (out / "report.md").read_text()


def no_machine_path(text: str, given: Path) -> None:
    """`text` names no absolute path but the one its caller gave (the scored file)."""
    rest = text.replace(str(given), "FILE")
    assert sys.prefix not in rest and str(Path.home()) not in rest
    assert not re.search(r"(?<![\w.])/(?:[\w.@+-]+/)+[\w.@+-]*", rest), re.search(r"(?<![\w.])/(?:[\w.@+-]+/)+[\w.@+-]*", rest)


def every_accuracy_has_its_interval(text: str) -> None:
    """Each accuracy written as a percentage ("66.7 %") is followed by its 95 % interval, and each
    table of accuracies has the interval column."""
    for line in text.splitlines():
        for match in PERCENT.finditer(line):
            assert INTERVAL.match(line, match.start()), line
    headers = [line for line in text.splitlines() if line.startswith("| benchmark | items | accuracy %")]
    assert headers and all("| 95 % interval |" in header for header in headers)


def test_lm_eval_samples_report_says_what_it_read_and_shows_intervals(tmp_path, capsys):
    results, text = scored(tmp_path, entropy=True)
    assert "read as lm-eval samples (task gsm8k as gsm8k; items matched: " in text
    assert results["format"] == "lm-eval samples"
    # three plain-text answers: no program ran, so none is PoT
    for protocol in ("released", "numloss"):
        assert results["benchmarks"][protocol]["gsm8k"]["styles"] == {"cot": 3}
        assert "| gsm8k | 3 | 66.7 | 20.8-93.9 | 3 | 0 / 3 / 0 |" in text
    no_machine_path(text, GSM8K_SAMPLES)
    assert "Program sandbox: " in text
    every_accuracy_has_its_interval(text)
    print_summary(score_outputs(GSM8K_SAMPLES, data_dir=DATA))
    console = [line for line in capsys.readouterr().out.splitlines() if "%" in line]
    assert console[0] == "accuracy % (95 % interval)" and all(INTERVAL.search(line) for line in console[1:])

    # accuracy.png: one point per benchmark and mACC with the table's interval, per protocol
    drawn = plot(tmp_path / "accuracy.png")
    assert [s["label"] for s in drawn["series"]] == ["protocol released", "protocol numloss"]
    for series, protocol in zip(drawn["series"], ("released", "numloss"), strict=True):
        score = results["benchmarks"][protocol]["gsm8k"]
        assert series["values"] == pytest.approx([100 * score["accuracy"], 100 * results["macc"][protocol]])
        assert sum(series["intervals"], []) == pytest.approx([100 * v for v in score["ci95"] + results["macc_ci95"][protocol]])
    assert drawn["xticklabels"] == ["gsm8k\n(3 items)", "mACC"] and drawn["lines"] == []

    # place_accuracy.png: whole places, named, never joined; the title names what is drawn
    drawn = plot(tmp_path / "place_accuracy.png")
    places = results["benchmarks"]["numloss"]["gsm8k"]["place_accuracy"]
    cells = "; ".join(f"{PLACE_NAMES[p['place']]} {100 * p['accuracy']:.1f} % ({100 * lo:.1f}-{100 * hi:.1f}) of {p['total']}"
                      for p in places for lo, hi in [wilson_interval(p["correct"], p["total"])])
    assert f"- gsm8k: accuracy by digit place of the generated answers: {cells}\n" in text
    assert drawn["xticklabels"] == [PLACE_NAMES[p["place"]] for p in places] and drawn["lines"] == []
    assert drawn["title"] == "gsm8k: generated answers by digit place (protocol numloss)"
    (series,) = drawn["series"]
    assert series["x"] == list(range(len(places)))
    assert sum(series["intervals"], []) == pytest.approx([100 * v for p in places for v in wilson_interval(p["correct"], p["total"])])
    for name in ("accuracy.png", "place_accuracy.png"):  # plain tick labels: no offsets, exponents or mathtext
        labels = plot(tmp_path / name)["yticklabels"]
        assert labels == ["0", "20", "40", "60", "80", "100"], labels

    # digit_entropy.png: one benchmark draws no legend, so the title says whose it is, with its digit count and mean
    drawn = plot(tmp_path / "digit_entropy.png")
    assert drawn["title"] == "Teacher-forced digit entropy, gsm8k: 4 digits, mean 1.50 nats" and drawn["legend"] == []
    assert drawn["xticklabels"] == ["0.0", "0.5", "1.0", "1.5", "2.0"] and drawn["yticklabels"][-1] == "1.0"


def test_outputs_with_no_answer_say_there_is_nothing_by_place_and_draw_no_place_plot(tmp_path):
    rows = [json.loads(line) for line in GSM8K_SAMPLES.read_text().splitlines()]
    for row in rows:
        row["resps"] = [["I cannot tell."]]
        row["filtered_resps"] = ["[invalid]"]
    source, out = tmp_path / GSM8K_SAMPLES.name, tmp_path / "none"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stale = out / "place_accuracy.png"
    stale.parent.mkdir()
    stale.write_bytes(b"an earlier report's picture")
    results, text = scored(out, source)
    assert results["benchmarks"]["numloss"]["gsm8k"]["answered"] == 0
    assert "- gsm8k: no numeric answer, so no accuracy by digit place" in text
    assert "accuracy by digit place of the generated answers" not in text and not stale.exists()
    assert sorted(p.name for p in out.iterdir()) == ["accuracy.png", "report.md", "results.json"]
    drawn = plot(out / "accuracy.png")
    assert drawn["series"][1]["values"] == [0.0, 0.0]
    assert sum(drawn["series"][1]["intervals"], []) == pytest.approx([0.0, 100 * wilson_interval(0, 3)[1]] * 2)
    no_machine_path(text, source)
    every_accuracy_has_its_interval(text)


def test_the_progress_bar_total_is_the_items_from_the_start_and_each_moves_it_once(monkeypatch):
    """Each item moves the bar once, not each batch; the chain-of-thought fallbacks of items whose
    program gave nothing are counted beside it, never raising its total mid-run (it went 3 -> 6)."""
    class Bar(tqdm):
        def update(self, n: int = 1) -> None:
            assert n == 1 and self.total == 3, (n, self.total)  # one item; the total never raised
            super().update(n)

    bars: list[Bar] = []
    monkeypatch.setattr(HFGenerator, "_new_bar", lambda self, total: bars.append(Bar(total=total, file=io.StringIO())) or bars[-1])
    report = evaluate(scrambled_tiny_model(), ["svamp"], data_dir=DATA, limit=3, max_new_tokens=3, digit_stats=False,
                      progress=True, allow_unisolated=True, batch_size=2)  # two batches
    fallbacks = report.scores["numloss"]["svamp"].styles.get("pot+cot", 0)
    assert fallbacks > 0, "the case needs fallbacks"
    (bar,) = bars
    assert (bar.total, bar.n, bar.postfix) == (3, 3, f"fallbacks {fallbacks}") and bar.disable  # closed
