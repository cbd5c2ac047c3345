"""#28782 - flashinfer's spec-v2 draft-extend CUDA graph, at tree width (0.5.11 / 0.5.12.x).

What: on Hopper the plugin routes spec-v2 trees (EAGLE topk > 1) to flashinfer (upstream's default rule, see
tree_drafting.follow_default_backend_rule). In 0.5.11 - 0.5.13.post1 flashinfer's draft extend (``DRAFT_EXTEND_V2``)
always runs eagerly: ``EagleDraftWorker.init_cuda_graphs`` captures the draft-extend graph for triton / trtllm_mla
only, and ``FlashInferAttnBackend.init_forward_metadata_capture_cuda_graph`` / ``..._replay_cuda_graph`` have no
DRAFT_EXTEND_V2 branch (they raise "Invalid mode"). Upstream added it in 0.5.14 (#28782: "~10 % online median E2E
latency, accept length unchanged"): flashinfer joins the draft-extend graph list, the capture / replay metadata get
a DRAFT_EXTEND_V2 branch (a causal paged prefill over prefix + extend, as spec v1's draft extend), and the query
layout is a constant ``num_draft_tokens`` per request.

The backport (patches/flashinfer-draft-extend-graph/0.5.11.patch, the same fingerprints on 0.5.12 and
0.5.12.post1): both metadata functions take DRAFT_EXTEND_V2 into spec v1's draft-extend branch (same wrappers, same
``FlashInferIndicesUpdaterPrefill.update(prefix_lens=None, use_ragged=False, spec_info)``), with the spec info made
constant-width by ``fixed_width_spec_info``: these releases' draft-extend ``generate_attn_arg_prefill`` builds
``qo_indptr`` from the accepted tokens (spec v1's variable extend; for spec v2 the runner copies the accept lengths
there), while the graph's rows are ``num_draft_tokens`` per request; on 0.5.12.x the worker's draft input has no such
method at all (only the runner's capture input, ``EagleDraftExtendInput``, has). The graph runner at tree width and the
capture decision are tree-drafting's (``EAGLEDraftExtendCudaGraphRunner.__init__``, ``EagleDraftWorker.init_cuda_graphs``
-> ``tree_drafting.tree_draft_extend_graph_reason``): flashinfer's graph is captured for trees with this fix applied
and no FR-Spec token map (#28782 falls back to eager there: the graph's logits buffer has the full draft vocab), unless
``SGLANG_SPECV2_FIXES_FLASHINFER_DRAFT_GRAPH=0``; the new branches are reached only by that graph. It was opt-in until
its GPU rows met (2026-11-27, docs/gpu-runs/2026-11-27-s21/: A/B on 0.5.11, 0.5.12 and 0.5.12.post1, greedy identity
of the topk 4 / 8 flashinfer tree rows with it on; at real size 0.83 - 0.87x the eager draft extend's TPOT).
Not backported: #28782's host-side
``extend_prefix_lens_cpu`` sum in the eager extend metadata (the graph path has no such ``.item()``: its plan
gets ``seq_lens_sum`` from the host) and #28854's sync-free ``fast_prefill_plan``.

``on_import``: flashinfer_backend is imported when a flashinfer server builds its attention backend; a process that
has not imported it at plugin load (0.5.12.x) applies the fix then (docs/how-it-works.md).

Removal: delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream from 0.5.14;
0.5.13 / 0.5.13.post1, where the tree path is upstream's, run flashinfer's draft extend eagerly).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="flashinfer-draft-extend-graph",
    upstream=("#28782",),
    title="flashinfer spec-v2 draft-extend CUDA graph metadata (tree width)",
    what=(
        "FlashInferAttnBackend.init_forward_metadata_capture_cuda_graph / init_forward_metadata_replay_cuda_graph: "
        "DRAFT_EXTEND_V2 takes spec v1's draft-extend branch (causal paged prefill, prefix_lens=None, no ragged "
        "part) with a constant num_draft_tokens query layout per request; tree-drafting's init_cuda_graphs "
        "captures flashinfer's draft-extend graph for trees (SGLANG_SPECV2_FIXES_FLASHINFER_DRAFT_GRAPH=0 turns it off)"
    ),
    why=(
        "flashinfer's spec-v2 draft extend runs eagerly in these releases (one launch per layer and a "
        "paged_kernel_lens.sum().item() sync per step); upstream 0.5.14 captures it (#28782: ~10% median latency)"
    ),
    removal="delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream from 0.5.14)",
    on_import=True,  # flashinfer_backend: imported by a flashinfer server's attention backend, not by every process
)

# ------------------------------------------------------------------ code the patched functions call
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
    caller's own (0.5.11's ``EagleDraftInput``; the runner's capture input), else ``EagleDraftExtendInput`` (0.5.12.x:
    the worker's draft input has no such method). That method takes ``bs`` from the accepted drafts and ``qo_indptr``
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
