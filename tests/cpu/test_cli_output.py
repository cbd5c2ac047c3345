"""The CLI's rough edges from a new user's first try (issue 24): the release table's wording, no-sglang messages,
`diff` names, `series` default, what `check-selection` selects, one error style within 120 columns, help and
--version, and SGLang's SGLANG_PLUGINS allow-list in `status`."""

import json
import os
import re
import types

import pytest
from conftest import LINE, ROOT, VERSION, requires_sglang
from test_cli import cli, no_sglang

from sglang_specv2_fixes import __version__, catalog, cli as cli_module, export, installed, plugin, releases, selection
from sglang_specv2_fixes.catalog import Note, Patched
from sglang_specv2_fixes.fixes import ALL_FIXES

WIDTH = 120
PLUGINS = "SGLANG_PLUGINS"  # SGLang's allow-list of plugins; ours is named specv2_fixes (pyproject.toml)
COMMANDS = ("status", "matrix", "index", "check-selection", "diff", "series")
SPLIT_WORD = re.compile(r"[A-Za-z]- [A-Za-z]")  # 'routed- experts': a word broken at its hyphen and re-joined


def run(monkeypatch, capsys, *argv, version="installed", env=None):
    """main(argv) in this process, as if sglang ``version`` were installed (None: no sglang); (status, out, err)."""
    if version != "installed":
        monkeypatch.setattr(installed, "version", lambda: version)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v) if v is not None else monkeypatch.delenv(k, raising=False)
    try:
        status = cli_module.main(list(argv))
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err


def checks_code(version):
    """status's (and check-selection's) exit status with sglang ``version`` faked over the release under test: 0 where
    the faked release is the real one's code line; 1 without sglang, or where it is another line (the real sources
    are not what that line's patch files and notes were written against: refused / unverified)."""
    return 0 if version is not None and releases.code_line(version) == LINE else 1


def too_wide(text):
    return [ln for ln in text.splitlines() if len(ln) > WIDTH]


@pytest.fixture(autouse=True)
def _no_selection(monkeypatch):
    monkeypatch.delenv(selection.ENV, raising=False)
    monkeypatch.delenv(PLUGINS, raising=False)


# ------------------------------------------------------------------ 1. the release table's wording
def test_no_reason_breaks_a_word_at_its_hyphen(monkeypatch, capsys):
    for line, table in releases.LINES.items():
        for fix, e in table.fixes.items():
            if isinstance(e, Note):
                assert not SPLIT_WORD.search(e.reason), (line, fix, e.reason)
    for v in releases.RELEASES:  # what `diff` and `status` print from it (wrapped, never at a hyphen)
        for fix in ALL_FIXES:
            if not isinstance(releases.entry(fix.name, releases.code_line(v)), Patched):
                status, out, err = run(monkeypatch, capsys, "diff", fix.name, "--release", v)
                assert status == 0 and not SPLIT_WORD.search(" ".join(out.split())), (v, out)
        status, out, err = run(monkeypatch, capsys, "status", version=v)
        assert "routed- experts" not in " ".join(out.split()), v


# ------------------------------------------------------------------------------ 2. without sglang
def test_without_sglang_every_message_says_not_installed():
    p = no_sglang("status", "--json")
    assert p.returncode == 1 and "None" not in p.stdout  # no sglang: status exits non-zero (issue 56, finding 5)
    d = json.loads(p.stdout)
    assert d["sglang_version"] is None and not d["supported"]
    assert {f["reason"] for f in d["fixes"].values()} == {"sglang is not installed in this environment"}
    p = no_sglang("diff", "tree-drafting")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("error: no sglang in this environment: pass --release VERSION"), p.stderr
    assert "None" not in p.stderr and "0.5.11, 0.5.12" in p.stderr


