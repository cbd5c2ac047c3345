"""Scheduler-state probe (``SGLANG_SPECV2_FIXES_PROBE=1``, test-only) and invariant check mode
(``SGLANG_SPECV2_FIXES_CHECK=1``, debug), both independent of the fix selection and not registered at
all unless enabled (zero cost when off).

It wraps ``process_batch_result_decode`` (AROUND) and observes, for every request of a spec-v2 decode
result that was already finished or retracted *before* the result is processed (a stale overlap
result), whether processing the result changed that request's state. It reimplements nothing: it
records what SGLang itself did to real requests. Counters are published in ``/server_info`` under
``internal_states[i].specv2_fixes.probe`` so a GPU test can compare stock and patched servers.

Invariants counted (a stale result must not touch a request whose KV is already released):
  stale_finished_kv_gain    finished request's kv_committed_len grew
  stale_retracted_kv_gain   retracted request's kv_committed_len grew (it was reset to 0)
  committed_over_allocated  retracted request ends with kv_committed_len > kv_allocated_len
  stale_stat_updates        spec_verify_ct changed on a finished/retracted request
  live_committed_over_allocated  a live request ends the step with kv_committed_len > kv_allocated_len
  seq_lens_sum_mismatch     a decode batch (no spec or spec v2) reaches run_batch with
                            seq_lens_sum != sum(seq_lens_cpu) (the #25818 class of bugs; counted over
                            seq_lens_checks batches). The device copy is not compared on 0.5.11/0.5.12:
                            they re-sync seq_lens_cpu from it eagerly and have no "synced" flag, so
                            a comparison would need a device sync against in-flight overlap work.
                            Spec v1 batches are skipped (its worker rewrites them mid-step).
  finished_in_launch        a speculative decode batch (spec v2, or any spec batch on SPEC_V2_ONLY lines)
                            reaches run_batch holding a request that is already finished (req.finished())
                            or whose req-pool slot is released (req_pool_idx None), counted per request over
                            launch_checks batches: the #28986 class (spec + grammar + overlap: the forced
                            sync processes the pending result after the batch was built, which finishes a
                            request and frees its slot, then the verify launches with it). Under ordinary
                            overlap such a request finishes only after the launch (a stale row of the next
                            result, see above), so any count here is a violation.

Counted, not a violation (tests/registered/test_verify_handoff.py):
  verify_host_waits         host waits on a verify: ``Event.synchronize()`` called from a function named
                            ``maybe_wait_verify_done`` (0.5.11 / 0.5.12.x; stock and patched alike), and from 0.5.13
                            on ``Stream.synchronize()`` / ``Event.synchronize()`` called from
                            ``FutureMap.resolve_seq_lens_cpu`` (the host mirror's copy after the verify's publish
                            event; the event on ROCm). The verify-handoff fix replaces the first by stream waits on
                            triton with CUDA graphs (chains, trees) and, on 0.5.13.x, drops the second where piecewise
                            CUDA graphs were the only reason for the mirror.
  prefill_graph_checks      prefill forwards the piecewise prefill CUDA graph runner was asked about (not verifies)
  prefill_graph_replays     ... and that its ``can_run`` answered True for, so the model runner replayed the graph
                            (0.5.11 - 0.5.13.x, where only the target builds that runner; the release's own answer,
                            tests/registered/test_eagle_target_prefill_graph.py)

In check mode the first violation raises in the scheduler (which stops it) with the request id and
its counters, instead of only being counted.

From 0.5.14 on spec v1 is gone: ``ScheduleBatch`` has no ``is_spec_v2`` and every speculative batch runs
the v2 schema, so on those code lines (SPEC_V2_ONLY) any batch with a speculative algorithm counts as
spec v2. From 0.5.16 on a request's allocation lives in ``req.kv.kv_allocated_len`` (``req.kv`` is None
once released); _allocated() reads either layout. The targets per code line are in the release table
(``releases.LINES[line].probe_decode`` / ``.run_batch`` / ``.spec_v2_only``).
"""

from __future__ import annotations

import logging
import threading
from typing import Dict

logger = logging.getLogger("sglang_specv2_fixes")

_lock = threading.Lock()
STATS: Dict[str, object] = {}
_strict = False
_spec_v2_only = False  # set by register() from the code line


class InvariantViolation(AssertionError):
    pass


def reset() -> None:
    with _lock:
        STATS.clear()
        STATS.update(
            spec_v2_results=0,
            stale_finished_seen=0,
            stale_retracted_seen=0,
            stale_finished_kv_gain=0,
            stale_retracted_kv_gain=0,
            committed_over_allocated=0,
            stale_stat_updates=0,
            live_committed_over_allocated=0,
            seq_lens_checks=0,
            seq_lens_sum_mismatch=0,
            launch_checks=0,
            finished_in_launch=0,
            grammar_finishes=0,
            grammar_past_end=0,
            verify_host_waits=0,
            prefill_graph_checks=0,
            prefill_graph_replays=0,
            examples=[],
        )


reset()


