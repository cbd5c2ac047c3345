"""#26866 - spec v2 tree drafting (EAGLE topk > 1) with page_size == 1.

SGLang 0.5.11 / 0.5.12.x decide "topk > 1 -> spec v1" in ``ServerArgs._handle_speculative_decoding``
*before* ``auto_choose_speculative_params`` runs. With default spec params a Llama target gets
steps 5 / topk 4 / 8 draft tokens while the overlap scheduler stays on, i.e. the spec v2 tree path,
which those releases never finished: the bonus-token kernel reads with the tree width instead of
the accepted width, the accepted path is never compacted (predict / hidden states / target KV stay
scattered over tree node slots while the scheduler resolve, the draft extend and the committed KV
read a chain), and the draft-extend CUDA graph is sized for ``num_steps + 1`` tokens per request.
Under concurrency this dies with "vectorized gather kernel index out of bounds".

Upstream landed the fix in #26866 (reverted by #26981: "breaks the default behaviors when we use
topk > 1 under the default spec v2 settings"; its routing still ran before the auto-chosen params;
the worker side is in 0.5.13.post1 as ``_finalize_accept_tree_path`` / ``_compact_accept_to_front`` /
``move_accept_tokens_to_target_kvcache``). This module backports it per code line:

* routing on the final params (launcher): where the user chose no attention backend, upstream's default
  rule is applied again with the final topk (Hopper: kept on fa3, as upstream 0.5.13 - 0.5.17 run it; fa3 -> flashinfer
  with SGLANG_SPECV2_FIXES_FA3_TREES=0); dense model + topk > 1 + page_size == 1 (+ flashinfer / triton / fa3,
  the backends whose tree path has a GPU row, fa3 unless that switch is off; no MLA, no MLP-sync padding, no
  multi-layer EAGLE) -> spec v2 tree drafting;
  any other topk > 1 setup -> spec v1 with one warning naming the reason; an explicit
  ``--disable-overlap-schedule`` is always kept; topk == 1 unchanged;
* ``EAGLEWorkerV2.verify``: bonus stride ``accept_index.shape[1]`` and accepted-path compaction;
* ``EAGLEWorkerV2.move_accepted_tokens_to_target_kvcache`` (dead upstream code until now): launch
  size ``bs * accept_index.shape[1]``; each release keeps its own count semantics;
* ``EagleDraftWorker.init_cuda_graphs`` / ``EAGLEDraftExtendCudaGraphRunner.__init__``: the spec-v2 draft-extend
  graph at tree width (``num_draft_tokens`` rows per request, as upstream 0.5.13; the triton metadata's query
  stride comes with draft-extend-kv-range, #27545), captured only where the shared draft-extend graph policy allows
  (``draft_extend_graph.tree_width_reason``; on by default, ``SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=0`` turns it off;
  flashinfer's graph, upstream #28782, with flashinfer-draft-extend-graph's metadata, on by default,
  ``auto,-flashinfer-draft-extend-graph`` leaves it out), else eager; the same function asks
  ``flashinfer_draft_extend_graph.flashinfer_graph_backends`` about a chain whose backend is not on the release's
  list (#28782 captures flashinfer's graph for chains too);
* ``SchedulerRuntimeCheckerMixin.self_check_during_busy``: the busy leak check runs for spec v2
  tree drafting (it stays skipped for spec v1 tree drafting).

The per-release details are in the patch files (patches/tree-drafting/) and docs/known-bugs.md.
"""

from __future__ import annotations

import logging

from ..catalog import Fix, switch
from ..selection import ENV_FA3_TREES, fa3_trees_enabled
from . import draft_extend_graph as policy

logger = logging.getLogger("sglang_specv2_fixes")

