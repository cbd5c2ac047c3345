import json
import os
import re
import subprocess
import sys

import pytest
from conftest import LINE, ROOT, VERSION, child_env, requires_sglang

from sglang_specv2_fixes import export, patchfile, releases
from sglang_specv2_fixes.catalog import Patched
from sglang_specv2_fixes.fixes import ALL_FIXES

needs_sglang = requires_sglang


def cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "sglang_specv2_fixes", *args], capture_output=True, text=True,
                          env=child_env(**env), cwd=ROOT, timeout=60)


def no_sglang(*args, **env):
    """The CLI in an interpreter that cannot import sglang (-S: no site-packages, empty PYTHONPATH)."""
    e = child_env(**env)
    e["PYTHONPATH"] = ""
    code = "import sys; sys.path.insert(0, %r); from sglang_specv2_fixes.cli import main; sys.exit(main(%r))" % (ROOT, list(args))
    return subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=e, timeout=60)


@needs_sglang
def test_status_explains_every_fix():
    p = cli("status")
    assert p.returncode == 0, p.stderr
    assert f"sglang: {VERSION}" in p.stdout and f"code line: {LINE}" in p.stdout
    for pr in ("#23456", "#22651", "#23962", "#25818", "#26866", "#26980"):
        assert pr in p.stdout
    for f in ALL_FIXES:
        assert re.search(rf"^  {re.escape(f.name)} +\S", p.stdout, re.M), f.name
        assert f.title in p.stdout
    for f in ALL_FIXES:  # each fix's state and the table's reason for it on this release
        entry = releases.entry(f.name, LINE)
        state = re.search(rf"^  {re.escape(f.name)} +(\S+)", p.stdout, re.M).group(1)
        if isinstance(entry, Patched):
            assert state == "ready", (f.name, state)
        else:
            assert state == entry.state, (f.name, state)
            assert entry.reason.split()[0] in p.stdout, (f.name, entry.reason)
    assert re.search(r"^  live-accept-metrics +ready +beyond upstream$", p.stdout, re.M)
    assert "MISMATCH" not in p.stdout and "NOT FOUND" not in p.stdout
    assert p.stderr == ""


@needs_sglang
def test_status_json_and_selection():
    p = cli("status", "--json", SGLANG_SPECV2_FIXES="off")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["sglang_version"] == VERSION and d["supported"] and d["selection"] == "off" and d["code_line"] == LINE
    st = d["fixes"]["skip-stale-overlap-updates"]
    stale_entry = releases.entry("skip-stale-overlap-updates", LINE)
    assert st["state"] == ("disabled" if isinstance(stale_entry, Patched) else stale_entry.state)
    assert all(t["ok"] for t in st["targets"]) and st["targets"]
    assert d["fixes"]["live-accept-metrics"]["upstream"] == [] and d["fixes"]["live-accept-metrics"]["state"] == "disabled"
    # a fix patched here, selected by its upstream PR number alone: the selection is the fix's name
    pick = next(f for f in ALL_FIXES if f.upstream and isinstance(releases.entry(f.name, LINE), Patched))
    p = cli("status", "--json", SGLANG_SPECV2_FIXES=pick.upstream[0].lstrip("#"))
    d = json.loads(p.stdout)
    assert d["selection"] == pick.name and d["fixes"][pick.name]["state"] == "ready"
    assert d["fixes"]["live-accept-metrics"]["state"] == "disabled"
    bad = cli("status", SGLANG_SPECV2_FIXES="nope")
    assert bad.returncode == 2 and "unknown fix name" in bad.stderr


@needs_sglang
def test_status_with_a_selection_patched_nowhere_here_says_so():
    upstream_here = [f.name for f in ALL_FIXES if not isinstance(releases.entry(f.name, LINE), Patched)]
    p = cli("status", SGLANG_SPECV2_FIXES=upstream_here[0])
    assert p.returncode == 0, p.stderr
    assert "is patched on this release: nothing would be patched" in p.stdout


