"""The catalogue of known upstream spec-v2 bugs: one record per bug, and this plugin's answer to it.

    BUGS                 every record: sglang_specv2_fixes/known_bugs.json, loaded (load()) when this module is
                         imported; the plugin never imports it (the CLI's docs commands and the tests do)
    problems()           where the catalogue and the release table disagree (a CPU test requires none)
    evidence_affected()  a record's source markers read in one release tree: affected or not
    markdown()           docs/known-bugs.md;  readme_claim(): the README's sentence about known bugs

    python -m sglang_specv2_fixes.known_bugs > docs/known-bugs.md     # regenerate (CI fails while it is stale)

The records are data (known_bugs.json, shipped as package data); this module reads them, derives what the release
table already says and checks the rest. A record says which releases of the table have the bug in their stock
source (``affected``, read from each release's wheel) and what this plugin does about it (``answer``):

* a fix name: the fix of the release table that covers it. The table must patch that fix on exactly the releases
  its records call affected (see ``problems()``). A record whose ``affected`` is ``"table"`` takes them from the
  table (the releases where it patches the fix or says open; a fix absent from a code line is not applicable
  there), and ``fixed_in`` ``"table"`` the first release from which the table says upstream and nothing is
  affected; its reason may say ``{affected}`` / ``{fixed_in}`` for those. Such a record without ``title`` takes the
  fix's, without ``verified`` the table's own verification (fingerprints);
* ``upstream``: every release of the table already has upstream's fix (none is affected);
* ``not-affected``: no release of the table has the bug's code path (none is affected);
* ``not-backported``: some releases are affected and this plugin does not patch it; ``reason`` says why (planned
  in an issue, needs hardware or a setup no test here can show, the bug is outside SGLang's Python, ...) and
  what a user can do meanwhile. A record may name the ``fix`` written (or being written) for it: it answers that
  fix once the release table patches it on every affected release (``resolve``), and is not-backported until then.

Written ranges: ``"0.5.11 - 0.5.13.post1"`` (both included), ``"0.5.14 -"`` (that release and every later one: a
bug open upstream stays affected on a release added to the table until a record says otherwise), ``"0.5.11"``.

How ``affected`` was read is in ``verified``; where that reading is a marker in the source (a regular
expression in a file), ``evidence`` holds it and tests/cpu/test_known_bugs.py re-reads it in every release tree
it finds, so a record that disagrees with a release's source fails there (for a ``"table"`` record: the table).
Records of the table's fixes without markers are verified by the table's own fingerprints
(tests/cpu/test_source_only_releases.py, test_fingerprints.py).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import sys
import textwrap
from typing import Dict, List, Optional, Tuple

from . import catalog, releases
from .catalog import Patched

UPSTREAM = catalog.UPSTREAM  # "upstream"
NOT_AFFECTED = "not-affected"
NOT_BACKPORTED = "not-backported"
ANSWERS = (UPSTREAM, NOT_AFFECTED, NOT_BACKPORTED)  # or the name of a fix of the release table
FROM_TABLE = "table"  # ``affected`` / ``fixed_in`` written as this: derived from the release table

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "known_bugs.json")
ORDER = list(releases.RELEASES)


def span(first: str, last: str) -> Tuple[str, ...]:
    """The releases of the table from ``first`` to ``last`` (both included)."""
    return tuple(ORDER[ORDER.index(first): ORDER.index(last) + 1])


def since(first: str) -> Tuple[str, ...]:
    """``first`` and every later release of the table."""
    return tuple(ORDER[ORDER.index(first):])


@dataclasses.dataclass(frozen=True)
class Evidence:
    """A marker in a release's source: ``pattern`` (regular expression, ``re.M``) searched in the files that match
    ``files`` (a glob relative to the folder holding ``sglang/``; ``**`` spans folders). ``fixed=True``: a match
    means the release has upstream's fix (no match: affected); ``fixed=False``: a match means it has the bug."""

    files: str
    pattern: str
    fixed: bool


