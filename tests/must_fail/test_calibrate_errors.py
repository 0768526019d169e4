"""Mistakes with the machine calibration (tecomp.calibration): a TargetError that
names the setting or the target and says what to do."""
import pytest

import tecomp as tc


def test_unknown_mode(monkeypatch):
    monkeypatch.setenv("TECOMP_CALIBRATE", "sometimes")
    with pytest.raises(tc.TargetError, match=r"TECOMP_CALIBRATE='sometimes' is not one of "
                                             r"auto, 0, off, force: it sets when tecomp "
                                             r"measures the host CPU's costs.*unset it"):
        tc.Target("llvm").machine


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mtriple=aarch64-linux-gnu",
                                    "cuda-emu"])
def test_calibrating_another_machine(target):
    with pytest.raises(tc.TargetError, match=r"cannot calibrate .*: only this machine's own "
                                             r"CPU can be measured \(tc.Target\('llvm'\)\)"):
        tc.calibration.calibrate(target, save=False)


def test_calibrating_something_that_is_no_target():
    with pytest.raises(tc.TargetError, match=r"a target is a string or a tc.Target, got int"):
        tc.calibration.calibrate(3, save=False)


@pytest.mark.parametrize("rounds", [0, 101, 2.5, True, "3"])
def test_bad_rounds(rounds):
    with pytest.raises(tc.TargetError, match=r"calibrate\(rounds=.*\): give an int from 1 "
                                             r"to 100"):
        tc.calibration.calibrate(rounds=rounds, save=False)
