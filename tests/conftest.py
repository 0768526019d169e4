"""Test-wide settings: the machine model's costs come from tecomp's table or its defaults,
never from a timing taken during the run (``TECOMP_CALIBRATE=0``; tests/test_calibrate.py
sets the mode it tests), so that a schedule does not depend on how busy the machine was."""
import os

os.environ.setdefault("TECOMP_CALIBRATE", "0")
