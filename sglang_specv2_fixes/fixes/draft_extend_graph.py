"""Which spec-v2 draft extends get a CUDA graph, and why the others run eagerly: the rule four fixes share.

Not a fix itself (no ``FIX``): the draft-extend graph policy that tree-drafting, fa3-draft-extend-graph,
flashinfer-draft-extend-graph and verify-handoff each apply a part of, written once. Each fix's patched functions call
their own module (the names its patch files import); those modules read the policy from here, and this module imports
none of them.

    backend          triton        is_triton       tree width needs draft-extend-kv-range's metadata (#27545)
                     fa3           is_fa3          fa3_graph_reason (chains by default, trees opt-in; fa3 only; the
                                                   metadata must live in the graph); tree-drafting takes the decision
                                                   fa3-draft-extend-graph's list made (fa3_tree_reason)
                     flashinfer    is_flashinfer   flashinfer_graph_reason (its DRAFT_EXTEND_V2 graph metadata, one
                                                   wrapper, no FR-Spec token map; trees also need the tree switch)
    shape            chain         num_draft_tokens == steps + 1: the runner's own width
                     tree          num_draft_tokens > steps + 1: tree_width_reason (0.5.11 / 0.5.12.x, where
                                   tree-drafting sizes the runner at tree width)
    the decision     decision() -> "cuda graph[ (backend)], N tokens per request" or "eager: why", logged once and
                     kept for /server_info (record, recorded; ``serving.draft_extend_graph``)
    verify-handoff   tree_handoff_reason: a tree without its draft-extend graph keeps the synchronous decode
                     preparation (every step would need the exact host mirror)

The switches are selection.py's (SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH, _FA3_DRAFT_GRAPH, _FLASHINFER_DRAFT_GRAPH); the
run-time test that another fix's functions are in place is runtime.in_place, for fixes the caller's ``requires``
names. Removal: with the last of those four fixes (0.5.22 leaving the supported releases, fa3-draft-extend-graph).
"""

from __future__ import annotations

import os
import sys

from .. import runtime, selection

TRITON_MODULE = "sglang.srt.layers.attention.triton_backend"
FA3_MODULE = "sglang.srt.layers.attention.flashattention_backend"
FLASHINFER_MODULE = "sglang.srt.layers.attention.flashinfer_backend"

DRAFT_EXTEND_GRAPH = "_specv2_draft_extend_graph"  # the decision, on the server args (plugin.serving_facts reads it)
FA3_LISTED = "_specv2_fa3_draft_extend_graph_reason"  # fa3_graph_backends' reason (None: captured), on the worker

# the triton draft-extend graph metadata that must be at tree width before that graph is captured (draft-extend-kv-range)
TRITON_DRAFT_EXTEND_METADATA = tuple(
    f"{TRITON_MODULE}.TritonAttnBackend.{name}"
    for name in ("init_forward_metadata_capture_cuda_graph", "init_forward_metadata_replay_cuda_graph")
)
# the FlashInferAttnBackend functions that carry flashinfer-draft-extend-graph's DRAFT_EXTEND_V2 graph metadata
_FLASHINFER_CAPTURE_REPLAY = ("init_forward_metadata_capture_cuda_graph", "init_forward_metadata_replay_cuda_graph")
_FLASHINFER_OUT_GRAPH = ("_prepare_cuda_graph_metadata", "init_forward_metadata_out_graph")  # 0.5.13 on


# ---------------------------------------------------------------------------------------------- backends
def _loaded(module: str, name: str):
    """The class ``name`` of ``module`` where that module is imported (it is wherever the backend is in use)."""
    return getattr(sys.modules.get(module), name, None)


def is_triton(backend) -> bool:
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    return isinstance(backend, TritonAttnBackend)


def is_fa3(backend) -> bool:
    cls = _loaded(FA3_MODULE, "FlashAttentionBackend")
    return cls is not None and isinstance(backend, cls)


def flashinfer_class():
    """``FlashInferAttnBackend`` where flashinfer_backend is imported, else None."""
    return _loaded(FLASHINFER_MODULE, "FlashInferAttnBackend")


def is_flashinfer(backend) -> bool:
    cls = flashinfer_class()
    return cls is not None and isinstance(backend, cls)


def is_tree(worker) -> bool:
    """A tree's draft extend: wider than the chain's ``steps + 1`` rows per request."""
    return worker.speculative_num_draft_tokens > worker.speculative_num_steps + 1