# -------------------------------------------------------------------------------- 3. diff's FIX
def test_diff_takes_one_fix_and_says_so(monkeypatch, capsys):
    status, out, err = run(monkeypatch, capsys, "diff", "off")
    assert status == 2 and out == ""
    assert err.startswith("error: 'off' is a selection value, not a fix"), err
    assert selection.ENV not in err and "Use 'auto', 'off'" not in err and "tree-drafting (#26866)" in err
    status, out, err = run(monkeypatch, capsys, "diff", "tree-drafting,23456")
    assert status == 2 and "unknown" not in err
    assert err.startswith("error: diff shows one fix at a time") and "skip-stale-overlap-updates, tree-drafting" in err
    status, out, err = run(monkeypatch, capsys, "diff", "bogus,23456")
    assert status == 2 and err.startswith("error: unknown fix 'bogus'"), err
    # two spellings of one fix are that fix
    status, out, err = run(monkeypatch, capsys, "diff", "tree-drafting,#26866", "--release", "0.5.11")
    assert status == 0 and out == open(os.path.join(ROOT, "patches", "tree-drafting", "0.5.11.patch")).read()


# ------------------------------------------------------------------------------ 4. series' default
def test_series_defaults_to_the_installed_release_as_diff_does(monkeypatch, capsys):
    status, out, err = run(monkeypatch, capsys, "series", version="0.5.14")
    assert status == 0 and out.split() == export.series("0.5.14") and err == ""
    status, out, err = run(monkeypatch, capsys, "series", "--help")
    assert status == 0 and "default: the installed sglang" in out
    p = no_sglang("series")
    assert p.returncode == 2 and p.stderr.startswith("error: no sglang in this environment: pass --release VERSION")


@requires_sglang
@pytest.mark.release_scoped
def test_series_of_the_installed_release():
    p = cli("series")
    assert p.returncode == 0 and p.stdout.split() == export.series(VERSION), p.stderr


# ---------------------------------------------------------------------------- 5. check-selection
@pytest.mark.parametrize("value", ["auto", ""])
@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_check_selection_auto_says_what_it_patches_on_the_installed_release(monkeypatch, capsys, value, version):
    status, out, err = run(monkeypatch, capsys, "check-selection", value, version=version)
    assert status == checks_code(version) and out.splitlines()[0] == "ok: auto", out
    here = [f.name for f in ALL_FIXES if isinstance(releases.entry(f.name, releases.code_line(version)), Patched)]
    assert f"on the installed sglang {version} auto patches {len(here)} of {len(ALL_FIXES)} fixes" in out
    for name in here:
        assert f"  {name}: patched on {export.ranges(releases.release_set(f'fix:{name}'))}\n" in out
    assert not too_wide(out)


def test_check_selection_auto_without_sglang():
    p = no_sglang("check-selection", "auto")
    assert p.returncode == 1 and p.stdout.splitlines() == ["ok: auto", "no sglang in this environment: nothing would "
                                                                       "be patched here"]


def test_an_empty_selection_is_auto_as_in_sglang(monkeypatch, capsys):
    # what the plugin does with the value (plugin.register): an empty --specv2-fixes wins over the variable and,
    # like an empty variable, parses to auto
    assert plugin._argv_selection(["launch_server", selection.FLAG, ""]) == ""
    assert selection.parse("", ALL_FIXES).mode == "auto"
    status, out, err = run(monkeypatch, capsys, "check-selection", "", env={selection.ENV: "off"}, version="0.5.11")
    text = " ".join(out.split())
    assert status == checks_code("0.5.11") and out.splitlines()[0] == "ok: auto"
    assert "an empty value means auto, as in SGLang" in text
    assert f"${selection.ENV}='off' is not consulted" in text and "auto patches" in text
    status, out, err = run(monkeypatch, capsys, "check-selection", env={selection.ENV: ""}, version="0.5.11")
    assert status == checks_code("0.5.11") and out.splitlines()[0] == f"ok: auto (from ${selection.ENV})"


def test_check_selection_says_when_nothing_is_patched_on_the_installed_release(monkeypatch, capsys):
    status, out, err = run(monkeypatch, capsys, "check-selection", "23456", version="0.5.23")
    assert status == checks_code("0.5.23") and "skip-stale-overlap-updates: patched on 0.5.11" in out
    assert ("on the installed sglang 0.5.23 nothing would be patched with this selection (upstream there: "
            "skip-stale-overlap-updates)") in out
    status, out, err = run(monkeypatch, capsys, "check-selection", "23456,26866", version="0.5.11")
    assert "on the installed sglang 0.5.11 this selection patches skip-stale-overlap-updates, tree-drafting" in out
    status, out, err = run(monkeypatch, capsys, "check-selection", "23456,live-accept-metrics", version="0.5.23")
    assert ("this selection patches live-accept-metrics; upstream there: skip-stale-overlap-updates"
            in " ".join(out.split()))


