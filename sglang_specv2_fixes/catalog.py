"""The vocabulary: fix records and the per-release entries of the release table.

A ``Fix`` says what a fix is (name, upstream PRs, what / why / removal plan). What it does on a given
release is one entry of the release table (``releases.py``):

* ``patch("0.5.11")``: apply ``patches/<fix>/0.5.11.patch`` (a unified diff against the upstream
  functions, see ``patchfile.py``); the file's header carries the fingerprints of the code it was
  written against, so a release whose functions are unchanged simply names the same file;
* ``note(UPSTREAM | OPEN | NOT_APPLICABLE, reason, check=(module, qualname, fingerprint))``: nothing
  to patch; ``check`` names the upstream code that carries the fix (or the bug) so the state is verified
  against the installed source rather than trusted.

The CLI, the per-process log line, ``/server_info``, the README compatibility table and the packagers'
series all come from these records and the patch files.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

# States a fix can be in for one release (and process). One name each, everywhere (JSON, CLI, README).
APPLIED = "applied"  # the plugin replaced the upstream code in this process
READY = "ready"  # fingerprints match; the plugin applies it when SGLang loads it (CLI view)
UPSTREAM = "upstream"  # the release already has the fix
PRESENT = "present"  # the installed source already equals the patched code (the patch was applied by hand)
NOT_APPLICABLE = "not-applicable"  # the bug's code shape does not exist in this release
OPEN = "open"  # the bug is in this release and this plugin version does not patch it there
DISABLED = "disabled"  # deselected by SGLANG_SPECV2_FIXES / --specv2-fixes
REFUSED = "refused"  # fingerprint mismatch, or the plugin's own data for it is damaged (see reason): not patched
UNVERIFIED = "unverified"  # the table says upstream / not-applicable / open, but the installed source is not that code
FAILED = "failed"  # selected and fingerprints matched, but the patch is not in effect (see reason)
UNSUPPORTED = "unsupported-release"

NOTE_STATES = (UPSTREAM, OPEN, NOT_APPLICABLE)


@dataclasses.dataclass(frozen=True)
class Patched:
    """This release gets ``patches/<fix>/<name>.patch``."""

    name: str


@dataclasses.dataclass(frozen=True)
class Note:
    """Nothing to patch on this release: ``state`` is UPSTREAM, OPEN or NOT_APPLICABLE."""

    state: str
    reason: str
    # (module, qualname, fingerprint) of the code meant; fingerprint None: that function must be absent (a
    # not-applicable note whose code shape does not exist in the release)
    check: Optional[Tuple[str, str, Optional[str]]] = None

    def __post_init__(self):
        if self.state not in NOTE_STATES:
            raise ValueError(f"note state must be one of {NOTE_STATES}, got {self.state!r}")


def patch(name: str) -> Patched:
    return Patched(name)


def note(state: str, reason: str, check: Optional[Tuple[str, str, str]] = None) -> Note:
    return Note(state, reason, check)


@dataclasses.dataclass(frozen=True)
class Switch:
    """An environment variable that changes what a fix does (not whether it is selected: that is the selection's
    ``auto,-NAME``). ``status`` lists the ones set, ``index`` and docs/usage.md every one."""

    env: str  # SGLANG_SPECV2_FIXES_...
    default: str  # what unset means, e.g. "on" or "hybrid-SWA pools only"
    effect: str  # what setting it does, e.g. "=0: tree-width draft extend runs eagerly"


def switch(env: str, default: str, effect: str) -> Switch:
    return Switch(env, default, effect)


@dataclasses.dataclass(frozen=True)
class Fix:
    name: str  # the id users select and every report uses, e.g. "tree-drafting"
    upstream: Tuple[str, ...]  # upstream PRs, e.g. ("#26866",); () for a fix that goes beyond upstream
    title: str
    what: str  # what is patched and how
    why: str  # the user-visible bug
    removal: str  # when this patch can be deleted
    related: Tuple[str, ...] = ()  # a beyond-upstream fix: the upstream issues / open PRs about its bug
    # its targets' modules are imported only on the path it fixes (e.g. the multi-layer EAGLE worker), or only after
    # plugins load (model_runner in a scheduler): the patch is applied when SGLang imports them (core.register), so
    # a process that never does pays no import for it
    on_import: bool = False
    # an environment switch the fix needs on (1 / true / yes / on) to be planned at all: a fix patched in before a GPU
    # has run it. Off, it is ``disabled`` with the switch named, and costs no fingerprinting or building at load
    opt_in: Optional[str] = None
    # the other fixes whose patched functions this fix's run-time rules test (runtime.in_place), e.g. tree-drafting's
    # tree-width triton draft-extend graph needs draft-extend-kv-range's metadata: core.plan refuses to plan a
    # catalogue naming an unknown fix here, and a CPU test that the rules ask about no other fix
    requires: Tuple[str, ...] = ()
    switches: Tuple[Switch, ...] = ()  # the environment switches that tune it (Switch)

    @property
    def refs(self) -> str:
        """Every reference, for tables: the upstream PRs ('#26651, #27545'), or 'beyond upstream' with the
        related issues ('beyond upstream (#39826, #37450)')."""
        if self.upstream:
            return ", ".join(self.upstream)
        return f"beyond upstream ({', '.join(self.related)})" if self.related else "beyond upstream"

    @property
    def ref(self) -> str:
        """Short reference for reports: the first upstream PR, or 'beyond upstream'."""
        return self.upstream[0] if self.upstream else "beyond upstream"

    @property
    def aliases(self) -> Tuple[str, ...]:
        """Every spelling a selection accepts: the name, each PR as '#N' and 'N'."""
        out = [self.name]
        for pr in self.upstream:
            out += [pr, pr.lstrip("#")]
        return tuple(out)
