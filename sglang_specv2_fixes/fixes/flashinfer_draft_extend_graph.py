"""#28782 - flashinfer's spec-v2 draft-extend CUDA graph (0.5.11 - 0.5.13.post1: chains and trees).

What: in 0.5.11 - 0.5.13.post1 flashinfer's spec-v2 draft extend (``DRAFT_EXTEND_V2``) always runs eagerly (one launch
per layer, a ``paged_kernel_lens.sum().item()`` sync per step) while verify and draft decode replay graphs:
``EagleDraftWorker.init_cuda_graphs`` captures the draft-extend graph for triton / trtllm (and tokenspeed MLA) only, and
flashinfer's graph metadata has no DRAFT_EXTEND_V2 branch ("Invalid mode"). Upstream added both in 0.5.14 (#28782:
"~10 % online median E2E latency, accept length unchanged"): flashinfer joins the draft-extend graph list, the graph
metadata gets a DRAFT_EXTEND_V2 branch (a causal paged prefill over prefix + extend, no ragged part,
``prefix_lens=None``), and the query layout is a constant ``num_draft_tokens`` rows per request. Spec-v2 trees (EAGLE
topk > 1) run on flashinfer where it is chosen; with fa3 trees off (SGLANG_SPECV2_FIXES_FA3_TREES=0) the plugin also
routes the default invocation's tree there on Hopper, 0.5.11 / 0.5.12.x (upstream's default rule, see
tree_drafting.follow_default_backend_rule).

The backport, per code line (one patch file each):

* 0.5.11 / 0.5.12.x (patches/flashinfer-draft-extend-graph/0.5.11.patch): ``init_forward_metadata_capture_cuda_graph``
  / ``..._replay_cuda_graph`` take DRAFT_EXTEND_V2 into spec v1's draft-extend branch (same wrappers, same
  ``FlashInferIndicesUpdaterPrefill.update(prefix_lens=None, use_ragged=False, spec_info)``). The graph runner at tree
  width and the capture decision are in tree-drafting's ``EagleDraftWorker.init_cuda_graphs``, where the release
  decides: a tree through ``draft_extend_graph.tree_width_reason``, a chain whose backend is not on the release's
  list through ``flashinfer_graph_backends``, both -> ``draft_extend_graph.flashinfer_graph_reason`` (a chain's runner
  is already ``steps + 1 = num_draft_tokens`` wide). On by default for trees and chains (GPU rows:
  tests/registered/test_tree_flashinfer_draft_extend_graph.py, test_flashinfer_draft_extend_graph_chain.py; greedy
  identity with the target served alone, stock eager). With the sync-free plan below, a flashinfer chain on these
  releases serves about as fast as upstream 0.5.17's.
* 0.5.13 / 0.5.13.post1 (patches/flashinfer-draft-extend-graph/0.5.13.patch): the graph metadata moved to
  ``_prepare_cuda_graph_metadata`` (the wrappers) and ``init_forward_metadata_out_graph`` (the plan, at capture and
  replay); both get 0.5.14's DRAFT_EXTEND_V2 branch (its own wrappers in ``draft_extend_cuda_graph_metadata``, which
  0.5.13 declares but never fills), and ``init_cuda_graphs`` gets 0.5.14's list entry through
  ``flashinfer_graph_backends``, for chains and trees (the runner is already ``num_draft_tokens`` wide there, #27545).
  On by default (GPU row: stock eager, the plugin captures with greedy output equal to the target served alone). The
  branches serve only the graph this rule captures (it marks the backend with the graph's width, ``graph_width``); multi-layer
  EAGLE's runner, which 0.5.13 captures on every backend, keeps stock's "Invalid mode" on flashinfer.

On both lines the spec info the plan sees is made constant-width by ``fixed_width_spec_info``: these releases'
draft-extend ``generate_attn_arg_prefill`` builds ``qo_indptr`` from the accepted tokens (spec v1's variable extend;
the spec-v2 runner copies the accept lengths there), while the graph's rows are ``num_draft_tokens`` per request
(0.5.14 reads ``num_tokens_per_req`` instead); the worker's draft input has no such method at all from 0.5.12 (only
``EagleDraftExtendInput`` has). The capture rule (``draft_extend_graph.flashinfer_graph_reason``, shared by both lines) runs the draft
extend eagerly where the fix is left out (``auto,-flashinfer-draft-extend-graph``; ``SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=0``
for trees), with an FR-Spec token map (the graph's logits buffer has the full draft vocab), and with two flashinfer
wrappers (sliding window / cross attention: their prefill plan needs the extend's prefix lengths, which the graph
metadata's ``prefix_lens=None`` does not give; 0.5.14 derives them). The decision goes to the log and to
``/server_info`` (``serving.draft_extend_graph``). Not backported: #28782's host-side ``extend_prefix_lens_cpu`` sum
in the eager extend metadata (the graph path has no such ``.item()``: its plan gets ``seq_lens_sum`` from the host).

**The replay's plan without a device-to-host copy (on by default for chains and trees,
``SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=0`` keeps flashinfer's own).** Stock's replay would plan through flashinfer's
own ``BatchPrefillWithPagedKVCacheWrapper.plan``, whose ``qo_indptr.to("cpu")`` (and ``paged_kv_indptr`` /
``paged_kv_last_page_len``) waits for the whole GPU queue, the verify just launched included: a large share of the
scheduler thread's time (py-spy), and a flashinfer chain well below upstream 0.5.17's throughput. Upstream 0.5.14 replaces the plan at replay by ``fast_prefill_plan``,
which calls flashinfer's ``_cached_module.plan`` itself with a host-known layout (``num_tokens_per_req`` rows per
request, kv lengths from ``seq_lens_cpu``). The plugin gives these releases the same layout through flashinfer's own
``plan`` instead (it depends on no argument list of flashinfer's compiled module): ``call_begin_forward`` hands it CPU
tensors (pinned on CUDA) for ``qo_indptr`` = ``arange(bs + 1) * width``, ``paged_kv_indptr`` = the cumsum of the kernel
lengths, ``paged_kv_last_page_len`` = ones, and those lengths as ``seq_lens``; ``paged_kv_indices`` stays the output of
the release's kv-indices kernel on the device. Read in the ``plan`` of flashinfer 0.6.8.post1 (0.5.11), 0.6.11.post1
(0.5.12.x) and 0.6.12 (0.5.13.x), the same on this path: every ``.to("cpu")`` / ``.cpu()`` of a CPU tensor is the tensor
itself, ``.item()`` / ``max`` read host tensors, the graph's buffers are filled by ``copy_(..., non_blocking=True)``
(host to device from pinned memory; the kv indices device to device), ``_compute_page_mask_indptr`` /
``segment_packbits`` run only with a custom mask (the draft extend's ``generate_attn_arg_prefill`` returns none: a
causal plan), ``seq_lens`` only fills ``_kv_lens_buffer`` from the host (its ``_seq_lens_kv`` / ``_seq_lens_q`` are read
by the cudnn backend only; SGLang builds these wrappers on fa2, which the plan requires) and the compiled module's
``plan`` reads the host arrays and copies its plan info from pinned memory. The kv lengths must be the device
``seq_lens`` the kv-indices kernel reads: a wrong ``kv_indptr`` is silent corruption, so nothing is guessed:

* per server (``plan_decision``, with the graph decision): the host mirror ``seq_lens_cpu`` must reach the draft
  extend. On 0.5.11 / 0.5.12.x ``EagleDraftInputV2Mixin.prepare_for_decode`` sets it from ``seq_lens.cpu()`` after
  the verify wait and ``prepare_for_extend_to_fill_draft_kvcache`` adds the draft tokens to both; only verify-handoff
  drops it (``seq_lens_cpu`` None), on servers whose every backend is triton, so its rule must refuse this server.
  On 0.5.13.x the scheduler's ``FutureMap`` publishes it (``resolve_seq_lens_cpu``: read from its pinned copy of
  ``new_seq_lens_buf``, the buffer ``seq_lens`` is gathered from) unless every spec-v2 backend declares
  ``needs_cpu_seq_lens = False``, which flashinfer does not;
* per replay (``replay_spec_info``): the runner hands the metadata its own host buffer, which it refreshes only from
  a forward batch that has ``seq_lens_cpu`` (padded rows at the fill value, as the device buffer). The plan takes it
  only where it has ``bs`` entries on the CPU and its sum equals the replay's ``seq_lens_sum`` (the runner's sum of
  the same forward batch, None on 0.5.13's GPU-only path); otherwise, and wherever a custom mask or another wrapper
  backend than fa2 shows up, that replay plans as stock. Two wrappers (sliding window / cross attention) keep the
  stock plan, as 0.5.14 does (their graph is not captured at all here).

The decision is logged and appended to ``serving.draft_extend_graph`` (", sync-free plan (host-known indptrs)" or
", flashinfer's own plan: why"); every replay of such a graph is counted in ``serving.draft_extend_plans``
("sync-free", or "flashinfer: why"), so the GPU row asserts which plan ran. CPU-proven on the releases' real
``FlashInferAttnBackend`` / ``FlashInferIndicesUpdaterPrefill`` (tests/cpu/test_fix_flashinfer_draft_extend_graph*.py).
On by default; GPU row: tests/registered/test_flashinfer_draft_extend_graph_chain.py's sync-free class (greedy equal to
the target alone, 32 concurrent requests with forced retraction, every replay planned sync-free), chains; trees take
the same plan through the same replay metadata.

``on_import``: flashinfer_backend is imported when a flashinfer server builds its attention backend; a process that
has not imported it at plugin load applies the fix then (docs/how-it-works.md).

Removal: delete when 0.5.13.post1 leaves the supported releases (upstream from 0.5.14).
"""

