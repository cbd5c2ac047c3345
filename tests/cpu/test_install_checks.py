"""The plugin cannot be fooled by its environment (issue 56, findings 2 - 5), on the releases' real objects:

* the release is read from the sglang that is imported: a 0.5.12.post1 source tree without a dist-info on
  PYTHONPATH in front of an installed 0.5.17 is planned as 0.5.12.post1, with one warning naming the disagreement;
  an edited ``_version.py`` is what both ``sglang.__version__`` and the plugin say; a tree whose version file says
  another release than its code gets ``unverified`` (never ``upstream``) for every note whose check fails, each one
  in the warnings, and ``status`` exits 1;
* a damaged install (a copy of the package with one patch file deleted) refuses that fix with one error line naming
  the file, in ``status`` (no traceback, exit 1), through ``load_plugins`` (the other fixes applied) and in
  ``/server_info``'s payload; an unexpected exception inside the plugin is one error line, never load_plugins'
  traceback; ``SGLANG_SPECV2_FIXES_STRICT=1`` stops startup for both;
* ``status`` and the log line name the plugin's own path and warn when it is not the installed distribution's;
* one validator: ``check-selection`` has ``status``'s checks and exit status; unknown ``SGLANG_SPECV2_FIXES_*``
  variables warn with a did-you-mean; the switches set are listed; ``survey`` of a wheel without sglang is an error.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
from conftest import LINE, ROOT, VERSION, child_env, requires_sglang
from release_trees import release_root

from sglang_specv2_fixes import catalog, cli as cli_module, installed, patchfile, releases, selection
from sglang_specv2_fixes.catalog import Note, Patched
from sglang_specv2_fixes.fixes import ALL_FIXES

SHADOWED, INSTALLED = "0.5.12.post1", "0.5.17"
needs_trees = pytest.mark.skipif(release_root(SHADOWED) is None or release_root(INSTALLED) is None,
                                 reason=f"no source trees of sglang {SHADOWED} and {INSTALLED} here")


def env_with(*front, **extra):
    """child_env with ``front`` first on PYTHONPATH and no release overlay but those named in ``front``."""
    e = child_env(**extra)
    rest = [p for p in e["PYTHONPATH"].split(os.pathsep) if p and os.sep + "releases" + os.sep not in p + os.sep]
    e["PYTHONPATH"] = os.pathsep.join([*front, *rest])
    return e


def cli(*args, env, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "sglang_specv2_fixes", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def sglang_tree(dest, version_of, claims=None):
    """``dest``/sglang: release ``version_of``'s package without its dist-info (every entry a symlink), its
    ``_version.py`` a copy that says ``claims`` (default: the real one). Returns ``dest``."""
    src = os.path.join(release_root(version_of), "sglang")
    pkg = os.path.join(dest, "sglang")
    os.makedirs(pkg)
    for name in os.listdir(src):
        if name != "_version.py":
            os.symlink(os.path.join(src, name), os.path.join(pkg, name))
    text = open(os.path.join(src, "_version.py"), encoding="utf-8").read()
    if claims:
        text = re.sub(r"(__version__ = version = )'[^']+'", rf"\1'{claims}'", text)
    open(os.path.join(pkg, "_version.py"), "w", encoding="utf-8").write(text)
    return str(dest)


# --------------------------------------------------------------------- 2. the sglang that is imported
@needs_trees
def test_a_source_tree_shadowing_an_installed_release_is_planned_as_itself(tmp_path):
    tree = sglang_tree(tmp_path / "src", SHADOWED)
    env = env_with(tree, release_root(INSTALLED))
    p = cli("status", "--json", env=env)
    d = json.loads(p.stdout)
    assert d["sglang_version"] == SHADOWED and d["code_line"] == releases.code_line(SHADOWED), d["sglang_version"]
    line = releases.code_line(SHADOWED)
    for f in ALL_FIXES:  # the shadowed release's own table, every check holding
        e = releases.entry(f.name, line)
        st = d["fixes"][f.name]
        assert st["state"] == ("ready" if isinstance(e, Patched) else e.state), (f.name, st["reason"])
        assert all(t["ok"] for t in st["targets"]), f.name
    said = [w for w in d["warnings"] if "dist-info" in w]
    assert len(said) == 1 and f"says {INSTALLED}" in said[0] and SHADOWED in said[0], d["warnings"]
    assert p.returncode == 0, p.stderr
    p = cli("status", env=env)
    assert f"sglang: {SHADOWED} ({os.path.join(tree, 'sglang')})" in p.stdout
    assert p.stderr.count("dist-info says") == 1 and p.returncode == 0, p.stderr


@needs_trees
def test_an_edited_version_file_is_what_sglang_and_the_plugin_say(tmp_path):
    tree = sglang_tree(tmp_path / "src", SHADOWED, claims="0.5.99")
    code = ("import sglang, json; from sglang_specv2_fixes import installed; "
            "print(json.dumps([sglang.__version__, installed.version()]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env=env_with(tree, release_root(INSTALLED)))
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.splitlines()[-1]) == ["0.5.99", "0.5.99"]


@needs_trees
def test_a_note_whose_check_fails_is_unverified_never_upstream(tmp_path):
    """0.5.12.post1's code under a version file that says 0.5.17: every 0.5.17 note whose checked function is not that
    code is unverified and warned about; status exits 1 (strict mode: 2)."""
    env = env_with(sglang_tree(tmp_path / "src", SHADOWED, claims=INSTALLED))
    p = cli("status", "--json", env=env)
    assert p.returncode == 1, p.stderr
    d = json.loads(p.stdout)
    assert d["sglang_version"] == INSTALLED
    unverified = []
    for f in ALL_FIXES:
        e, st = releases.entry(f.name, releases.code_line(INSTALLED)), d["fixes"][f.name]
        if isinstance(e, Note) and e.check:
            failed = not all(t["ok"] for t in st["targets"])
            assert st["state"] == ("unverified" if failed else e.state), (f.name, st)
            unverified += [f.name] if failed else []
        assert not (st["state"] in catalog.NOTE_STATES and not all(t["ok"] for t in st["targets"])), f.name
    assert "tree-drafting" in unverified and "verify-handoff" in unverified, unverified
    assert sorted(w.split()[0] for w in d["warnings"] if " unverified: " in w) == sorted(unverified)
    p = cli("status", env=dict(env, SGLANG_SPECV2_FIXES_STRICT="1"))
    assert p.returncode == 2 and "SGLANG_SPECV2_FIXES_STRICT=1: a server would stop at startup" in \
        " ".join(p.stderr.split()), p.stderr[-2000:]


# ------------------------------------------------------------------------------- 3. a damaged install
def damaged_copy(tmp_path, fix, name):
    """A copy of the plugin package (patch files included, as the wheel has them) without patches/<fix>/<name>.patch."""
    dest = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "sglang_specv2_fixes"), dest / "sglang_specv2_fixes", symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "testing"))
    missing = dest / "sglang_specv2_fixes" / "patches" / fix / f"{name}.patch"
    os.remove(missing)
    return str(dest), str(missing)


VICTIM = "live-accept-metrics"  # patched on every release of the table
LOAD = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from sglang.srt.plugins import load_plugins
load_plugins()
import sglang.srt.managers.scheduler
from sglang_specv2_fixes import plugin
r = plugin.announce('scheduler')
print('RESULT ' + json.dumps(dict(states={f.name: f.state for f in r.fixes}, errors=r.errors,
      info=plugin.server_info_payload()['errors'], path=r.plugin_path, file=plugin.__file__)))
"""