# ------------------------------------------------------------------- 6. one error style, 120 columns
@pytest.mark.parametrize("argv, env", [
    (["check-selection", "bogus"], {}),
    (["check-selection", "26866,off"], {}),
    (["check-selection"], {selection.ENV: "bogus,nope,still-not-a-fix"}),
    (["status"], {selection.ENV: "bogus"}),
    (["diff", "bogus"], {}),
    (["diff", "tree-drafting", "--release", "0.5.10"], {}),
    (["series", "--release", "0.5.10"], {}),
    ([], {}),
    (["frobnicate"], {}),
    (["status", "--bogus"], {}),
])
def test_every_error_is_one_style_within_120_columns(monkeypatch, capsys, argv, env):
    status, out, err = run(monkeypatch, capsys, *argv, env=env)
    assert status == 2 and out == "", (out, err)
    assert err.startswith("error: ") and err.count("error: ") == 1, err
    assert "usage:" not in err and "sglang-specv2-fixes: " not in err, err
    assert not too_wide(err), err


def test_status_fits_in_120_columns_on_every_release(monkeypatch, capsys):
    # every release's notes; against another release's installed source the patches' targets mismatch, so the
    # refused reasons (the longest lines) are printed too
    for v in [*releases.RELEASES, "0.5.10.post1", None]:
        for env in ({}, {selection.ENV: "26866,live-accept-metrics"}, {PLUGINS: "other"}):
            status, out, err = run(monkeypatch, capsys, "status", version=v, env=env)
            assert not too_wide(out) and not too_wide(err), (v, env, too_wide(out + err))
            if releases.code_line(v) not in (None, LINE):
                assert "refused" in out or "MISMATCH" in out or "NOT FOUND" in out, v


def test_status_wide_and_json_keep_full_targets_and_fingerprints(monkeypatch, capsys):
    version = "0.5.11" if VERSION != "0.5.11" else "0.5.23"  # not the installed release: mismatches
    status, out, err = run(monkeypatch, capsys, "status", "--wide", version=version)
    _, js, _ = run(monkeypatch, capsys, "status", "--json", version=version)
    d = json.loads(js)
    for f in d["fixes"].values():
        for t in f["targets"]:
            fps = t["expected"] if t["ok"] else f"installed {t['installed']}, expected {t['expected']}" \
                if t["installed"] else f"expected {t['expected']}"
            assert re.search(rf"^ +(ok|MISMATCH|NOT FOUND) +{re.escape(t['target'])}  {fps}$", out, re.M), t
        assert f["reason"] in out  # one line each
    assert too_wide(out)


def test_matrix_index_and_check_selection_fit_in_120_columns(monkeypatch, capsys):
    for argv in (["matrix"], ["index"], ["check-selection", "auto"], ["check-selection", "live-accept-metrics"],
                 ["check-selection", ",".join(f.name for f in ALL_FIXES)], ["--help"],
                 *([c, "--help"] for c in COMMANDS)):
        for v in ("0.5.11", "0.5.23", None):
            status, out, err = run(monkeypatch, capsys, *argv, version=v, env={"COLUMNS": "300"})
            code = 0 if argv[0] != "check-selection" or argv[1] == "--help" else \
                2 if v is None and argv[1] != "auto" else checks_code(v)  # fixes named, no sglang: a stop
            assert status == code and not too_wide(out), (argv, too_wide(out))
    status, out, err = run(monkeypatch, capsys, "matrix")
    for fix, cells in export.matrix_rows():  # every release still named, as ranges of the table
        assert f"{fix.name} ({fix.refs})" in out, fix.name


# ----------------------------------------------------------------------------------- 7. help, version
def test_top_help_is_plain_text(monkeypatch, capsys):
    status, out, err = run(monkeypatch, capsys, "--help", env={"COLUMNS": "120"})
    assert status == 0 and "``" not in out and "fixes/__init__.py" not in out
    assert "index" in out and "what each fix patches, why, upstream PRs" in " ".join(out.split())


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_a_description(monkeypatch, capsys, command):
    status, out, err = run(monkeypatch, capsys, command, "--help", env={"COLUMNS": "120"})
    assert status == 0
    blocks = out.split("\n\n")
    assert blocks[0].startswith("usage: ") and not blocks[1].startswith(("options:", "positional arguments:")), out
    assert len(blocks[1].split()) > 10 and "``" not in out


