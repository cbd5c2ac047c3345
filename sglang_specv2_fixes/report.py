"""The per-process report: every fix's state for the installed release, as core.plan decides it and
core.register / core.verify update it (``status``, the log line and ``/server_info`` print it)."""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional

from . import installed, releases
from .runtime import unsupported


@dataclasses.dataclass
class TargetCheck:
    target: str
    expected: str  # fingerprint the patch (or note) was written against
    installed: Optional[str]  # fingerprint of the installed source (None: not found)
    ok: bool


@dataclasses.dataclass
class FixStatus:
    name: str
    upstream: List[str]
    title: str
    state: str
    reason: str
    patch: Optional[str] = None  # patches/<fix>/<name>.patch used on this release
    targets: List[TargetCheck] = dataclasses.field(default_factory=list)
    related: List[str] = dataclasses.field(default_factory=list)  # upstream issues of a fix beyond upstream

    @property
    def ref(self) -> str:
        return self.upstream[0] if self.upstream else "beyond upstream"

    @property
    def refs(self) -> str:
        """As catalog.Fix.refs: the upstream PRs, or 'beyond upstream' with the related issues."""
        if self.upstream:
            return ", ".join(self.upstream)
        return f"beyond upstream ({', '.join(self.related)})" if self.related else "beyond upstream"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Report:
    plugin_version: str
    sglang_version: Optional[str]
    code_line: Optional[str]
    selection: str
    fixes: List[FixStatus]
    warnings: List[str] = dataclasses.field(default_factory=list)
    # a release the table does not know, planned by fingerprint (SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE=fingerprint):
    # the closest known code line ("none" when nothing matched); None otherwise
    fingerprint_match: Optional[str] = None
    # failures inside the plugin (damaged data, an unexpected exception): one line each, naming the cause
    errors: List[str] = dataclasses.field(default_factory=list)
    plugin_path: str = dataclasses.field(default_factory=installed.plugin_path)  # the copy of the plugin that runs

    @property
    def supported(self) -> bool:
        return self.code_line is not None or self.fingerprint_match is not None

    @property
    def layout_line(self) -> Optional[str]:
        """The known code line whose layout this release has (its own, or the fingerprint match)."""
        return self.code_line or (self.fingerprint_match if self.fingerprint_match != "none" else None)

    def get(self, name: str) -> FixStatus:
        for f in self.fixes:
            if f.name == name:
                return f
        raise KeyError(name)

    def as_dict(self) -> dict:
        return {
            "plugin_version": self.plugin_version,
            "sglang_version": self.sglang_version,
            "code_line": self.code_line,
            "supported": self.supported,
            "fingerprint_match": self.fingerprint_match,
            "selection": self.selection,
            "fixes": {f.name: f.as_dict() for f in self.fixes},
            "warnings": list(self.warnings),
            "errors": list(self.errors),
            "plugin_path": self.plugin_path,
        }

    def summary(self) -> str:
        """One line: release and what each fix does in this process."""
        if not self.supported:
            return (f"sglang-specv2-fixes {self.plugin_version}: {unsupported(self.sglang_version)} (known: "
                    f"{', '.join(releases.RELEASES)}); nothing patched")
        groups: Dict[str, List[str]] = {}
        for f in self.fixes:
            groups.setdefault(f.state, []).append(f"{f.name}({f.ref})" if f.upstream else f.name)
        parts = "; ".join(f"{state}: {', '.join(names)}" for state, names in groups.items())
        unknown = "" if self.code_line else f" (not in the table; by fingerprint, closest {self.fingerprint_match})"
        return (
            f"sglang-specv2-fixes {self.plugin_version} on sglang {self.sglang_version}{unknown} "
            f"[selection={self.selection}, pid={os.getpid()}, from {self.plugin_path}]: {parts}"
        )
