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
        assert reg["releases"] and set(reg["bug_in"]) <= set(reg["releases"]), path
        assert "sys.path" not in open(path).read(), path  # the helpers are the installed sglang_specv2_fixes.testing
        compile(open(path).read(), path, "exec")


def test_registration_names_release_sets():
    """A row names release sets (resolved through releases.release_set); literal version lists still work."""
    from sglang_specv2_fixes.releases import release_set
    from sglang_specv2_fixes.testing.registry import resolve

    assert resolve("fix:tree-drafting") == release_set("fix:tree-drafting")
    assert resolve(["0.5.11"]) == resolve(("0.5.11",)) == ["0.5.11"]
    reg = run_registered.registration(os.path.join(ROOT, "tests", "registered", "test_stale_overlap_updates.py"))
    assert reg["releases"] == release_set("patched&gpu&up-to:0.5.12.post1") == ["0.5.11", "0.5.12", "0.5.12.post1"]
    assert reg["bug_in"] == release_set("fix:skip-stale-overlap-updates")


def test_runner_runs_files_in_parallel_and_reports_verdicts(tmp_path):
    """The GPU runner itself, on dummy registered files: A/B verdicts, timeouts, --jobs, reports."""
    import json
    import subprocess

    from conftest import VERSION

    reg = tmp_path / "reg"
    reg.mkdir()
    head = "from sglang_specv2_fixes.testing.registry import register_specv2_ci\nimport os, sys, time\n"
    body = {
        # stock fails where the bug is (an assertion), plugin passes: as expected
        "test_bug.py": (f"register_specv2_ci(est_time=5, suite='specv2-gpu', releases=['{VERSION}'], bug_in=['{VERSION}'])\n"
                        "if __name__ == '__main__':\n    assert os.environ['SPECV2_AB'] != 'off', 'the bug'\n"),
        # stock fails without an assertion (its server never started): as expected by exit code, flagged in the report
        "test_port.py": (f"register_specv2_ci(est_time=5, suite='specv2-gpu', releases=['{VERSION}'], bug_in=['{VERSION}'])\n"
                         "if __name__ == '__main__':\n    sys.exit(1 if os.environ['SPECV2_AB'] == 'off' else 0)\n"),
        # a guard row (a release set, not a list) that fails with the plugin: UNEXPECTED
        "test_guard.py": ("register_specv2_ci(est_time=9, suite='specv2-gpu', releases='all')\n"
                          "if __name__ == '__main__':\n    sys.exit(0 if os.environ['SPECV2_AB'] == 'off' else 1)\n"),
        "test_hang.py": (f"register_specv2_ci(est_time=1, suite='specv2-gpu', releases=['{VERSION}'])\n"
                         "if __name__ == '__main__':\n    time.sleep(60)\n"),
        # --gpus: each file's processes see exactly one of the runner's GPUs
        "test_gpu.py": (f"register_specv2_ci(est_time=2, suite='specv2-gpu', releases=['{VERSION}'])\n"
                        "if __name__ == '__main__':\n    sys.exit(0 if os.environ.get('CUDA_VISIBLE_DEVICES') in ('7', '9') else 1)\n"),
        # gpus=2 (a --tp-size 2 row): both of the runner's GPUs, for both modes
        "test_two_gpus.py": (f"register_specv2_ci(est_time=2, suite='specv2-gpu', releases=['{VERSION}'], gpus=2)\n"
                             "if __name__ == '__main__':\n    sys.exit(0 if sorted(os.environ.get('CUDA_VISIBLE_DEVICES', '').split(',')) == ['7', '9'] else 1)\n"),
        "test_other_release.py": ("register_specv2_ci(est_time=1, suite='specv2-gpu', releases=['0.0.1'])\n"
                                  "if __name__ == '__main__':\n    sys.exit(1)\n"),
    }
    for name, text in body.items():
        (reg / name).write_text(head + text)
    out = tmp_path / "out"
    env = {**os.environ, "SPECV2_REG_DIR": str(reg)}
    p = subprocess.run([sys.executable, os.path.join(ROOT, "ci", "run_registered.py"), "--out", str(out),
                        "--jobs", "3", "--timeout", "8", "--gpus", "7,9"], env=env, capture_output=True, text=True, timeout=120)
    res = json.loads((out / "results.json").read_text())
    got = {(r["file"], r["mode"]): (r["passed"], r["verdict"]) for r in res["results"]}
    assert got == {
        ("test_bug.py", "off"): (False, "as expected"), ("test_bug.py", "auto"): (True, "as expected"),
        ("test_port.py", "off"): (False, "as expected"), ("test_port.py", "auto"): (True, "as expected"),
        ("test_guard.py", "off"): (True, "as expected"), ("test_guard.py", "auto"): (False, "UNEXPECTED"),
        ("test_hang.py", "off"): (False, "UNEXPECTED"), ("test_hang.py", "auto"): (False, "UNEXPECTED"),
        ("test_gpu.py", "off"): (True, "as expected"), ("test_gpu.py", "auto"): (True, "as expected"),
        ("test_two_gpus.py", "off"): (True, "as expected"), ("test_two_gpus.py", "auto"): (True, "as expected"),
    }, p.stdout + p.stderr
    assert res["gpus"] == ["7", "9"] and res["jobs"] == 3 and res["wall_s"] >= 8
    assert [r["rc"] for r in res["results"] if r["file"] == "test_hang.py"] == ["timeout", "timeout"]
    assert {r["limit_s"] for r in res["results"]} == {8}  # --timeout: every file's limit
    assert p.returncode == 1
    md = (out / "results.md").read_text()
    assert "3 files at a time over GPUs 7,9, wall clock" in md
    assert "| test_bug.py | FAIL (rc=1) | pass | stock fails, plugin passes: met |" in md
    assert "| test_port.py | FAIL (rc=1, no assertion failed: read its log) | pass |" in md
    asserted = {(r["file"], r["mode"]): r["asserted"] for r in res["results"]}
    assert asserted[("test_bug.py", "off")] is True and asserted[("test_port.py", "off")] is False
    assert asserted[("test_bug.py", "auto")] is None
    assert "test_guard.py | pass | FAIL (rc=1) | both pass: NOT MET" in md