def test_version_names_the_program_and_the_installed_sglang(monkeypatch, capsys):
    status, out, err = run(monkeypatch, capsys, "--version", version="0.5.14")
    assert status == 0 and out == f"sglang-specv2-fixes {__version__} (sglang 0.5.14 installed)\n" and err == ""
    p = no_sglang("--version")
    assert p.returncode == 0 and p.stdout == f"sglang-specv2-fixes {__version__} (no sglang installed)\n"


# --------------------------------------------------------------------------------- 8. SGLANG_PLUGINS
@pytest.mark.parametrize("value, loaded", [
    (None, True), ("", True), ("specv2_fixes", True), (" other , specv2_fixes ", True), (",specv2_fixes,", True),
    ("other", False), ("SPECV2_FIXES", False), ("specv2_fixes_x", False), (" , ", False),
])
def test_plugin_skipped_reads_sglang_plugins(value, loaded):
    env = {} if value is None else {PLUGINS: value}
    assert (installed.plugin_skipped(env) is None) == loaded


def test_the_entry_point_name_is_the_packaged_one():
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    group = text[text.index('[project.entry-points."sglang.srt.plugins"]'):]
    assert installed.ENTRY_POINT == "specv2_fixes"
    assert re.search(rf"^specv2_fixes = \"sglang_specv2_fixes.plugin:register\"$", group, re.M)


@requires_sglang
@pytest.mark.release_scoped
def test_plugin_skipped_is_the_installed_sglangs_own_rule(monkeypatch):
    """installed.plugin_skipped against the installed release's own load_plugins_by_group (a stand-in entry point
    named as ours; nothing is loaded but a no-op)."""
    from sglang.srt import plugins

    ep = types.SimpleNamespace(name="specv2_fixes", value="x:y", dist=None, load=lambda: (lambda: None))
    monkeypatch.setattr(plugins, "entry_points", lambda group: [ep])
    for value in (None, "", "specv2_fixes", " other , specv2_fixes ", ",specv2_fixes,", "other", "SPECV2_FIXES",
                  "specv2_fixes_x", " , ", "specv2_fixes other"):
        if value is None:
            monkeypatch.delenv(PLUGINS, raising=False)
        else:
            monkeypatch.setenv(PLUGINS, value)
        loaded = "specv2_fixes" in plugins.load_plugins_by_group(plugins.GENERAL_PLUGINS_GROUP)
        assert (installed.plugin_skipped() is None) == loaded, value


@requires_sglang
@pytest.mark.release_scoped
def test_status_says_when_sglang_would_not_load_the_plugin():
    patched = [f.name for f in ALL_FIXES if isinstance(releases.entry(f.name, LINE), Patched)]
    p = cli("status", SGLANG_PLUGINS="some_other_plugin")
    assert p.returncode == 1, p.stderr  # the plugin would not load: non-zero (issue 56, finding 5)
    assert not re.search(r"^  \S+ +ready ", p.stdout, re.M), p.stdout
    for name in patched:
        assert re.search(rf"^  {re.escape(name)} +disabled ", p.stdout, re.M), name
    text = " ".join(p.stdout.split())
    assert ("nothing would be patched: SGLang would not load this plugin ($SGLANG_PLUGINS='some_other_plugin' does "
            "not name specv2_fixes)") in text and "'ready' becomes 'applied'" not in text
    assert "warning: SGLang would not load this plugin" in p.stderr
    d = json.loads(cli("status", "--json", SGLANG_PLUGINS="some_other_plugin").stdout)
    assert all(d["fixes"][n]["state"] == catalog.DISABLED and "SGLANG_PLUGINS" in d["fixes"][n]["reason"]
               for n in patched)
    assert any("SGLang would not load this plugin" in w for w in d["warnings"])
    p = cli("status", SGLANG_PLUGINS="some_other_plugin,specv2_fixes")  # named: as without the variable
    assert p.returncode == 0 and "plugin: loaded ($SGLANG_PLUGINS names specv2_fixes)" in p.stdout
    for name in patched:
        assert re.search(rf"^  {re.escape(name)} +ready ", p.stdout, re.M), name
