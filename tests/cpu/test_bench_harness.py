"""The GPU serving benchmark harness on CPU: bench/serving_selftest.py parses the installed release's real
bench_serving output format, checks every flag the harness passes exists in that release, and runs the
whole harness against fake servers (with the real bench_serving in-process) including a budget cut."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT, requires_sglang

pytestmark = requires_sglang


@pytest.mark.serial  # fake servers and run budgets: alone on the machine (ci/run_cpu_tests.sh)
def test_serving_harness_selftest_on_the_release():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "serving_selftest.py"), "--e2e"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0 and "[selftest] all checks passed" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]


def test_plot_merges_parts_run_on_several_gpus():
    """bench/gpu_real_size.sh --split (gpu_bench_all.sh too) runs a release's configurations as parts on several
    GPUs; plot.py --merge makes one results.json of them (checked on a committed real run, split by configuration)."""
    import copy
    import json

    import pytest

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import plot

    real = json.load(open(os.path.join(ROOT, "tests", "cpu", "data", "serving-0.5.11-results.json")))
    names = list(real["configs"])
    assert len(names) >= 2
    parts = []
    for k, name in enumerate(names):
        p = copy.deepcopy(real)
        p["configs"] = {name: real["configs"][name]}
        p["meta"].update(cuda_visible_devices=str(k), elapsed_s=100.0 + k, complete=k == 0,
                         stop_reason=None if k == 0 else "budget", points=6, points_failed=0)
        p["meta"]["args"] = dict(p["meta"]["args"], configs=[name])
        parts.append(p)
    merged = plot.merge(parts)
    assert list(merged["configs"]) == names and merged["configs"] == real["configs"]
    assert merged["meta"]["complete"] is False and merged["meta"]["elapsed_s"] == 100.0 + len(names) - 1
    assert merged["meta"]["points"] == 6 * len(names)
    md = plot.markdown(merged)
    assert f"Run as {len(names)} parts side by side" in md and f"GPU 0: {names[0]} (100 s)" in md
    assert "INCOMPLETE: budget" in md
    assert plot.summarize(merged) == plot.summarize(real)  # the table rows are the real run's
    with pytest.raises(ValueError, match="more than one part"):
        plot.merge([parts[0], parts[0]])
    other = copy.deepcopy(parts[1])
    other["meta"]["sglang"] = "0.0.1"
    with pytest.raises(ValueError, match="different releases"):
        plot.merge([parts[0], other])


@pytest.mark.release_scoped  # the decode step of every release layout (mixin up to 0.5.12.x, processor from 0.5.13)
def test_hot_path_overhead_benchmark_runs_on_the_release():
    """bench/hot_path_overhead.py (a benchmark: no timing is asserted) times the release's real
    process_batch_result_decode against the plugin's body on the CPU tests' scenario; it must keep running."""
    import json

    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "hot_path_overhead.py"), "-n", "100"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    res = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    case = res["cases"]["process_batch_result_decode"]
    assert case["stock_us"] > 0 and case["plugin_us"] > 0


def test_import_overhead_benchmark_splits_the_cost():
    import json

    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "import_overhead.py"), "-n", "1"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    res = json.loads(p.stdout.splitlines()[-1])
    from conftest import LINE, patched_here

    from sglang_specv2_fixes import patchfile, releases
    from sglang_specv2_fixes.fixes import ALL_FIXES

    # distinct functions: composed patch files (two fixes on one function) build and hook it once
    targets = {(t.module, t.qualname) for f in ALL_FIXES if patched_here(f.name)
               for t in patchfile.load(f.name, releases.entry(f.name, LINE).name).targets}
    assert targets and res["hooked_targets"] >= len(targets)  # the plugin hooked its targets ...
    # ... and none pays SGLang's sys.modules walk: class-method targets skip it, module-level functions
    # (run_eagle_verify 0.5.16+, set_mamba_track_indices_from_reqs 0.5.13+) get the plugin's lookup by name
    # (plugin._install_fast_propagate; test_plugin_load checks that it replaces every imported copy)
    assert res["hook_registry_walks"] == 0
    assert abs(res["plugin_own_ms"] + res["hook_registry_propagate_ms"] - res["added_ms"]) < 1e-6
    # the patched plain defs are compiled on their first call, not at start: counted, and what they cost apart
    assert 0 < res["deferred_functions"] <= res["hooked_targets"]
    assert set(res["first_call_compile_ms"]) == {"cold", "warm"} and res["first_call_compile_ms"]["cold"] > 0
