"""CPU test setup: the real SGLang release under test is on PYTHONPATH (ci/run_cpu_tests.sh puts one
release overlay there per pytest run). Only the GPU-only ``sgl_kernel`` is replaced by a stand-in
(``sglang_specv2_fixes/testing/stubs``, also for child processes: ``child_env``)."""

import json
import os
import subprocess
import sys

import pytest

from sglang_specv2_fixes import installed, releases
from sglang_specv2_fixes.testing import standins

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

standins.use_sgl_kernel_stand_in()

# the opt-in fixes (Fix.opt_in: patched in before a GPU has run them) are planned in the tests like every other fix,
# here and in child processes; their default, switch unset and the fix disabled, is
# test_plugin_load.py::test_opt_in_fixes_stay_out_without_their_switch (and the fixes' own tests set it per case)
from sglang_specv2_fixes.fixes import ALL_FIXES as _ALL_FIXES  # noqa: E402

OPT_IN_SWITCHES = tuple(f.opt_in for f in _ALL_FIXES if f.opt_in)
for _switch in OPT_IN_SWITCHES:
    os.environ[_switch] = "1"
# the mechanism's own tests need a subject when no fix is opt-in (every one's GPU row has met): they make this fix
# opt-in behind a test switch, in this process (a replaced ALL_FIXES) or in a child (opt_in_code, run first)
OPT_IN_SUBJECT, OPT_IN_TEST_SWITCH = "fa3-draft-extend-graph", "SGLANG_SPECV2_FIXES_TEST_OPT_IN"


def opt_in_code(name=OPT_IN_SUBJECT, switch=OPT_IN_TEST_SWITCH):
    """Python source that makes fix ``name`` opt-in behind ``switch`` in a fresh interpreter, before anything plans:
    ALL_FIXES is replaced in place (core, survey and the plugin hold the same list)."""
    return (f"import dataclasses\nfrom sglang_specv2_fixes import fixes as _fixes\n"
            f"_fixes.ALL_FIXES[:] = [dataclasses.replace(f, opt_in={switch!r}) if f.name == {name!r} else f "
            f"for f in _fixes.ALL_FIXES]\n")

VERSION = installed.version()
LINE = releases.code_line(VERSION)


def pytest_report_header(config):
    return f"sglang under test: {VERSION} (code line {LINE}) at {installed.sglang_root()}"


requires_sglang = pytest.mark.skipif(VERSION is None, reason="no sglang release on PYTHONPATH")


def patched_here(fix, target=None):
    """The release table patches ``fix`` on the release under test (with ``target``, a qualname: and that release's
    patch file replaces it)."""
    from sglang_specv2_fixes import patchfile
    from sglang_specv2_fixes.catalog import Patched

    entry = LINE is not None and releases.entry(fix, LINE)
    if not isinstance(entry, Patched):
        return False
    return target is None or any(t.qualname == target for t in patchfile.load(fix, entry.name).targets)


def where_patched(fix, what, target=None):
    """Mark: the test runs ``fix``'s patch for this release (``what``); elsewhere the release table says the fix is
    upstream / not applicable there, so there is no patch to run (the state itself is checked by test_fingerprints).
    ``target`` (a qualname): only where this release's patch replaces it (a fix whose patch files replace different
    functions on different code lines)."""
    state = "unknown release" if LINE is None else getattr(releases.entry(fix, LINE), "state", "patched")
    if state == "patched" and target is not None:
        state = f"patched without {target}"
    return pytest.mark.skipif(not patched_here(fix, target), reason=f"{fix} is {state} on sglang {VERSION}: {what}")


def mixin_layout():
    from sglang_specv2_fixes.testing.scenarios import mixin_layout as m

    return LINE is not None and m(LINE)


MIXIN_ONLY = pytest.mark.skipif(
    not mixin_layout(), reason=f"sglang {VERSION}: no SchedulerOutputProcessorMixin decode path (0.5.13+ layout); "
                               "the stale-case scenario runs on 0.5.11 / 0.5.12.x objects")


def check_fast_plan_replay(fast, stock, width, prefix):
    """flashinfer-draft-extend-graph's sync-free plan (chains' default, trees with =1), one replay of a
    draft-extend graph over requests with ``prefix`` lengths plus one padded request (``fast`` / ``stock``: the recorded
    runs with and without the switch): the plan got host tensors of 0.5.14's fast_prefill_plan layout (qo = arange *
    width, kv = cumsum of seq_lens_cpu), the device kernel's kv indices (equal to the stock plan's), and the capture
    planned as stock. Shared by the 0.5.11 and 0.5.13 code lines' tests."""
    lens = [p + width for p in prefix] + [1]  # the padded request keeps the fill value
    assert fast["replay"]["host"] == [True, True, True]
    assert fast["replay"]["qo_indptr"] == [0, width, 2 * width, 3 * width]
    assert fast["replay"]["kv_indptr"] == [0, lens[0], lens[0] + lens[1], sum(lens)]
    assert fast["replay"]["last_page_len"] == [1, 1, 1] and fast["replay"]["seq_lens"] == lens
    assert fast["replay"]["kv_indices"] == stock["replay"]["kv_indices"]
    assert fast["capture"]["host"] == [False, False, False] and fast["capture"]["seq_lens"] is None
    assert fast["plans"] == {"sync-free": 1}


def child_env(**extra):
    env = standins.child_env(names=("sgl_kernel",))
    env.pop("SGLANG_SPECV2_FIXES", None)
    env.pop("SGLANG_SPECV2_FIXES_PROBE", None)
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def run_script_json(path, timeout=600):
    """Run the file ``path`` as a script in a fresh interpreter (a fresh 'SGLang process'; its ``__main__`` prints
    one JSON line last) and return that JSON; the run must succeed."""
    p = subprocess.run([sys.executable, os.path.abspath(path)], capture_output=True, text=True, timeout=timeout,
                       cwd=ROOT, env=child_env())
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


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


# ------------------------------------------------------------ bench reports (test_profile_steps, test_host_profile)
def write_report_inputs(tmp_path, key, full, plain):
    """Two serving.py results files for the report tests: ``full`` as it is and ``plain`` without ``key``
    ("profiles" / "host_profiles"); returns {"full": path, "plain": path}."""
    import json

    del plain[key]
    paths = {}
    for name, r in (("full", full), ("plain", plain)):
        paths[name] = str(tmp_path / f"{name}.json")
        json.dump(r, open(paths[name], "w"))
    return paths


def as_other_config(r, key):
    """A copy of results ``r`` whose only configuration tree-topk8 (and its ``key`` entries) is renamed tree-topk4:
    a second part for ``plot.merge``."""
    import copy

    b = copy.deepcopy(r)
    b["configs"] = {"tree-topk4": b["configs"].pop("tree-topk8")}
    b[key] = [dict(x, config="tree-topk4") for x in b[key]]
    return b


def serving_dry_run(*extra):
    """``bench/serving.py --real-size --dry-run`` of tree-topk4 and tree-topk8 at 4 s points plus ``extra``:
    (its output, its rough time in seconds)."""
    import re

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(x for x in (ROOT, os.environ.get("PYTHONPATH")) if x))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "serving.py"), "--real-size", "--dry-run",
                        "--configs", "tree-topk4,tree-topk8", "--point-seconds", "4", *extra], capture_output=True,
                       text=True, timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout, float(re.search(r"rough time: (\d+)s", p.stdout).group(1))