def test_row_limit_follows_est_time():
    """Without --timeout a file may run its est_time with a 25 % margin, at least TIMEOUT_FLOOR; --timeout is every
    file's limit. Every registered row's default limit is above its est_time."""
    limit = run_registered.row_timeout
    assert run_registered.TIMEOUT_FLOOR == 400
    assert [limit({"est_time": e}) for e in (1, 300, 320, 321, 400, 480)] == [400, 400, 400, 402, 500, 600]
    assert limit({"est_time": 480}, 330) == 330 and limit({"est_time": 5}, 8) == 8
    for path in glob.glob(os.path.join(ROOT, "tests", "registered", "test_*.py")):
        reg = run_registered.registration(path)
        assert limit(reg) >= 1.25 * reg["est_time"], (path, reg["est_time"], limit(reg))


def test_runner_limits_each_file_by_its_est_time(tmp_path):
    """No --timeout: each file's runs get its own limit (results.json ``limit_s``, the value the runner enforces)."""
    import json
    import subprocess

    from conftest import VERSION

    reg = tmp_path / "reg"
    reg.mkdir()
    head = "from sglang_specv2_fixes.testing.registry import register_specv2_ci\n"
    for name, est in (("test_short.py", 2), ("test_long.py", 480)):
        (reg / name).write_text(head + f"register_specv2_ci(est_time={est}, suite='specv2-gpu', releases=['{VERSION}'])\n"
                                "if __name__ == '__main__':\n    pass\n")
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "ci", "run_registered.py"), "--out", str(out), "--jobs", "2"],
                       env={**os.environ, "SPECV2_REG_DIR": str(reg)}, capture_output=True, text=True, timeout=120)
    res = {(r["file"], r["mode"]): (r["rc"], r["limit_s"]) for r in json.loads((out / "results.json").read_text())["results"]}
    assert res == {("test_short.py", "off"): (0, 400), ("test_short.py", "auto"): (0, 400),
                   ("test_long.py", "off"): (0, 600), ("test_long.py", "auto"): (0, 600)}, p.stdout + p.stderr
    assert "test_long.py: modes ['off', 'auto'] (est 480s, limit 600s" in p.stdout


