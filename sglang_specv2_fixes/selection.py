"""The user's choice of fixes: ``SGLANG_SPECV2_FIXES`` or ``--specv2-fixes`` (same grammar).

    auto            every fix this release needs (default)
    auto,-NAME[,-NAME...]  auto without these (e.g. to measure or work around one fix); "auto" may be left out
    -NAME[,-NAME...]       the same as auto,-NAME[,...]
    off | none      nothing is patched (status and reporting still work); 0 / false / no as well
    1 | true | yes | on    the same as auto (as the switches read them: every on value means the default)
    NAME[,NAME...]  exactly these; a name is a fix name or one of its upstream PR numbers ("#23456",
                    "23456"); a fix that goes beyond upstream is named by its name only

A ``Selection`` compares by meaning (``26866`` == ``tree-drafting``); ``canonical`` is the spelling
every report uses.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from typing import FrozenSet, Iterable, List, Optional

ENV = "SGLANG_SPECV2_FIXES"
ENV_PROBE = "SGLANG_SPECV2_FIXES_PROBE"  # test-only scheduler-state probe (tests/registered)
ENV_CHECK = "SGLANG_SPECV2_FIXES_CHECK"  # debug: the probe's invariants stop the scheduler
ENV_PROBE_DIR = "SGLANG_SPECV2_FIXES_PROBE_DIR"  # test-only: every scheduler rank writes its probe view there
# the spec-v2 draft-extend CUDA graph at tree width (tree-drafting, triton): on by default, =0 turns it off
ENV_TREE_GRAPH = "SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH"
# that graph's replays planned from host-known indptrs, without flashinfer's device-to-host copies
# (flashinfer-draft-extend-graph, upstream 0.5.14's fast_prefill_plan): chains unless set to an off value, trees with =1
ENV_FLASHINFER_FAST_PLAN = "SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN"
# fa3's spec-v2 draft-extend CUDA graph (fa3-draft-extend-graph, #40762): chains unless set to an off value, trees
# with =1 (their rows met; no clear gain for a tree at real size)
ENV_FA3_GRAPH = "SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH"
# spec-v2 tree drafting on fa3 (tree-drafting, 0.5.11 / 0.5.12.x), and the default invocation left on the fa3 that
# those releases and upstream 0.5.13 - 0.5.17 pick: on unless set to an off value (its rows met on a GPU)
ENV_FA3_TREES = "SGLANG_SPECV2_FIXES_FA3_TREES"
# verify-handoff on fa3 (its replay and eager draft-extend metadata bounded without the host mirror): on unless set to
# an off value
ENV_VERIFY_HANDOFF_FA3 = "SGLANG_SPECV2_FIXES_VERIFY_HANDOFF_FA3"
FLAG = "--specv2-fixes"
AUTO_VALUES = ("", "auto", "default")  # the selection's spellings of auto (empty: as unset), case-insensitive
ON_VALUES = ("1", "true", "yes", "on")  # the switches' on values: for the selection, auto
OFF_VALUES = ("off", "none", "0", "false", "no")
# a release the table does not know: "skip" (default: one warning, nothing patched) or "fingerprint" (patch a fix only
# where every target equals a known release's `before` exactly; survey.plan_unknown)
ENV_UNKNOWN_RELEASE = "SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE"
UNKNOWN_RELEASE_MODES = ("skip", "fingerprint")


class SelectionError(ValueError):
    """``str(e)`` is the whole message (the valid names included); ``problem`` the part about the value itself."""

    def __init__(self, message: str, problem: Optional[str] = None):
        super().__init__(message)
        self.problem = problem or message


@dataclasses.dataclass(frozen=True)
class Selection:
    mode: str  # "auto" | "off" | "explicit"
    names: FrozenSet[str] = frozenset()  # canonical fix names when explicit
    raw: str = dataclasses.field(default="auto", compare=False)  # as the user wrote it
    without: FrozenSet[str] = frozenset()  # auto without these (canonical fix names)

    @property
    def canonical(self) -> str:
        if self.explicit:
            return ",".join(sorted(self.names))
        return ",".join([self.mode] + [f"-{n}" for n in sorted(self.without)])

    def wants(self, fix_name: str) -> bool:
        if self.mode == "auto":
            return fix_name not in self.without
        if self.mode == "off":
            return False
        return fix_name in self.names

    @property
    def explicit(self) -> bool:
        return self.mode == "explicit"


def parse(value: Optional[str], fixes: Iterable) -> Selection:
    """Parse a selection string against the catalogue; raise SelectionError listing valid names."""
    fixes = list(fixes)
    raw = (value if value is not None else "auto").strip()
    low = raw.lower()
    if low in AUTO_VALUES or low in ON_VALUES:
        return Selection("auto", raw=raw or "auto")
    if low in OFF_VALUES:
        return Selection("off", raw=raw)
    alias = {a.lower(): f.name for f in fixes for a in f.aliases}
    items = [item.strip() for item in raw.split(",")]
    if any(item.startswith("-") for item in items):  # auto without some: "auto,-a,-b" or "-a,-b"
        if items[0].lower() in AUTO_VALUES[1:]:
            items = items[1:]
        bad = [item for item in items if not item.startswith("-")]
        if bad or not items:
            raise _invalid(f"{raw!r} mixes fix names with '-NAME' exclusions (use 'auto,-NAME,...' for auto "
                           f"without some fixes, or list exactly the fixes wanted)", fixes)
        items = [item[1:].strip() for item in items]
        without = True
    else:
        without = False
    names, unknown = set(), []
    for item in items:
        if not item:
            raise _invalid(f"empty entry in {raw!r}", fixes)
        if item.lower() in ("auto", "off", "none"):
            raise _invalid(f"{item!r} cannot be combined with fix names", fixes)
        canon = alias.get(item.lower())
        if canon is None:
            unknown.append(item)
        else:
            names.add(canon)
    if unknown:
        raise _invalid(f"unknown fix name(s): {', '.join(_with_guess(u, alias) for u in unknown)}", fixes)
    if without:
        return Selection("auto", raw=raw, without=frozenset(names))
    return Selection("explicit", frozenset(names), raw)


def _with_guess(item: str, alias: dict) -> str:
    """'tree_drafting (did you mean tree-drafting?)': the closest fix name, '_' read as '-'."""
    names = sorted(set(alias.values()))
    key = item.lower().replace("_", "-").strip()
    guess = alias.get(key) or next(iter(difflib.get_close_matches(key, names, 1, 0.75)), None)
    return f"{item} (did you mean {guess}?)" if guess else item


def valid_names(fixes) -> list:
    """Every fix as a selection names it: 'tree-drafting (#26866)', 'live-accept-metrics'."""
    return [f"{f.name} ({', '.join(f.upstream)})" if f.upstream else f.name for f in fixes]


def _invalid(problem: str, fixes) -> SelectionError:
    return SelectionError(_message(problem, fixes), problem)


def _message(problem: str, fixes) -> str:
    valid = ", ".join(valid_names(fixes))
    return (
        f"sglang-specv2-fixes: invalid {ENV} / {FLAG} value: {problem}. "
        f"Use 'auto', 'off', 'auto,-NAME,...' (auto without those) or a comma list of: {valid}."
    )


def unknown_release_mode() -> str:
    """``SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE``: "skip" (unset, empty) or "fingerprint"; another value raises
    SelectionError (it stops startup like a bad selection)."""
    value = os.environ.get(ENV_UNKNOWN_RELEASE, "").strip().lower() or "skip"
    if value not in UNKNOWN_RELEASE_MODES:
        raise SelectionError(f"sglang-specv2-fixes: invalid {ENV_UNKNOWN_RELEASE} value {value!r}: use "
                             f"{' or '.join(UNKNOWN_RELEASE_MODES)}")
    return value


ENV_STRICT = "SGLANG_SPECV2_FIXES_STRICT"  # =1: a selected fix that cannot be applied stops startup
ENV_CODE_CACHE = "SGLANG_SPECV2_FIXES_CODE_CACHE"  # fingerprint.py: the start-up cache's folder, or 0 (no cache)
PREFIX = "SGLANG_SPECV2_FIXES_"
TEST_PREFIX = PREFIX + "TEST_"  # the CPU tests' own switches (tests/cpu/conftest.py): never warned about
# the variables that are not a fix's switch (those are declared on the fix: catalog.Switch, Fix.switches / opt_in)
GLOBAL_VARIABLES = {
    ENV: "the selection (auto / off / NAME,...)",
    ENV_UNKNOWN_RELEASE: "a release the table does not know: skip (default) or fingerprint",
    ENV_STRICT: "=1: a selected fix that cannot be applied (refused, failed, unverified) stops startup",
    ENV_CODE_CACHE: "the start-up code cache's folder, or 0 for none",
    ENV_PROBE: "=1: the scheduler-state probe, published in /server_info (tests)",
    ENV_CHECK: "=1: the probe's invariants stop the scheduler (debugging)",
    ENV_PROBE_DIR: "with the probe: every scheduler rank writes its view there",
}
# variables of earlier versions: what replaces them (the warning says it)
REMOVED_VARIABLES = {
    PREFIX + "MIN_TOKENS_PER_POSITION": "min-tokens-per-position is on by default; auto,-min-tokens-per-position leaves it out",
    PREFIX + "READ_DONE_AFTER_REPLAY": "draft-extend-read-done-order is on by default; auto,-draft-extend-read-done-order leaves it out",
    PREFIX + "FLASHINFER_DRAFT_GRAPH": "auto,-flashinfer-draft-extend-graph leaves flashinfer's draft-extend graph out "
                                       "(TREE_DRAFT_GRAPH=0: trees only)",
    PREFIX + "VERIFY_HANDOFF": "auto,-verify-handoff leaves verify-handoff out (VERIFY_HANDOFF_FA3=0: fa3 servers only)",
}


def known_variables(fixes) -> dict:
    """Every ``SGLANG_SPECV2_FIXES_*`` variable this version reads: name -> what it does (the fixes' switches
    included, with their fix)."""
    out = dict(GLOBAL_VARIABLES)
    for f in fixes:
        for sw in f.switches:
            out.setdefault(sw.env, f"{f.name}: {sw.effect}")
        if f.opt_in:
            out.setdefault(f.opt_in, f"{f.name}: =1 plans it (opt-in)")
    return out


def unknown_variables(fixes, env=None) -> List[str]:
    """One warning per ``SGLANG_SPECV2_FIXES_*`` variable in ``env`` (default: this process's) that this version does
    not read, with the closest known name or what replaced it."""
    env = os.environ if env is None else env
    known = known_variables(fixes)
    out = []
    for name in sorted(n for n in env if n.startswith(PREFIX) and n not in known and not n.startswith(TEST_PREFIX)):
        if name in REMOVED_VARIABLES:
            out.append(f"{name} is no longer read: {REMOVED_VARIABLES[name]}")
            continue
        guess = difflib.get_close_matches(name, list(known) + list(REMOVED_VARIABLES), 1, 0.8)
        gone = f" (no longer read: {REMOVED_VARIABLES[guess[0]]})" if guess and guess[0] in REMOVED_VARIABLES else ""
        fix = name[len(PREFIX):].lower().replace("_", "-")
        fix = next((f.name for f in fixes if f.name == fix), None)
        out.append(f"{name} is not a variable this plugin reads (ignored)" +
                   (f": did you mean {guess[0]}?{gone}" if guess else f"; known: {', '.join(sorted(known))}") +
                   (f" (to leave the fix out: {ENV}=auto,-{fix})" if fix else ""))
    return out


def active_switches(fixes, env=None) -> List[str]:
    """``NAME=value (what it does)`` for every known variable set in ``env`` besides the selection itself."""
    env = os.environ if env is None else env
    known = known_variables(fixes)
    return [f"{n}={env[n]} ({known[n]})" for n in sorted(known) if n in env and n != ENV]


def strict() -> bool:
    """``SGLANG_SPECV2_FIXES_STRICT=1``: a selected fix that cannot be applied stops startup."""
    return _flag(ENV_STRICT)


def from_env(fixes) -> Selection:
    return parse(os.environ.get(ENV), fixes)


_ON, _OFF = ON_VALUES, ("0", "false", "no", "off")  # the switches' vocabulary


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _ON


def _unless_off(name: str) -> bool:
    """A default-on switch: on unless the variable holds an off value."""
    return os.environ.get(name, "").strip().lower() not in _OFF


def turned_off(name: str) -> str:
    """The reason a default-on switch gives when its variable turned it off (logged and in /server_info)."""
    return f"turned off by {name}={os.environ.get(name)}"


def opted_in(fix) -> bool:
    """A fix with an ``opt_in`` switch is planned only with that switch on (core.plan, survey.plan_unknown); every
    other fix is."""
    return fix.opt_in is None or _flag(fix.opt_in)


def opt_in_reason(fix, patch: str) -> str:
    """The ``disabled`` reason of an opt-in fix whose switch is off."""
    return f"opt-in until its GPU row has met on every release it applies to: {fix.opt_in}=1 applies {patch}"


def probe_enabled() -> bool:
    return _flag(ENV_PROBE) or _flag(ENV_CHECK)


def probe_dir():
    """Folder where each scheduler rank writes its probe view on every internal-state query (tensor-parallel rows
    compare ranks: only rank 0 answers the HTTP query); None when unset or the probe is off."""
    return (os.environ.get(ENV_PROBE_DIR) or None) if probe_enabled() else None


def check_enabled() -> bool:
    return _flag(ENV_CHECK)


def tree_draft_graph_enabled() -> bool:
    """The spec-v2 draft-extend CUDA graph at tree width: on unless SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH is set to
    an off value (0 / false / no / off). It was opt-in until the tree rows of the registered matrix had run with it
    on (0.5.11 and 0.5.12.post1)."""
    return _unless_off(ENV_TREE_GRAPH)


def verify_handoff_fa3_enabled() -> bool:
    """verify-handoff on fa3 servers (0.5.11 / 0.5.12.x; fa3's replay and eager draft-extend metadata bound the KV length
    by the page tables' static width where the host mirror is absent, as upstream 0.5.17 does): on unless
    SGLANG_SPECV2_FIXES_VERIFY_HANDOFF_FA3 is set to an off value (0 / false / no / off). It was opt-in until its row
    had met on a GPU (test_verify_handoff_fa3.py on 0.5.11, 0.5.12, 0.5.12.post1): without it the default
    invocation on fa3 keeps the host wait for the verify that upstream 0.5.17 no longer has."""
    return _unless_off(ENV_VERIFY_HANDOFF_FA3)


def flashinfer_fast_plan_enabled() -> bool:
    """flashinfer's spec-v2 draft-extend graph (flashinfer-draft-extend-graph, 0.5.11 - 0.5.13.post1) plans its
    replays from host-known indptrs, so flashinfer's plan copies nothing to the host (upstream 0.5.14's
    fast_prefill_plan): on unless SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN is set to an off value (0 / false / no /
    off). Chains since their GPU row (test_flashinfer_draft_extend_graph_chain.py) passed with it on 0.5.11,
    0.5.12, 0.5.12.post1, 0.5.13 and 0.5.13.post1; trees since theirs did (test_tree_flashinfer_draft_extend_graph.py
    on 0.5.11, 0.5.12.post1 and 0.5.13.post1, test_tree_flashinfer_topk4.py on 0.5.11 and 0.5.12.post1, the releases
    it applies to)."""
    return _unless_off(ENV_FLASHINFER_FAST_PLAN)


def fa3_draft_graph_enabled() -> bool:
    """fa3's spec-v2 draft-extend CUDA graph (upstream #40762 / 0.5.23, backported to 0.5.11 - 0.5.22): on unless
    SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH is set to an off value (0 / false / no / off). It was opt-in until its chain
    row had met on every torch-2.11 release (0.5.11 - 0.5.17). A tree's graph needs ``fa3_tree_draft_graph_opted_in`` besides."""
    return _unless_off(ENV_FA3_GRAPH)


def fa3_tree_draft_graph_opted_in() -> bool:
    """fa3's draft-extend graph at a tree's width (topk > 1): only with SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH set to an
    on value (1 / true / yes / on). Its row (test_fa3_draft_extend_graph.py's tree class) passed on the plugin side on
    every torch-2.11 release; it stays opt-in because the default invocation's tree gained nothing clear from it over
    the eager draft extend at real size (bench/real_size.py)."""
    return _flag(ENV_FA3_GRAPH)


def fa3_trees_enabled() -> bool:
    """Spec-v2 tree drafting on fa3 (tree-drafting, 0.5.11 / 0.5.12.x): on unless SGLANG_SPECV2_FIXES_FA3_TREES is set
    to an off value (0 / false / no / off). The default invocation on Hopper then stays on the fa3 that upstream
    0.5.13 - 0.5.17 run it on (0.5.17 picks fa3, topk 4, spec v2 there). It was opt-in until the fa3 tree rows had met
    on a GPU (0.5.11, 0.5.12, 0.5.12.post1)."""
    return _unless_off(ENV_FA3_TREES)