def test_console_script_and_matrix():
    exe = os.path.join(os.path.dirname(sys.executable), "sglang-specv2-fixes")
    p = subprocess.run([exe, "matrix", "--markdown"], capture_output=True, text=True, env=child_env(), timeout=60)
    assert p.returncode == 0, p.stderr
    assert "| `skip-stale-overlap-updates` | #23456 | applied | upstream | upstream |" in p.stdout
    assert "| `live-accept-metrics` | - | applied |" in p.stdout
    header = p.stdout.splitlines()[0]
    assert header == "| fix | upstream | " + " | ".join(releases.RELEASES) + " |"
    rows = p.stdout.strip().splitlines()[2:]
    assert [r.split("|")[1].strip().strip("`") for r in rows] == [f.name for f in ALL_FIXES]
    for row, (fix, cells) in zip(rows, export.matrix_rows()):
        assert [c.strip() for c in row.split("|")[3:-1]] == [cells[v] for v in releases.RELEASES]
    plain = subprocess.run([exe, "matrix"], capture_output=True, text=True, env=child_env(), timeout=60)
    assert plain.returncode == 0 and "live-accept-metrics (beyond upstream)" in plain.stdout


def test_check_selection():
    p = cli("check-selection", "#23456")
    assert p.returncode == 0 and p.stdout.startswith("ok: skip-stale-overlap-updates")
    assert "skip-stale-overlap-updates: patched on " + ", ".join(releases.release_set("fix:skip-stale-overlap-updates")) in p.stdout
    p = cli("check-selection", "bogus")
    assert p.returncode == 2 and "skip-stale-overlap-updates (#23456)" in p.stderr
    p = cli("check-selection", "26866,off")
    assert p.returncode == 2 and "cannot be combined" in p.stderr


def test_check_selection_auto_without_a_fix():
    p = cli("check-selection", "auto,-26866")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "ok: auto,-tree-drafting"
    assert "(left out: tree-drafting)" in p.stdout.replace("\n", " ")
    assert "tree-drafting: patched on" not in p.stdout and "live-accept-metrics: patched on" in p.stdout
    p = cli("check-selection", "26866,-23456")
    assert p.returncode == 2 and "mixes fix names with '-NAME' exclusions" in p.stderr


def test_check_selection_of_a_fix_beyond_upstream():
    p = cli("check-selection", "live-accept-metrics")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "ok: live-accept-metrics"
    where = export.ranges(releases.release_set("fix:live-accept-metrics"))  # '0.5.11 … 0.5.23'
    assert f"live-accept-metrics: patched on {where}\n" in p.stdout


def test_check_selection_reads_the_environment_by_default():
    p = cli("check-selection", SGLANG_SPECV2_FIXES="26866")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "ok: tree-drafting (from $SGLANG_SPECV2_FIXES)"
    p = cli("check-selection", SGLANG_SPECV2_FIXES="bogus")
    assert p.returncode == 2 and "unknown fix name(s): bogus" in p.stderr
    p = cli("check-selection")  # no argument, no variable: the default
    assert p.returncode == 0 and p.stdout.splitlines()[0] == "ok: auto"
    p = cli("check-selection", "off", SGLANG_SPECV2_FIXES="bogus")  # an argument wins over the variable
    assert p.returncode == 0 and p.stdout.strip() == "ok: off"


def test_no_sglang_on_path():
    p = no_sglang("status")  # nothing would be patched: exit 1, not 0 (issue 56, finding 5)
    assert p.returncode == 1, p.stderr
    assert "sglang: not installed" in p.stdout and "nothing would be patched" in p.stdout
    p = no_sglang("status", "--json")
    assert p.returncode == 1 and json.loads(p.stdout)["supported"] is False


@pytest.mark.parametrize("value", ["tree-drafting", "26866,live-accept-metrics"])
def test_status_with_explicit_names_and_no_sglang_exits_2(value):
    p = no_sglang("status", SGLANG_SPECV2_FIXES=value)
    assert p.returncode == 2, p.stdout + p.stderr
    out = p.stdout + p.stderr
    assert out.count("Known releases:") == 1 and out.count("nothing would be patched") == 1, out
    assert "no sglang: nothing would be patched" in p.stdout
    assert "error: fixes named explicitly" in p.stderr and "a server would stop at startup" in p.stderr
    p = no_sglang("status", "--json", SGLANG_SPECV2_FIXES=value)
    assert p.returncode == 2 and json.loads(p.stdout)["supported"] is False


