"""#28782 - flashinfer's spec-v2 draft-extend CUDA graph (0.5.11 - 0.5.13.post1: chains and trees).

What: in 0.5.11 - 0.5.13.post1 flashinfer's spec-v2 draft extend (``DRAFT_EXTEND_V2``) always runs eagerly (one launch
per layer, a ``paged_kernel_lens.sum().item()`` sync per step) while verify and draft decode replay graphs:
``EagleDraftWorker.init_cuda_graphs`` captures the draft-extend graph for triton / trtllm (and tokenspeed MLA) only, and
flashinfer's graph metadata has no DRAFT_EXTEND_V2 branch ("Invalid mode"). Upstream added both in 0.5.14 (#28782:
"~10 % online median E2E latency, accept length unchanged"): flashinfer joins the draft-extend graph list, the graph
metadata gets a DRAFT_EXTEND_V2 branch (a causal paged prefill over prefix + extend, no ragged part,
``prefix_lens=None``), and the query layout is a constant ``num_draft_tokens`` rows per request. On Hopper the plugin
routes spec-v2 trees (EAGLE topk > 1) to flashinfer on 0.5.11 / 0.5.12.x (upstream's default rule, see
tree_drafting.follow_default_backend_rule); 0.5.13.x picks flashinfer for trees by itself.

The backport, per code line (one patch file each):

* 0.5.11 / 0.5.12.x (patches/flashinfer-draft-extend-graph/0.5.11.patch): ``init_forward_metadata_capture_cuda_graph``
  / ``..._replay_cuda_graph`` take DRAFT_EXTEND_V2 into spec v1's draft-extend branch (same wrappers, same
  ``FlashInferIndicesUpdaterPrefill.update(prefix_lens=None, use_ragged=False, spec_info)``). The graph runner at tree
  width and the capture decision are in tree-drafting's ``EagleDraftWorker.init_cuda_graphs``, where the release
  decides: a tree through ``tree_drafting.tree_draft_extend_graph_reason``, a chain whose backend is not on the
  release's list through ``flashinfer_graph_backends``, both -> ``flashinfer_graph_reason`` (a chain's runner is
  already ``steps + 1 = num_draft_tokens`` wide). On by default: trees since their GPU rows met (2026-11-27,
  docs/gpu-runs/2026-11-27-s21/: A/B on 0.5.11, 0.5.12 and 0.5.12.post1, greedy identity of the topk 4 / 8 flashinfer
  tree rows with it on; at real size 0.83 - 0.87x the eager draft extend's TPOT), chains (the same branches and runner
  at width 4 for 3 steps) since theirs did (test_flashinfer_draft_extend_graph_chain.py, A/B on the same three,
  docs/gpu-runs/2026-11-27-s25/). A flashinfer chain on 0.5.11 went from 0.65 - 0.76 of upstream 0.5.17's tok/s
  without it to 0.78 - 0.82 with it (docs/bench/upstream-parity.md); the rest is the plan's host copy below.
* 0.5.13 / 0.5.13.post1 (patches/flashinfer-draft-extend-graph/0.5.13.patch): the graph metadata moved to
  ``_prepare_cuda_graph_metadata`` (the wrappers) and ``init_forward_metadata_out_graph`` (the plan, at capture and
  replay); both get 0.5.14's DRAFT_EXTEND_V2 branch (its own wrappers in ``draft_extend_cuda_graph_metadata``, which
  0.5.13 declares but never fills), and ``init_cuda_graphs`` gets 0.5.14's list entry through
  ``flashinfer_graph_backends``, for chains and trees (the runner is already ``num_draft_tokens`` wide there, #27545).
  On by default since its rows met A/B on both (2026-11-27, docs/gpu-runs/2026-11-27-s24/: stock eager, the plugin
  captures with greedy output equal to the target served alone). The branches
  serve only the graph this rule captures (it marks the backend with the graph's width, ``graph_width``); multi-layer
  EAGLE's runner, which 0.5.13 captures on every backend, keeps stock's "Invalid mode" on flashinfer.

On both lines the spec info the plan sees is made constant-width by ``fixed_width_spec_info``: these releases'
draft-extend ``generate_attn_arg_prefill`` builds ``qo_indptr`` from the accepted tokens (spec v1's variable extend;
the spec-v2 runner copies the accept lengths there), while the graph's rows are ``num_draft_tokens`` per request
(0.5.14 reads ``num_tokens_per_req`` instead); the worker's draft input has no such method at all from 0.5.12 (only
``EagleDraftExtendInput`` has). The capture rule (``flashinfer_graph_reason``, shared by both lines) runs the draft
extend eagerly with ``SGLANG_SPECV2_FIXES_FLASHINFER_DRAFT_GRAPH=0`` (``SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=0`` for
trees), with an FR-Spec token map (the graph's logits buffer has the full draft vocab), and with two flashinfer
wrappers (sliding window / cross attention: their prefill plan needs the extend's prefix lengths, which the graph
metadata's ``prefix_lens=None`` does not give; 0.5.14 derives them). The decision goes to the log and to
``/server_info`` (``serving.draft_extend_graph``). Not backported: #28782's host-side ``extend_prefix_lens_cpu`` sum
in the eager extend metadata (the graph path has no such ``.item()``: its plan gets ``seq_lens_sum`` from the host) and
0.5.14's sync-free ``fast_prefill_plan`` at replay (the plan here is flashinfer's own, which copies its indptrs to the
host).

``on_import``: flashinfer_backend is imported when a flashinfer server builds its attention backend; a process that
has not imported it at plugin load applies the fix then (docs/how-it-works.md).

Removal: delete when 0.5.13.post1 leaves the supported releases (upstream from 0.5.14).
"""

