"""The spec-v2 decode preparation without the host wait on the previous verify (0.5.11, 0.5.12, 0.5.12.post1; 0.5.13
removed the wait, #25879).

With the overlap scheduler, 0.5.11 / 0.5.12.x build batch N+1 while batch N runs on the forward stream, but three places
block the scheduler thread until N's verify has finished on the GPU: ``ScheduleBatch.maybe_wait_verify_done``
(``verify_done.synchronize()``, from ``filter_batch``, ``merge_batch`` and ``EagleDraftInputV2Mixin.prepare_for_decode``),
``filter_batch``'s ``self.seq_lens.sum().item()`` and ``prepare_for_decode``'s ``batch.seq_lens.cpu()`` (plus two
pageable, hence blocking, ``.to(device)`` copies of the KV lengths). The exact host mirror ``seq_lens_cpu`` is needed
for one reason on a triton + CUDA-graph chain: ``prepare_for_extend_to_fill_draft_kvcache`` builds the draft extend's
prefix lengths (and from them its positions) as a host list. So the host prepares N+1 only during N's draft extend, and
the GPU waits for the host about 0.5 - 0.9 ms per decode step (docs/bench/upstream-parity.md: 4 - 10 % of a chain's
tok/s at TP 1 against 0.5.17, 13 - 20 % at TP 2; the source comparison is in the fix's known-bugs record).

0.5.13+ keep the host one step ahead (0.5.17: the future map publishes ``new_seq_lens`` behind a GPU-side event, no D2H
of ``seq_lens`` for triton, ``seq_lens_sum`` an upper bound, the draft extend's positions from device tensors). The
patch gives 0.5.11 / 0.5.12.x the same pipeline depth on the one path where the host mirror is not needed:

* ``maybe_wait_verify_done``: where ``applies(batch)``, the current (schedule) stream waits for the ``verify_done``
  event (``stream_wait``) instead of the host: every schedule-stream read of ``seq_lens`` (filter / merge indexing,
  ``assign_req_to_token_pool``) still comes after the verify that wrote it, and the forward stream waits for the
  schedule stream before the next forward (``run_batch``'s ``forward_stream.wait_stream(schedule_stream)``).
* ``filter_batch``: ``seq_lens_sum`` becomes ``host_bound(batch)`` (no ``.item()``), ``seq_lens_cpu`` stays None.
* ``merge_batch``: a None ``seq_lens_cpu`` on either side gives None (the next ``prepare_for_decode`` decides).
* ``EagleDraftInputV2Mixin.prepare_for_decode``: pinned, non-blocking H2D of the KV lengths; no ``seq_lens.cpu()``:
  ``seq_lens_cpu = None`` and ``seq_lens_sum = host_bound(batch)``.
* ``ForwardBatch.init_new``: an extend batch may give ``extend_prefix_lens`` as a device tensor (then
  ``extend_prefix_lens_cpu`` is None); ``compute_position`` already runs on device tensors.
* ``prepare_for_extend_to_fill_draft_kvcache``: with ``seq_lens_cpu`` None the prefix lengths are the device
  ``seq_lens`` (the positions follow on the GPU); ``extend_seq_lens`` stays the host constant list.
* ``EAGLEWorkerV2.forward_batch_generation``: a decode batch that arrives with ``seq_lens_cpu`` None but that a CUDA
  graph cannot run (draft, target verify or draft extend: bs above the captured sizes, ``replace_embeds``) is given
  the exact mirror first (``materialize``: ``seq_lens.cpu()`` on the forward stream, the release's own blocking
  read), so every eager consumer (triton's eager metadata sizes ``kv_indices`` with ``seq_lens_sum``; the eager
  draft's ``common_template`` slices with it; the eager draft extend sums ``extend_prefix_lens_cpu``) sees exact
  values.

``host_bound`` is the sum of the requests' ``kv_allocated_len``: the KV slots the verify writes
(``[seq_len, seq_len + draft tokens)``) are allocated, so every request's ``seq_len`` after the verify is below its
allocated length; the consumers left on the graph path only size buffers with it or ignore it (triton's replay
metadata reads neither ``seq_lens_sum`` nor ``seq_lens_cpu``). KV sizing never used ``seq_lens``: the allocation reads
the host counters (``kv_committed_len + 2 * alloc_len_per_decode``), which lag by one verify in the release already.

``applies(batch)`` (every other batch keeps the release's synchronous path, byte for byte): a spec-v2 batch whose draft
input carries a ``verify_done`` event (steady decode; the first decode after a prefill still syncs), no logprob or
hidden-state return, no grammar, no encoder-decoder model, the plain request and token pools (no mamba / hybrid-GDN,
no hybrid-SWA, no paged or hisparse allocator), and a server (``server_reason``) with chains only (topk 1: trees,
the tree-drafting path, keep the wait), triton for every attention backend, CUDA graphs on with padding, page size 1,
no DP attention, no two-batch overlap, no LoRA, no mixed chunk, no multi-layer EAGLE, no PD disaggregation, no pdmux.

On by default since its row met A/B on 0.5.11, 0.5.12 and 0.5.12.post1 (2026-11-27, docs/gpu-runs/2026-11-27-s23/,
tests/registered/test_verify_handoff.py: greedy identity of a triton chain against the target served alone, the strict
idle / busy memory checks under load, aborts and forced retraction; stock fails only the probe's count of host waits
on ``verify_done``, 229 in a 16-request chain load, the plugin 0). At real size on 0.5.11 it gives 1.23 / 1.19 /
1.06x output tok/s at c = 1 / 8 / 32, and the chain reaches 0.98 - 1.02x upstream 0.5.17 (docs/bench/upstream-parity.md).
``SGLANG_SPECV2_FIXES_VERIFY_HANDOFF=0`` turns it off (``server_reason``).

Removal: delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream from 0.5.13).
"""

