"""The release table: every fact about an SGLang release that the plugin, the CLI, ci/ and the tests use.

    RELEASES   version -> Release(line, torch pin, CPU-test overlay)
    LINES      code line -> Line(state of every fix, probe targets)

A *code line* groups releases whose checked functions are byte-identical (0.5.12 and 0.5.12.post1). Each line's
fix entries are in release_lines.py: ``patch(NAME)`` (apply ``patches/<fix>/NAME.patch``; the file's header holds
the fingerprints it was written against, so several lines may name one file) or ``note(STATE, reason,
check=(module, qualname, fingerprint))`` (nothing to patch; the check verifies the state against the installed
source). A fix absent from a line is not applicable there (``entry`` answers a not-applicable note, with nothing
to check). Nothing here imports sglang.

    python -m sglang_specv2_fixes.releases set patched        # release lists for shell scripts
    python -m sglang_specv2_fixes.releases cpu-overlays       # "VERSION SPEC..." per importable release
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Dict, List, Optional, Tuple

from .catalog import Patched
from .release_lines import _FIXES, Entry, _derive, absent  # noqa: F401  (_derive: survey drafts are written in it)

BRP = "sglang.srt.managers.scheduler_components.batch_result_processor"
MIXIN = "sglang.srt.managers.scheduler_output_processor_mixin"
RUN_BATCH = "sglang.srt.managers.scheduler.Scheduler.run_batch"
# the target's piecewise prefill CUDA graph runner up to 0.5.13.x (only a target builds one there): can_run decides
# whether an extend forward replays it
PREFILL_GRAPH_CAN_RUN = "sglang.srt.model_executor.piecewise_cuda_graph_runner.PiecewiseCudaGraphRunner.can_run"


@dataclasses.dataclass(frozen=True)
class Release:
    version: str
    line: str  # code line (key of LINES)
    torch: str  # the release's torch pin
    cpu: Optional[Tuple[str, ...]] = None  # pip specs of its CPU-test overlay; None: source tree only

    @property
    def gpu(self) -> bool:
        """Its torch pin is the lent GPU image's own (2.11): registered rows can run it there."""
        return self.torch.startswith("2.11")


@dataclasses.dataclass(frozen=True)
class Line:
    fixes: Dict[str, Entry]
    probe_decode: str  # process_batch_result_decode(self, batch, result): the probe's AROUND target
    spec_v2_only: bool = False  # spec v1 gone: no ScheduleBatch.is_spec_v2, every spec batch is v2
    run_batch: str = RUN_BATCH
    prefill_graph_can_run: Optional[str] = None  # the probe's AROUND target counting prefill-graph replays, if any

    def entry(self, fix: str) -> "Entry":
        """The fix's entry on this line; a fix the line does not name is not applicable here."""
        e = self.fixes.get(fix)
        return absent(fix) if e is None else e


def _r(version, line, torch, *cpu):
    return Release(version, line, torch, tuple(cpu) or None)


RELEASES: Dict[str, Release] = {r.version: r for r in (
    _r("0.5.11", "0.5.11", "2.11.0", "flashinfer-python==0.6.8.post1", "apache-tvm-ffi==0.1.15.post2"),
    _r("0.5.12", "0.5.12", "2.11.0", "flashinfer-python==0.6.11.post1", "apache-tvm-ffi==0.1.9"),
    _r("0.5.12.post1", "0.5.12", "2.11.0", "flashinfer-python==0.6.11.post1", "apache-tvm-ffi==0.1.9"),
    _r("0.5.13", "0.5.13", "2.11.0", "flashinfer-python==0.6.12", "apache-tvm-ffi==0.1.9"),
    _r("0.5.13.post1", "0.5.13", "2.11.0", "flashinfer-python==0.6.12", "apache-tvm-ffi==0.1.9"),
    _r("0.5.14", "0.5.14", "2.11.0", "flashinfer-python==0.6.12", "apache-tvm-ffi==0.1.9"),
    _r("0.5.15", "0.5.15", "2.11.0", "flashinfer-python==0.6.12", "apache-tvm-ffi==0.1.11"),
    _r("0.5.15.post1", "0.5.15.post1", "2.11.0", "flashinfer-python==0.6.12", "apache-tvm-ffi==0.1.11"),
    _r("0.5.16", "0.5.16", "2.11.0", "flashinfer-python==0.6.14", "apache-tvm-ffi==0.1.11"),
    _r("0.5.17", "0.5.17", "2.11.0", "flashinfer-python==0.6.15.post1", "apache-tvm-ffi==0.1.11", "xgrammar==0.2.1"),
    _r("0.5.18", "0.5.18", "2.13.0", "flashinfer-python==0.6.17", "apache-tvm-ffi==0.1.11", "xgrammar==0.2.1"),
    _r("0.5.19", "0.5.19", "2.13.0", "flashinfer-python==0.6.18", "apache-tvm-ffi==0.1.11", "xgrammar==0.2.1"),
    _r("0.5.20", "0.5.20", "2.13.0", "flashinfer-python==0.6.18", "apache-tvm-ffi==0.1.11", "xgrammar==0.2.1"),
    _r("0.5.21", "0.5.21", "2.13.0", "flashinfer-python==0.6.18", "apache-tvm-ffi==0.1.11"),
    _r("0.5.22", "0.5.22", "2.14.1", "flashinfer-python==0.7.1", "apache-tvm-ffi==0.1.11"),
    _r("0.5.23", "0.5.23", "2.14.1", "flashinfer-python==0.7.2", "apache-tvm-ffi==0.1.11"),
)}