from __future__ import annotations

import logging

from .. import runtime
from ..catalog import Fix, switch
from . import draft_extend_graph as policy

logger = logging.getLogger("sglang_specv2_fixes")

FIX = Fix(
    name="flashinfer-draft-extend-graph",
    upstream=("#28782",),
    title="flashinfer spec-v2 draft-extend CUDA graph with a sync-free replay plan",
    what=(
        "FlashInferAttnBackend's graph metadata (0.5.11 / 0.5.12.x: init_forward_metadata_capture_cuda_graph / "
        "init_forward_metadata_replay_cuda_graph; 0.5.13.x: _prepare_cuda_graph_metadata / "
        "init_forward_metadata_out_graph) gets a DRAFT_EXTEND_V2 branch (causal paged prefill, prefix_lens=None, no "
        "ragged part) with a constant num_draft_tokens query layout per request; the draft-extend graph is captured "
        "for chains and trees by tree-drafting's init_cuda_graphs (0.5.11 / 0.5.12.x) and by 0.5.13.x's "
        "init_cuda_graphs (flashinfer_graph_backends). "
        "FlashInferIndicesUpdaterPrefill.call_begin_forward plans the graph's replays from host-known indptrs "
        "(upstream 0.5.14's fast_prefill_plan layout, through flashinfer's own plan) for chains and trees; "
        "SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=0 keeps flashinfer's own plan"
    ),
    why=(
        "flashinfer's spec-v2 draft extend runs eagerly in these releases (one launch per layer and a "
        "paged_kernel_lens.sum().item() sync per step); upstream 0.5.14 captures it (#28782: ~10% median latency); "
        "the replay's flashinfer plan copies its indptrs to the host, a wait on the whole GPU queue (0.5.14: "
        "fast_prefill_plan)"
    ),
    removal="delete when 0.5.13.post1 leaves the supported releases (upstream from 0.5.14)",
    on_import=True,  # flashinfer_backend: imported by a flashinfer server's attention backend, not by every process
    requires=("verify-handoff",),  # the sync-free plan needs the host mirror that verify-handoff may drop
    switches=(
        switch("SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN", "chains on, trees off",
               "=0: the graph's replays use flashinfer's own plan (its device-to-host copies); =1: trees too"),
    ),
)

