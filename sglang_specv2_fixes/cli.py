"""Command line: ``sglang-specv2-fixes`` / ``python -m sglang_specv2_fixes``.

    status [--json] [--wide]  the imported sglang, this plugin's copy, the switches set, each fix's state and
                              reason, fingerprint checks (no GPU, nothing imported from sglang, nothing patched)
    matrix [--markdown]       the fix x release compatibility table of this plugin version
    index                     the patch index (what / why / PRs / which patch file on which release / switches)
    variables [--markdown]    every SGLANG_SPECV2_FIXES_* variable this version reads, the fixes' switches included
    check-selection [VALUE]   validate a selection with status's checks and say what it patches (default:
                              $SGLANG_SPECV2_FIXES); the same exit status as status
    diff FIX [--release V]    the patch file a release gets for FIX (default: the installed release)
    series [--release V]      the packagers' series of release V (default: the installed release)
    series --write patches    regenerate patches/series/<release> for every patched release
    survey [PATH] [--as-new]  a release tree, a wheel or the installed sglang read fix by fix against every known
                              fingerprint, with a draft release-table entry (adding a release starts here)

Text output fits in 120 columns (``status --wide`` and ``status --json`` carry the full target names and
fingerprints); every error is ``error: ...`` on stderr with exit status 2, a failure inside the plugin included (no
traceback). ``status`` and ``check-selection`` exit 0 when a server would start with every selected fix in effect, 1
when something is wrong but a server would start (a fix refused, failed or unverified, damaged plugin data, no sglang,
SGLang would not load the plugin), 2 when a server would stop at startup (an invalid selection or
SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE, fixes named on a release this plugin does not know, SGLANG_SPECV2_FIXES_STRICT=1
with a selected fix that cannot be applied).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import textwrap

from . import __version__, catalog, core, export, installed, patchfile, releases, selection
from .catalog import Patched
from .fixes import ALL_FIXES

WIDTH = 120
IND = " " * 31  # status: the column of a fix's title, reason and target checks
PROG = "sglang-specv2-fixes"
DESCRIPTION = (
    "Inspect sglang-specv2-fixes, the SGLang plugin that backports spec-v2 (EAGLE/EAGLE3 + overlap scheduler) "
    "fixes: what it would patch in the installed sglang, on which release each fix is patched, and the patch "
    "files themselves. Nothing is imported from sglang and nothing is patched; no GPU needed."
)
COMMANDS = {  # name: (one line for the command list, the command's own --help description)
    "status": (
        "what the plugin would do with the installed sglang",
        "The imported sglang (warned when its dist-info disagrees), this plugin's own path (warned when it is not the "
        "installed distribution's), the selection ($SGLANG_SPECV2_FIXES), the switches set, whether SGLang would load "
        "the plugin ($SGLANG_PLUGINS), and every fix's state on that release with the reason and the fingerprint check "
        "of each function it patches. Exit status 1 when a fix would be refused, failed or unverified, plugin data is "
        "damaged, sglang is missing or SGLang would not load the plugin; 2 when a server would stop at startup (an "
        "invalid selection, fixes named explicitly on a release this plugin does not know, strict mode).",
    ),
    "matrix": (
        "the fix x release compatibility table",
        "Every fix's state on every release this plugin version knows: applied (patched by this plugin), "
        "upstream, not-applicable or open.",
    ),
    "index": (
        "the patch index: what each fix patches, why, upstream PRs, patch files, removal plan",
        "For every fix: what is patched and how, the bug it fixes, its upstream PRs, which patch file each "
        "release gets, and when the patch can be removed (the docstring of sglang_specv2_fixes/fixes/__init__.py "
        "holds the same text).",
    ),
    "variables": (
        "every SGLANG_SPECV2_FIXES_* variable this version reads",
        "The global variables and every fix's switches (declared on the fix), with what unset means and what setting "
        "them does; --markdown: as docs/usage.md's table. status warns about any other SGLANG_SPECV2_FIXES_* variable.",
    ),
    "check-selection": (
        "validate a selection and show what it patches",
        "Check a $SGLANG_SPECV2_FIXES / --specv2-fixes value (default: the variable as set now) with status's "
        "checks (the release, $SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE, $SGLANG_PLUGINS, unknown variables, strict mode; "
        "the same warnings and exit status) and say which fixes it patches on the installed sglang and on which "
        "releases each fix is patched. As in SGLang, an empty value means auto.",
    ),
    "diff": (
        "the patch file a release gets for one fix",
        "Print the patch file (a unified diff against the release's own source) that the plugin applies for FIX "
        "on a release (default: the installed sglang), or why nothing is patched there. FIX is one fix name or "
        "one of its upstream PR numbers.",
    ),
    "series": (
        "the packagers' patch series of a release (paths under patches/)",
        "The patch files, in order, that make up a release's series (default: the installed sglang), or, with "
        "--write, patches/series/<release> for every patched release.",
    ),
    "survey": (
        "a release (tree, wheel or the installed one) read against every known fingerprint",
        "For every fix, each function the release table knows for it, its fingerprint in PATH (an unpacked "
        "release, the sglang package folder, or a wheel read as a zip; default: the installed sglang) and which "
        "known patch file's before / after or note it equals; then the code line the release matches and a draft "
        "release-table entry for a maintainer to review. Nothing is installed or imported.",
    ),
}


# ------------------------------------------------------------------------------------------ output
_SPACE = "\x00"  # _fill prints it as a space but never breaks a line there
_BREAK = "\x01"  # _fill may break a line there and prints nothing


def _list(items) -> str:
    """A comma list that _fill never breaks inside an item ('tree-drafting (#26866)' stays on one line)."""
    return ", ".join(str(i).replace(" ", _SPACE) for i in items)


def _ranges(versions) -> str:
    """export.ranges ('0.5.11, 0.5.13 … 0.5.23'), a range never broken across lines."""
    return export.ranges(versions).replace(" … ", f"{_SPACE}…{_SPACE}")


def _names(canonical: str) -> str:
    """A selection's canonical spelling ('a,b,c') that _fill may break after a comma, and prints unchanged."""
    return canonical.replace(",", "," + _BREAK + " ")


