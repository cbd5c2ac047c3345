"""The spec-v2 decode preparation without the host wait on the previous verify (0.5.11, 0.5.12, 0.5.12.post1; 0.5.13
removed the wait, #25879, except under piecewise CUDA graphs: 0.5.13 / 0.5.13.post1, see the end; 0.5.14 removed that
too, #28633).

With the overlap scheduler, 0.5.11 / 0.5.12.x build batch N+1 while batch N runs on the forward stream, but three places
block the scheduler thread until N's verify has finished on the GPU: ``ScheduleBatch.maybe_wait_verify_done``
(``verify_done.synchronize()``, from ``filter_batch``, ``merge_batch`` and ``EagleDraftInputV2Mixin.prepare_for_decode``),
``filter_batch``'s ``self.seq_lens.sum().item()`` and ``prepare_for_decode``'s ``batch.seq_lens.cpu()`` (plus two
pageable, hence blocking, ``.to(device)`` copies of the KV lengths). The exact host mirror ``seq_lens_cpu`` is needed
for one reason on a triton + CUDA-graph decode step: ``prepare_for_extend_to_fill_draft_kvcache`` builds the draft
extend's prefix lengths (and from them its positions) as a host list. So the host prepares N+1 only during N's draft
extend, and the GPU idles while the host prepares every decode step: a few percent of a chain's throughput at TP 1,
more at TP 2 (the source comparison with 0.5.17 is in the fix's known-bugs record).

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

Trees (topk > 1, tree-drafting's spec-v2 path) add no consumer of the host mirror on the graph path (read on
0.5.11 / 0.5.12 / 0.5.12.post1 with tree-drafting and draft-extend-kv-range applied):

* the draft (``prepare_for_v2_draft``, ``assign_draft_cache_locs_page_size_1``, the draft graph's replay and
  ``TritonMultiStepDraftBackend.init_forward_metadata_replay_cuda_graph``): device ``seq_lens`` only; topk is the
  grid width. ``common_template`` slices ``kv_indices`` by ``seq_lens_sum`` only where it is given a ``call_fn``
  (capture and the eager draft).
* ``build_tree_kernel_efficient``: on triton with CUDA graphs it is handed the target backend's
  ``cuda_graph_custom_mask`` (``get_verify_buffers_to_fill_after_draft``) and ignores ``seq_lens_sum``, which sizes
  only a mask it allocates itself (without a buffer an upper bound allocates more, harmless). The kernel places each
  request's rows by the cumulative device ``seq_lens`` (sgl-kernel ``build_tree_efficient``), and the verify reads
  them through ``mask_indptr`` = cumsum of ``n * (seq_lens + n)`` from the same device ``seq_lens`` (graph replay and
  eager alike); the replay's ``custom_mask[: spec_info.custom_mask.shape[0]] = spec_info.custom_mask`` copies the
  buffer onto itself. The buffer (``max_bs * n * max_context_len``) and its limits are the release's, the same with
  the exact mirror: nothing on this path depends on ``seq_lens_sum``. Chains build their mask the same way; upstream
  0.5.17 passes an upper bound there too (``eagle_worker_common``: "over-size is safe").
* target verify (``prepare_for_v2_verify``, ``CudaGraphRunner.replay_prepare``, triton's TARGET_VERIFY replay):
  device ``seq_lens``; ``seq_lens_cpu`` is copied only where not None; ``seq_lens_sum`` is passed and not read. Even
  the eager verify sizes ``kv_indices`` by ``kv_indptr[-1]``, not by ``seq_lens_sum``. (0.5.12 also keeps both on the
  verify input for TBO's ``split_spec_info``; TBO is excluded.)
* the accepted-path compaction (tree-drafting's ``verify``: ``move_accepted_tokens_to_target_kvcache``,
  ``compact_accept_to_front``): device ``seq_lens`` and ``accept_index``. It runs after ``verify_done`` is recorded,
  and the release's host wait also orders the schedule stream only after ``verify_done``; the next forward follows
  it on the forward stream.
* the tree-width draft extend (its graph runner's replay, triton's DRAFT_EXTEND_V2 metadata with
  draft-extend-kv-range): device ``seq_lens`` and ``extend_seq_lens``, a host ``extend_seq_lens_cpu`` of constants;
  ``seq_lens_cpu`` only where not None. Without that graph (``SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=0``, or
  draft-extend-kv-range not applied: tree-drafting then records "eager: ..." as its decision) every step would need
  ``materialize``, a blocking read after the whole previous step, so such a server keeps the synchronous path
  (``server_reason``).

Upstream 0.5.17 serves trees on triton the same way: ``needs_cpu_seq_lens = False``, no ``seq_lens`` D2H, the tree
mask written into the backend's buffer with ``seq_lens_sum`` an upper bound or unused.

fa3 (on by default; ``SGLANG_SPECV2_FIXES_VERIFY_HANDOFF_FA3=0`` leaves fa3 out; the default invocation on Hopper, an
fa3 tree, waits for the host the same way). fa3's
metadata reads the host mirror for one value, ``max_seq_len_k``: the width of the page table it gathers
(``req_to_token[..., :max_seq_pages]``) and a split heuristic; the kernels read ``cache_seqlens`` from the device.
Where the mirror is absent upstream 0.5.17 takes the static bound ``max_context_len`` (the page tables' own width:
"over-wide page table, slightly suboptimal split heuristic, but no D2H sync"), and so does the patch
(``fa3_max_seq_len_k``), in:

* ``FlashAttentionBackend.init_forward_metadata_replay_cuda_graph``: the draft decode (topk 1 and topk > 1), target
  verify (topk 1 and the cascade of topk > 1) and draft-extend branches; ``seq_lens_cpu`` may be None. The bound is
  never above the page-table buffers' width (``max_num_pages``: the fused triton gather writes ``max_seq_pages``
  columns unchecked), and a request's KV length never exceeds it (the release's own invariant). The topk > 1 target
  verify's mask extraction already runs on the device ``seq_lens``.
* ``FlashAttentionBackend.init_forward_metadata``, the extend branch: fa3's draft extend runs eagerly where
  fa3-draft-extend-graph does not capture it (no fa3 draft-extend graph before 0.5.23; the fix captures chains by
  default, trees with its switch; a batch that does not fit that graph runs eagerly too), so its eager metadata takes
  the bound too, and decides "draft extend" before reading ``extend_prefix_lens_cpu`` (None for a handoff draft
  extend, see ``ForwardBatch.init_new``). So on fa3 the graphs a step needs are the draft and target verify ones
  (``graphs_run``), chains and trees alike.
* ``CudaGraphRunner.replay_prepare``: a target verify without the mirror passes ``seq_lens_cpu=None`` instead of the
  runner's buffer, which holds an earlier batch's lengths (fa3 would size its page tables from them; triton reads
  neither). The draft runner already passes the batch's own None. ``EAGLEDraftExtendCudaGraphRunner.replay`` (the
  graph of fa3-draft-extend-graph) does the same for a draft extend: it copies ``seq_lens_cpu`` into its buffer only
  where the batch has one, so the handoff runs beside that graph.

``applies(batch)`` (every other batch keeps the release's synchronous path, byte for byte): a spec-v2 batch whose draft
input carries a ``verify_done`` event (steady decode; the first decode after a prefill still syncs), no logprob or
hidden-state return, no grammar, no encoder-decoder model, the plain request and token pools (no mamba / hybrid-GDN, no
hybrid-SWA, no paged or hisparse allocator), and a server (``server_reason``) with triton (or fa3) for every attention
backend, CUDA graphs on with padding, page size 1, no DP attention, no two-batch overlap, no LoRA, no mixed chunk, no
multi-layer EAGLE, no PD disaggregation, no pdmux; chains and trees (a tree wider than steps + 1 only with its
draft-extend graph at tree width on triton; fa3's eager draft extend reads no mirror, and its graph's replay gets
None).

On by default for chains and trees on triton and fa3. GPU proof: tests/registered/test_verify_handoff.py (triton,
chains and trees) and test_verify_handoff_fa3.py (fa3): greedy identity against the target served alone, the strict
idle / busy memory checks under load, aborts and forced retraction; stock fails only the probe's count of host waits on
``verify_done`` (the plugin's is 0) and, for an explicit tree, its spec-v1 fallback. ``SGLANG_SPECV2_FIXES=auto,-verify-handoff``
turns the fix off, ``SGLANG_SPECV2_FIXES_VERIFY_HANDOFF_FA3=0`` only on fa3 (``server_reason``).

0.5.13 / 0.5.13.post1 (one code line, the same functions): #25879 is there, the host mirror is published by the
scheduler's ``FutureMap.resolve_seq_lens_cpu`` (a private stream waits for the verify's publish event, copies, and the
host ``synchronize()``s it) only where ``decide_needs_cpu_seq_lens`` says a spec-v2 attention backend needs it; triton
says it does not, and then the host never waits. But that decision returns True whenever piecewise CUDA graphs are on
(the default; "FIXME: support PCG without seq lens cpu value"), so a default triton server still waits on the host for
each verify. 0.5.14 drops the branch (#28633: every consumer of the mirror either declares ``needs_cpu_seq_lens`` or is
None-safe). So does the patch, in ``decide_needs_cpu_seq_lens``, where ``piecewise_reason`` admits the server: EAGLE /
EAGLE3, every spec-v2 attention backend triton's (``TritonAttnBackend``, ``TritonMultiStepDraftBackend``), no breakable
CUDA graph, no multi-layer EAGLE; two-batch overlap keeps the release's branch before it. The server then takes the
path 0.5.13 itself takes with ``--disable-piecewise-cuda-graph``. Sound because no batch whose mirror the decision drops
reaches a piecewise graph (read on 0.5.13 and 0.5.13.post1, whose files here are identical): the mirror is dropped only
for decode batches (``resolve_seq_lens_cpu`` returns at once without ``future_indices``); their forwards are
TARGET_VERIFY on the target runner, whose ``PiecewiseCudaGraphRunner.can_run`` refuses it, and DECODE /
DRAFT_EXTEND_V2 on the draft runner, which captures piecewise graphs only with ``--enable-breakable-cuda-graph``
(``init_piecewise_cuda_graphs``' ``force_for_draft_worker``). A prefill's EXTEND batch does reach the piecewise graph,
with its own host lengths (``prepare_for_extend``); mixed chunks are refused with speculative decoding; the other
readers of ``disable_piecewise_cuda_graph`` (model and communicator choices) do not read ``seq_lens_cpu``. Not fa3 or
flashinfer: their backends ask for the mirror on 0.5.13.x (fa3 stops asking in 0.5.17), so the host wait stays there.

Removal: delete when 0.5.13.post1 leaves the supported releases (upstream from 0.5.14).
"""

