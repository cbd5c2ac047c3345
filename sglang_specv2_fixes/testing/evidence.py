"""The evidence data file (docs/evidence.tsv) and the table generated from it (docs/evidence.md).

    python -m sglang_specv2_fixes.testing.evidence markdown > docs/evidence.md     # regenerate (a CPU test checks it)
    python -m sglang_specv2_fixes.testing.evidence check                         # validate the data file
    python -m sglang_specv2_fixes.testing.evidence append --device H200 --release 0.5.11 --backend triton \\
        --fix verify-handoff --row tests/registered/test_verify_handoff.py --result "A/B met"

One tab-separated line per run result, appended by whoever ran it (``append`` below, or the function of the same
name from a GPU runner), never edited afterwards:

    date      YYYY-MM-DD (UTC) of the run
    device    the GPU (``H200``, ``2 x H200`` for a 2-GPU row) or ``CPU``
    release   a release of the release table (sglang_specv2_fixes/releases.py)
    backend   the attention backend of the row's server (``triton``, ``flashinfer``, ``fa3``, ``flashmla``), ``-`` for
              CPU
    fix       the fix the row is registered for (its ``bug_in`` / ``releases`` spec), ``-`` for a guard row
    row       the test: ``tests/registered/FILE.py`` or ``tests/cpu/FILE.py``, ``::Class`` when only one class ran
    result    one of RESULTS
    note      free text: extra environment, why a side failed (may be empty)

Raw logs stay out of the tree: the line is the result, the runner's own output is the CI artifact.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
from typing import Dict, List, NamedTuple, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "docs", "evidence.tsv")
COLUMNS = ("date", "device", "release", "backend", "fix", "row", "result", "note")
RESULTS = {
    "A/B met": "registered GPU row: stock fails, the plugin passes",
    "both pass": "registered GPU row expected to pass on both sides (guard, or the fix is upstream there): it did",
    "plugin passes": "registered GPU row, plugin side only (stock not run in that run): passes",
    "stock fails": "registered GPU row, stock side only (plugin not run in that run): fails as the row expects",
    "stock passes": "registered GPU row expected to pass on both sides, stock side only: passes",
    "not met": "registered GPU row whose expectation was not met (the note says how)",
    "CPU-proven": "the fix's CPU test on the release's real source passed",
}
BACKENDS = ("triton", "flashinfer", "fa3", "flashmla", "-")
GPU_RESULTS = ("A/B met", "both pass", "plugin passes", "stock fails", "stock passes", "not met")


class Line(NamedTuple):
    date: str
    device: str
    release: str
    backend: str
    fix: str
    row: str
    result: str
    note: str = ""

    def tsv(self) -> str:
        return "\t".join(self)


def load(path: str = DATA) -> List[Line]:
    """The data file's lines (the header skipped); a line with the wrong number of fields raises ValueError."""
    out = []
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        if tuple(header) != COLUMNS:
            raise ValueError(f"{path}: header {header}, expected {list(COLUMNS)}")
        for n, ln in enumerate(f, 2):
            fields = ln.rstrip("\n").split("\t")
            if len(fields) != len(COLUMNS):
                raise ValueError(f"{path}:{n}: {len(fields)} fields, expected {len(COLUMNS)}")
            out.append(Line(*fields))
    return out


def _row_exists(row: str) -> Optional[str]:
    """None when ``row`` names an existing test file (and class), else why not."""
    path, _, cls = row.partition("::")
    if not re.fullmatch(r"tests/(registered|cpu)/test_\w+\.py", path):
        return f"row {row!r} is not tests/registered/FILE.py or tests/cpu/FILE.py"
    full = os.path.join(ROOT, path)
    if not os.path.exists(full):
        return f"row {row!r}: no such file"
    if cls:
        with open(full, encoding="utf-8") as f:
            if not re.search(rf"^class {re.escape(cls)}\b", f.read(), re.M):
                return f"row {row!r}: no class {cls} in {path}"
    return None