FIX = Fix(
    name="tree-drafting",
    upstream=('#26866',),
    title="spec v2 tree drafting (EAGLE topk > 1) with page_size == 1",
    what="ServerArgs._handle_speculative_decoding routes topk > 1 after auto_choose_speculative_params (an auto-chosen attention backend is re-chosen by upstream's default rule on the final topk; page_size == 1 dense models on flashinfer/triton keep spec v2, everything else spec v1 with a warning); EAGLEWorkerV2.verify uses the accepted width as bonus stride and compacts the accepted tree path (target KV via move_accepted_tokens_to_target_kvcache, predict, hidden states) to the front of each request block; move_accepted_tokens_to_target_kvcache launches bs * accept_index.shape[1]; EagleDraftWorker.init_cuda_graphs skips the num_steps+1-wide draft-extend graph for trees (and captures flashinfer's for chains where flashinfer-draft-extend-graph's rule allows); the busy leak check runs for spec v2 tree drafting",
    why="default EAGLE/EAGLE3 params (auto-chosen topk 4) keep the overlap scheduler on and run the unfinished spec v2 tree path: out-of-bounds reads (device-side assert 'vectorized gather kernel index out of bounds' under concurrency) and wrong bonus tokens / hidden states / KV",
    removal="delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream re-landed it in 0.5.13.post1, where spec v1 is gone)",
    # its tree-width draft-extend graph rule tests their functions (draft_extend_graph.tree_width_reason)
    requires=("draft-extend-kv-range", "flashinfer-draft-extend-graph", "fa3-draft-extend-graph"),
    switches=(
        switch("SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH", "on",
               "=0: a tree's draft extend runs eagerly (no tree-width draft-extend CUDA graph, on any backend)"),
        switch("SGLANG_SPECV2_FIXES_FA3_TREES", "on",
               "=0: no spec-v2 trees on fa3 (an explicit fa3 tree runs spec v1, the default invocation gets flashinfer)"),
    ),
)

# ------------------------------------------------------------------ code the patched functions call
# Written once here rather than in each release's patch: the same on every release this fix patches.


USER_BACKENDS = "_specv2_user_attention_backends"  # set by plugin.py before ServerArgs.__post_init__
TREE_ROUTE = "_specv2_tree_route"  # route_tree's decision on a topk > 1 setup, read by plugin.serving_facts
TREE_BACKENDS = ("flashinfer", "triton")  # attention backends whose spec-v2 tree path has a GPU row here
FA3_TREE_BACKEND = "fa3"  # joins them unless SGLANG_SPECV2_FIXES_FA3_TREES=0 (selection.fa3_trees_enabled)


def route_tree(server_args):
    """Route a topk > 1 setup on the final (explicit or auto-chosen) params; None keeps it on spec v2
    tree drafting, a string is the reason it goes to spec v1 (logged by the patched caller).

    Called by the patched ``ServerArgs._handle_speculative_decoding``. First, when the user chose no
    attention backend, the backend is re-chosen by upstream's own rule on the final params (see
    follow_default_backend_rule); then spec_v2_tree_v1_reason decides.
    """
    follow_default_backend_rule(server_args)
    reason = spec_v2_tree_v1_reason(server_args)
    # kept on the instance (it travels to every scheduler process with server_args): /server_info names the reason
    # where a setup (e.g. a parallel one: DP attention) was routed away from spec-v2 trees (plugin.serving_facts)
    server_args.__dict__[TREE_ROUTE] = reason or "spec v2 tree drafting"
    return reason


