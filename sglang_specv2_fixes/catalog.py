"""The fix catalogue as data.

Every fix is one ``Fix`` record (name, upstream PR, what/why, removal plan) plus, per SGLang code line,
either the ``Patch`` list that backports it or a ``ReleaseNote`` saying why nothing is patched there
(already upstream, not applicable). The CLI, the per-process log line, ``/server_info``, the README
compatibility table and ``patches/`` are all generated from these records.

A ``Patch`` replaces one function or method. Its body is written as a plain ``def`` with the upstream
name, nested in a per-release namespace class of the fix module (``class v0_5_11: def verify(...)``);
at apply time that source is compiled into the *target module's* globals, so the body resolves names
exactly as it would if it were pasted into the upstream file. That is what makes the exported
``patches/`` series and the plugin one source of truth.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Tuple


# States a fix can be in for one release (and process).
APPLIED = "applied"  # the plugin replaced the upstream code in this process
READY = "ready"  # would be applied (CLI view: nothing is patched in the CLI process)
UPSTREAM = "upstream"  # the release already has the fix
PRESENT = "present"  # the installed source already equals our body (a patches/ series was applied)
NOT_APPLICABLE = "not-applicable"  # the bug's code shape does not exist in this release
DISABLED = "disabled"  # deselected by SGLANG_SPECV2_FIXES / --specv2-fixes
REFUSED = "refused"  # fingerprint mismatch: the installed code is not the code the body was written for
FAILED = "failed"  # selected and fingerprints matched, but the patch is not in effect (see reason)
NOT_BACKPORTED = "open"  # the bug is present in this release, but this plugin version does not patch it there
UNSUPPORTED = "unsupported-release"


@dataclasses.dataclass(frozen=True)
class Patch:
    """Replace ``module.qualname`` with the body ``namespace.<name>`` of the fix module.

    fingerprint: short sha256 of the normalised upstream source this body was written against
    (see fingerprint.py). A mismatch refuses the whole fix for that release.
    processes: where the patch matters ("launcher": the process that parses server args;
    "scheduler": every scheduler subprocess). Patches are registered in every process that loads
    the plugin (cheap), but a process only *reports* the ones for its role.
    """

    module: str
    qualname: str
    fingerprint: str
    body: Tuple[type, str]  # (namespace class, function name) inside the fix module
    processes: Tuple[str, ...] = ("scheduler",)

    @property
    def target(self) -> str:
        return f"{self.module}.{self.qualname}"


@dataclasses.dataclass(frozen=True)
class ReleaseNote:
    """Nothing to patch on this code line; ``state`` is UPSTREAM, NOT_APPLICABLE or NOT_BACKPORTED.

    check: optional (module, qualname, fingerprint) of the upstream code that carries the fix, so the
    CLI can say "upstream (source verified)" rather than trusting the table.
    """

    state: str
    reason: str
    check: Optional[Tuple[str, str, str]] = None


@dataclasses.dataclass(frozen=True)
class Fix:
    name: str
    pr: str  # "#23456"
    title: str
    what: str  # what is patched and how
    why: str  # the user-visible bug
    removal: str  # when this patch can be deleted
    lines: Dict[str, object]  # code line -> List[Patch] | ReleaseNote
    # Optional hook run after the patches are applied (e.g. extra runtime state); must be idempotent.
    extra_setup: Optional[Callable[[], None]] = None

    def for_line(self, line: str):
        return self.lines.get(line)

    def patches(self, line: str) -> List[Patch]:
        entry = self.lines.get(line)
        return list(entry) if isinstance(entry, (list, tuple)) else []

    @property
    def aliases(self) -> Tuple[str, ...]:
        num = self.pr.lstrip("#")
        return (self.name, self.pr, num) if num.isdigit() else (self.name,)