# ------------------------------------------------------------------ code the patched functions call
FLASHINFER_MODULE = policy.FLASHINFER_MODULE
GRAPH_WIDTH = "_specv2_draft_extend_graph_width"  # on the backend whose graph flashinfer_graph_backends lets capture
# the sync-free plan (the default; SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=0 turns it off): the function that
# hands flashinfer's plan the host layout, the mark on a backend whose draft-extend graph replays with it
# (plan_decision), and the attribute of one replay's fixed-width spec info holding that layout (replay_spec_info;
# call_begin_forward reads it by this name)
PLAN_TARGET = f"{FLASHINFER_MODULE}.FlashInferIndicesUpdaterPrefill.call_begin_forward"
FAST_PLAN = "_specv2_draft_extend_fast_plan"
HOST_LAYOUT = "_specv2_host_layout"
SYNC_FREE = "sync-free"
_HOST_CONST = {}  # (bs, width, pinned) -> (qo_indptr, paged_kv_last_page_len) on the host, read-only
PLANS = {}  # how each replay of a FAST_PLAN graph planned: SYNC_FREE or "flashinfer: why" -> count (one writer thread)
_WARNED = set()
_QO_LENS = {}  # (width, bs, device) -> constant per-request query lengths, read-only (cumsum in the plan)