from __future__ import annotations

import logging
import os
import sys

from ..catalog import Fix

logger = logging.getLogger("sglang_specv2_fixes")

FIX = Fix(
    name="flashinfer-draft-extend-graph",
    upstream=("#28782",),
    title="flashinfer spec-v2 draft-extend CUDA graph (0.5.11 / 0.5.12.x chains: opt-in)",
    what=(
        "FlashInferAttnBackend's graph metadata (0.5.11 / 0.5.12.x: init_forward_metadata_capture_cuda_graph / "
        "init_forward_metadata_replay_cuda_graph; 0.5.13.x: _prepare_cuda_graph_metadata / "
        "init_forward_metadata_out_graph) gets a DRAFT_EXTEND_V2 branch (causal paged prefill, prefix_lens=None, no "
        "ragged part) with a constant num_draft_tokens query layout per request; the draft-extend graph is captured "
        "for trees by tree-drafting's init_cuda_graphs (0.5.11 / 0.5.12.x; chains there too with "
        "SGLANG_SPECV2_FIXES_FLASHINFER_DRAFT_GRAPH=1 until their GPU row has run), for chains and trees by 0.5.13.x's "
        "init_cuda_graphs (flashinfer_graph_backends); =0 turns it off"
    ),
    why=(
        "flashinfer's spec-v2 draft extend runs eagerly in these releases (one launch per layer and a "
        "paged_kernel_lens.sum().item() sync per step); upstream 0.5.14 captures it (#28782: ~10% median latency)"
    ),
    removal="delete when 0.5.13.post1 leaves the supported releases (upstream from 0.5.14)",
    on_import=True,  # flashinfer_backend: imported by a flashinfer server's attention backend, not by every process
)

# ------------------------------------------------------------------ code the patched functions call
FLASHINFER_MODULE = "sglang.srt.layers.attention.flashinfer_backend"
# the FlashInferAttnBackend functions that carry this fix's DRAFT_EXTEND_V2 graph metadata, by graph-metadata API
_CAPTURE_REPLAY = ("init_forward_metadata_capture_cuda_graph", "init_forward_metadata_replay_cuda_graph")  # .. 0.5.12.x
_OUT_GRAPH = ("_prepare_cuda_graph_metadata", "init_forward_metadata_out_graph")  # 0.5.13 on
GRAPH_WIDTH = "_specv2_draft_extend_graph_width"  # on the backend whose graph flashinfer_graph_backends lets capture
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


