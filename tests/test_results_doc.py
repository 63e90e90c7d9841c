"""docs/results.md quotes the records: every generated block is what numloss.compare.results_doc
computes from results/ now, and the page keeps its reference shape."""

from __future__ import annotations

import re

from numloss.compare import results_doc


def test_every_generated_block_matches_the_records() -> None:
    text = results_doc.DOC.read_text()
    names = re.findall(r"<!-- results:([a-z0-9-]+):begin -->", text)
    assert set(names) == set(results_doc.RENDERERS), "every renderer has its block and no block is unknown"
    rendered = results_doc.render(text)
    if rendered != text:  # name the first block that differs
        for match in results_doc.BLOCK.finditer(text):
            again = results_doc.BLOCK.search(rendered, match.start())
            assert again and again["body"] == match["body"], (
                f"docs/results.md block {match['name']!r} differs from the records; "
                "run python -m numloss.compare.results_doc")
    assert rendered == text


def test_the_page_reads_as_a_reference() -> None:
    text = results_doc.DOC.read_text()
    assert len(text.splitlines()) <= 250
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Does DEL help?", "the first screen answers the question"
    assert "## SmolLM2-135M-Instruct, LoRA, on arithmetic word problems" in headings, "the pretrained arm's section"
    assert not re.search(r"\bissue \d+|\bsession", text, re.I), "no internal issue numbers or sessions"