@dataclasses.dataclass(frozen=True)
class Bug:
    id: str  # stable slug
    title: str
    refs: Tuple[str, ...]  # upstream issues / PRs ("#23802"); () for a bug found here (beyond upstream)
    found: str  # where it was found: "release table" or the survey's item ("survey A", "survey watch list", ...)
    symptom: str  # what the user sees
    affected: Tuple[str, ...]  # releases of the table whose stock source has the bug (table order)
    fixed_in: Optional[str]  # first release of the table with upstream's fix; None: open upstream (as of the last)
    answer: str  # a fix name, or one of ANSWERS
    reason: str  # why this answer (what is missing for a backport, where upstream fixed it, ...)
    verified: str  # how ``affected`` was read: function / fingerprint / grep
    evidence: Tuple[Evidence, ...] = ()  # re-read by tests/cpu/test_known_bugs.py in every release tree present
    # the fix of the release table written for this bug, where one is (or is being) written: the record is written
    # with answer ``not-backported`` and a reason for the user; resolve() makes ``fix`` its answer once the table
    # patches that fix on every release the record calls affected (a fix that has not landed, or not on all of them,
    # leaves the record not-backported, its reason naming the fix and the releases it lacks)
    fix: Optional[str] = None
    from_table: bool = False  # affected and fixed_in derived from the release table ("table" in the data)

    @property
    def is_fix(self) -> bool:
        return self.answer not in ANSWERS


_TABLE = "release table: the patch file's `before` fingerprints match the stock source where it is applied, " \
         "each note's checked function elsewhere (tests/cpu/test_source_only_releases.py, test_fingerprints.py)"
_KEYS = {"id", "title", "refs", "found", "symptom", "affected", "fixed_in", "answer", "fix", "reason", "verified",
         "evidence"}
_REQUIRED = {"id", "refs", "found", "symptom", "affected", "fixed_in", "answer", "reason"}


# ------------------------------------------------------------------------------- the data
def parse_releases(written) -> Tuple[str, ...]:
    """A written ``affected`` (a list of ranges, see the module docstring) as releases of the table, table order.
    An unknown release raises ValueError."""
    out: List[str] = []
    for part in written:
        first, dash, last = (x.strip() for x in part.partition("-"))  # no release name holds a '-'
        for v in (first, last):
            if v and v not in releases.RELEASES:
                raise ValueError(f"{part!r}: {v!r} is not a release of the table")
        out += since(first) if dash and not last else span(first, last) if dash else [first]
    return tuple(out)


def table_affected(fix: str) -> Tuple[str, ...]:
    """The releases whose stock source has ``fix``'s bug by the table: it patches the fix there or says open."""
    states = table_states(fix)
    return tuple(v for v in ORDER if states[v] in (catalog.APPLIED, catalog.OPEN))


def table_fixed_in(fix: str) -> Optional[str]:
    """The first release from which the table says ``fix`` is upstream and no later release is affected."""
    states, affected = table_states(fix), set(table_affected(fix))
    return next((v for i, v in enumerate(ORDER) if states[v] == UPSTREAM and not affected & set(ORDER[i:])), None)


def _record(d: dict) -> Bug:
    unknown, missing = set(d) - _KEYS, _REQUIRED - set(d)
    if unknown or missing:
        raise ValueError(f"{DATA}: record {d.get('id')!r}: unknown keys {sorted(unknown)}, missing {sorted(missing)}")
    answer, derived = d["answer"], d["affected"] == FROM_TABLE
    if derived != (d["fixed_in"] == FROM_TABLE) or derived and answer in ANSWERS:
        raise ValueError(f"record {d['id']!r}: affected and fixed_in come from the table together, for a fix's record")
    if derived:
        affected, fixed_in = table_affected(answer), table_fixed_in(answer)
    else:
        affected, fixed_in = parse_releases(d["affected"]), d["fixed_in"]
    reason = d["reason"].replace("{affected}", _ranges(affected)).replace("{fixed_in}", fixed_in or "open")
    title = d.get("title")
    if title is None:
        from .fixes import ALL_FIXES

        title = next((f.title for f in ALL_FIXES if f.name == answer), None)
        if title is None:
            raise ValueError(f"record {d['id']!r}: a title (only a fix's record may take its fix's)")
    return Bug(id=d["id"], title=title, refs=tuple(d["refs"]), found=d["found"], symptom=d["symptom"],
               affected=affected, fixed_in=fixed_in, answer=answer, reason=reason,
               verified=d.get("verified", _TABLE),
               evidence=tuple(Evidence(e["files"], e["pattern"], e["fixed"]) for e in d.get("evidence", ())),
               fix=d.get("fix"), from_table=derived)


