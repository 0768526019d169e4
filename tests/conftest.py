"""Test-wide settings: the machine model's costs come from tecomp's table or its defaults,
never from a timing taken during the run (``TECOMP_CALIBRATE=0``; tests/test_calibrate.py
sets the mode it tests), so that a schedule does not depend on how busy the machine was.

A test (or a ``pytest.param``) marked ``@pytest.mark.slow`` is skipped unless
``TECOMP_LONG_TESTS=1``: the exhaustive variants of a matrix whose representative cases
run by default."""
import os

import pytest

os.environ.setdefault("TECOMP_CALIBRATE", "0")

LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    if LONG:
        return
    skip = pytest.mark.skip(reason="slow: set TECOMP_LONG_TESTS=1")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