def loaded(env, prelude=""):
    """LOAD in a fresh interpreter outside the checkout (``env``'s PYTHONPATH decides which plugin copy imports)."""
    p = subprocess.run([sys.executable, "-c", prelude + LOAD], capture_output=True, text=True, env=env, cwd="/",
                       timeout=300)
    res = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    return p, (json.loads(res[-1][len("RESULT "):]) if res else None)


@requires_sglang
@pytest.mark.release_scoped
def test_a_missing_patch_file_refuses_that_fix_only(tmp_path):
    site, missing = damaged_copy(tmp_path, VICTIM, releases.entry(VICTIM, LINE).name)
    env = env_with(site, *[p for p in child_env()["PYTHONPATH"].split(os.pathsep) if "releases" in p])
    p = cli("status", env=env, cwd="/")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {VICTIM} refused: damaged install:"), p.stderr
    assert missing in " ".join(p.stderr.replace("\n  ", "").split()), p.stderr
    assert re.search(rf"^  {VICTIM} +refused ", p.stdout, re.M)
    patched = [f.name for f in ALL_FIXES if isinstance(releases.entry(f.name, LINE), Patched) and f.name != VICTIM]
    for name in patched:
        assert re.search(rf"^  {re.escape(name)} +ready ", p.stdout, re.M), name
    # the server: the other fixes applied, one error line naming the file, no load_plugins traceback
    p, r = loaded(env)
    assert r is not None and p.returncode == 0, p.stderr[-3000:]
    assert "Failed to execute" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert r["file"].startswith(site) and r["path"].startswith(site)
    assert r["states"][VICTIM] == "refused" and len(r["errors"]) == 1 and missing in r["errors"][0]
    assert r["info"] == r["errors"]  # /server_info carries it
    assert sum(missing in ln for ln in p.stderr.splitlines()) == 1, p.stderr[-3000:]
    assert all(r["states"][n] in ("applied", "ready") for n in patched), r["states"]
    # strict mode: startup stops, naming the fix
    p, r = loaded(dict(env, SGLANG_SPECV2_FIXES_STRICT="1"))
    assert r is None and p.returncode != 0 and f"{VICTIM} refused" in p.stderr, p.stderr[-3000:]
    # a command that reads the missing file: one error line, exit 2
    p = cli("diff", VICTIM, env=env, cwd="/")
    assert p.returncode == 2 and p.stderr.startswith("error: ") and "Traceback" not in p.stderr, p.stderr
    assert missing in " ".join(p.stderr.replace("\n  ", "").split())