def _fill(text: str, first: str = "", rest: str = None, wide: bool = False) -> str:
    """``text`` in lines of at most WIDTH columns (one line when ``wide``); the first line starts with ``first``,
    the others with ``rest`` (default: as many spaces). Fix names, paths and dotted names are never split."""
    rest = " " * len(first) if rest is None else rest
    if wide:
        out = first + text
    else:
        out = textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                            break_on_hyphens=False)
    return re.sub(_BREAK + " ?", "", out).replace(_SPACE, " ")


def _short_targets(text: str) -> str:
    """Dotted sglang names cut to their last two parts, as the target checks print them (--wide: in full)."""
    return re.sub(r"\bsglang(?:\.\w+)*\.(\w+\.\w+)\b", r"\1", text)


def _error(message: str, *more: str) -> int:
    """The CLI's one error style: ``error: message`` (and indented details) on stderr; returns the exit status."""
    print(_fill(message, "error: ", "  "), file=sys.stderr)
    for m in more:
        print(_fill(m, "  "), file=sys.stderr)
    return 2


def _known(spec: str = "all") -> str:
    return f"{'patched' if spec == 'patched' else 'known'} releases: {_list(releases.release_set(spec))}"


def _fixes_named() -> str:
    return f"fixes: {_list(selection.valid_names(ALL_FIXES))}"


def _selection_error(e: selection.SelectionError, source: str) -> int:
    return _error(f"invalid {source} value: {e.problem}", f"use 'auto', 'off' or a comma list of: "
                  f"{_list(selection.valid_names(ALL_FIXES))}")


def _no_release(version, what: str, spec: str = "all") -> int:
    """Error for a command that needs a release when none was given and the installed one does not do."""
    if version is None:
        return _error(f"no sglang in this environment: {what}", _known(spec))
    known = "knows" if spec == "all" else "patches"
    return _error(f"the installed sglang {version} is not a release this plugin {known}: {what}", _known(spec))


# ------------------------------------------------------------------------------------------ status
def _patchable_here(sel, line) -> list:
    return [n for n in sorted(sel.names) if line and isinstance(releases.entry(n, line), Patched)]