def test_runner_budget_kills_and_skips(tmp_path):
    import json
    import subprocess

    from conftest import VERSION

    reg = tmp_path / "reg"
    reg.mkdir()
    head = "from sglang_specv2_fixes.testing.registry import register_specv2_ci\nimport time\n"
    (reg / "test_long.py").write_text(head + f"register_specv2_ci(est_time=2, suite='specv2-gpu', releases=['{VERSION}'])\n"
                                      "if __name__ == '__main__':\n    time.sleep(60)\n")
    (reg / "test_too_big.py").write_text(head + f"register_specv2_ci(est_time=500, suite='specv2-gpu', releases=['{VERSION}'])\n"
                                         "if __name__ == '__main__':\n    pass\n")
    out = tmp_path / "out"
    subprocess.run([sys.executable, os.path.join(ROOT, "ci", "run_registered.py"), "--out", str(out), "--jobs", "2",
                    "--budget", "20"], env={**os.environ, "SPECV2_REG_DIR": str(reg)}, capture_output=True, timeout=120)
    res = {(r["file"], r["mode"]): r["rc"] for r in json.loads((out / "results.json").read_text())["results"]}
    assert res == {("test_long.py", "off"): "budget", ("test_long.py", "auto"): "budget",
                   ("test_too_big.py", "off"): "not run", ("test_too_big.py", "auto"): "not run"}
    assert "| test_too_big.py | not run | not run | (run budget) |" in (out / "results.md").read_text()


def test_runner_runs_only_the_selected_tests(tmp_path):
    """--tests PATTERN: unittest's -k in each mode, so one class of a file runs (the other's setUpClass not at all)."""
    import json
    import subprocess

    from conftest import VERSION

    reg = tmp_path / "reg"
    reg.mkdir()
    (reg / "test_two.py").write_text(
        "import os, unittest\nfrom sglang_specv2_fixes.testing.registry import register_specv2_ci\n"
        f"register_specv2_ci(est_time=2, suite='specv2-gpu', releases=['{VERSION}'])\n"
        "class TestChain(unittest.TestCase):\n"
        "    @classmethod\n    def setUpClass(cls):\n        raise RuntimeError('the chain class ran')\n"
        "    def test_0(self):\n        pass\n"
        "class TestChainTree(unittest.TestCase):\n"
        "    def test_0(self):\n        open(os.path.join(os.environ['MARK'], os.environ['SPECV2_AB']), 'w').close()\n"
        "if __name__ == '__main__':\n    unittest.main()\n")
    out, mark = tmp_path / "out", tmp_path / "mark"
    mark.mkdir()
    p = subprocess.run([sys.executable, os.path.join(ROOT, "ci", "run_registered.py"), "--out", str(out),
                        "--tests", "TestChainTree"], env={**os.environ, "SPECV2_REG_DIR": str(reg), "MARK": str(mark)},
                       capture_output=True, text=True, timeout=120)
    res = json.loads((out / "results.json").read_text())
    assert [(r["mode"], r["passed"]) for r in res["results"]] == [("off", True), ("auto", True)], p.stdout + p.stderr
    assert sorted(os.listdir(mark)) == ["auto", "off"] and res["tests"] == ["TestChainTree"]
    assert "only tests matching TestChainTree" in (out / "results.md").read_text()
    # a pattern that selects nothing fails the row, and a stock side expected to fail does not read as the bug
    # (unittest before 3.12 exits 0 when it ran no test)
    (reg / "test_two.py").write_text((reg / "test_two.py").read_text().replace("releases=[", "bug_in=['%s'], releases=["
                                                                              % VERSION))
    subprocess.run([sys.executable, os.path.join(ROOT, "ci", "run_registered.py"), "--out", str(out),
                    "--tests", "NoSuchClass"], env={**os.environ, "SPECV2_REG_DIR": str(reg), "MARK": str(mark)},
                   capture_output=True, timeout=120)
    res = json.loads((out / "results.json").read_text())["results"]
    assert [(r["mode"], r["passed"], r["rc"], r["verdict"]) for r in res] == [
        ("off", False, "no test selected", "UNEXPECTED"), ("auto", False, "no test selected", "UNEXPECTED")]
    # without it the whole file runs, and the chain class's failure fails the row
    subprocess.run([sys.executable, os.path.join(ROOT, "ci", "run_registered.py"), "--out", str(out)],
                   env={**os.environ, "SPECV2_REG_DIR": str(reg), "MARK": str(mark)}, capture_output=True, timeout=120)
    assert [r["passed"] for r in json.loads((out / "results.json").read_text())["results"]] == [False, False]