@pytest.mark.parametrize("explicit", [False, True])
def test_status_on_an_unknown_release(explicit):
    code = ("import sys; from sglang_specv2_fixes import installed; installed.version = lambda: '0.5.10.post1'; "
            "from sglang_specv2_fixes.cli import main; sys.exit(main(['status']))")
    env = child_env(SGLANG_SPECV2_FIXES="26866" if explicit else None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    out = p.stdout + p.stderr
    assert p.returncode == (2 if explicit else 0), out
    assert out.count("sglang 0.5.10.post1 is not a release this plugin knows") == 1, out
    assert out.count("Known releases:") == 1 and ", ".join(releases.RELEASES) in " ".join(out.split())  # wrapped


@needs_sglang
def test_diff_shows_a_fix_against_the_installed_release():
    patched = [f.name for f in ALL_FIXES if isinstance(releases.entry(f.name, LINE), Patched)]
    assert patched
    for name in patched:
        p = cli("diff", name)
        assert p.returncode == 0, p.stderr
        pf = patchfile.load(name, releases.entry(name, LINE).name)
        for t in pf.targets:
            assert f"--- a/{t.rel_path}" in p.stdout
        assert p.stdout.startswith(patchfile.MAGIC) and f"\nfix: {name}\n" in p.stdout
        assert p.stdout == open(patchfile.patch_path(name, releases.entry(name, LINE).name)).read()
    p = cli("diff", "#23456")
    assert p.returncode == 0
    if isinstance(releases.entry("skip-stale-overlap-updates", LINE), Patched):
        assert "_resolve_spec_overlap_token_ids" in p.stdout and p.stdout.startswith(patchfile.MAGIC)
    else:
        assert p.stdout.startswith("skip-stale-overlap-updates: nothing patched on sglang") and "upstream" in p.stdout
    assert cli("diff", "bogus").returncode == 2


def test_diff_for_another_release():
    for v in ("0.5.11", "0.5.12.post1", releases.release_set("fix:live-accept-metrics")[-1]):
        p = cli("diff", "live-accept-metrics", "--release", v)
        name = releases.entry("live-accept-metrics", releases.code_line(v)).name
        assert p.returncode == 0 and p.stdout == open(patchfile.patch_path("live-accept-metrics", name)).read()
    assert cli("diff", "tree-drafting", "--release", "9.9.9").returncode == 2  # not a release choice


def test_series():
    for v in releases.release_set("patched"):
        p = cli("series", "--release", v)
        assert p.returncode == 0 and p.stdout.split() == export.series(v)
    assert cli("series", "--release", "9.9.9").returncode == 2


def test_readme_compatibility_table_is_the_generated_one():
    p = cli("matrix", "--markdown")
    assert p.returncode == 0, p.stderr
    readme = open(os.path.join(ROOT, "README.md")).read().splitlines()
    start = readme.index(next(ln for ln in readme if ln.startswith("| fix | ")))
    end = next((i for i in range(start, len(readme)) if not readme[i].startswith("|")), len(readme))
    assert readme[start:end] == p.stdout.strip().splitlines(), "README compatibility table is stale: paste `matrix --markdown`"


def test_patch_index_is_the_generated_one():
    path = os.path.join(ROOT, "sglang_specv2_fixes", "fixes", "__init__.py")
    text = open(path).read()
    block = text[text.index("BEGIN INDEX\n") + len("BEGIN INDEX\n"): text.index("END INDEX")]
    assert block == export.index_text(), "fixes/__init__.py patch index is stale: paste `sglang-specv2-fixes index`"
    p = cli("index")
    assert p.returncode == 0 and p.stdout == export.index_text()
    for f in ALL_FIXES:
        assert f"{f.name}  [" in block