from __future__ import annotations

import logging
import os
import threading

from ..catalog import Fix
from .. import selection
from ..selection import ENV_VERIFY_HANDOFF

logger = logging.getLogger("sglang_specv2_fixes")

FIX = Fix(
    name="verify-handoff",
    upstream=("#25879",),
    title="decode preparation without the host wait on the verify (triton chains)",
    what=(
        "ScheduleBatch.maybe_wait_verify_done makes the schedule stream wait for verify_done instead of the host, and "
        "filter_batch / merge_batch / EagleDraftInputV2Mixin.prepare_for_decode drop the seq_lens D2H (seq_lens_cpu "
        "None, seq_lens_sum the allocated-length bound, pinned non-blocking H2D), the draft extend takes its prefix "
        "lengths from the device seq_lens (ForwardBatch.init_new accepts them), and EAGLEWorkerV2.forward_batch_generation "
        "restores the exact host mirror where a CUDA graph cannot run; only for triton chains with CUDA graphs "
        "(SGLANG_SPECV2_FIXES_VERIFY_HANDOFF=0 turns it off)"
    ),
    why=(
        "0.5.11 / 0.5.12.x block the scheduler thread until the previous verify ends (verify_done.synchronize, "
        "seq_lens.cpu()) to build the draft extend's positions on the host, so the next batch is prepared only during "
        "the draft extend and the GPU idles 0.5 - 0.9 ms per decode step (4 - 10 % of a chain's tok/s at TP 1 against "
        "0.5.17, 13 - 20 % at TP 2)"
    ),
    removal="delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream from 0.5.13)",
)

# test-only counters (read by the probe): steps that took the stream wait, host waits kept, worker fallbacks
_lock = threading.Lock()
COUNTS = {"stream_waits": 0, "host_waits": 0, "materialized": 0}
_SERVER = {}  # id(server_args) -> reason or None


def _count(key: str) -> None:
    with _lock:
        COUNTS[key] += 1


def server_reason(args) -> str | None:
    """Why this server keeps the synchronous decode preparation (None: the handoff may apply). Read from its
    ServerArgs, once per object."""
    key = id(args)
    if key not in _SERVER:
        _SERVER[key] = _server_reason(args)
        logger.info("sglang-specv2-fixes: verify handoff: %s", _SERVER[key] or "on (triton chain, CUDA graphs)")
    return _SERVER[key]