from __future__ import annotations

import logging
import threading

from ..catalog import Fix, switch
from .. import selection
from . import draft_extend_graph as policy
from ..selection import ENV_VERIFY_HANDOFF_FA3, turned_off

logger = logging.getLogger("sglang_specv2_fixes")

FIX = Fix(
    name="verify-handoff",
    upstream=("#25879", "#28633"),
    title="decode preparation without the host wait on the verify (triton and fa3, CUDA graphs)",
    what=(
        "ScheduleBatch.maybe_wait_verify_done makes the schedule stream wait for verify_done instead of the host, and "
        "filter_batch / merge_batch / EagleDraftInputV2Mixin.prepare_for_decode drop the seq_lens D2H (seq_lens_cpu "
        "None, seq_lens_sum the allocated-length bound, pinned non-blocking H2D), the draft extend takes its prefix "
        "lengths from the device seq_lens (ForwardBatch.init_new accepts them), and EAGLEWorkerV2.forward_batch_generation "
        "restores the exact host mirror where a CUDA graph cannot run; for triton with CUDA graphs, chains and "
        "trees (a tree wider than steps + 1 only with its tree-width draft-extend graph), and for fa3 (its replay "
        "and eager draft-extend metadata bound the KV length by the page tables' width, as 0.5.17, and the target-verify "
        "and draft-extend graph replays pass no stale mirror; SGLANG_SPECV2_FIXES_VERIFY_HANDOFF_FA3=0 leaves fa3 out); "
        "on 0.5.13.x decide_needs_cpu_seq_lens no longer forces the host mirror under piecewise CUDA graphs for a "
        "triton EAGLE server (as 0.5.14), so the scheduler copies no seq_lens to the host and waits for no verify"
    ),
    why=(
        "0.5.11 / 0.5.12.x block the scheduler thread until the previous verify ends (verify_done.synchronize, "
        "seq_lens.cpu()) to build the draft extend's positions on the host, so the next batch is prepared only during "
        "the draft extend and the GPU idles for the host every decode step (0.5.13 keeps the host a step ahead, "
        "except under piecewise CUDA graphs, the default: 0.5.13.x still publish the host mirror there, and the host "
        "waits for each verify's publish event)"
    ),
    removal="delete when 0.5.13.post1 leaves the supported releases (upstream from 0.5.14)",
    switches=(
        switch("SGLANG_SPECV2_FIXES_VERIFY_HANDOFF_FA3", "on", "=0: fa3 servers keep the release's host wait"),
    ),
)