@requires_sglang
def test_an_exception_inside_the_plugin_is_one_error_line():
    prelude = "from sglang_specv2_fixes import core\ndef boom(report): raise RuntimeError('a bug')\ncore.register = boom\n"
    env = env_with(ROOT, *[p for p in child_env()["PYTHONPATH"].split(os.pathsep) if "releases" in p])
    p, r = loaded(env, prelude)
    assert r is not None and p.returncode == 0, p.stderr[-3000:]
    assert "Failed to execute" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert [ln for ln in p.stderr.splitlines() if "RuntimeError: a bug" in ln] and len(r["errors"]) == 1
    assert "failed inside the plugin" in r["errors"][0] and r["info"] == r["errors"]
    p, r = loaded(dict(env, SGLANG_SPECV2_FIXES_STRICT="1"), prelude)
    assert r is None and p.returncode != 0 and "RuntimeError: a bug" in p.stderr


# ------------------------------------------------------------------------------ 4. which copy runs
@requires_sglang
def test_status_and_the_log_line_name_the_plugins_path(tmp_path):
    p = cli("status", "--json", env=child_env())
    here = os.path.join(ROOT, "sglang_specv2_fixes")
    assert json.loads(p.stdout)["plugin_path"] == here
    assert cli("status", env=child_env()).stdout.splitlines()[0].endswith(f"({here})")
    copy = tmp_path / "clone"
    shutil.copytree(here, copy / "sglang_specv2_fixes", ignore=shutil.ignore_patterns("__pycache__", "testing"))
    env = env_with(str(copy), *[p for p in child_env()["PYTHONPATH"].split(os.pathsep) if "releases" in p])
    p = cli("status", "--json", env=env, cwd=str(copy))
    d = json.loads(p.stdout)
    assert d["plugin_path"] == str(copy / "sglang_specv2_fixes")
    installed_copy = installed._dist_package(installed.DIST, "sglang_specv2_fixes")
    shadowed = [w for w in d["warnings"] if "not from the installed" in w]
    if installed_copy is None:  # no distribution installed: nothing to compare with
        assert not shadowed
    else:
        assert len(shadowed) == 1 and str(copy) in shadowed[0] and installed_copy in shadowed[0], d["warnings"]
    p, r = loaded(env)
    assert r is not None and f"from {copy / 'sglang_specv2_fixes'}]" in p.stderr, p.stderr[-2000:]