def draft_extend_width() -> int:
    """Rows per request of a spec-v2 draft extend: the whole verify block (num_draft_tokens; tree-drafting sizes
    the graph runner the same way)."""
    from sglang.srt.server_args import get_global_server_args

    return get_global_server_args().speculative_num_draft_tokens


def accept_fields(spec_info):
    """The draft input's (accepted tokens, accepted drafts) field names: 0.5.11's ``num_accepted_tokens`` /
    ``num_accepted_drafts``, renamed ``num_accept_tokens`` / ``num_correct_drafts`` in 0.5.12 (accept-length-split)."""
    if hasattr(spec_info, "num_accept_tokens"):
        return "num_accept_tokens", "num_correct_drafts"
    return "num_accepted_tokens", "num_accepted_drafts"


def fixed_width_spec_info(spec_info, bs: int, width: int = None):
    """The spec info flashinfer's prefill plan should see for a spec-v2 draft extend of ``bs`` (padded) requests: a
    new draft-extend input whose accepted tokens / drafts give ``width`` query rows per request (upstream #28782's
    constant qo layout). Its class is the one whose ``generate_attn_arg_prefill`` the graph was captured with: the
    caller's own (0.5.11's ``EagleDraftInput``; the runner's capture input), else ``EagleDraftExtendInput`` (from
    0.5.12 the worker's draft input has no such method). That method takes ``bs`` from the accepted drafts and ``qo_indptr``
    from the cumsum of the accepted tokens (``accept_fields``) and reads nothing else of it; the caller's object (the
    draft input the worker and the runner share) is left as it was."""
    import torch

    cls = type(spec_info)
    if not hasattr(cls, "generate_attn_arg_prefill"):
        from sglang.srt.speculative.eagle_info import EagleDraftExtendInput as cls
    width = draft_extend_width() if width is None else width
    tokens, drafts = accept_fields(cls)
    ref = getattr(spec_info, accept_fields(spec_info)[0], None)
    device = (ref if ref is not None else spec_info.hidden_states).device
    key = (width, bs, device)
    lens = _QO_LENS.get(key)
    if lens is None:
        lens = _QO_LENS[key] = (
            torch.full((bs,), width, dtype=torch.int32, device=device),
            torch.full((bs,), width - 1, dtype=torch.int32, device=device),
        )
    return cls(hidden_states=spec_info.hidden_states, **{tokens: lens[0], drafts: lens[1]})


metadata_targets = policy.flashinfer_metadata_targets  # this fix's DRAFT_EXTEND_V2 graph metadata on this release


def flashinfer_graph_backends(worker, is_cuda) -> list:
    """Called by the patched ``EagleDraftWorker.init_cuda_graphs`` inside its draft-extend graph list (0.5.13.x, chains
    and trees) and by tree-drafting's for a chain whose backend is not on that list (0.5.11 / 0.5.12.x):
    ``[FlashInferAttnBackend]`` where the draft-extend backend is flashinfer on CUDA and the policy's flashinfer rule
    allows (``draft_extend_graph.flashinfer_graph_reason``; the backend is then marked with the graph's width, which
    the 0.5.13.x metadata reads), else none. For a flashinfer worker the decision is logged once and kept for /server_info
    (``serving.draft_extend_graph``); any other backend gets none, silently."""
    backend = worker.draft_extend_attn_backend
    if not is_cuda or not policy.is_flashinfer(backend):
        return []
    reason = policy.flashinfer_graph_reason(worker, backend)
    width = worker.speculative_num_draft_tokens
    decision = policy.decision(width, reason, "flashinfer", plan_decision(worker, backend) if reason is None else "")
    policy.record(worker, decision)
    logger.info("sglang-specv2-fixes: spec v2 draft extend: %s", decision)
    if reason is not None:
        return []
    backend.__dict__[GRAPH_WIDTH] = width
    return [policy.flashinfer_class()]