def metadata_targets() -> tuple:
    """The FlashInferAttnBackend functions that carry this fix's DRAFT_EXTEND_V2 graph metadata on the installed
    release: ``_prepare_cuda_graph_metadata`` / ``init_forward_metadata_out_graph`` where the class has that API
    (0.5.13 on), else the capture / replay pair (0.5.11 / 0.5.12.x)."""
    cls = getattr(sys.modules.get(FLASHINFER_MODULE), "FlashInferAttnBackend", None)
    names = _OUT_GRAPH if cls is not None and hasattr(cls, _OUT_GRAPH[0]) else _CAPTURE_REPLAY
    return tuple(f"{FLASHINFER_MODULE}.FlashInferAttnBackend.{name}" for name in names)


def flashinfer_graph_reason(worker, backend):
    """Why this flashinfer draft worker does not capture the spec-v2 draft-extend CUDA graph (None: it does). Called
    for trees by tree-drafting's rule on 0.5.11 / 0.5.12.x (``tree_drafting.tree_draft_extend_graph_reason``), and by
    ``flashinfer_graph_backends`` for chains and trees on 0.5.13.x and for chains on 0.5.11 / 0.5.12.x."""
    from .. import core, selection

    if not selection.flashinfer_draft_graph_enabled():
        return f"turned off by {selection.ENV_FLASHINFER_GRAPH}={os.environ.get(selection.ENV_FLASHINFER_GRAPH)}"
    tree = worker.speculative_num_draft_tokens > worker.speculative_num_steps + 1
    if tree and not selection.tree_draft_graph_enabled():
        return f"turned off by {selection.ENV_TREE_GRAPH}={os.environ.get(selection.ENV_TREE_GRAPH)}"
    if not all(core.is_patched(t) for t in metadata_targets()):
        return "flashinfer-draft-extend-graph is not applied: it carries flashinfer's DRAFT_EXTEND_V2 graph metadata"
    if getattr(backend, "num_wrappers", 1) != 1 or getattr(backend, "use_sliding_window_kv_pool", False):
        return ("two flashinfer wrappers (sliding window / cross attention): their prefill plan needs the extend's "
                "prefix lengths, which the graph metadata (prefix_lens=None) does not give in this release")
    if getattr(worker.server_args, "speculative_token_map", None):
        return ("FR-Spec (--speculative-token-map): the graph's logits buffer has the full draft vocab "
                "(eager, as upstream #28782)")
    return None


def flashinfer_graph_backends(worker, is_cuda) -> list:
    """Called by the patched ``EagleDraftWorker.init_cuda_graphs`` inside its draft-extend graph list (0.5.13.x, chains
    and trees) and by tree-drafting's for a chain whose backend is not on that list (0.5.11 / 0.5.12.x):
    ``[FlashInferAttnBackend]`` where the draft-extend backend is flashinfer on CUDA
    and ``flashinfer_graph_reason`` allows (the backend is then marked with the graph's width, which the 0.5.13.x
    metadata reads), else none. For a flashinfer worker the decision is logged once and kept for /server_info
    (``serving.draft_extend_graph``); any other backend gets none, silently."""
    backend = worker.draft_extend_attn_backend
    cls = getattr(sys.modules.get(FLASHINFER_MODULE), "FlashInferAttnBackend", None)  # imported where it is in use
    if not is_cuda or cls is None or not isinstance(backend, cls):
        return []
    from .tree_drafting import record_draft_extend_graph

    reason = flashinfer_graph_reason(worker, backend)
    width = worker.speculative_num_draft_tokens
    decision = f"cuda graph (flashinfer), {width} tokens per request" if reason is None else f"eager: {reason}"
    record_draft_extend_graph(worker, decision)
    logger.info("sglang-specv2-fixes: spec v2 draft extend: %s", decision)
    if reason is not None:
        return []
    backend.__dict__[GRAPH_WIDTH] = width
    return [cls]


def graph_width(backend):
    """The rows per request of the draft-extend graph ``flashinfer_graph_backends`` let this backend capture (0.5.13.x),
    None for any other DRAFT_EXTEND_V2 graph (the patched metadata then answers as stock)."""
    return backend.__dict__.get(GRAPH_WIDTH)