def load(path: str = DATA) -> Tuple[Bug, ...]:
    """The records of ``path`` as written (a record's ``fix`` not yet resolved against the table)."""
    with open(path, encoding="utf-8") as f:
        return tuple(_record(d) for d in json.load(f)["bugs"])


def resolve(b: Bug) -> Bug:
    """``b`` with its answer settled from the release table: a record naming a ``fix`` answers it once the table
    patches that fix on every release the record calls affected; until then it stays not-backported and its
    reason says which releases the fix lacks."""
    if b.fix is None:
        return b
    known = any(b.fix in line.fixes for line in releases.LINES.values())
    states = table_states(b.fix) if known else {}
    missing = [v for v in b.affected if states.get(v) != catalog.APPLIED]
    if not missing:
        return dataclasses.replace(b, answer=b.fix, reason=f"patched on {_ranges(b.affected)} by {b.fix}; "
                                                            f"without it: {b.reason}")
    lacks = "is not in this plugin's release table yet" if not known else f"is not patched on {_ranges(missing)}"
    return dataclasses.replace(b, reason=f"{b.reason} (its fix here, {b.fix}, {lacks})")


def by_id(bug_id: str) -> Bug:
    return next(b for b in BUGS if b.id == bug_id)


# ------------------------------------------------------------------------------- the table relation
def table_states(fix: str) -> Dict[str, str]:
    """Release -> the table's entry state for ``fix`` (``applied`` for a patch file; ``not-applicable`` where the
    fix is absent from the release's code line)."""
    out = {}
    for v, r in releases.RELEASES.items():
        e = releases.LINES[r.line].entry(fix)
        out[v] = catalog.APPLIED if isinstance(e, Patched) else e.state
    return out