def two_flashinfer_wrappers(backend) -> bool:
    """Sliding window / cross attention: flashinfer's prefill plan needs the extend's prefix lengths."""
    return getattr(backend, "num_wrappers", 1) != 1 or getattr(backend, "use_sliding_window_kv_pool", False)


# ------------------------------------------------------------------------------------------- the rules
def tree_width_reason(worker):
    """Why this process cannot capture the spec-v2 draft-extend CUDA graph at tree width (None: it can). Used by
    tree-drafting (0.5.11 / 0.5.12.x), which sizes the graph runner at tree width; the backend's graph metadata must be
    at that width too:

    * triton: draft-extend-kv-range (query stride / max_extend_len, upstream #27545);
    * flashinfer: flashinfer-draft-extend-graph's DRAFT_EXTEND_V2 graph metadata (upstream #28782 / 0.5.14),
      flashinfer_graph_reason;
    * fa3: fa3-draft-extend-graph (fa3's DRAFT_EXTEND_V2 graph metadata is width-generic; upstream 0.5.23 captures it
      for trees too), the decision its list made in the same ``init_cuda_graphs`` (fa3_tree_reason).

    Any other backend runs a tree's draft extend eagerly. ``SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=0`` turns it off."""
    if not selection.tree_draft_graph_enabled():
        return selection.turned_off(selection.ENV_TREE_GRAPH)
    backend = worker.draft_extend_attn_backend
    if is_triton(backend):
        if not runtime.in_place("draft-extend-kv-range", TRITON_DRAFT_EXTEND_METADATA):
            return "draft-extend-kv-range is not applied: it carries the tree-width query stride of the triton metadata"
        return None
    if is_fa3(backend):
        return fa3_tree_reason(worker)
    if not is_flashinfer(backend):
        return "only the triton, flashinfer and fa3 draft-extend graph metadata is ported to tree width"
    return flashinfer_graph_reason(worker, backend)


def fa3_graph_reason(worker, backend):
    """Why this fa3 draft worker does not capture the draft-extend graph (None: it does): off by its switch, a tree
    without the opt-in, fa4, or a pool whose draft-extend metadata fa3 builds outside the graph."""
    if not selection.fa3_draft_graph_enabled():
        return selection.turned_off(selection.ENV_FA3_GRAPH)
    if worker.topk > 1 and not selection.fa3_tree_draft_graph_opted_in():
        return (f"a tree's fa3 draft-extend graph is opt-in ({selection.ENV_FA3_GRAPH}=1): it shows no clear gain over "
                "the eager draft extend for a tree at real size")
    if getattr(backend, "fa_impl_ver", 3) != 3:
        return f"fa{backend.fa_impl_ver}: only fa3 has run here"
    captured = getattr(backend, "draft_extend_metadata_captured_in_graph", None)
    if captured is not None and not captured():
        return ("fa3 builds this pool's draft-extend metadata outside the graph (draft_extend_metadata_captured_in_graph: "
                "a hybrid-SWA pool without a full-to-SWA mapping, or a translating KV index)")
    if captured is None and not _swa_mapped(backend):
        return ("a hybrid-SWA pool without a full-to-SWA mapping: not run with the graph here (0.5.16's "
                "draft_extend_metadata_captured_in_graph test, applied to the pool before 0.5.16)")
    return None


def _swa_mapped(backend) -> bool:
    """0.5.16's ``draft_extend_metadata_captured_in_graph`` on a backend that predates it: the pool is not hybrid-SWA,
    or it has a full-to-SWA index mapping (0.5.15's unified pool, whose v2p table stands for it, has none)."""
    if not getattr(backend, "use_sliding_window_kv_pool", False):
        return True
    return getattr(getattr(backend, "token_to_kv_pool", None), "full_to_swa_index_mapping", None) is not None


def fa3_tree_reason(worker):
    """tree-drafting's tree-width rule for an fa3 draft worker (0.5.11 / 0.5.12.x): fa3-draft-extend-graph's rule,
    where its list ran in the same ``init_cuda_graphs`` (the function both files build), whose decision it takes as
    made there; without that fix, fa3 trees keep their eager draft extend."""
    if FA3_LISTED not in vars(worker):
        return "fa3-draft-extend-graph is not applied (fa3's draft-extend graph)"
    return vars(worker)[FA3_LISTED]


