"""Command line: ``sglang-specv2-fixes`` / ``python -m sglang_specv2_fixes``.

    status [--json]        installed sglang, each fix's state and reason, fingerprint checks (no GPU,
                           nothing imported from sglang, nothing patched)
    matrix [--markdown]    the fix x release compatibility table of this plugin version
    check-selection VALUE  validate an SGLANG_SPECV2_FIXES / --specv2-fixes value
    diff FIX               the fix as a unified diff against the installed sglang
    export-patches --release V --out DIR [--source SGLANG_DIR]
                           write the quilt series for release V (source: the installed sglang)
"""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__, catalog, core, release, selection
from .catalog import ReleaseNote
from .fixes import ALL_FIXES


def _status(args) -> int:
    try:
        sel = selection.from_env(ALL_FIXES)
    except selection.SelectionError as e:
        print(e, file=sys.stderr)
        return 2
    report = core.plan(sel)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0
    v = report.sglang_version
    print(f"sglang-specv2-fixes {__version__}")
    if v is None:
        print("sglang: not installed in this environment")
    else:
        where = release.sglang_root()
        print(f"sglang: {v} ({where})")
    if not report.supported:
        print(
            f"  not a supported release: nothing would be patched. Supported: {', '.join(release.SUPPORTED_RELEASES)}"
        )
    print(f"selection: {report.selection} (${selection.ENV} or {selection.FLAG})")
    print()
    for f in report.fixes:
        shown = "would apply" if f.state == catalog.READY else f.state
        print(f"  {f.pr:<16} {f.name:<28} {shown}")
        print(f"  {'':<16} {f.title}")
        if f.reason:
            print(f"  {'':<16} reason: {f.reason}")
        for t in f.targets:
            mark = "ok" if t.ok else "MISMATCH" if t.installed else "NOT FOUND"
            print(f"  {'':<16} fingerprint {mark}: {t.target} installed={t.installed} expected={t.expected}")
    for w in report.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print()
    print("'would apply' becomes 'applied' in each SGLang process that loads the plugin; the running")
    print("server's own view is in GET /server_info -> specv2_fixes.")
    return 1 if any(f.state == catalog.REFUSED for f in report.fixes) else 0


def matrix_rows():
    """(fix, {release: cell}) for every fix and supported release, from the catalogue."""
    rows = []
    for fix in ALL_FIXES:
        cells = {}
        for ver, line in release.SUPPORTED_RELEASES.items():
            entry = fix.for_line(line)
            if entry is None:
                cells[ver] = catalog.NOT_APPLICABLE
            elif isinstance(entry, ReleaseNote):
                cells[ver] = entry.state
            else:
                cells[ver] = catalog.APPLIED
        rows.append((fix, cells))
    return rows


def _matrix(args) -> int:
    vers = list(release.SUPPORTED_RELEASES)
    if args.markdown:
        print("| fix | PR | " + " | ".join(vers) + " |")
        print("|---|---|" + "---|" * len(vers))
        for fix, cells in matrix_rows():
            print(f"| `{fix.name}` | {fix.pr} | " + " | ".join(cells[v] for v in vers) + " |")
    else:
        print(f"{'fix':<28} {'PR':<16} " + " ".join(f"{v:<15}" for v in vers))
        for fix, cells in matrix_rows():
            print(f"{fix.name:<28} {fix.pr:<16} " + " ".join(f"{cells[v]:<15}" for v in vers))
    return 0


def _check_selection(args) -> int:
    try:
        sel = selection.parse(args.value, ALL_FIXES)
    except selection.SelectionError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"ok: {sel.mode}" + (f" {sorted(sel.names)}" if sel.explicit else ""))
    return 0


def _diff(args) -> int:
    from . import export

    version = release.installed_version()
    root = release.sglang_root()
    try:
        fix = next(f for f in ALL_FIXES if args.fix in f.aliases)
    except StopIteration:
        print(selection._message(f"unknown fix name(s): {args.fix}", ALL_FIXES), file=sys.stderr)
        return 2
    if root is None:
        print("sglang is not installed in this environment", file=sys.stderr)
        return 2
    try:
        diff = export.fix_diff(fix, version, root)
    except export.ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(diff if diff else f"{fix.name}: nothing to patch on sglang {version}")
    return 0


def _export(args) -> int:
    from . import export

    root = args.source or release.sglang_root()
    installed = release.installed_version()
    if args.source is None and installed != args.release:
        print(f"error: installed sglang is {installed}; pass --source with sglang {args.release}'s package dir",
              file=sys.stderr)
        return 2
    try:
        names = export.export(args.release, root, args.out)
    except export.ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{args.out}/series: {len(names)} patch(es): {', '.join(names) or '-'}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="sglang-specv2-fixes", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("status", help="what the plugin would do with the installed sglang")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_status)
    m = sub.add_parser("matrix", help="fix x release compatibility table")
    m.add_argument("--markdown", action="store_true")
    m.set_defaults(func=_matrix)
    c = sub.add_parser("check-selection", help="validate a selection value")
    c.add_argument("value")
    c.set_defaults(func=_check_selection)
    d = sub.add_parser("diff", help="a fix as a unified diff against the installed sglang")
    d.add_argument("fix")
    d.set_defaults(func=_diff)
    e = sub.add_parser("export-patches", help="write patches/<release>/series from the plugin's bodies")
    e.add_argument("--release", required=True, choices=list(release.SUPPORTED_RELEASES))
    e.add_argument("--out", required=True)
    e.add_argument("--source", help="sglang package directory of that release (default: the installed one)")
    e.set_defaults(func=_export)
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `status | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