def problems() -> List[str]:
    """Every disagreement between the catalogue and the release table (empty: consistent). The relation:

    * every record: its affected releases are releases of the table, in table order; ``fixed_in`` (when set) is a
      release of the table and no release from it on is affected; a bug open upstream (``fixed_in`` None) that
      affects anything affects the newest release;
    * ``upstream`` / ``not-affected``: nothing affected (``upstream``: fixed_in is the table's first release);
      ``not-backported``: something affected, and a reason;
    * a fix name: the fix exists in the table; when it has upstream PRs, a record with refs names one of them (a
      record without refs is a bug found here that the fix covers beyond upstream); and
      for each fix the union of its records' affected releases equals the releases where the table patches it or
      says ``open`` (a release the table calls ``upstream`` or ``not-applicable`` has no bug in its stock source);
    * a record naming a ``fix``: a fix name, affected somewhere, and its answer that fix (``resolve``: the table
      patches it on every affected release, so the relation above holds for it) or ``not-backported``;
    * every fix of the table has at least one record, and record ids are unique.
    """
    from .fixes import ALL_FIXES

    out: List[str] = []
    fixes = {f.name: f for f in ALL_FIXES}
    ids = [b.id for b in BUGS]
    out += [f"record id {i!r} is used twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    newest = ORDER[-1]
    for b in BUGS:
        where = f"{b.id}:"
        if any(v not in releases.RELEASES for v in b.affected):
            out.append(f"{where} affected names releases the table does not know: "
                       f"{[v for v in b.affected if v not in releases.RELEASES]}")
            continue
        if list(b.affected) != sorted(set(b.affected), key=ORDER.index):
            out.append(f"{where} affected is not in table order / has duplicates")
        if b.fixed_in is not None:
            if b.fixed_in not in releases.RELEASES:
                out.append(f"{where} fixed_in {b.fixed_in!r} is not a release of the table")
            elif set(b.affected) & set(since(b.fixed_in)):
                out.append(f"{where} fixed upstream in {b.fixed_in} but affected on "
                           f"{sorted(set(b.affected) & set(since(b.fixed_in)), key=ORDER.index)}")
        elif b.affected and newest not in b.affected:
            out.append(f"{where} open upstream (fixed_in None) but the newest release {newest} is not affected")
        if not b.reason.strip() or not b.verified.strip() or not b.symptom.strip():
            out.append(f"{where} symptom, reason and verified must all be written")
        if any(not re.fullmatch(r"#\d+", r) for r in b.refs):
            out.append(f"{where} refs must be '#NNNN': {b.refs}")
        if b.answer in (UPSTREAM, NOT_AFFECTED) and b.affected:
            out.append(f"{where} answer {b.answer!r} but affected {list(b.affected)}")
        if b.answer == UPSTREAM and b.fixed_in != ORDER[0]:
            out.append(f"{where} answer 'upstream' needs fixed_in {ORDER[0]} (every release has the fix)")
        if b.fix is not None:
            if not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", b.fix):
                out.append(f"{where} fix {b.fix!r} is not a fix name")
            if b.answer not in (b.fix, NOT_BACKPORTED):
                out.append(f"{where} names fix {b.fix} but answers {b.answer!r} (not-backported until the table "
                           f"patches it on every affected release, then {b.fix})")
            if not b.affected:
                out.append(f"{where} names fix {b.fix} but no release is affected")
        if b.answer == NOT_BACKPORTED and not b.affected:
            out.append(f"{where} answer 'not-backported' but no release is affected (upstream / not-affected?)")
        if b.is_fix:
            fix = fixes.get(b.answer)
            if fix is None:
                out.append(f"{where} answer {b.answer!r} is neither a fix of the release table nor one of {ANSWERS}")
                continue
            if fix.upstream and b.refs and not set(fix.upstream) & set(b.refs):
                out.append(f"{where} refs {list(b.refs)} name none of {fix.name}'s upstream PRs {list(fix.upstream)}")
    for name in fixes:
        recs = [b for b in BUGS if b.answer == name]
        if not recs:
            out.append(f"fix {name} of the release table has no record in the catalogue")
            continue
        states = table_states(name)
        bug_in = {v for v, s in states.items() if s in (catalog.APPLIED, catalog.OPEN)}
        affected = {v for b in recs for v in b.affected}
        if affected != bug_in:
            out.append(
                f"fix {name}: its records call {_ranges(sorted(affected, key=ORDER.index)) or 'nothing'} affected, "
                f"the table patches it (or says open) on {_ranges(sorted(bug_in, key=ORDER.index)) or 'nothing'}")
    return out


# ------------------------------------------------------------------------------- evidence in a tree
def evidence_affected(bug: Bug, root: str) -> Optional[bool]:
    """Whether the release whose ``sglang`` package is under ``root`` has ``bug`` by its evidence (every marker must
    say affected); None when the record has no evidence."""
    if not bug.evidence:
        return None
    verdicts = []
    for ev in bug.evidence:
        hit = False
        for path in sorted(glob.glob(os.path.join(root, ev.files), recursive=True)):
            with open(path, encoding="utf-8") as f:
                if re.search(ev.pattern, f.read(), re.M):
                    hit = True
                    break
        verdicts.append(hit != ev.fixed)
    return all(verdicts)


# ------------------------------------------------------------------------------- derived text
def _ranges(versions) -> str:
    runs: List[List[str]] = []
    for v in versions:
        if runs and ORDER.index(v) == ORDER.index(runs[-1][-1]) + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]} … {r[-1]}" for r in runs)


def outcome(b: Bug) -> str:
    """What a user of the table's releases gets: 'fixed here' (a fix patches it on every affected release), 'absent'
    (no release of the table has it) or 'not backported'."""
    if not b.affected:
        return "absent"
    if b.is_fix and all(table_states(b.answer)[v] == catalog.APPLIED for v in b.affected):
        return "fixed here"
    return "not backported"


def counts() -> Dict[str, int]:
    out = {"fixed here": 0, "absent": 0, "not backported": 0}
    for b in BUGS:
        out[outcome(b)] += 1
    return out


