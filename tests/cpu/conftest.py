"""CPU test setup: the real SGLang release under test is on PYTHONPATH (ci/run_cpu_tests.sh puts one
release overlay there per pytest run). Only the GPU-only ``sgl_kernel`` is replaced by a stand-in."""

import importlib.util
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
STUBS = os.path.join(HERE, "stubs")
ROOT = os.path.dirname(os.path.dirname(HERE))

if importlib.util.find_spec("sgl_kernel") is None:
    sys.path.append(STUBS)

from sglang_specv2_fixes import release  # noqa: E402

VERSION = release.installed_version()
LINE = release.code_line(VERSION)


def pytest_report_header(config):
    return f"sglang under test: {VERSION} (code line {LINE}) at {release.sglang_root()}"


requires_sglang = pytest.mark.skipif(VERSION is None, reason="no sglang release on PYTHONPATH")


def child_env(**extra):
    env = dict(os.environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if STUBS not in paths and importlib.util.find_spec("sgl_kernel").origin.startswith(STUBS):
        paths.append(STUBS)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("SGLANG_SPECV2_FIXES", None)
    env.pop("SGLANG_SPECV2_FIXES_PROBE", None)
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def run_py(code, timeout=240, **env):
    """Run python code in a fresh interpreter (a fresh 'SGLang process') and return CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=child_env(**env), cwd=ROOT
    )


def own_setup_class(case):
    """The row's own setUpClass function that SGLang's CustomTestCase wrapped (``safe_setUpClass`` keeps it in
    its closure), or None when setUpClass is not CustomTestCase-wrapped."""
    setup = case.setUpClass.__func__
    if not getattr(setup, "_safe_setup_wrapped", False):
        return None
    (orig,) = [c.cell_contents for c in setup.__closure__ if callable(c.cell_contents)]
    return orig
