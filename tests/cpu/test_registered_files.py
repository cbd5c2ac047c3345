"""CI check that every registered GPU test file parses and registers (the GPU runs happen on the device)."""

import glob
import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "ci"))
import run_registered  # noqa: E402


def test_every_registered_file_registers():
    files = glob.glob(os.path.join(ROOT, "tests", "registered", "test_*.py"))
    assert files
    for path in files:
        reg = run_registered.registration(path)
        assert reg["suite"] and reg["est_time"] > 0
        assert set(reg["bug_in"]) <= set(reg["releases"]), path
        compile(open(path).read(), path, "exec")