def readme_claim() -> str:
    """The README's sentence about known bugs (tests/cpu/test_known_bugs.py checks the README carries it)."""
    c = counts()
    first, last = ORDER[0], ORDER[-1]
    from .fixes import ALL_FIXES

    opt_in = {f.name for f in ALL_FIXES if f.opt_in}
    n_opt = sum(1 for b in BUGS if outcome(b) == "fixed here" and b.answer in opt_in)
    text = (f"Known upstream spec-v2 bugs: {len(BUGS)} ([docs/known-bugs.md](docs/known-bugs.md), with the releases "
            f"each one affects): {c['fixed here']} fixed by this plugin on every release they affect"
            + (f" ({n_opt} opt-in until its GPU row has met on every release)" if n_opt else "") + f", {c['absent']} "
            f"in none of {first} … {last} (fixed upstream earlier, or never there), {c['not backported']} not "
            f"backported, each with its reason.")
    return textwrap.fill(text, 120, break_on_hyphens=False, break_long_words=False)


def _fill(text: str, indent: str = "") -> List[str]:
    return textwrap.wrap(text, 120, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def markdown() -> str:
    c = counts()
    lines = [
        "# Known upstream spec-v2 bugs",
        "",
        "<!-- generated by `python -m sglang_specv2_fixes.known_bugs > docs/known-bugs.md` from",
        "     sglang_specv2_fixes/known_bugs.json and the release table; tests/cpu/test_known_bugs.py fails while",
        "     this file is stale -->",
        "",
    ]
    lines += _fill(
        f"Every known upstream bug of SGLang's spec v2 (EAGLE / EAGLE3 on the overlap scheduler) that this project "
        f"has looked at, with the releases of {ORDER[0]} … {ORDER[-1]} whose stock source has it and this plugin's "
        f"answer. {len(BUGS)} records: {c['fixed here']} fixed by this plugin on every release they affect, "
        f"{c['absent']} in none of these releases, {c['not backported']} not backported. Sources: the fixes of the "
        "release table (`sglang_specv2_fixes/releases.py`) and a survey of upstream issues and pull requests read "
        "against each release's wheel (its performance items are not bugs and are not listed).")
    lines.append("")
    lines += _fill(
        "Answers: a **fix name** (this plugin's fix; the release table patches it exactly where the record says "
        "affected, a CPU test checks it), **upstream** (every release here has upstream's fix), **not-affected** (no "
        "release here has the code path), **not-backported** (affected, not patched here; the reason says why). "
        "*Verified* says how the affected releases were read; a record with a source marker is re-read in every "
        "release's source by the CPU tests. A fix's record whose affected releases come from the release table says "
        "so.")
    lines += ["", "| bug | upstream refs | affected | fixed upstream in | answer |", "|---|---|---|---|---|"]
    for b in BUGS:
        lines.append(f"| [{b.id}](#{b.id}) | {', '.join(b.refs) or '-'} | {_ranges(b.affected) or 'none'} | "
                     f"{b.fixed_in or 'open'} | `{b.answer}` |")
    for b in BUGS:
        lines += ["", f"## {b.id}", ""]
        lines += _fill(f"**{b.title}** ({b.found}; {', '.join(b.refs) or 'no upstream ref'})")
        lines.append("")
        for bullet in (f"What the user sees: {b.symptom}.",
                       f"Affected: {_ranges(b.affected) or 'none'}; fixed upstream in: {b.fixed_in or 'open'}"
                       + (" (both from the release table)." if b.from_table else "."),
                       f"Answer: `{b.answer}`: {b.reason}.",
                       f"Verified: {b.verified}."):
            lines += _fill("* " + bullet, "  ")
        for ev in b.evidence:
            lines.append(f"* Marker ({'the fix' if ev.fixed else 'the bug'} where it matches), `{ev.files}`:")
            lines.append(f"  `{ev.pattern}`")
    return "\n".join(lines) + "\n"


_RECORDS: Tuple[Bug, ...] = load()  # as written
# every record, answers settled from the release table (resolve)
BUGS: Tuple[Bug, ...] = tuple(resolve(b) for b in _RECORDS)


def _main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        print("usage: python -m sglang_specv2_fixes.known_bugs > docs/known-bugs.md", file=sys.stderr)
        return 2
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(_main())