def graph_width(backend):
    """The rows per request of the draft-extend graph ``flashinfer_graph_backends`` let this backend capture (0.5.13.x),
    None for any other DRAFT_EXTEND_V2 graph (the patched metadata then answers as stock)."""
    return backend.__dict__.get(GRAPH_WIDTH)


# ------------------------------------------------------------------ the sync-free replay plan
_VERIFY_WAIT = "sglang.srt.managers.schedule_batch.ScheduleBatch.maybe_wait_verify_done"  # patched by verify-handoff


_two_wrappers = policy.two_flashinfer_wrappers


def fast_plan_reason(worker, backend):
    """Why this flashinfer draft-extend graph keeps flashinfer's own plan at replay although the sync-free plan is
    selected for it (None: it plans from host-known indptrs). The host layout needs the exact host mirror
    ``seq_lens_cpu`` of the draft extend on every graph replay (see the module docstring)."""
    if not runtime.in_place(FIX.name, (PLAN_TARGET,)):
        return "flashinfer-draft-extend-graph's call_begin_forward is not applied: it hands the plan the host layout"
    if _two_wrappers(backend):
        return "two flashinfer wrappers (sliding window / cross attention): stock plan, as upstream 0.5.14"
    if not getattr(backend, "needs_cpu_seq_lens", True):  # 0.5.13.x: what the scheduler's FutureMap publishes
        return "the backend does not ask the scheduler for seq_lens_cpu (needs_cpu_seq_lens False)"
    if runtime.in_place("verify-handoff", (_VERIFY_WAIT,)):  # 0.5.11 / 0.5.12.x: verify-handoff drops seq_lens_cpu where its rule admits
        from .verify_handoff import server_reason

        if server_reason(worker.server_args) is None:
            return "verify-handoff leaves seq_lens_cpu None on this server"
    return None


def plan_decision(worker, backend) -> str:
    """The plan part of a captured flashinfer draft-extend graph's decision (flashinfer_graph_backends, and
    tree-drafting's rule for 0.5.11 / 0.5.12.x trees): "" where the switch leaves this graph flashinfer's own plan
    (``selection.flashinfer_fast_plan_enabled``: SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=0; the decision reads as
    before), else ", sync-free plan (host-known indptrs)" (the backend is marked:
    replay_spec_info builds the host layout for it) or ", flashinfer's own plan: why"."""
    from .. import selection

    backend.__dict__.pop(FAST_PLAN, None)
    if not selection.flashinfer_fast_plan_enabled():
        return ""
    reason = fast_plan_reason(worker, backend)
    if reason is not None:
        return f", flashinfer's own plan: {reason}"
    backend.__dict__[FAST_PLAN] = True
    return ", sync-free plan (host-known indptrs)"


def _count(key: str) -> None:
    PLANS[key] = PLANS.get(key, 0) + 1
    if key != SYNC_FREE and key not in _WARNED:
        _WARNED.add(key)
        logger.warning("sglang-specv2-fixes: a flashinfer draft-extend graph replay planned as stock (%s)", key)


def plan_counts():
    """``serving.draft_extend_plans``: how the replays of a sync-free-plan graph planned in this process (a copy),
    None where no such graph replayed."""
    return dict(PLANS) or None


def _host_constants(bs: int, width: int, pin: bool):
    import torch

    key = (bs, width, pin)
    const = _HOST_CONST.get(key)
    if const is None:
        qo = torch.arange(0, (bs + 1) * width, width, dtype=torch.int32)
        last = torch.ones(bs, dtype=torch.int32)
        const = _HOST_CONST[key] = (qo.pin_memory(), last.pin_memory()) if pin else (qo, last)
    return const


