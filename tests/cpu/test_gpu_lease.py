"""ci/gpu/lease.sh, the steps of a GPU lease (one device call each): it refuses to run without the commit it records,
names its steps on a wrong one, returns from ``poll`` as soon as the benchmark's log says it ended, and ``collect``
brings a benchmark back with its oversized logs cut (a device call returns limited files)."""

import os
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.release_independent  # ci/run_cpu_tests.sh: on the first anchor release only

SCRIPT = os.path.join(ROOT, "ci", "gpu", "lease.sh")
STEPS = ("bundle", "combine", "fa3-parts", "xgrammar", "outlines", "flashmla", "unpack", "add", "inst", "rows", "arows",
         "queue", "run", "matrix", "models", "bench", "wait", "poll", "collect", "status")


def lease(*args, env=None, timeout=120):
    full = {**os.environ, "SPECV2_COMMIT": "abc1234", **(env or {})}
    return subprocess.run(["bash", SCRIPT, *args], cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=timeout)


def test_the_commit_is_required():
    env = {k: v for k, v in os.environ.items() if k != "SPECV2_COMMIT"}
    p = subprocess.run(["bash", SCRIPT, "status"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "SPECV2_COMMIT" in p.stderr


def test_an_unknown_step_lists_every_step():
    p = lease("no-such-step")
    assert p.returncode == 2
    listed = [line.split()[1] for line in p.stderr.splitlines() if line.startswith("#   ")]
    assert tuple(listed) == STEPS, p.stderr


def test_poll_returns_once_the_benchmark_ended(tmp_path):
    bench = tmp_path / "bench-x"
    bench.mkdir()
    (bench / "run.log").write_text("[real_size_report] 0.5.11 TP1 default c=8: b/a 1.123 over 3 pairs\nexit 0\n")
    # 600 s to wait unless the log's "exit" line ends it: the subprocess's own limit is far below that
    p = lease("poll", "600", "x", env={"BENCH_ROOT": str(tmp_path)}, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "1.123 over 3 pairs" in p.stdout and "exit 0" in p.stdout


def test_collect_cuts_oversized_logs(tmp_path):
    root, out = tmp_path / "root", tmp_path / "out"
    (root / "bench-x" / "parts").mkdir(parents=True)
    out.mkdir()
    long_line = "y" * 5000
    (root / "bench-x" / "parts" / "server.log").write_text((long_line + "\n") * 600)  # 3 MB
    (root / "bench-x" / "results.json").write_text('{"points": []}')
    p = lease("collect", "x", "missing", env={"BENCH_ROOT": str(root), "OUT": str(out)})
    assert p.returncode == 0, p.stderr
    lines = (out / "bench-x" / "parts" / "server.log").read_text().splitlines()
    assert len(lines) == 600 and {len(line) for line in lines} == {2000}
    assert (out / "bench-x" / "results.json").read_text() == '{"points": []}'
    assert not (out / "bench-missing").exists()


@pytest.mark.parametrize("env, gpus, slots, timeout, tests", [
    ({}, "0", "8", "600", None),
    ({"ROWS_GPUS": "1", "ROWS_SLOTS": "6", "ROWS_TIMEOUT": "900", "ROWS_TESTS": "TestX"}, "1", "6", "900", "TestX")])
def test_rows_queue_both_modes_on_the_chosen_gpu(tmp_path, env, gpus, slots, timeout, tests):
    # a python3 on PATH that records its arguments stands in for ci/gpu/bg.py (which would unpack a bundle)
    fake, log = tmp_path / "bin", tmp_path / "calls"
    fake.mkdir()
    (fake / "python3").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (fake / "python3").chmod(0o755)
    p = lease("rows", "0.5.14", "test_a.py", "test_b.py",
              env={**env, "PATH": f"{fake}:{os.environ['PATH']}"})
    assert p.returncode == 0, p.stderr
    calls = log.read_text().splitlines()
    assert [c.split(" --modes ")[1].split()[0] for c in calls] == ["off", "auto"]
    for c in calls:
        assert c.startswith("ci/gpu/bg.py start 0.5.14 test_a.py test_b.py --modes ")
        assert f"--gpus {gpus}" in c and f"--slots {slots}" in c and f"--timeout {timeout}" in c
        assert (f"--tests {tests}" in c) if tests else ("--tests" not in c)


def test_every_script_the_lease_runs_is_there():
    """The lease's steps, ci/gpu/bg.py's row command and the benchmarks call each other by path from the repo root:
    every ci/ and bench/ path they name exists (a moved script would only show on the GPU machine)."""
    import re

    named = set()
    for f in ("ci/gpu/lease.sh", "ci/gpu/bg.py", "ci/gpu/prepare.sh", "bench/gpu_bench.sh", "bench/gpu_real_size.sh"):
        named |= set(re.findall(r"\b((?:ci|bench)/[\w/.-]+\.(?:sh|py))\b", open(os.path.join(ROOT, f)).read()))
    assert {"ci/gpu/prepare.sh", "ci/gpu/bg.py", "ci/run_registered.py", "ci/gpu/env.sh"} <= named, named
    assert [p for p in sorted(named) if not os.path.exists(os.path.join(ROOT, p))] == []
    for script in ("make_bundle_slim.sh", "make_combined_bundle.sh", "make_fa3_parts.sh", "make_xgrammar_overlay.sh",
                   "make_outlines_overlay.sh"):
        assert f'"$HERE/{script}"' in open(SCRIPT).read() and os.path.exists(os.path.join(ROOT, "ci", "gpu", script))


def test_run_and_matrix_need_no_commit(tmp_path):
    """``run`` / ``matrix`` record nothing of their own (the runner writes the results): no SPECV2_COMMIT needed; the
    background steps keep asking for it (test_the_commit_is_required)."""
    env = {k: v for k, v in os.environ.items() if k != "SPECV2_COMMIT"}
    p = subprocess.run(["bash", SCRIPT, "run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "usage: run RELEASE" in p.stderr and "SPECV2_COMMIT" not in p.stderr, p.stderr
