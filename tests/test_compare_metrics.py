"""The testbed's endpoints where the multiplication answers need more than tests/test_eval_metrics.py
checks (alignment by place value, a missing answer, the signed-log MAE by hand): a longer prediction
is judged only at the gold's places, and a factor-10 error costs about ln 10."""

from __future__ import annotations

import math

import pytest

from numloss.evaluate.metrics import numeric_distance, place_accuracy


def test_a_longer_prediction_and_a_factor_ten_error() -> None:
    by_place = {e.place: (e.correct, e.total) for e in place_accuracy([12736.0, 736.0], ["2736", "2736"])}
    # 12736 is not punished at the ten-thousands 2736 lacks; 736 is wrong only at the thousands
    assert by_place == {3: (1, 2), 2: (2, 2), 1: (2, 2), 0: (2, 2)}
    assert numeric_distance([27360.0], [2736.0]).signed_log_mae == pytest.approx(math.log(27361 / 2737))