def host_layout(bs: int, width: int, seq_lens_cpu, seq_lens_sum, pin: bool):
    """(layout, None) or (None, why): the host-known ``(qo_indptr, paged_kv_indptr, paged_kv_last_page_len, kv
    lengths)`` of a draft-extend graph replay of ``bs`` (padded) requests at ``width`` rows each, int32 CPU tensors
    (pinned where ``pin``), from the replay's ``seq_lens_cpu`` (the kernel lengths, prefix + extend), refused unless it
    holds ``bs`` entries on the CPU whose sum is ``seq_lens_sum``. The kv tensors are new per replay: flashinfer's
    plan copies them to the device without blocking, and the pinned block is not reused before that copy ran."""
    import torch

    if seq_lens_cpu is None:
        return None, "no seq_lens_cpu"
    if seq_lens_cpu.device.type != "cpu" or tuple(seq_lens_cpu.shape) != (bs,):
        return None, (f"seq_lens_cpu of shape {tuple(seq_lens_cpu.shape)} on {seq_lens_cpu.device.type} for a "
                      f"batch of {bs}")
    qo, last = _host_constants(bs, width, pin)
    buf = torch.empty(2 * bs + 1, dtype=torch.int32, pin_memory=pin)
    kv_indptr, kv_lens = buf[: bs + 1], buf[bs + 1 :]
    kv_lens.copy_(seq_lens_cpu)
    kv_indptr[0] = 0
    torch.cumsum(kv_lens, 0, dtype=torch.int32, out=kv_indptr[1:])
    if seq_lens_sum is None or int(kv_indptr[-1]) != seq_lens_sum:
        return None, "seq_lens_cpu does not sum to the replay's seq_lens_sum"
    return (qo, kv_indptr, last, kv_lens), None


def replay_spec_info(backend, spec_info, bs: int, seq_lens_cpu, seq_lens_sum, width: int = None):
    """Called by the patched replay metadata of a spec-v2 draft-extend graph (0.5.11 / 0.5.12.x:
    ``init_forward_metadata_replay_cuda_graph``; 0.5.13.x: ``init_forward_metadata_out_graph`` outside capture):
    ``fixed_width_spec_info``, which on a backend ``plan_decision`` marked also carries the replay's host layout
    (``host_layout`` of the runner's ``seq_lens_cpu[:bs]``) for ``call_begin_forward``; a replay it refuses is counted
    and plans as stock."""
    width = draft_extend_width() if width is None else width
    spec = fixed_width_spec_info(spec_info, bs, width)
    if not backend.__dict__.get(FAST_PLAN) or _two_wrappers(backend):
        return spec  # two wrappers are never marked (plan_decision); their kernel lengths are not seq_lens
    ref = getattr(spec, accept_fields(spec)[0], None)
    pin = ref is not None and ref.is_cuda
    layout, why = host_layout(bs, width, seq_lens_cpu, seq_lens_sum, pin)
    if layout is None:
        _count(f"flashinfer: {why}")
    else:
        spec.__dict__[HOST_LAYOUT] = layout
    return spec


def host_plan_args(spec_info, wrapper, qo_indptr, kv_indptr, kv_last_page_len, custom_mask):
    """Called by the patched ``FlashInferIndicesUpdaterPrefill.call_begin_forward`` for a spec info carrying a host
    layout (``replay_spec_info``): ``(qo_indptr, paged_kv_indptr, paged_kv_last_page_len, extra plan kwargs)`` for
    the paged wrapper's plan, the host layout (the kv lengths as ``seq_lens``), or the device arguments as given where
    the plan would not be the causal fa2 plan the layout was read for (counted)."""
    layout = spec_info.__dict__[HOST_LAYOUT]
    if custom_mask is not None:
        _count("flashinfer: a custom mask")
    elif getattr(wrapper, "_backend", None) != "fa2":
        _count(f"flashinfer: wrapper backend {getattr(wrapper, '_backend', None)}")
    else:
        qo, kv, last, lens = layout
        _count(SYNC_FREE)
        return qo, kv, last, {"seq_lens": lens}
    return qo_indptr, kv_indptr, kv_last_page_len, {}
