"""The HTML report's chart axes: round tick values, on linear and log scales."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from trainlint.verify.report_html import line_chart, ticks  # noqa: E402


@pytest.mark.parametrize("low, high, log, expected", [
    (1, 20, False, [5, 10, 15, 20]),
    (0.31, 0.38, False, [0.32, 0.34, 0.36, 0.38]),
    (-1.5, 2.5, False, [-1, 0, 1, 2]),
    (0.5, 6206, True, [1, 10, 100, 1000]),
    (1e-8, 1e2, True, [1e-8, 1e-5, 1e-2, 10]),
    (3.0, 3.0, False, [3.0]),
])
def test_ticks_are_round_values_inside_the_range(low, high, log, expected):
    assert ticks(low, high, log) == pytest.approx(expected)


def test_a_marker_near_the_right_edge_is_labelled_leftwards():
    values = [1.0] * 19 + [float("nan")]
    svg = line_chart(values, "", [{"step": 20, "text": "non-finite from step 20"}])
    assert 'text-anchor="end" font-size="11" fill="#b3261e">non-finite from step 20' in svg
    svg = line_chart(values, "", [{"step": 2, "text": "spike at step 2"}])
    assert 'text-anchor="start" font-size="11" fill="#b3261e">spike at step 2' in svg