def flashinfer_metadata_targets() -> tuple:
    """The FlashInferAttnBackend functions that carry flashinfer-draft-extend-graph's DRAFT_EXTEND_V2 graph metadata
    on the installed release: ``_prepare_cuda_graph_metadata`` / ``init_forward_metadata_out_graph`` where the class
    has that API (0.5.13 on), else the capture / replay pair (0.5.11 / 0.5.12.x)."""
    cls = flashinfer_class()
    names = _FLASHINFER_OUT_GRAPH if cls is not None and hasattr(cls, _FLASHINFER_OUT_GRAPH[0]) \
        else _FLASHINFER_CAPTURE_REPLAY
    return tuple(f"{FLASHINFER_MODULE}.FlashInferAttnBackend.{name}" for name in names)


def flashinfer_graph_reason(worker, backend):
    """Why this flashinfer draft worker does not capture the spec-v2 draft-extend CUDA graph (None: it does). Used for
    trees by tree_width_reason (0.5.11 / 0.5.12.x), and by flashinfer-draft-extend-graph's list for chains and trees on
    0.5.13.x and for chains on 0.5.11 / 0.5.12.x."""
    if is_tree(worker) and not selection.tree_draft_graph_enabled():
        return selection.turned_off(selection.ENV_TREE_GRAPH)
    if not runtime.in_place("flashinfer-draft-extend-graph", flashinfer_metadata_targets()):
        return "flashinfer-draft-extend-graph is not applied: it carries flashinfer's DRAFT_EXTEND_V2 graph metadata"
    if two_flashinfer_wrappers(backend):
        return ("two flashinfer wrappers (sliding window / cross attention): their prefill plan needs the extend's "
                "prefix lengths, which the graph metadata (prefix_lens=None) does not give in this release")
    if getattr(worker.server_args, "speculative_token_map", None):
        return ("FR-Spec (--speculative-token-map): the graph's logits buffer has the full draft vocab "
                "(eager, as upstream #28782)")
    return None


# ------------------------------------------------------------------------------------------- the decision
def decision(width: int, reason, backend_label: str = "", suffix: str = "") -> str:
    """The decision as logged and reported: "cuda graph (fa3), 8 tokens per request" or "eager: why"."""
    if reason is not None:
        return f"eager: {reason}"
    label = f" ({backend_label})" if backend_label else ""
    return f"cuda graph{label}, {width} tokens per request{suffix}"


def record(worker, text: str) -> None:
    """Keep a draft worker's draft-extend graph decision for /server_info (``plugin.serving_facts``), which reads the
    scheduler's server_args: the worker's own and its target worker's, which are the scheduler's object. They are one
    object up to 0.5.16; from 0.5.17 the draft worker holds a deep copy (``draft_server_args_copy``)."""
    worker.server_args.__dict__[DRAFT_EXTEND_GRAPH] = text
    target = getattr(getattr(worker, "target_worker", None), "server_args", None)
    if target is not None:
        target.__dict__[DRAFT_EXTEND_GRAPH] = text


def recorded(server_args):
    """The decision a draft worker of this server recorded (None: none decided yet, or a chain on its own graph)."""
    return getattr(server_args, "__dict__", {}).get(DRAFT_EXTEND_GRAPH)


def tree_handoff_reason(args):
    """For verify-handoff: a tree wider than steps + 1 runs its draft extend in tree-drafting's tree-width graph or
    eagerly. Eagerly, every step would need the exact host mirror (a blocking read after the whole previous step,
    longer than the release's wait), so such a server keeps the synchronous path. Read from the switch and, once the
    draft worker has decided, from the recorded decision (None: the handoff may apply)."""
    topk = getattr(args, "speculative_eagle_topk", None) or 1
    steps = getattr(args, "speculative_num_steps", None) or 0
    tokens = getattr(args, "speculative_num_draft_tokens", None) or 0
    if topk == 1 or tokens <= steps + 1:
        return None  # the release's own draft-extend graph (steps + 1 tokens per request)
    if not selection.tree_draft_graph_enabled():
        env = selection.ENV_TREE_GRAPH
        return f"tree draft extend without its CUDA graph ({env}={os.environ.get(env)})"
    made = recorded(args)
    if made is not None and not made.startswith("cuda graph"):
        return f"tree draft extend {made}"
    return None