def follow_default_backend_rule(server_args):
    """Upstream's default-backend rule, applied to the final speculative params.

    ``ServerArgs._get_default_attn_backend`` says (0.5.11 … 0.5.23): "FA3 on hopper unless user use spec
    decode with topk > 1 or page_size > 1", else flashinfer (triton without it). But it runs before the
    speculative params are chosen, so the default invocation (no --speculative-eagle-topk) gets fa3 and
    then an auto-chosen topk of 4. Where the user set no attention backend at all, the rule is run again
    now that topk is known. Upstream 0.5.13 - 0.5.17 still choose before topk and run that tree on fa3 on Hopper:
    with fa3 trees on (the default; SGLANG_SPECV2_FIXES_FA3_TREES=0 turns them off) fa3 is kept as they keep it.
    A user's explicit backend is never changed. ServerArgs built without this
    plugin's __post_init__ hook (e.g. a source tree patched from patches/) carries no record of what the
    user chose and is left alone. Returns (old, new) when it changed the backend, else None.
    """
    user = getattr(server_args, USER_BACKENDS, None)
    if user is None or any(b is not None for b in user):
        return None
    old = server_args.attention_backend
    if old == FA3_TREE_BACKEND and FA3_TREE_BACKEND in tree_backends():
        return None  # fa3 trees on: the default invocation stays on fa3, as upstream 0.5.13 - 0.5.17 run it
    new = server_args._get_default_attn_backend(server_args.use_mla_backend(), server_args.get_model_config())
    if new == old:
        return None
    server_args.attention_backend = new
    for field in ("prefill_attention_backend_str", "decode_attention_backend_str"):
        if getattr(server_args, field, None) == old:
            setattr(server_args, field, new)
    logger.warning(
        "sglang-specv2-fixes: attention backend %s -> %s: no backend was chosen and the speculative topk is "
        "%s; upstream's default rule picks %s for that (it ran before topk was chosen)",
        old, new, server_args.speculative_eagle_topk, new,
    )
    return old, new


def tree_backends() -> tuple:
    """The attention backends spec-v2 tree drafting runs on: TREE_BACKENDS, and fa3 unless
    SGLANG_SPECV2_FIXES_FA3_TREES is off."""
    return TREE_BACKENDS + ((FA3_TREE_BACKEND,) if fa3_trees_enabled() else ())


def spec_v2_tree_v1_reason(server_args):
    """Why a topk > 1 setup cannot run spec v2 tree drafting in this release (None: it can)."""
    from sglang.srt.configs.linear_attn_model_registry import get_linear_attn_spec_by_arch

    def _is_hybrid_linear_attn_model():
        # Same model families the scheduler treats as Mamba / GDN / linear
        # attention (ModelRunner.mambaish_config), read from the config only.
        import sglang.srt.configs as hybrid_configs
        from sglang.srt.configs.linear_attn_model_registry import (
            get_linear_attn_config,
        )

        hf_config = server_args.get_model_config().hf_config
        if (
            get_linear_attn_spec_by_arch(hf_config.architectures[0])
            is not None
            or get_linear_attn_config(hf_config) is not None
        ):
            return True
        hybrid_names = (
            "BailingHybridConfig",
            "FalconH1Config",
            "InternS2PreviewConfig",
            "JetNemotronConfig",
            "JetVLMConfig",
            "KimiLinearConfig",
            "Lfm2Config",
            "Lfm2MoeConfig",
            "Lfm2VlConfig",
            "NemotronHConfig",
            "NemotronH_Nano_VL_V2_Config",
            "Qwen3NextConfig",
            "Qwen3_5Config",
            "Qwen3_5MoeConfig",
        )
        hybrid_classes = tuple(
            getattr(hybrid_configs, name)
            for name in hybrid_names
            if hasattr(hybrid_configs, name)
        )
        granite_cls = getattr(hybrid_configs, "GraniteMoeHybridConfig", None)
        get_text_config = getattr(hf_config, "get_text_config", None)
        candidates = [hf_config]
        if get_text_config is not None:
            candidates.append(get_text_config())
        for cfg in candidates:
            if granite_cls is not None and isinstance(cfg, granite_cls):
                return any(
                    t == "mamba" for t in (getattr(cfg, "layer_types", None) or [])
                )
            if isinstance(cfg, hybrid_classes):
                return True
        return False

    def _spec_v2_tree_unsupported_reason():
        if server_args.page_size is not None and server_args.page_size > 1:
            return (
                "spec v2 tree drafting (topk > 1) requires page_size == 1, "
                f"got page_size={server_args.page_size}"
            )
        if server_args.enable_multi_layer_eagle:
            return "spec v2 tree drafting (topk > 1) is not supported by multi-layer EAGLE"
        if (
            server_args.enable_dp_attention
            or server_args.moe_dense_tp_size == 1
            or server_args.moe_a2a_backend not in (None, "none")
        ):
            return (
                "spec v2 tree drafting (topk > 1) is not supported with MLP-sync "
                "token padding (DP attention / moe_dense_tp_size=1 / MoE A2A) in this release"
            )
        if server_args.use_mla_backend():
            return (
                "spec v2 tree drafting (topk > 1) needs a target KV move that the MLA "
                "KV pool of this release lacks"
            )
        backends = set(server_args.get_attention_backends())
        if server_args.speculative_draft_attention_backend is not None:
            backends.add(server_args.speculative_draft_attention_backend)
        enabled = tree_backends()
        unsupported = sorted(str(b) for b in backends if b not in enabled)
        if unsupported:
            fa3 = f"; fa3 is off: {ENV_FA3_TREES}=0" if FA3_TREE_BACKEND in unsupported else ""
            return (
                "spec v2 tree drafting (topk > 1) is only enabled for the "
                f"{' and '.join(enabled)} attention backends (the ones it was run on{fa3}), "
                f"got {', '.join(unsupported)}"
            )
        if _is_hybrid_linear_attn_model():
            return (
                "spec v2 tree drafting (topk > 1) does not support hybrid "
                "Mamba/GDN/linear-attention models"
            )
        return None

    return _spec_v2_tree_unsupported_reason()


