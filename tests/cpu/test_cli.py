import json
import os
import subprocess
import sys

from conftest import LINE, ROOT, VERSION, child_env, requires_sglang

pytestmark = requires_sglang


def cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "sglang_specv2_fixes", *args], capture_output=True, text=True,
                          env=child_env(**env), cwd=ROOT, timeout=60)


def test_status_explains_every_fix():
    p = cli("status")
    assert p.returncode == 0, p.stderr
    assert f"sglang: {VERSION}" in p.stdout
    for pr in ("#23456", "#22651", "#23962", "#25818"):
        assert pr in p.stdout
    assert ("would apply" if LINE == "0.5.11" else "upstream since 0.5.12") in p.stdout
    assert "MISMATCH" not in p.stdout and "NOT FOUND" not in p.stdout


def test_status_json_and_selection():
    p = cli("status", "--json", SGLANG_SPECV2_FIXES="off")
    d = json.loads(p.stdout)
    assert d["sglang_version"] == VERSION and d["supported"] and d["selection"] == "off"
    st = d["fixes"]["skip-stale-overlap-updates"]
    assert st["state"] == ("disabled" if LINE == "0.5.11" else "upstream")
    assert all(t["ok"] for t in st["targets"])
    bad = cli("status", SGLANG_SPECV2_FIXES="nope")
    assert bad.returncode == 2 and "unknown fix name" in bad.stderr


def test_console_script_and_matrix():
    exe = os.path.join(os.path.dirname(sys.executable), "sglang-specv2-fixes")
    p = subprocess.run([exe, "matrix", "--markdown"], capture_output=True, text=True, env=child_env(), timeout=60)
    assert p.returncode == 0, p.stderr
    assert "| `skip-stale-overlap-updates` | #23456 | applied | upstream | upstream |" in p.stdout


def test_check_selection():
    assert cli("check-selection", "#23456").returncode == 0
    p = cli("check-selection", "bogus")
    assert p.returncode == 2 and "skip-stale-overlap-updates (#23456)" in p.stderr


def test_no_sglang_on_path():
    env = child_env()
    env["PYTHONPATH"] = ""
    p = subprocess.run([sys.executable, "-S", "-c", "import sys; sys.path.insert(0, %r); from sglang_specv2_fixes.cli import main; sys.exit(main(['status']))" % ROOT],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "sglang: not installed" in p.stdout and "nothing would be patched" in p.stdout


def test_diff_shows_a_fix_against_the_installed_release():
    p = cli("diff", "tree-drafting")
    assert p.returncode == 0, p.stderr
    assert "--- a/sglang/srt/speculative/eagle_worker_v2.py" in p.stdout and "# specv2-fixes:" in p.stdout
    p = cli("diff", "#23456")
    assert p.returncode == 0
    assert ("_resolve_spec_overlap_token_ids" in p.stdout) if LINE == "0.5.11" else ("nothing to patch" in p.stdout)
    assert cli("diff", "bogus").returncode == 2


def test_readme_compatibility_table_is_the_generated_one():
    p = cli("matrix", "--markdown")
    readme = open(os.path.join(ROOT, "README.md")).read()
    for line in p.stdout.strip().splitlines():
        assert line in readme, f"README compatibility table is stale: {line}"