def _is_spec_v2(batch) -> bool:
    if _spec_v2_only:
        algo = getattr(batch, "spec_algorithm", None)
        return algo is not None and not algo.is_none()
    return bool(getattr(batch, "is_spec_v2", False))


def _kv_len(req, name) -> int:
    """``kv_allocated_len`` / ``kv_committed_len`` on every layout: Req attributes, then on ``req.kv`` (allocated
    from 0.5.16, committed from 0.5.19; ``req.kv`` is None once the KV is released, up to 0.5.22: 0)."""
    if hasattr(req, name):
        return getattr(req, name)
    kv = getattr(req, "kv", None)
    return 0 if kv is None else getattr(kv, name)


def _allocated(req) -> int:
    return _kv_len(req, "kv_allocated_len")


def _committed(req) -> int:
    return _kv_len(req, "kv_committed_len")


def _around(original, self, batch, result, *args, **kwargs):
    if not _is_spec_v2(batch):
        return original(self, batch, result, *args, **kwargs)
    before = [
        (req, _committed(req), req.spec_verify_ct, req.is_retracted)
        for req in batch.reqs
        if req.is_retracted or req.finished()
    ]
    grammar_live = [req for req in batch.reqs
                    if getattr(req, "grammar", None) is not None and not req.finished() and not req.is_retracted]
    out = original(self, batch, result, *args, **kwargs)
    with _lock:
        STATS["spec_v2_results"] += 1
        for req in grammar_live:
            if req.finished():
                STATS["grammar_finishes"] += 1
                n, end = len(req.output_ids), req.finished_len
                if type(req.finished_reason).__name__ == "FINISH_MATCHED_TOKEN" and end is not None and n > end:
                    STATS["grammar_past_end"] += 1
                    _record(f"grammar rid={req.rid}: finished on a matched token with {n} output ids, finished_len "
                            f"{end} (kv_committed_len {_committed(req)})")
        for req, committed0, verify0, retracted in before:
            kind = "retracted" if retracted else "finished"
            STATS[f"stale_{kind}_seen"] += 1
            bad = []
            committed = _committed(req)
            if committed > committed0:
                STATS[f"stale_{kind}_kv_gain"] += 1
                bad.append(f"kv_committed_len {committed0}->{committed}")
            if retracted and committed > _allocated(req):
                STATS["committed_over_allocated"] += 1
                bad.append(f"kv_committed_len {committed} > kv_allocated_len {_allocated(req)}")
            if req.spec_verify_ct != verify0:
                STATS["stale_stat_updates"] += 1
                bad.append(f"spec_verify_ct {verify0}->{req.spec_verify_ct}")
            if bad:
                _record(f"{kind} rid={req.rid}: " + ", ".join(bad))
        for req in batch.reqs:  # stale requests are finished or retracted, so skipped here too
            if req.finished() or req.is_retracted or req.req_pool_idx is None:
                continue
            if _committed(req) > _allocated(req):
                STATS["live_committed_over_allocated"] += 1
                _record(f"live rid={req.rid}: kv_committed_len {_committed(req)} > kv_allocated_len {_allocated(req)}")
    return out


def _around_run_batch(original, self, batch, *args, **kwargs):
    mode = getattr(batch, "forward_mode", None)
    if mode is not None and mode.is_decode() and _is_spec_v2(batch):  # spec v2 implies a speculative algorithm
        gone = [req for req in batch.reqs if req.finished() or req.req_pool_idx is None]
        with _lock:
            STATS["launch_checks"] += 1
            STATS["finished_in_launch"] += len(gone)
            for req in gone:
                state = f"finished ({type(req.finished_reason).__name__})" if req.finished() else "req_pool_idx None"
                _record(f"launch rid={req.rid}: {state} in a decode batch of {len(batch.reqs)} at run_batch")
    if (
        mode is not None
        and mode.is_decode()
        and (batch.spec_algorithm.is_none() or _is_spec_v2(batch))
        and batch.seq_lens_cpu is not None
        and batch.seq_lens_sum is not None
    ):
        total = int(batch.seq_lens_cpu.sum())
        with _lock:
            STATS["seq_lens_checks"] += 1
            if total != batch.seq_lens_sum:
                STATS["seq_lens_sum_mismatch"] += 1
                _record(f"decode batch of {len(batch.reqs)}: seq_lens_sum {batch.seq_lens_sum} != sum(seq_lens_cpu) {total}")
    return original(self, batch, *args, **kwargs)


_local = threading.local()


def _around_prefill_graph_can_run(original, self, forward_batch, *args, **kwargs):
    """Count the runner's answers for prefills: every call, and the True ones (the forward replays the graph). A
    verify the decode CUDA graph does not take (a batch above its largest size) reaches the same question through
    ``forward_extend`` and is not counted: the runner never replays a verify (its ``can_run`` says no to
    TARGET_VERIFY on every release). Only the outermost call counts: when this hook's own application imports the
    runner's module, an on_import fix's apply there can wrap the method a second time."""
    mode = getattr(forward_batch, "forward_mode", None)
    if getattr(_local, "in_can_run", False) or (mode is not None and mode.is_target_verify()):
        return original(self, forward_batch, *args, **kwargs)
    _local.in_can_run = True
    try:
        out = original(self, forward_batch, *args, **kwargs)
    finally:
        _local.in_can_run = False
    with _lock:
        STATS["prefill_graph_checks"] += 1
        STATS["prefill_graph_replays"] += bool(out)
    return out


