"""The testbed's endpoints on hand-worked cases: place accuracy of a generated number (aligned by
place value) and the signed-log MAE (mean |slog(pred) - slog(gold)|, slog(x) = sign(x) ln(1+|x|)),
as the runner records them for every run."""

from __future__ import annotations

import math

import pytest

from numloss.evaluate.metrics import numeric_distance, place_accuracy


def _by_place(preds, golds):
    return {e.place: (e.correct, e.total) for e in place_accuracy(preds, golds)}


def test_place_accuracy_multiplication_answers() -> None:
    # 48*57=2736 -> "2856"; 10*34=340 -> "340"; 23*62=1426 -> "1466"; 11*9=99 -> no number
    preds = [2856.0, 340.0, 1466.0, None]
    golds = ["2736", "340", "1426", "99"]
    assert _by_place(preds, golds) == {
        3: (2, 2),  # thousands: 2 = 2, 1 = 1; 340 and 99 have no thousands digit
        2: (2, 3),  # hundreds: 8 vs 7 wrong, 3 = 3, 4 = 4
        1: (1, 4),  # tens: 5 vs 3, 4 = 4, 6 vs 2, none vs 9
        0: (3, 4),  # units: 6, 0, 6 right; the missing answer wrong
    }


def test_place_accuracy_aligns_by_place_not_by_position() -> None:
    # a dropped leading digit: "736" for 2736 is wrong only at the thousands (places, not positions)
    assert _by_place([736.0], ["2736"]) == {3: (0, 1), 2: (1, 1), 1: (1, 1), 0: (1, 1)}
    # decimals: 3.1 for 3.14 misses the second decimal; 3.15 has it wrong
    assert _by_place([3.1, 3.15], ["3.14", "3.14"]) == {0: (2, 2), -1: (2, 2), -2: (0, 2)}
    # a longer prediction is not punished at places the gold lacks
    assert _by_place([12736.0], ["2736"]) == {3: (1, 1), 2: (1, 1), 1: (1, 1), 0: (1, 1)}


def test_signed_log_mae_hand_worked() -> None:
    preds = [2856.0, 340.0, 1466.0, None]
    golds = [2736.0, 340.0, 1426.0, 99.0]
    distance = numeric_distance(preds, golds)
    expected = (math.log(2857 / 2737) + 0.0 + math.log(1467 / 1427)) / 3  # the missing item left out
    assert distance.signed_log_mae == pytest.approx(expected, rel=1e-12)
    assert distance.mae == pytest.approx((120 + 0 + 40) / 3)
    assert distance.missing == 1
    # sign matters: -5 against 5 is 2 ln 6 apart; 0 against 0 is 0
    assert numeric_distance([-5.0, 0.0], [5.0, 0.0]).signed_log_mae == pytest.approx(math.log(6))
    # a factor-10 error costs about ln 10 whatever the size
    assert numeric_distance([27360.0], [2736.0]).signed_log_mae == pytest.approx(math.log(27361 / 2737))
    assert math.isnan(numeric_distance([None], [1.0]).signed_log_mae)
