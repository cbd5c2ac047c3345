"""The release table: every fact about an SGLang release that the plugin, the CLI, ci/ and the tests use.

    RELEASES   version -> Release(line, torch pin, CPU-test overlay)
    LINES      code line -> Line(state of every fix, probe targets)

A *code line* groups releases whose checked functions are byte-identical (0.5.12 and 0.5.12.post1). A
fix's entry on a line is ``patch(NAME)`` (apply ``patches/<fix>/NAME.patch``; the file's header holds the
fingerprints it was written against, so several lines may name one file) or ``note(STATE, reason,
check=(module, qualname, fingerprint))`` (nothing to patch; the check verifies the state against the
installed source). Nothing here imports sglang.

    python -m sglang_specv2_fixes.releases set patched        # release lists for shell scripts
    python -m sglang_specv2_fixes.releases cpu-overlays       # "VERSION SPEC..." per importable release
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Dict, List, Optional, Tuple, Union

from .catalog import NOT_APPLICABLE, OPEN, UPSTREAM, Note, Patched, note, patch

Entry = Union[Patched, Note]

BRP = "sglang.srt.managers.scheduler_components.batch_result_processor"
MIXIN = "sglang.srt.managers.scheduler_output_processor_mixin"
RUN_BATCH = "sglang.srt.managers.scheduler.Scheduler.run_batch"


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


def _r(version, line, torch, *cpu):
    return Release(version, line, torch, tuple(cpu) or None)


RELEASES: Dict[str, Release] = {r.version: r for r in (
    _r("0.5.11", "0.5.11", "2.11.0", "flashinfer-python==0.6.8.post1", "apache-tvm-ffi==0.1.15.post2"),
    _r("0.5.12", "0.5.12", "2.11.0"),
    _r("0.5.12.post1", "0.5.12", "2.11.0", "flashinfer-python==0.6.11.post1", "apache-tvm-ffi==0.1.9"),
    _r("0.5.13.post1", "0.5.13.post1", "2.11.0"),
    _r("0.5.14", "0.5.14", "2.11.0"),
    _r("0.5.15", "0.5.15", "2.11.0"),
    _r("0.5.15.post1", "0.5.15", "2.11.0"),
    _r("0.5.16", "0.5.16", "2.11.0"),
    _r("0.5.17", "0.5.17", "2.11.0"),
)}

_D = "SchedulerOutputProcessorMixin.process_batch_result_decode"
_B = "SchedulerBatchResultProcessor.process_batch_result_decode"
PROBE = {"0.5.11": f"{MIXIN}.{_D}", "0.5.12": f"{MIXIN}.{_D}"}
LINES: Dict[str, Line] = {}
_FIXES = {
    "0.5.11": {
        "skip-stale-overlap-updates": patch("0.5.11"),
        "tree-drafting": patch("0.5.11"),
        "live-accept-metrics": patch("0.5.11"),
        "routed-experts-draft-guard": patch("0.5.11"),
        "bonus-slot-accounting": note(UPSTREAM, 'upstream in 0.5.11 (pre-claim in prepare_for_decode)', check=('sglang.srt.speculative.eagle_info_v2', 'EagleDraftInputV2Mixin.prepare_for_decode', '479436d2ab730a31')),
        "accept-length-split": note(UPSTREAM, 'upstream in 0.5.11 (num_accepted_drafts / num_accepted_tokens)', check=('sglang.srt.speculative.eagle_info_v2', 'EagleVerifyInputV2Mixin.sample', 'f4882cf41e15caa7')),
        "seq-lens-helper": note(NOT_APPLICABLE, 'eager seq_lens_sum and no overlap batch snapshot in this release: nothing can go stale', check=None),
    },
    "0.5.12": {
        "skip-stale-overlap-updates": note(UPSTREAM, 'upstream since 0.5.12 (_resolve_spec_overlap_tokens skips retracted/finished requests)', check=('sglang.srt.managers.scheduler_output_processor_mixin', 'SchedulerOutputProcessorMixin._resolve_spec_overlap_tokens', 'a1880655aef27b21')),
        "tree-drafting": patch("0.5.12"),
        "live-accept-metrics": patch("0.5.12"),
        "routed-experts-draft-guard": patch("0.5.11"),
        "bonus-slot-accounting": note(UPSTREAM, 'upstream in 0.5.12 (pre-claim in prepare_for_decode)', check=('sglang.srt.speculative.eagle_info_v2', 'EagleDraftInputV2Mixin.prepare_for_decode', '6ee69b3410f0a06c')),
        "accept-length-split": note(UPSTREAM, 'upstream in 0.5.12, renamed num_correct_drafts / num_accept_tokens', check=('sglang.srt.speculative.eagle_info_v2', 'EagleVerifyInputV2Mixin.sample', '6e817b9a418683c9')),
        "seq-lens-helper": note(NOT_APPLICABLE, 'eager seq_lens_sum and no overlap batch snapshot in this release: nothing can go stale', check=None),
    },
    "0.5.13.post1": {
        "skip-stale-overlap-updates": note(UPSTREAM, 'upstream (scheduler_components SchedulerBatchResultProcessor._resolve_spec_v2_tokens)', check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor._resolve_spec_v2_tokens', '6772ae0cd329ca86')),
        "tree-drafting": note(UPSTREAM, 'upstream (EAGLEWorkerV2._finalize_accept_tree_path; spec v1 removed, page_size > 1 trees supported); the routed-experts / indexer top-k compaction this plugin adds on 0.5.11/0.5.12.x is still open there', check=('sglang.srt.speculative.eagle_worker_v2', 'EAGLEWorkerV2._finalize_accept_tree_path', '262f15c339d14aee')),
        "live-accept-metrics": note(OPEN, 'bug present (batch_result_processor feeds metrics_reporter.update_spec_metrics with the whole batch)', check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor.process_batch_result_decode', '5ce509dbf9bec081')),
        "routed-experts-draft-guard": note(OPEN, 'bug present (init_routed_experts_capturer has no draft-worker guard)', check=('sglang.srt.model_executor.model_runner', 'ModelRunner.init_routed_experts_capturer', 'fb25d223da521613')),
        "bonus-slot-accounting": note(UPSTREAM, 'upstream in 0.5.13.post1 (pre-claim in prepare_for_decode)', check=('sglang.srt.speculative.eagle_info_v2', 'EagleDraftInputV2Mixin.prepare_for_decode', '9017d8dab86d36c8')),
        "accept-length-split": note(UPSTREAM, 'upstream (num_correct_drafts / num_accept_tokens)', check=('sglang.srt.speculative.eagle_info_v2', 'EagleVerifyInputV2Mixin.sample', 'c756e172672bef6e')),
        "seq-lens-helper": note(UPSTREAM, 'upstream in another form (FutureMap.resolve_seq_lens_cpu syncs the overlap snapshot)', check=('sglang.srt.managers.overlap_utils', 'FutureMap.resolve_seq_lens_cpu', '0e06bbae78da2463')),
    },
    "0.5.14": {
        "skip-stale-overlap-updates": note(UPSTREAM, 'upstream (SchedulerBatchResultProcessor._resolve_spec_v2_tokens skips retracted requests and only rolls back the pre-claimed bonus slot of finished ones)', check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor._resolve_spec_v2_tokens', 'a566b5757f77d5a8')),
        "tree-drafting": note(UPSTREAM, 'upstream (EAGLEWorkerV2._finalize_accept_tree_path; spec v1 removed); the routed-experts / indexer top-k compaction is still open there (verify returns them uncompacted)', check=('sglang.srt.speculative.eagle_worker_v2', 'EAGLEWorkerV2._finalize_accept_tree_path', '2ce7801a49d5769b')),
        "live-accept-metrics": note(OPEN, "bug present (process_batch_result_decode still feeds metrics_reporter.update_spec_metrics with batch.batch_size() and the whole batch's num_correct_drafts, and counts len(batch.reqs) generated tokens, stale requests included)", check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor.process_batch_result_decode', '5b11777872b8b330')),
        "routed-experts-draft-guard": note(OPEN, 'bug present (init_routed_experts_capturer has no draft-worker guard, unchanged since 0.5.11)', check=('sglang.srt.model_executor.model_runner', 'ModelRunner.init_routed_experts_capturer', 'fb25d223da521613')),
        "bonus-slot-accounting": note(UPSTREAM, 'upstream in 0.5.14 (pre-claim in prepare_for_decode)', check=('sglang.srt.speculative.eagle_info_v2', 'EagleDraftInputV2Mixin.prepare_for_decode', 'f9901a957593abcb')),
        "accept-length-split": note(UPSTREAM, 'upstream (num_correct_drafts / num_accept_tokens; the v2 sample moved to eagle_utils.eagle_sample)', check=('sglang.srt.speculative.eagle_utils', 'eagle_sample', '5e49f3d99001edb5')),
        "seq-lens-helper": note(UPSTREAM, 'upstream in another form (FutureMap.resolve_seq_lens_cpu syncs the overlap snapshot)', check=('sglang.srt.managers.overlap_utils', 'FutureMap.resolve_seq_lens_cpu', '03bc17e32f9094ff')),
    },
    "0.5.15": {
        "skip-stale-overlap-updates": note(UPSTREAM, 'upstream (SchedulerBatchResultProcessor._resolve_spec_v2_tokens: finished and retracted requests get no KV or statistics update); the finished-request bonus-slot rollback is superseded: no worker pre-claims the bonus any more, resolve commits the full accepted run of live requests only', check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor._resolve_spec_v2_tokens', '9e0ca40ab277ef7a')),
        "tree-drafting": note(UPSTREAM, 'upstream (EAGLEWorkerV2._finalize_accept_tree_path; spec v1 removed); the routed-experts / indexer top-k compaction is still open there (verify returns them uncompacted)', check=('sglang.srt.speculative.eagle_worker_v2', 'EAGLEWorkerV2._finalize_accept_tree_path', '2ce7801a49d5769b')),
        "live-accept-metrics": note(OPEN, "bug present (process_batch_result_decode still feeds metrics_reporter.update_spec_metrics with batch.batch_size() and the whole batch's num_correct_drafts, and counts len(batch.reqs) generated tokens, stale requests included)", check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor.process_batch_result_decode', 'c7223534eb68894c')),
        "routed-experts-draft-guard": note(UPSTREAM, "upstream (#26980: init_routed_experts_capturer returns early for the draft worker, and the draft forward no longer calls the capturer's on_forward_end)", check=('sglang.srt.model_executor.model_runner', 'ModelRunner.init_routed_experts_capturer', '6d11c7828eb1a3a0')),
        "bonus-slot-accounting": note(NOT_APPLICABLE, 'pre-claim scheme removed (#28754): eagle_info_v2 is gone, eagle_utils.eagle_prepare_for_decode claims no bonus slot and _resolve_spec_v2_tokens commits the full accepted run (drafts + bonus) of live requests', check=('sglang.srt.speculative.eagle_utils', 'eagle_prepare_for_decode', '71f4d923deb606d9')),
        "accept-length-split": note(UPSTREAM, 'upstream (num_correct_drafts / num_accept_tokens; the v2 sample moved to eagle_utils.eagle_sample)', check=('sglang.srt.speculative.eagle_utils', 'eagle_sample', 'a71fa4dd6851e3c0')),
        "seq-lens-helper": note(UPSTREAM, 'upstream in another form (FutureMap.resolve_seq_lens_cpu syncs the overlap snapshot)', check=('sglang.srt.managers.overlap_utils', 'FutureMap.resolve_seq_lens_cpu', '42648b6d836794f3')),
    },
    "0.5.16": {
        "skip-stale-overlap-updates": note(UPSTREAM, 'upstream (SchedulerBatchResultProcessor._resolve_spec_v2_tokens: finished and retracted requests get no KV or statistics update); the finished-request bonus-slot rollback is superseded: no worker pre-claims the bonus any more, resolve commits the full accepted run of live requests only', check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor._resolve_spec_v2_tokens', 'f2046557f69151de')),
        "tree-drafting": note(UPSTREAM, 'upstream (moved to eagle_worker_common._finalize_accept_tree_path, called from the shared verify for topk > 1); the routed-experts / indexer top-k compaction is still open there', check=('sglang.srt.speculative.eagle_worker_common', '_finalize_accept_tree_path', '763824351d7a2f90')),
        "live-accept-metrics": note(OPEN, "bug present (process_batch_result_decode still feeds metrics_reporter.update_spec_metrics with batch.batch_size() and the whole batch's num_correct_drafts, and counts len(batch.reqs) generated tokens, stale requests included)", check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor.process_batch_result_decode', '3005c9221a9e3c6d')),
        "routed-experts-draft-guard": note(UPSTREAM, "upstream (#26980: init_routed_experts_capturer returns early for the draft worker, and the draft forward no longer calls the capturer's on_forward_end)", check=('sglang.srt.model_executor.model_runner', 'ModelRunner.init_routed_experts_capturer', '60219fcde8db8058')),
        "bonus-slot-accounting": note(NOT_APPLICABLE, 'pre-claim scheme removed (#28754): eagle_info_v2 is gone, eagle_utils.eagle_prepare_for_decode claims no bonus slot and _resolve_spec_v2_tokens commits the full accepted run (drafts + bonus) of live requests', check=('sglang.srt.speculative.eagle_utils', 'eagle_prepare_for_decode', '8889cbb3fc0f55cd')),
        "accept-length-split": note(UPSTREAM, 'upstream (num_correct_drafts / num_accept_tokens; the v2 sample moved to eagle_utils.eagle_sample)', check=('sglang.srt.speculative.eagle_utils', 'eagle_sample', '2e8d7fe3e06f453a')),
        "seq-lens-helper": note(UPSTREAM, 'upstream in another form (FutureMap.resolve_seq_lens_cpu syncs the overlap snapshot)', check=('sglang.srt.managers.overlap_utils', 'FutureMap.resolve_seq_lens_cpu', '0bc94a38081f5f9b')),
    },
    "0.5.17": {
        "skip-stale-overlap-updates": note(UPSTREAM, 'upstream (SchedulerBatchResultProcessor._resolve_spec_v2_tokens: finished and retracted requests get no KV or statistics update); the finished-request bonus-slot rollback is superseded: no worker pre-claims the bonus any more, resolve commits the full accepted run of live requests only', check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor._resolve_spec_v2_tokens', '2c4bc18f7e2bf70a')),
        "tree-drafting": note(UPSTREAM, 'upstream (moved to eagle_worker_common._finalize_accept_tree_path, called from the shared verify for topk > 1); the routed-experts / indexer top-k compaction is still open there', check=('sglang.srt.speculative.eagle_worker_common', '_finalize_accept_tree_path', '763824351d7a2f90')),
        "live-accept-metrics": note(OPEN, "bug present (process_batch_result_decode still feeds metrics_reporter.update_spec_metrics with batch.batch_size() and the whole batch's num_correct_drafts, and counts len(batch.reqs) generated tokens, stale requests included)", check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor.process_batch_result_decode', '8cd056836d757676')),
        "routed-experts-draft-guard": note(UPSTREAM, "upstream (#26980: init_routed_experts_capturer returns early for the draft worker, and the draft forward no longer calls the capturer's on_forward_end)", check=('sglang.srt.model_executor.model_runner', 'ModelRunner.init_routed_experts_capturer', '60219fcde8db8058')),
        "bonus-slot-accounting": note(NOT_APPLICABLE, 'pre-claim scheme removed (#28754): eagle_info_v2 is gone, eagle_utils.eagle_prepare_for_decode claims no bonus slot and _resolve_spec_v2_tokens commits the full accepted run (drafts + bonus) of live requests', check=('sglang.srt.speculative.eagle_utils', 'eagle_prepare_for_decode', 'a838c68eae04cb10')),
        "accept-length-split": note(UPSTREAM, 'upstream (num_correct_drafts / num_accept_tokens; the v2 sample moved to eagle_utils.eagle_sample)', check=('sglang.srt.speculative.eagle_utils', 'eagle_sample', '140530ac2567d399')),
        "seq-lens-helper": note(UPSTREAM, 'upstream in another form (FutureMap.resolve_seq_lens_cpu syncs the overlap snapshot)', check=('sglang.srt.managers.overlap_utils', 'FutureMap.resolve_seq_lens_cpu', '0bc94a38081f5f9b')),
    },
}
for _line, _fixes in _FIXES.items():
    LINES[_line] = Line(
        fixes=_fixes,
        probe_decode=PROBE.get(_line, f"{BRP}.{_B}"),
        spec_v2_only=_line not in ("0.5.11", "0.5.12", "0.5.13.post1"),
    )
del _line, _fixes


# ------------------------------------------------------------------------------------------ queries
def release(version: Optional[str]) -> Optional[Release]:
    return RELEASES.get(version or "")


def code_line(version: Optional[str]) -> Optional[str]:
    r = release(version)
    return r.line if r else None


def entry(fix: str, line: str) -> Entry:
    return LINES[line].fixes[fix]


def is_patched(line: str) -> bool:
    return any(isinstance(e, Patched) for e in LINES[line].fixes.values())


def release_set(spec: str) -> List[str]:
    """Releases (table order) named by ``spec``: all | patched | report-only | gpu | fix:<name>, and
    intersections with '&' (``"gpu&fix:tree-drafting"``). An unknown spec raises ValueError."""
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
        elif part.startswith("fix:"):
            name = part[4:]
            if not any(name in line.fixes for line in LINES.values()):
                raise ValueError(f"release set {spec!r}: unknown fix {name!r}")
            keep = {v for v, r in RELEASES.items() if isinstance(LINES[r.line].fixes.get(name), Patched)}
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