def _not_loaded(report: core.Report, why: str) -> None:
    """The view when SGLang would not load the plugin at all: nothing is 'ready', and a warning says why."""
    for f in report.fixes:
        if f.state == catalog.READY:
            f.state, f.reason = catalog.DISABLED, f"SGLang would not load the plugin: {why}"
    report.warnings.append(f"SGLang would not load this plugin: {why} (add {installed.ENTRY_POINT} to "
                           f"${installed.PLUGINS_ENV} or unset it)")


class _Checked:
    """What status's checks found (shared with check-selection): the selection, the plan, why SGLang would skip the
    plugin (None: it would load it), the exit status and, for 2, why a server would stop at startup."""

    def __init__(self, sel, report, skipped):
        self.sel, self.report, self.skipped = sel, report, skipped
        self.stops = None
        if sel.explicit and not report.supported and not skipped:
            self.stops = f"fixes named explicitly ({_names(sel.canonical)}): a server would stop at startup"
        elif not skipped and core.strict_failures(report, sel):
            self.stops = (f"${selection.ENV_STRICT}=1: a server would stop at startup ("
                          f"{'; '.join(core.strict_failures(report, sel))})")
        bad = any(f.state in core.NOT_IN_EFFECT for f in report.fixes)
        self.code = 2 if self.stops else 1 if (bad or report.errors or skipped or report.sglang_version is None) else 0

    def print_problems(self, wide: bool = False) -> None:
        """The warnings and plugin errors on stderr (an error line names its cause; never a traceback)."""
        for w in self.report.warnings:
            print(_fill(w if wide else _short_targets(w), "warning: ", "  ", wide), file=sys.stderr)
        for e in self.report.errors:
            print(_fill(e, "error: ", "  ", wide), file=sys.stderr)


def _checks(value, source: str):
    """status's checks of selection ``value``: (None, _Checked), or (exit status, None) after the error."""
    try:
        sel = selection.parse(value, ALL_FIXES)
    except selection.SelectionError as e:
        return _selection_error(e, source), None
    try:
        selection.unknown_release_mode()
    except selection.SelectionError as e:
        return _error(str(e).replace("sglang-specv2-fixes: ", "")), None
    report = core.plan(sel)
    skipped = installed.plugin_skipped()
    if skipped:
        _not_loaded(report, skipped)
    return None, _Checked(sel, report, skipped)


def _status(args) -> int:
    status, c = _checks(os.environ.get(selection.ENV), f"${selection.ENV}")
    if c is None:
        return status
    sel, report, skipped = c.sel, c.report, c.skipped
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return c.code
    wide = args.wide
    v = report.sglang_version
    print(f"{PROG} {__version__} ({report.plugin_path})")
    print("sglang: not installed in this environment" if v is None else f"sglang: {v} ({installed.sglang_root()})")
    print(_fill(f"{_names(report.selection)} (${selection.ENV} or {selection.FLAG})", "selection: ", "  ", wide))
    for sw in selection.active_switches(ALL_FIXES):
        print(_fill(sw, "switch: ", "  ", wide))
    if os.environ.get(installed.PLUGINS_ENV) and not skipped:
        print(f"plugin: loaded (${installed.PLUGINS_ENV} names {installed.ENTRY_POINT})")
    c.print_problems(wide)
    if not report.supported:
        what = "no sglang" if v is None else f"sglang {v} is not a release this plugin knows"
        print()
        print(_fill(f"{what}: nothing would be patched. Known releases: {_list(releases.RELEASES)}", "", "  ", wide))
        if v is not None:
            _unknown_release_preview(sel, wide)
        if c.stops:
            return _error(c.stops)
        return c.code
    if report.code_line:
        print(f"code line: {report.code_line}\n")
    else:
        print(_fill(f"none (not in the table; {selection.ENV_UNKNOWN_RELEASE}=fingerprint, closest known line: "
                    f"{report.fingerprint_match})", "code line: ", "  ", wide) + "\n")
    width = max((len(f.name) for f in report.fixes), default=0)
    for f in report.fixes:
        print(f"  {f.name:<{width}} {f.state:<15} {f.refs}")
        print(_fill(f.title, IND, wide=wide))
        if f.reason:
            print(_fill(f.reason if wide else _short_targets(f.reason), IND, wide=wide))
        for t in f.targets:
            mark = "ok" if t.ok else "MISMATCH" if t.installed else "NOT FOUND"
            fps = f"expected {t.expected}"  # the fingerprints (NOT FOUND: there is no installed one)
            if t.ok or t.installed:
                fps = t.expected if t.ok else f"installed {t.installed}, {fps}"
            if wide:
                print(f"{IND}{mark:<9} {t.target}  {fps}")
                continue
            print(f"{IND}{mark:<9} {'.'.join(t.target.rsplit('.', 2)[-2:])}")
            if not t.ok:
                print(f"{IND}{'':<10}{fps}")
    print()
    if skipped:
        print(_fill(f"nothing would be patched: SGLang would not load this plugin ({skipped}); add "
                    f"{installed.ENTRY_POINT} to ${installed.PLUGINS_ENV} or unset it.", wide=wide))
    else:
        if sel.explicit and report.code_line and not _patchable_here(sel, report.code_line):
            print(_fill(f"note: none of the selected fixes ({_names(sel.canonical)}) is patched on this release: "
                        f"nothing would be patched", wide=wide) + "\n")
        print("'ready' becomes 'applied' in each SGLang process that loads the plugin; the running server's own")
        print("view is in GET /server_info -> specv2_fixes.")
    if c.stops:
        return _error(c.stops)
    return c.code