def _server_reason(args) -> str | None:
    if not selection.verify_handoff_enabled():
        return f"turned off by {ENV_VERIFY_HANDOFF}={os.environ.get(ENV_VERIFY_HANDOFF)}"
    g = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    if (g("speculative_algorithm") or "").upper() not in ("EAGLE", "EAGLE3"):
        return f"speculative algorithm {g('speculative_algorithm')}: only EAGLE / EAGLE3 were read for it"
    topk = g("speculative_eagle_topk") or 1
    if topk > 1:
        return f"tree drafting (topk {topk}) keeps the host wait"
    names = ("attention_backend", "decode_attention_backend", "prefill_attention_backend",
             "speculative_draft_attention_backend")
    backends = {g(n) for n in names} - {None}
    if backends != {"triton"}:
        return f"attention backends {sorted(map(str, backends))}: only triton's graph metadata was read for it"
    if g("disable_cuda_graph") or g("disable_cuda_graph_padding"):
        return "CUDA graphs off or without padding"
    if (g("page_size") or 1) != 1:
        return f"page size {g('page_size')}"
    for flag in ("enable_dp_attention", "enable_two_batch_overlap", "enable_lora", "enable_mixed_chunk",
                 "enable_multi_layer_eagle", "enable_hisparse", "enable_pdmux"):
        if g(flag):
            return flag.replace("_", "-")
    if g("disaggregation_mode", "null") != "null":
        return f"PD disaggregation ({g('disaggregation_mode')})"
    return None


def applies(batch) -> bool:
    """This batch's decode preparation may skip the host wait (see the module docstring)."""
    if not getattr(batch, "is_spec_v2", False):
        return False
    spec = batch.spec_info
    if spec is None or getattr(spec, "verify_done", None) is None:
        return False
    if batch.return_logprob or getattr(batch, "return_hidden_states", False) or batch.has_grammar:
        return False
    if batch.model_config.is_encoder_decoder or getattr(batch, "is_hybrid_swa", False):
        return False
    if getattr(batch, "hisparse_coordinator", None) is not None:
        return False
    if type(batch.req_to_token_pool).__name__ != "ReqToTokenPool":
        return False  # HybridReqToTokenPool: mamba / GDN state tracking reads seq_lens_cpu
    if type(batch.token_to_kv_pool_allocator).__name__ != "TokenToKVPoolAllocator":
        return False  # SWA, paged, hisparse allocators
    from sglang.srt.server_args import get_global_server_args

    return server_reason(get_global_server_args()) is None


def stream_wait(batch, event) -> None:
    """The current stream (the scheduler's schedule stream) waits for ``event``; the host does not."""
    import torch

    torch.get_device_module(batch.device).current_stream().wait_event(event)
    _count("stream_waits")


def host_bound(batch) -> int:
    """An upper bound of ``sum(seq_lens)`` read from host counters only: every request's allocated KV length."""
    return sum(req.kv_allocated_len for req in batch.reqs)


def _fits(runner, bs: int) -> bool:
    return (runner is not None and not getattr(runner, "disable_padding", False)
            and not getattr(runner, "require_mlp_sync", False) and bs <= runner.max_bs)


def graphs_run(worker, batch) -> bool:
    """Every CUDA graph of the decode step (draft, target verify, draft extend) can run this batch."""
    bs = len(batch.seq_lens)
    draft = worker.draft_worker
    runners = (draft.cuda_graph_runner, draft.cuda_graph_runner_for_draft_extend,
               worker.target_worker.model_runner.graph_runner)
    return getattr(batch, "replace_embeds", None) is None and all(_fits(r, bs) for r in runners)


def materialize(worker, batch) -> None:
    """Called by the patched ``EAGLEWorkerV2.forward_batch_generation`` for a decode batch without ``seq_lens_cpu``:
    where a graph cannot run, the exact host mirror (the release's blocking read, on the forward stream)."""
    if batch.seq_lens_cpu is not None or batch.forward_mode.is_idle() or graphs_run(worker, batch):
        return
    batch.seq_lens_cpu = batch.seq_lens.cpu()
    batch.seq_lens_sum = int(batch.seq_lens_cpu.sum().item())
    _count("materialized")