_D = "SchedulerOutputProcessorMixin.process_batch_result_decode"
_B = "SchedulerBatchResultProcessor.process_batch_result_decode"
PROBE = {"0.5.11": f"{MIXIN}.{_D}", "0.5.12": f"{MIXIN}.{_D}"}
LINES: Dict[str, Line] = {}

for _line, _fixes in _FIXES.items():
    LINES[_line] = Line(
        fixes=_fixes,
        probe_decode=PROBE.get(_line, f"{BRP}.{_B}"),
        spec_v2_only=_line not in ("0.5.11", "0.5.12", "0.5.13"),
        prefill_graph_can_run=PREFILL_GRAPH_CAN_RUN if _line in ("0.5.11", "0.5.12", "0.5.13") else None,
    )
del _line, _fixes
NAMES = frozenset(fix for L in LINES.values() for fix in L.fixes)  # every fix the table names on some line


# ------------------------------------------------------------------------------------------ queries
def release(version: Optional[str]) -> Optional[Release]:
    return RELEASES.get(version or "")


def code_line(version: Optional[str]) -> Optional[str]:
    r = release(version)
    return r.line if r else None


def entry(fix: str, line: str) -> Entry:
    """``fix``'s entry on code ``line`` (not applicable where the line does not name it); KeyError for an unknown
    line, or a fix no line names."""
    if fix not in NAMES:
        raise KeyError(fix)
    return LINES[line].entry(fix)


def is_patched(line: str) -> bool:
    return any(isinstance(e, Patched) for e in LINES[line].fixes.values())


def release_set(spec: str) -> List[str]:
    """Releases (table order) named by ``spec``: all | patched | report-only | gpu | cpu | fix:<name> |
    up-to:<version> | from:<version> (both inclusive), intersections with '&' (``"gpu&fix:tree-drafting"``) and unions
    of those with '|' (``"fix:a|fix:b"``; '&' binds closer). An unknown spec raises ValueError."""
    if "|" in spec:
        keep = {v for alt in spec.split("|") for v in release_set(alt)}
        return [v for v in RELEASES if v in keep]
    out = list(RELEASES)
    for part in spec.split("&"):
        part = part.strip()
        if part == "all":
            keep = set(RELEASES)
        elif part == "patched":
            keep = {v for v, r in RELEASES.items() if is_patched(r.line)}
        elif part == "report-only":
            keep = {v for v, r in RELEASES.items() if not is_patched(r.line)}
        elif part == "gpu":
            keep = {v for v, r in RELEASES.items() if r.gpu}
        elif part == "cpu":
            keep = {v for v, r in RELEASES.items() if r.cpu}
        elif part.startswith(("up-to:", "from:")):
            kind, _, edge = part.partition(":")
            if edge not in RELEASES:
                raise ValueError(f"release set {spec!r}: unknown release {edge!r}")
            order = list(RELEASES)
            i = order.index(edge)
            keep = set(order[: i + 1] if kind == "up-to" else order[i:])
        elif part.startswith("fix:"):
            name = part[4:]
            if name not in NAMES:
                raise ValueError(f"release set {spec!r}: unknown fix {name!r}")
            keep = {v for v, r in RELEASES.items() if isinstance(entry(name, r.line), Patched)}
        else:
            raise ValueError(f"unknown release set {part!r} in {spec!r}")
        out = [v for v in out if v in keep]
    return out


def _main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["set"] and len(argv) == 2:
        print(" ".join(release_set(argv[1])))
    elif argv == ["cpu-overlays"]:
        for v, r in RELEASES.items():
            if r.cpu:
                print(v, f"sglang=={v}", *r.cpu)
    elif argv == ["source-only"]:
        print(" ".join(v for v, r in RELEASES.items() if not r.cpu))
    else:
        print("usage: python -m sglang_specv2_fixes.releases set SPEC | cpu-overlays | source-only", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main())
