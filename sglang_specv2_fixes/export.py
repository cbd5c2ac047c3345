"""Views generated from the release table and the patch files (never edited by hand; CI checks them):

    matrix_rows()        fix x release states (README compatibility table, ``matrix``)
    index_text()         the patch index in fixes/__init__.py (what / why / PRs / where / switches / removal)
    variables_markdown() every SGLANG_SPECV2_FIXES_* variable (docs/usage.md's table, ``variables``)
    series(version)      the patch files that make up release ``version``'s packagers' series
    write_series(dir)    ``patches/series/<release>`` for every patched release
"""

from __future__ import annotations

import os
import textwrap
from typing import Dict, List, Tuple

from . import catalog, releases
from .catalog import Fix, Patched
from .fixes import ALL_FIXES


def cell(fix: Fix, version: str) -> str:
    e = releases.entry(fix.name, releases.code_line(version))
    return catalog.APPLIED if isinstance(e, Patched) else e.state


def matrix_rows() -> List[Tuple[Fix, Dict[str, str]]]:
    return [(fix, {v: cell(fix, v) for v in releases.RELEASES}) for fix in ALL_FIXES]


def ranges(versions: List[str]) -> str:
    """'0.5.11, 0.5.12 … 0.5.17' style: consecutive releases of the table collapse into one range."""
    order = list(releases.RELEASES)
    runs: List[List[str]] = []
    for v in versions:
        if runs and order.index(v) == order.index(runs[-1][-1]) + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]} … {r[-1]}" for r in runs)


def where(fix: Fix) -> List[str]:
    """Per state (and patch file), the releases it covers."""
    groups: Dict[str, List[str]] = {}
    for v, r in releases.RELEASES.items():
        e = releases.entry(fix.name, r.line)
        key = f"applied: patches/{fix.name}/{e.name}.patch" if isinstance(e, Patched) else e.state
        groups.setdefault(key, []).append(v)
    return [f"{k} ({ranges(vs)})" for k, vs in groups.items()]


def index_text() -> str:
    out = []
    for fix in ALL_FIXES:
        head = f"{fix.name}  [{fix.refs}]  {fix.title}"
        out.append(textwrap.fill(head, 120, subsequent_indent="    ", break_on_hyphens=False))  # the CLI width
        for label, text in (("What", fix.what), ("Why", fix.why)):
            out.append(textwrap.fill(text, 100, initial_indent=f"    {label}: ", subsequent_indent="        "))
        for w in where(fix):
            out.append(f"    - {w}")
        for sw in fix.switches:
            out.append(textwrap.fill(f"{sw.env} (unset: {sw.default}) {sw.effect}", 100,
                                     initial_indent="    Switch: ", subsequent_indent="        "))
        out.append(textwrap.fill(fix.removal, 100, initial_indent="    Removal: ", subsequent_indent="        "))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def variables_markdown() -> str:
    """The table of every ``SGLANG_SPECV2_FIXES_*`` variable: the global ones, then each fix's switches."""
    from . import selection

    rows = ["| variable | unset | what it does |", "|---|---|---|"]
    for name, what in selection.GLOBAL_VARIABLES.items():
        rows.append(f"| `{name}` | {'auto' if name == selection.ENV else '-'} | {what} |")
    for fix in ALL_FIXES:
        for sw in fix.switches:
            rows.append(f"| `{sw.env}` | {sw.default} | `{fix.name}`: {sw.effect} |")
        if fix.opt_in:
            rows.append(f"| `{fix.opt_in}` | off | `{fix.name}`: =1 plans it (opt-in) |")
    return "\n".join(rows) + "\n"


def series(version: str) -> List[str]:
    """Patch files (relative to patches/) for ``version``, in catalogue order."""
    line = releases.code_line(version)
    out = []
    for fix in ALL_FIXES:
        e = releases.entry(fix.name, line)
        if isinstance(e, Patched):
            out.append(f"{fix.name}/{e.name}.patch")
    return out


def write_series(patch_dir: str) -> List[str]:
    """Write ``<patch_dir>/series/<release>`` for every patched release; remove stale ones."""
    d = os.path.join(patch_dir, "series")
    os.makedirs(d, exist_ok=True)
    written = []
    for v in releases.release_set("patched"):
        with open(os.path.join(d, v), "w") as f:
            f.write("".join(p + "\n" for p in series(v)))
        written.append(v)
    for stale in set(os.listdir(d)) - set(written):
        os.remove(os.path.join(d, stale))
    return written