# test-only counters (read by the probe): steps that took the stream wait, host waits kept, worker fallbacks
_lock = threading.Lock()
COUNTS = {"stream_waits": 0, "host_waits": 0, "materialized": 0}
_SERVER = {}  # id(server_args) -> reason or None
FA3 = "fa3"


def _count(key: str) -> None:
    with _lock:
        COUNTS[key] += 1


def server_reason(args) -> str | None:
    """Why this server keeps the synchronous decode preparation (None: the handoff may apply). Read from its
    ServerArgs, once per object."""
    key = id(args)
    if key not in _SERVER:
        _SERVER[key] = _server_reason(args)
        on = f"on ({getattr(args, 'attention_backend', None)}, CUDA graphs)"
        logger.info("sglang-specv2-fixes: verify handoff: %s", _SERVER[key] or on)
    return _SERVER[key]


def _server_reason(args) -> str | None:
    g = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    if (g("speculative_algorithm") or "").upper() not in ("EAGLE", "EAGLE3"):
        return f"speculative algorithm {g('speculative_algorithm')}: only EAGLE / EAGLE3 were read for it"
    names = ("attention_backend", "decode_attention_backend", "prefill_attention_backend",
             "speculative_draft_attention_backend")
    backends = {g(n) for n in names} - {None}
    fa3 = backends == {FA3}
    if fa3 and not selection.verify_handoff_fa3_enabled():
        return "attention backend fa3: " + turned_off(ENV_VERIFY_HANDOFF_FA3)
    if not fa3 and backends != {"triton"}:
        return f"attention backends {sorted(map(str, backends))}: only triton's and fa3's graph metadata were read for it"
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
    # fa3's draft extend needs no mirror (fa3_max_seq_len_k); a tree without its draft-extend graph keeps the wait
    return None if fa3 else policy.tree_handoff_reason(args)


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
    """Every CUDA graph of the decode step (draft, target verify, draft extend) can run this batch. On fa3 the draft
    extend runs eagerly and needs no mirror (``fa3_max_seq_len_k``): the draft and target-verify graphs."""
    from sglang.srt.server_args import get_global_server_args

    bs = len(batch.seq_lens)
    draft = worker.draft_worker
    runners = [draft.cuda_graph_runner, worker.target_worker.model_runner.graph_runner]
    if get_global_server_args().attention_backend != FA3:
        runners.append(draft.cuda_graph_runner_for_draft_extend)
    return getattr(batch, "replace_embeds", None) is None and all(_fits(r, bs) for r in runners)


