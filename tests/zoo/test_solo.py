"""zoo.solo, the fair timing method: each framework alone in a fresh process
with the environment as given; the interleaved figure under PASSIVE OpenMP;
block medians summarised as median and range."""
import os

import pytest

from neoflow.zoo import solo


def test_summary_is_the_median_of_block_medians_with_their_range():
    assert solo.summarize([3.0, 1.0, 2.0, 10.0, 2.5]) == {
        "median_ms": 2.5, "spread_ms": [1.0, 10.0], "block_ms": [3.0, 1.0, 2.0, 10.0, 2.5]}


def test_a_framework_alone_runs_in_its_own_process_with_default_threading(monkeypatch):
    for key in solo.PASSIVE_ENV:
        monkeypatch.delenv(key, raising=False)
    figure = solo.run_alone("lltm", "neoflow", "small", steps=2, blocks=3)
    assert figure["omp_env"] == {key: None for key in solo.PASSIVE_ENV}
    assert len(figure["block_ms"]) == 3
    assert figure["spread_ms"][0] <= figure["median_ms"] <= figure["spread_ms"][1]


def test_the_interleaved_figure_runs_under_passive_openmp(monkeypatch):
    for key in solo.PASSIVE_ENV:
        monkeypatch.delenv(key, raising=False)
    figures = solo.run_interleaved("lltm", ["neoflow", "eager"], "small", steps=2, blocks=1)
    assert figures["omp_env"] == solo.PASSIVE_ENV
    assert figures["neoflow"]["median_ms"] > 0 and figures["eager"]["median_ms"] > 0


def test_a_failing_child_is_reported_with_its_last_error_line():
    with pytest.raises(RuntimeError, match="no network 'nonesuch'"):
        solo.run_alone("nonesuch", "eager", "small", steps=1, blocks=1)


def test_an_unknown_framework_is_refused():
    with pytest.raises(ValueError, match="framework must be one of"):
        solo.measure("lltm", "jax", "small", steps=1, blocks=1)