def problems(lines: List[Line]) -> List[str]:
    """Every line checked against the release table, the fix list and the test tree: what is wrong, per line."""
    from .. import export, releases  # imported here: the module's CLI and tests only
    from ..fixes import ALL_FIXES

    fixes = {f.name for f in ALL_FIXES}
    cells = {fix.name: c for fix, c in export.matrix_rows()}
    bad = []
    for n, ln in enumerate(lines, 2):
        why = []
        try:
            datetime.date.fromisoformat(ln.date)
        except ValueError:
            why.append(f"date {ln.date!r} is not YYYY-MM-DD")
        rel = releases.RELEASES.get(ln.release)
        if rel is None:
            why.append(f"release {ln.release!r} is not in the release table")
        if ln.fix != "-" and ln.fix not in fixes:
            why.append(f"fix {ln.fix!r} is not a fix name")
        if ln.backend not in BACKENDS:
            why.append(f"backend {ln.backend!r} is not one of {BACKENDS}")
        if ln.result not in RESULTS:
            why.append(f"result {ln.result!r} is not one of {list(RESULTS)}")
        r = _row_exists(ln.row)
        if r:
            why.append(r)
        if "\t" in ln.note or "\n" in ln.note:
            why.append("note holds a tab or a newline")
        if ln.result == "CPU-proven":
            if ln.device != "CPU" or ln.backend != "-" or not ln.row.startswith("tests/cpu/"):
                why.append("a CPU-proven line has device CPU, backend - and a tests/cpu/ row")
            if ln.fix in cells and rel and cells[ln.fix][ln.release] != "applied":
                why.append(f"{ln.fix} is {cells[ln.fix][ln.release]} on {ln.release}, not patched: nothing to prove")
        elif ln.result in GPU_RESULTS:
            if ln.device == "CPU" or not ln.row.startswith("tests/registered/") or ln.backend == "-":
                why.append("a GPU line has a GPU device, a backend and a tests/registered/ row")
            if rel and not rel.gpu:
                why.append(f"{ln.release} pins torch {rel.torch}: its rows do not run on the GPU image")
        if ln.result == "A/B met" and ln.fix == "-":
            why.append("an A/B line names its fix")
        bad += [f"line {n}: {w}" for w in why]
    return bad


def _best(lines: List[Line]) -> Dict[tuple, dict]:
    """Per (fix, release): the newest A/B line (one run with both sides, or a row's stock-fails and plugin-passes
    sides from two runs: then the later date), the rows that met A/B, the newest plugin-passes line, the CPU lines
    and the not-met lines."""
    out: Dict[tuple, dict] = {}
    halves: Dict[tuple, dict] = {}
    for ln in sorted(lines, key=lambda x: (x.date, x.row)):
        d = out.setdefault((ln.fix, ln.release), {"ab": None, "rows": set(), "plugin": None, "cpu": [], "not": []})
        if ln.result in ("stock fails", "plugin passes"):
            h = halves.setdefault((ln.fix, ln.release, ln.row), {})
            h[ln.result] = ln
            if len(h) == 2:  # both sides met, in two runs: the A/B is as recent as its later side
                ln = ln._replace(result="A/B met", note="sides in two runs: stock " + h["stock fails"].date
                                 + ", plugin " + h["plugin passes"].date)
        if ln.result == "A/B met":
            d["ab"] = ln
            d["rows"].add(ln.row)
        elif ln.result == "plugin passes":
            d["plugin"] = ln
        elif ln.result == "CPU-proven":
            if ln.row not in [c.row for c in d["cpu"]]:
                d["cpu"].append(ln)
        elif ln.result == "not met":
            d["not"].append(ln)
    return out


def _cell_row(row: str) -> str:
    path, _, cls = row.partition("::")
    return f"`{os.path.basename(path)}`" + (f" (`{cls}`)" if cls else "")


