"""The GPU serving benchmark harness on CPU: bench/serving_selftest.py parses the installed release's real
bench_serving output format, checks every flag the harness passes exists in that release, and runs the
whole harness against fake servers (with the real bench_serving in-process) including a budget cut."""

import os
import subprocess
import sys

from conftest import ROOT, requires_sglang

pytestmark = requires_sglang


def test_serving_harness_selftest_on_the_release():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "serving_selftest.py"), "--e2e"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0 and "[selftest] all checks passed" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