def _record(message: str) -> None:
    if len(STATS["examples"]) < 5:
        STATS["examples"].append(message)
    if _strict:
        raise InvariantViolation(f"sglang-specv2-fixes invariant violated: {message}")


def register(code_line: str, strict: bool = False):
    """Register the observer for ``code_line`` (its targets come from the release table); ``strict``
    (check mode) makes violations raise. Returns the hook functions registered."""
    global _strict, _spec_v2_only
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from .releases import LINES

    line = LINES[code_line]
    _strict = strict
    _spec_v2_only = line.spec_v2_only
    HookRegistry.register(line.probe_decode, _around, HookType.AROUND)
    HookRegistry.register(line.run_batch, _around_run_batch, HookType.AROUND)
    hooks = (_around, _around_run_batch)
    if line.prefill_graph_can_run:
        HookRegistry.register(line.prefill_graph_can_run, _around_prefill_graph_can_run, HookType.AROUND)
        hooks += (_around_prefill_graph_can_run,)
    _count_verify_host_waits()
    return hooks


# host waits on a verify: the torch.cuda class whose synchronize() is called, from functions of these names
HOST_WAITS = {
    "Event": ("maybe_wait_verify_done", "resolve_seq_lens_cpu"),  # verify_done (0.5.11 / 0.5.12.x); ROCm's publish
    "Stream": ("resolve_seq_lens_cpu",),  # 0.5.13 on: the host mirror's D2H stream, after the publish event
}


def _count_verify_host_waits() -> None:
    """Wrap ``torch.cuda.Event.synchronize`` and ``torch.cuda.Stream.synchronize`` (test-only, probe on): count the
    calls made from a function ``HOST_WAITS`` names (the release's, or verify-handoff's patched one where it keeps the
    host wait)."""
    import sys

    try:
        import torch

        classes = {name: getattr(torch.cuda, name) for name in HOST_WAITS}
    except Exception:  # noqa: BLE001 - no CUDA torch: nothing to count
        return
    for name, cls in classes.items():
        original = cls.synchronize
        if getattr(original, "_specv2_probe", False):
            continue

        def synchronize(self, *args, _original=original, _callers=HOST_WAITS[name], **kwargs):
            if sys._getframe(1).f_code.co_name in _callers:
                with _lock:
                    STATS["verify_host_waits"] += 1
            return _original(self, *args, **kwargs)

        synchronize._specv2_probe = True
        cls.synchronize = synchronize


# SGLang's own scheduler-wide acceptance counters, per release name (lifetime + current log interval)
_COUNTERS = (
    ("spec_total_num_accepted_tokens", "spec_num_accepted_tokens"),  # 0.5.11
    ("spec_total_num_accept_tokens", "spec_num_accept_tokens"),  # 0.5.12+ (0.5.13+: on scheduler.metrics_reporter)
)


def spec_counters(scheduler) -> dict:
    """The scheduler's acceptance counters as SGLang keeps them (read, not recomputed): accepted tokens
    and verify steps since start, so a test can compare them with the per-request meta_info."""
    owner = getattr(scheduler, "metrics_reporter", scheduler)  # 0.5.13+: SchedulerMetricsReporter keeps them
    for total, current in _COUNTERS:
        if hasattr(owner, total):
            return {
                "accepted_tokens": getattr(owner, total) + getattr(owner, current),
                "verify_steps": owner.spec_total_num_forward_ct + owner.spec_num_forward_ct,
            }
    return {}


def radix_tokens(scheduler):
    """Tokens held in the scheduler's prefix cache (SGLang's own ``tree_cache.total_size()``), None without one: a
    test reads what a finished request left cached (#35694: nothing past what the client received)."""
    cache = getattr(scheduler, "tree_cache", None)
    try:
        n = cache.total_size() if cache is not None else None
    except Exception:  # noqa: BLE001 - a cache kind without a size is reported as None
        return None
    return n if isinstance(n, int) else None  # hybrid caches answer a (full, swa) pair: not a token count


def snapshot() -> dict:
    with _lock:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in STATS.items()}


def write_rank_view(folder, payload) -> None:
    """Write this scheduler rank's view (``payload``: its /server_info ``specv2_fixes`` with probe and counters) to
    ``folder/probe-tp<r>-dp<d>.json``, replacing the previous one atomically; nothing when ``folder`` is None."""
    if not folder:
        return
    import json
    import os

    rank = payload.get("rank") or {}
    path = os.path.join(folder, f"probe-tp{rank.get('tp_rank')}-dp{rank.get('dp_rank')}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f)
    os.replace(tmp, path)