def _unknown_release_preview(sel, wide: bool) -> None:
    """What SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE=fingerprint would do on this unknown release."""
    from .survey import plan_unknown

    preview = plan_unknown(core.Report(__version__, installed.version(), None, sel.canonical, []), sel, ALL_FIXES)
    print(f"\nwith {selection.ENV_UNKNOWN_RELEASE}=fingerprint (closest known code line: {preview.fingerprint_match}):")
    width = max((len(f.name) for f in preview.fixes), default=0)
    for f in preview.fixes:
        print(f"  {f.name:<{width}} {f.state}")
        print(_fill(f.reason if wide else _short_targets(f.reason), IND, wide=wide))


# ------------------------------------------------------------------------------------- the tables
def _matrix(args) -> int:
    vers = list(releases.RELEASES)
    rows = export.matrix_rows()
    if args.markdown:  # one table row per line, as in the README
        print("| fix | upstream | " + " | ".join(vers) + " |")
        print("|---|---|" + "---|" * len(vers))
        for fix, cells in rows:
            refs = fix.refs if fix.upstream or fix.related else "-"
            print(f"| `{fix.name}` | {refs} | " + " | ".join(cells[v] for v in vers) + " |")
    else:
        for fix, cells in rows:
            print(f"{fix.name} ({fix.refs})")
            for state in dict.fromkeys(cells.values()):
                print(_fill(_ranges([v for v in vers if cells[v] == state]), f"    {state:<15} "))
    return 0


def _index(args) -> int:
    print(export.index_text(), end="")
    return 0


def _variables(args) -> int:
    if args.markdown:
        print(export.variables_markdown(), end="")
        return 0
    for name, what in selection.known_variables(ALL_FIXES).items():
        print(name)
        print(_fill(what, "    "))
    return 0


# ---------------------------------------------------------------------------------- check-selection
def _patched_on(name: str) -> str:
    vs = releases.release_set(f"fix:{name}")
    if not vs:
        return f"  {name}: never patched by this plugin (upstream or not applicable everywhere)"
    return _fill(_ranges(vs), f"  {name}: patched on ", "    ")