def compact_accept_to_front(x, accept_index, bs: int, num_draft_tokens: int):
    """Move each request's accepted tree path to the front of its block.

    ``x`` is node-indexed (``[bs * num_draft_tokens, ...]``); ``accept_index`` holds global node ids,
    -1 padded (``[bs, steps + 1]``). Padded entries clamp to node 0 but land past accept_lens, where
    nothing reads them. Returns a new tensor; ``x`` is left as it was.
    """
    import torch

    s1 = accept_index.shape[1]
    safe = accept_index.to(torch.int64).clamp(min=0).reshape(-1)
    gathered = x[safe]
    out = x.clone(memory_format=torch.contiguous_format)
    out.view(bs, num_draft_tokens, *x.shape[1:])[:, :s1] = gathered.view(bs, s1, *x.shape[1:])
    return out


def draft_extend_graph_at_tree_width(worker) -> bool:
    """Called by the patched ``EagleDraftWorker.init_cuda_graphs`` for a tree (num_draft_tokens > steps + 1) on CUDA:
    True captures the draft-extend graph at tree width (triton, flashinfer or fa3; the shared policy's
    ``draft_extend_graph.tree_width_reason``: the width itself is patched in ``EAGLEDraftExtendCudaGraphRunner.__init__``,
    the backend's graph metadata must be at that width too), False runs the tree's draft extend eagerly. The decision
    goes to the log once and to /server_info (``serving.draft_extend_graph``)."""
    reason = policy.tree_width_reason(worker)
    width = worker.speculative_num_draft_tokens
    backend = worker.draft_extend_attn_backend
    label = suffix = ""
    if reason is None and not policy.is_triton(backend):
        if policy.is_fa3(backend):
            label = "fa3"
        else:
            from .flashinfer_draft_extend_graph import plan_decision  # flashinfer's replay plan, its own switch

            label, suffix = "flashinfer", plan_decision(worker, backend)
    decision = policy.decision(width, reason, label, suffix)
    policy.record(worker, decision)
    logger.info("sglang-specv2-fixes: spec v2 tree draft extend: %s", decision)
    return reason is None
