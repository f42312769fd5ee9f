"""Shared by the schedule tests: pin the SIMD target."""
import pytest


@pytest.fixture
def avx2(monkeypatch):
    """Build for AVX2's 32-byte vectors (16 registers) whatever the machine:
    for tests whose sizes were chosen around 8 float lanes (a 16-column
    register tile, 8 or 16 channels a channel tile) and that check those
    AVX2 schedules. tests/schedule/test_target.py covers both widths."""
    monkeypatch.setenv("NEOFLOW_VECTOR_BYTES", "32")