def _on_installed(sel: selection.Selection, version, line) -> str:
    """What ``sel`` patches on the installed sglang, in one sentence."""
    if version is None:
        return "no sglang in this environment: nothing would be patched here"
    if line is None:
        return f"the installed sglang {version} is not a release this plugin knows: nothing would be patched"
    wanted = [f.name for f in ALL_FIXES if sel.wants(f.name)]
    patched = [n for n in wanted if isinstance(releases.entry(n, line), Patched)]
    if sel.mode == "auto":
        left_out = f" (left out: {_list(sorted(sel.without))})" if sel.without else ""
        return (f"on the installed sglang {version} auto patches {len(patched)} of {len(wanted)} fixes{left_out} "
                f"(the others are upstream or not applicable there):")
    others: dict = {}
    for n in wanted:
        if n not in patched:
            others.setdefault(releases.entry(n, line).state, []).append(n)
    rest = "; ".join(f"{state} there: {_list(names)}" for state, names in others.items())
    if not patched:
        return f"on the installed sglang {version} nothing would be patched with this selection ({rest})"
    return f"on the installed sglang {version} this selection patches {_list(patched)}" + (f"; {rest}" if rest else "")


def _check_selection(args) -> int:
    given = args.value is not None
    value = args.value if given else os.environ.get(selection.ENV)
    status, c = _checks(value, "selection" if given else f"${selection.ENV}")
    if c is None:
        return status
    sel = c.sel
    c.print_problems()
    if c.stops:
        return _error(c.stops)
    source = "" if given or value is None else f" (from ${selection.ENV})"
    print(_fill(_names(sel.canonical) + source, "ok: ", "    "))
    if given and not value.strip():
        env = os.environ.get(selection.ENV, "").strip()
        note = (f"an empty value means auto, as in SGLang (an empty ${selection.ENV}, or {selection.FLAG} '' "
                f"whatever the variable says)")
        if env:
            note += (f"; ${selection.ENV}={env!r} is not consulted: run check-selection without an argument to "
                     f"check the variable")
        print(_fill(note, "  "))
    if sel.mode == "off":
        return c.code
    version = c.report.sglang_version
    line = releases.code_line(version)
    if c.skipped:
        print(_fill(f"SGLang would not load this plugin ({c.skipped}): nothing would be patched", "  "))
    if sel.explicit:
        for n in sorted(sel.names):
            print(_patched_on(n))
        print(_fill(_on_installed(sel, version, line)))
        if not any(releases.release_set(f"fix:{n}") for n in sel.names):
            print("note: nothing would be patched on any release with this selection")
        return c.code
    print(_fill(_on_installed(sel, version, line)))
    if line is not None:
        for f in ALL_FIXES:
            if sel.wants(f.name) and isinstance(releases.entry(f.name, line), Patched):
                print(_patched_on(f.name))
    return c.code


# ------------------------------------------------------------------------------------ patch files
def _one_fix(name: str):
    """(fix, None) for one fix name or PR number, else (None, exit status) after the error."""
    fix = core.fix_by_alias(name)
    if fix is not None:
        return fix, None
    items = [i.strip() for i in name.split(",") if i.strip()]
    named = {core.fix_by_alias(i) for i in items}
    if len(items) > 1 and None not in named:
        if len(named) == 1:
            return named.pop(), None
        names = [f.name for f in ALL_FIXES if f in named]
        return None, _error(f"diff shows one fix at a time: {name!r} names {len(names)} ({_list(names)}); run "
                            f"diff once per fix")
    if name.strip().lower() in selection.AUTO_VALUES + selection.ON_VALUES + selection.OFF_VALUES:
        return None, _error(f"{name!r} is a selection value, not a fix: diff takes one fix name or upstream PR "
                            f"number", _fixes_named())
    unknown = [i for i in items if core.fix_by_alias(i) is None] or [name]
    return None, _error(f"unknown fix {_list(repr(u) for u in unknown)}", _fixes_named())


def _diff(args) -> int:
    fix, status = _one_fix(args.fix)
    if fix is None:
        return status
    version = args.release or installed.version()
    line = releases.code_line(version)
    if line is None:
        return _no_release(version, "pass --release VERSION")
    e = releases.entry(fix.name, line)
    if not isinstance(e, Patched):
        print(_fill(f"{fix.name}: nothing patched on sglang {version} ({e.state}: {e.reason})", rest="  "))
        return 0
    with open(patchfile.patch_path(fix.name, e.name), encoding="utf-8") as f:
        sys.stdout.write(f.read())
    return 0


