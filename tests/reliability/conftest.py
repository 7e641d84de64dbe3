"""Shared helpers of the reliability suite.

Every test records what it tried and what it observed with the `observe` fixture; the values land in the
JUnit XML as test properties, which `python -m relaxspec.reliability` turns into docs/RELIABILITY.md.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def observe(record_property):
    """``observe(section, item, expected, observed)``: record one row of the reliability table."""

    def _observe(section: str, item: str, expected: str, observed: str) -> None:
        record_property("section", section)
        record_property("item", item)
        record_property("expected", expected)
        record_property("observed", " ".join(str(observed).split())[:1500])

    return _observe