# ------------------------------------------------------------------------------------ 5. one validator
def run(monkeypatch, capsys, *argv, env=None, version="installed"):
    if version != "installed":
        monkeypatch.setattr(installed, "version", lambda: version)
    for k in [k for k in os.environ if k.startswith(selection.PREFIX) or k == installed.PLUGINS_ENV]:
        monkeypatch.delenv(k)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    try:
        status = cli_module.main(list(argv))
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, " ".join(err.split())


@pytest.mark.parametrize("argv, env", [
    (["status"], {selection.ENV: "tree-drafting"}),
    (["check-selection", "tree-drafting"], {}),
    (["check-selection"], {selection.ENV: "tree-drafting"}),
])
def test_check_selection_stops_where_status_does_on_an_unknown_release(monkeypatch, capsys, argv, env):
    status, out, err = run(monkeypatch, capsys, *argv, env=env, version="0.5.10.post1")
    assert status == 2 and "error: fixes named explicitly (tree-drafting): a server would stop at startup" in err, err


@pytest.mark.parametrize("command", [["status"], ["check-selection", "auto"]])
def test_a_bad_unknown_release_mode_is_an_error_for_both(monkeypatch, capsys, command):
    status, out, err = run(monkeypatch, capsys, *command, env={selection.ENV_UNKNOWN_RELEASE: "yes-please"})
    assert status == 2 and out == "" and err.startswith(f"error: invalid {selection.ENV_UNKNOWN_RELEASE}"), err


@requires_sglang
def test_check_selection_reads_sglang_plugins(monkeypatch, capsys):
    status, out, err = run(monkeypatch, capsys, "check-selection", "auto", env={installed.PLUGINS_ENV: "other"})
    assert status == 1 and "warning: SGLang would not load this plugin" in err, err
    assert "SGLang would not load this plugin ($SGLANG_PLUGINS='other'" in " ".join(out.split())
    status, out, err = run(monkeypatch, capsys, "check-selection", "auto",
                           env={installed.PLUGINS_ENV: "other,specv2_fixes"})
    assert status == run(monkeypatch, capsys, "status")[0] and "would not load" not in err + out


@requires_sglang
@pytest.mark.parametrize("name, guess", [
    ("SGLANG_SPECV2_FIXES_VERIFY_HANDOF", "did you mean SGLANG_SPECV2_FIXES_VERIFY_HANDOFF? (no longer read: "
                                          "auto,-verify-handoff"),
    ("SGLANG_SPECV2_FIXES_FA3_TREE", "did you mean SGLANG_SPECV2_FIXES_FA3_TREES?"),
    ("SGLANG_SPECV2_FIXES_TREE_DRAFTING", "to leave the fix out: SGLANG_SPECV2_FIXES=auto,-tree-drafting"),
    ("SGLANG_SPECV2_FIXES_STRICTT", "did you mean SGLANG_SPECV2_FIXES_STRICT?"),
    ("SGLANG_SPECV2_FIXES_READ_DONE_AFTER_REPLAY", "auto,-draft-extend-read-done-order leaves it out"),
])
@pytest.mark.parametrize("command", [["status"], ["check-selection"]])
def test_an_unknown_variable_warns_with_a_did_you_mean(monkeypatch, capsys, name, guess, command):
    status, out, err = run(monkeypatch, capsys, *command, env={name: "0"})
    assert f"warning: {name} is " in err and guess in err, err
    assert status == run(monkeypatch, capsys, *command)[0]  # a warning, not an error


