"""Command line: ``sglang-specv2-fixes`` / ``python -m sglang_specv2_fixes``.

    status [--json]          installed sglang, each fix's state and reason, fingerprint checks (no GPU,
                             nothing imported from sglang, nothing patched)
    matrix [--markdown]      the fix x release compatibility table of this plugin version
    index                    the patch index (what / why / PRs / which patch file on which release)
    check-selection [VALUE]  validate a selection (default: $SGLANG_SPECV2_FIXES)
    diff FIX [--release V]   the patch file a release gets for FIX (default: the installed release)
    series --release V       the packagers' series of release V (paths under patches/)
    series --write patches   regenerate patches/series/<release> for every patched release
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import __version__, catalog, core, export, installed, patchfile, releases, selection
from .catalog import Patched
from .fixes import ALL_FIXES


def _selection(value):
    try:
        return selection.parse(value, ALL_FIXES), None
    except selection.SelectionError as e:
        return None, str(e)


def _patchable_here(sel, line) -> list:
    return [n for n in sorted(sel.names) if line and isinstance(releases.entry(n, line), Patched)]


def _status(args) -> int:
    sel, err = _selection(os.environ.get(selection.ENV))
    if err:
        print(err, file=sys.stderr)
        return 2
    report = core.plan(sel)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 2 if (sel.explicit and not report.supported) else 0
    v = report.sglang_version
    print(f"sglang-specv2-fixes {__version__}")
    print("sglang: not installed in this environment" if v is None else f"sglang: {v} ({installed.sglang_root()})")
    print(f"selection: {report.selection} (${selection.ENV} or {selection.FLAG})")
    if not report.supported:
        what = "no sglang" if v is None else f"sglang {v} is not a release this plugin knows"
        print(f"\n{what}: nothing would be patched. Known releases: {', '.join(releases.RELEASES)}")
        if sel.explicit:
            print(f"error: fixes named explicitly ({sel.canonical}): a server would stop at startup", file=sys.stderr)
            return 2
        return 0
    print(f"code line: {report.code_line}\n")
    for f in report.fixes:
        print(f"  {f.name:<28} {f.state:<15} {', '.join(f.upstream) or 'beyond upstream'}")
        print(f"  {'':<28} {f.title}")
        if f.reason:
            print(f"  {'':<28} {f.reason}")
        for t in f.targets:
            mark = "ok" if t.ok else "MISMATCH" if t.installed else "NOT FOUND"
            print(f"  {'':<28} {mark:<9} {t.target.rsplit('.', 2)[-2]}.{t.target.rsplit('.', 1)[-1]}")
            if not t.ok:
                print(f"  {'':<38} installed {t.installed}, expected {t.expected}")
    for w in report.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if sel.explicit and not _patchable_here(sel, report.code_line):
        print(f"\nnote: none of the selected fixes ({sel.canonical}) is patched on this release: nothing would be patched")
    print("\n'ready' becomes 'applied' in each SGLang process that loads the plugin; the running server's own")
    print("view is in GET /server_info -> specv2_fixes.")
    return 1 if any(f.state in (catalog.REFUSED, catalog.FAILED) for f in report.fixes) else 0


def _matrix(args) -> int:
    vers = list(releases.RELEASES)
    rows = export.matrix_rows()
    if args.markdown:
        print("| fix | upstream | " + " | ".join(vers) + " |")
        print("|---|---|" + "---|" * len(vers))
        for fix, cells in rows:
            refs = fix.refs if fix.upstream or fix.related else "-"
            print(f"| `{fix.name}` | {refs} | " + " | ".join(cells[v] for v in vers) + " |")
    else:
        for fix, cells in rows:
            print(f"{fix.name} ({fix.refs})")
            for state in dict.fromkeys(cells.values()):
                print(f"    {state:<15} {', '.join(v for v in vers if cells[v] == state)}")
    return 0


def _index(args) -> int:
    print(export.index_text(), end="")
    return 0


def _check_selection(args) -> int:
    value = args.value if args.value is not None else os.environ.get(selection.ENV)
    sel, err = _selection(value)
    if err:
        print(err, file=sys.stderr)
        return 2
    print(f"ok: {sel.canonical}" + ("" if args.value is not None or value is None else f" (from ${selection.ENV})"))
    if sel.explicit:
        patched = {n: releases.release_set(f"fix:{n}") for n in sorted(sel.names)}
        for n, vs in patched.items():
            print(f"  {n}: patched on {', '.join(vs)}" if vs else f"  {n}: never patched by this plugin (upstream or not applicable everywhere)")
        if not any(patched.values()):
            print("note: nothing would be patched on any release with this selection")
    return 0


def _diff(args) -> int:
    fix = core.fix_by_alias(args.fix)
    if fix is None:
        print(selection._message(f"unknown fix name(s): {args.fix}", ALL_FIXES), file=sys.stderr)
        return 2
    version = args.release or installed.version()
    line = releases.code_line(version)
    if line is None:
        print(f"error: sglang {version} is not a release this plugin knows; pass --release", file=sys.stderr)
        return 2
    e = releases.entry(fix.name, line)
    if not isinstance(e, Patched):
        print(f"{fix.name}: nothing patched on sglang {version} ({e.state}: {e.reason})")
        return 0
    with open(patchfile.patch_path(fix.name, e.name), encoding="utf-8") as f:
        sys.stdout.write(f.read())
    return 0


def _series(args) -> int:
    if args.write:
        written = export.write_series(args.write)
        print(f"{args.write}/series/: {', '.join(written)}")
        return 0
    if not args.release:
        print("error: --release or --write", file=sys.stderr)
        return 2
    for p in export.series(args.release):
        print(p)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="sglang-specv2-fixes", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("status", help="what the plugin would do with the installed sglang")
    s.add_argument("--json", action="store_true", help="the same report as JSON (as in GET /server_info)")
    s.set_defaults(func=_status)
    m = sub.add_parser("matrix", help="fix x release compatibility table")
    m.add_argument("--markdown", action="store_true", help="as the README's Markdown table")
    m.set_defaults(func=_matrix)
    sub.add_parser("index", help="the patch index (fixes/__init__.py)").set_defaults(func=_index)
    c = sub.add_parser("check-selection", help="validate a selection value")
    c.add_argument("value", nargs="?", help=f"default: ${selection.ENV}")
    c.set_defaults(func=_check_selection)
    d = sub.add_parser("diff", help="the patch file a release gets for a fix")
    d.add_argument("fix")
    d.add_argument("--release", choices=list(releases.RELEASES), help="default: the installed sglang")
    d.set_defaults(func=_diff)
    e = sub.add_parser("series", help="the packagers' patch series of a release (paths under patches/)")
    e.add_argument("--release", choices=releases.release_set("patched"))
    e.add_argument("--write", metavar="PATCH_DIR", help="write PATCH_DIR/series/<release> for every patched release")
    e.set_defaults(func=_series)
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `status | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