def fa3_max_seq_len_k(backend, seq_lens_cpu, delta: int = 0) -> int:
    """fa3's host bound of the KV length (``max_seq_len_k``: the page table's gathered width, a split heuristic; the
    kernels read ``cache_seqlens``): the release's ``seq_lens_cpu.max() + delta`` where the mirror is given, else
    (a handoff decode step) the page tables' static width ``max_context_len``, as upstream 0.5.17 bounds it."""
    if seq_lens_cpu is None:
        return backend.max_context_len
    return seq_lens_cpu.max().item() + delta


def materialize(worker, batch) -> None:
    """Called by the patched ``EAGLEWorkerV2.forward_batch_generation`` for a decode batch without ``seq_lens_cpu``:
    where a graph cannot run, the exact host mirror (the release's blocking read, on the forward stream)."""
    if batch.seq_lens_cpu is not None or batch.forward_mode.is_idle() or graphs_run(worker, batch):
        return
    batch.seq_lens_cpu = batch.seq_lens.cpu()
    batch.seq_lens_sum = int(batch.seq_lens_cpu.sum().item())
    _count("materialized")


# ----------------------------------------------------------------- 0.5.13.x: piecewise CUDA graphs
TRITON = ("TritonAttnBackend", "TritonMultiStepDraftBackend")  # the spec-v2 backends read for the piecewise rule


def piecewise_reason(args, attn_backends) -> str | None:
    """0.5.13.x: why this server keeps the host mirror that piecewise CUDA graphs force in ``decide_needs_cpu_seq_lens``
    (None: the patched decision leaves it to the spec-v2 attention backends ``attn_backends``, as 0.5.14). Logged for a
    speculative server."""
    reason = _piecewise_reason(args, attn_backends)
    if getattr(args, "speculative_algorithm", None):
        logger.info("sglang-specv2-fixes: verify handoff under piecewise CUDA graphs: %s",
                    f"host mirror kept ({reason})" if reason else "no host mirror forced (the backends decide)")
    return reason


def _piecewise_reason(args, attn_backends) -> str | None:
    algo = getattr(args, "speculative_algorithm", None)
    if (algo or "").upper() not in ("EAGLE", "EAGLE3"):
        return f"speculative algorithm {algo}: only EAGLE / EAGLE3 were read for it"
    if getattr(args, "enable_breakable_cuda_graph", False):
        return "enable-breakable-cuda-graph: the draft runner captures piecewise graphs too"
    if getattr(args, "enable_multi_layer_eagle", False):
        return "enable-multi-layer-eagle"
    names = sorted({type(b).__name__ for b in attn_backends if b is not None})
    if not names or not set(names) <= set(TRITON):
        return f"attention backends {names}: only triton's were read for it"
    return None