def markdown(lines: Optional[List[Line]] = None) -> str:
    """docs/evidence.md: per fix and release it patches, the strongest result in the data file."""
    from .. import export, releases

    lines = load() if lines is None else lines
    best = _best(lines)
    out = [
        "# Evidence: fix x release",
        "",
        "<!-- generated by `python -m sglang_specv2_fixes.testing.evidence markdown > docs/evidence.md` from",
        "     docs/evidence.tsv; a CPU test fails when this copy drifts -->",
        "",
        "For every release a fix is patched on (*applied* in the README's compatibility table), the strongest result in",
        "[evidence.tsv](evidence.tsv), one line per run result:",
        "",
        "* **GPU A/B**: the fix's registered row (`tests/registered/`) against the real `sglang.launch_server`, run",
        "  twice (`--specv2-fixes off` and `auto`), failed on stock and passed with the plugin; the newest such run,",
        "  and how many rows have met A/B for the fix there (a row's two sides may come from two runs: both dates",
        "  shown). A later run of that row that did not meet its expectation is named.",
        "* **GPU, plugin side**: the row passed with the plugin; its stock side has not run on that release.",
        "* **CPU**: the fix's CPU test on the release's real SGLang source (`ci/run_cpu_tests.sh`).",
        "",
        "How to add a result: `python -m sglang_specv2_fixes.testing.evidence append --help`.",
        "",
        "| fix | release | proof | date | device | backend | row |",
        "|---|---|---|---|---|---|---|",
    ]
    counts = {"GPU A/B": 0, "GPU, plugin side": 0, "CPU": 0, "none": 0}
    for fix, cells in export.matrix_rows():
        for v in releases.RELEASES:
            if cells[v] != "applied":
                continue
            d = best.get((fix.name, v))
            ab = d and d["ab"]
            if ab:
                more = len(d["rows"]) - 1
                row = _cell_row(ab.row) + (f" (+{more} more rows)" if more else "")
                later = [x for x in d["not"] if x.date > ab.date and x.row == ab.row]
                if later:
                    row += f"; not met on {later[-1].date}"
                if ab.note.startswith("sides in two runs"):
                    row += f" ({ab.note})"
                proof, date, dev, be = "GPU A/B", ab.date, ab.device, ab.backend
            elif d and d["plugin"]:
                p = d["plugin"]
                proof, date, dev, be, row = "GPU, plugin side", p.date, p.device, p.backend, _cell_row(p.row)
            elif d and d["cpu"]:
                c = d["cpu"][-1]
                proof, date, dev, be = "CPU", c.date, "CPU", "-"
                row = ", ".join(_cell_row(x.row) for x in d["cpu"])
            else:
                proof, date, dev, be, row = "none", "-", "-", "-", "-"
            counts[proof] += 1
            out.append(f"| `{fix.name}` | {v} | {proof} | {date} | {dev} | {be} | {row} |")
    total = sum(counts.values())
    out += ["", f"{total} (fix, release) pairs patched: " + ", ".join(f"{k} {n}" for k, n in counts.items()) + "."]
    return "\n".join(out) + "\n"


def append(device: str, release: str, backend: str, fix: str, row: str, result: str, note: str = "",
           date: Optional[str] = None, path: str = DATA) -> Line:
    """Append one result line (date: today, UTC) after checking it; ValueError names what is wrong."""
    ln = Line(date or datetime.datetime.now(datetime.timezone.utc).date().isoformat(), device, release, backend, fix,
              row, result, note)
    bad = problems([ln])
    if bad:
        raise ValueError("; ".join(b.split(": ", 1)[1] for b in bad))
    with open(path, "a", encoding="utf-8") as f:
        f.write(ln.tsv() + "\n")
    return ln


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sglang_specv2_fixes.testing.evidence", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("markdown", help="print docs/evidence.md")
    sub.add_parser("check", help="validate docs/evidence.tsv")
    a = sub.add_parser("append", help="append one result line to docs/evidence.tsv")
    for name in ("device", "release", "backend", "fix", "row"):
        a.add_argument(f"--{name}", required=True)
    a.add_argument("--result", required=True, choices=list(RESULTS))
    a.add_argument("--note", default="")
    a.add_argument("--date", help="YYYY-MM-DD (default: today, UTC)")
    args = p.parse_args(argv)
    if args.cmd == "markdown":
        sys.stdout.write(markdown())
        return 0
    if args.cmd == "check":
        bad = problems(load())
        print("\n".join(bad) or f"{DATA}: ok")
        return 1 if bad else 0
    try:
        ln = append(args.device, args.release, args.backend, args.fix, args.row, args.result, args.note, args.date)
    except ValueError as e:
        print(f"not appended: {e}", file=sys.stderr)
        return 2
    print(ln.tsv())
    print("then: python -m sglang_specv2_fixes.testing.evidence markdown > docs/evidence.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