@requires_sglang
def test_status_lists_the_switches_set(monkeypatch, capsys):
    status, out, err = run(monkeypatch, capsys, "status")
    assert "switch: " not in out
    status, out, err = run(monkeypatch, capsys, "status", env={"SGLANG_SPECV2_FIXES_FA3_TREES": "0"})
    assert "switch: SGLANG_SPECV2_FIXES_FA3_TREES=0 (tree-drafting: =0: " in out and "FA3_TREES" not in err


def test_every_variable_the_package_reads_is_declared():
    """A switch read anywhere in the package is a fix's (catalog.Switch), a global one, or a removed one."""
    known = set(selection.known_variables(ALL_FIXES)) | set(selection.REMOVED_VARIABLES)
    pkg = os.path.join(ROOT, "sglang_specv2_fixes")
    seen = set()
    for d, _, files in os.walk(pkg):
        if os.sep + "testing" in d:
            continue
        for f in files:
            if f.endswith(".py"):
                seen |= set(re.findall(r"SGLANG_SPECV2_FIXES_[A-Z0-9_]*[A-Z0-9]", open(os.path.join(d, f)).read()))
    seen = {v for v in seen if not v.startswith(selection.TEST_PREFIX)}
    assert seen and seen <= known, sorted(seen - known)
    for f in ALL_FIXES:
        for sw in f.switches:
            assert sw.env.startswith(selection.PREFIX) and sw.default and sw.effect, (f.name, sw)


@pytest.mark.parametrize("value", ["1", "true", "on", "YES"])
def test_on_values_mean_auto_as_off_values_mean_off(value):
    assert selection.parse(value, ALL_FIXES) == selection.parse("auto", ALL_FIXES)
    assert selection.parse({"1": "0", "true": "false", "on": "off", "YES": "no"}[value], ALL_FIXES).mode == "off"


@pytest.mark.parametrize("value, guess", [("tree_drafting", "tree-drafting"), ("auto,-Tree_Drafting", "tree-drafting"),
                                          ("verify-handof", "verify-handoff")])
def test_a_misspelt_fix_name_gets_a_did_you_mean(value, guess):
    with pytest.raises(selection.SelectionError) as e:
        selection.parse(value, ALL_FIXES)
    assert f"(did you mean {guess}?)" in e.value.problem


def test_survey_of_a_wheel_without_sglang_is_an_error(tmp_path, monkeypatch, capsys):
    wheel = tmp_path / "other-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("other/__init__.py", "")
        z.writestr("other-1.0.dist-info/METADATA", "Name: other\nVersion: 1.0\n")
    status, out, err = run(monkeypatch, capsys, "survey", str(wheel))
    assert status == 2 and out == "" and err.startswith("error: ") and "holds no sglang package" in err, err
    (tmp_path / "tree").mkdir()
    status, out, err = run(monkeypatch, capsys, "survey", str(tmp_path / "tree"))
    assert status == 2 and out == "" and err.startswith("error: "), err


def test_docs_variables_table_is_the_generated_one():
    from sglang_specv2_fixes import export

    text = open(os.path.join(ROOT, "docs", "usage.md"), encoding="utf-8").read()
    start = text.index("| variable | unset | what it does |")
    end = text.index("\n\n", start)
    assert text[start:end + 1] == export.variables_markdown(), "docs/usage.md's table is stale: paste `variables --markdown`"
    for f in ALL_FIXES:
        for sw in f.switches:
            assert f"`{sw.env}`" in text and sw.env in export.index_text(), sw.env