def _series(args) -> int:
    if args.write:
        written = export.write_series(args.write)
        print(_fill(f"{args.write}/series/: {_list(written)}"))
        return 0
    version = args.release or installed.version()
    if version not in releases.release_set("patched"):
        return _no_release(version, "pass --release VERSION (or --write PATCH_DIR)", "patched")
    for p in export.series(version):
        print(p)
    return 0


def _survey(args) -> int:
    from . import survey

    try:
        tree = survey.Tree.open(args.path)
    except (OSError, ValueError) as e:
        return _error(str(e))
    if tree.read("sglang/__init__.py") is None:
        return _error(f"{tree.label}: holds no sglang package (sglang/__init__.py): nothing to survey")
    sys.stdout.write(survey.render(survey.survey(tree, as_new=args.as_new)))
    return 0


# ------------------------------------------------------------------------------------------- parser
class _Help(argparse.HelpFormatter):
    """argparse's help, but a fix state ('not-applicable') or option is never split at its hyphen."""

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text, width, indent):
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error style (``error: ...``, exit status 2) and help at most WIDTH columns wide;
    subcommands inherit both."""

    def __init__(self, *args, **kwargs):
        width = min(WIDTH, shutil.get_terminal_size().columns) - 2  # argparse's own margin
        kwargs.setdefault("formatter_class", lambda prog: _Help(prog, width=width))
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(_error(f"{message} (see {self.prog} --help)"))


class _Version(argparse.Action):
    """--version: this plugin's version and the installed sglang's, found without importing sglang."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        v = installed.version()
        print(f"{PROG} {__version__} ({f'sglang {v}' if v else 'no sglang'} installed)")
        parser.exit()


def _release_arg(spec: str):
    """argparse type: a release of ``releases.release_set(spec)``; the error lists them."""

    def check(value):
        if value not in releases.release_set(spec):
            known = "knows" if spec == "all" else "patches"
            raise argparse.ArgumentTypeError(f"{value} is not a release this plugin {known} ({_known(spec)})")
        return value

    check.__name__ = "release"
    return check


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=DESCRIPTION)
    p.add_argument("--version", action=_Version, help="this plugin's version and the installed sglang's")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", required=True)

    def command(name, func):
        short, long = COMMANDS[name]
        c = sub.add_parser(name, help=short, description=long)
        c.set_defaults(func=func)
        return c

    s = command("status", _status)
    s.add_argument("--json", action="store_true", help="the same report as JSON (as in GET /server_info)")
    s.add_argument("--wide", action="store_true", help="no wrapping; full target names and their fingerprints")
    command("matrix", _matrix).add_argument("--markdown", action="store_true", help="as the README's Markdown table")
    command("index", _index)
    command("variables", _variables).add_argument("--markdown", action="store_true", help="as docs/usage.md's table")
    c = command("check-selection", _check_selection)
    c.add_argument("value", nargs="?", metavar="VALUE",
                   help=f"auto, off or a comma list of fix names / PR numbers (default: ${selection.ENV})")
    d = command("diff", _diff)
    d.add_argument("fix", metavar="FIX", help="a fix name or one of its upstream PR numbers (23456, #23456)")
    d.add_argument("--release", metavar="VERSION", type=_release_arg("all"), help="default: the installed sglang")
    e = command("series", _series)
    e.add_argument("--release", metavar="VERSION", type=_release_arg("patched"), help="default: the installed sglang")
    e.add_argument("--write", metavar="PATCH_DIR", help="write PATCH_DIR/series/<release> for every patched release")
    v = command("survey", _survey)
    v.add_argument("path", nargs="?", metavar="PATH", help="a release tree or a wheel (default: the installed sglang)")
    v.add_argument("--as-new", action="store_true",
                   help="a release of the table read as if the table lacked its code line (the draft it would need)")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `status | head`
        sys.stderr.close()
        return 0
    except Exception as e:  # a failure inside the plugin (damaged data, a bug): one line naming it, no traceback
        where = f"{e.filename} is missing" if isinstance(e, FileNotFoundError) and e.filename else \
            f"{type(e).__name__}: {e}"
        return _error(f"{args.cmd} failed inside {PROG} {__version__} ({installed.plugin_path()}): {where}",
                      f"reinstall {installed.DIST}, or report it with this line")


if __name__ == "__main__":
    sys.exit(main())