def test_runner_reports_rows_needing_more_gpus_as_not_run(tmp_path):
    import json
    import subprocess

    from conftest import VERSION

    reg = tmp_path / "reg"
    reg.mkdir()
    (reg / "test_tp2.py").write_text("from sglang_specv2_fixes.testing.registry import register_specv2_ci\n"
                                     f"register_specv2_ci(est_time=2, suite='specv2-gpu', releases=['{VERSION}'], gpus=2)\n"
                                     "if __name__ == '__main__':\n    pass\n")
    out = tmp_path / "out"
    subprocess.run([sys.executable, os.path.join(ROOT, "ci", "run_registered.py"), "--out", str(out), "--gpus", "3"],
                   env={**os.environ, "SPECV2_REG_DIR": str(reg)}, capture_output=True, timeout=120)
    res = json.loads((out / "results.json").read_text())["results"]
    assert [(r["file"], r["mode"], r["rc"], r["verdict"]) for r in res] == [
        ("test_tp2.py", "off", "needs 2 GPUs", "not run"), ("test_tp2.py", "auto", "needs 2 GPUs", "not run")]
    assert "| test_tp2.py | not run | not run | (needs 2 GPUs) |" in (out / "results.md").read_text()


def test_registered_and_cpu_test_modules_have_distinct_names():
    """Both folders are imported by basename (pytest's rootdir-less import, the registered loader below): a CPU test
    named like a registered row would be returned for the row by importlib and hide its test cases."""
    names = {d: {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "tests", d, "test_*.py"))}
             for d in ("cpu", "registered")}
    assert names["cpu"] and names["registered"] and not names["cpu"] & names["registered"]


def test_every_registered_file_loads_its_tests_on_the_release():
    """Import each registered file against the release under test (no server is started at import) and
    check unittest finds its tests and that every class starts a server in setUpClass (a mixin placed
    after CustomTestCase would leave unittest's no-op setUpClass in effect)."""
    import importlib
    import unittest

    from conftest import VERSION, own_setup_class

    reg_dir = os.path.join(ROOT, "tests", "registered")
    sys.path.insert(0, reg_dir)
    try:
        for path in sorted(glob.glob(os.path.join(reg_dir, "test_*.py"))):
            if VERSION not in run_registered.registration(path)["releases"]:
                continue
            mod = importlib.import_module(os.path.basename(path)[:-3])
            suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
            cases = {type(t) for s in suite for t in s}
            assert cases and suite.countTestCases() > 0, path
            for case in cases:
                orig = own_setup_class(case)
                assert orig is not None, (path, case, "not wrapped by CustomTestCase")
                # the function CustomTestCase wrapped must be the row's own setUpClass, not unittest's no-op
                assert orig is not unittest.TestCase.setUpClass.__func__, (path, case, "setUpClass is unittest's no-op")
    finally:
        sys.path.remove(reg_dir)


def test_nccl_port_is_fixed_except_for_plain_data_parallel():
    """Every row's server gets a fixed torch.distributed port (HTTP port + 20), except --dp-size > 1 without DP
    attention: SGLang's DP controller gives each DP rank that one port, and the second rank failed with EADDRINUSE
    on 2 x H200. The DP 2 row's own flags must take the exception."""
    import ast

    from sglang_specv2_fixes.testing.config import nccl_args

    url = "http://127.0.0.1:22000"
    assert nccl_args(url) == nccl_args(url, ("--tp-size", "2")) == ["--nccl-port", "22020"]
    assert nccl_args(url, ("--dp-size", "1")) == ["--nccl-port", "22020"]
    assert nccl_args(url, ("--dp-size", "2", "--enable-dp-attention")) == ["--nccl-port", "22020"]
    path = os.path.join(ROOT, "tests", "registered", "test_dp2_live_accept_metrics.py")
    (launch_args,) = [ast.literal_eval(node.value) for node in ast.walk(ast.parse(open(path).read()))
                      if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "LAUNCH_ARGS"]
    assert "--dp-size" in launch_args and nccl_args(url, launch_args) == []
