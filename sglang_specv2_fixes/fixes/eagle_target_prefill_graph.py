"""0.5.11 - 0.5.13.x: the spec-v2 EAGLE target's piecewise prefill CUDA graph is captured and never replayed.

``PiecewiseCudaGraphRunner.__init__`` captures with ``CaptureHiddenMode.NULL`` (FULL only with
``--enable-return-hidden-states``), while ``EAGLEWorkerV2.forward_batch_generation`` asks the target for FULL hidden
states on every prefill (the draft extend consumes them) and ``can_run`` rejects a batch whose mode differs from the
runner's. So the graph (on by default) is captured at start and every target prefill runs eagerly, one kernel launch
at a time from the host (a higher time to first token). Upstream says as much from 0.5.14 (its
``init_prefill_cuda_graph``: "the captured graph is dead"); 0.5.14 stops capturing it for an EAGLE target on
tc_piecewise (#28386), and from 0.5.15 the default prefill backend on CUDA, the breakable graph, captures FULL for the
EAGLE target and LAST for the draft (#25795 / #28870); 0.5.13's experimental ``--enable-breakable-cuda-graph`` runner
already does (a different class: this patch does not touch it). #28809 proposed FULL for the piecewise graph (closed).

The patch makes the same decision on this runner, where ``capture_full`` allows it: the EAGLE / EAGLE3 target of a
spec-v2 worker (``EAGLEWorkerV2``: 0.5.11 / 0.5.12.x with the overlap scheduler on, 0.5.13.x always; not the draft,
not multi-layer EAGLE) on a dense model captures FULL, the mode ``--enable-return-hidden-states`` already takes in
these releases. Everything else keeps the release's NULL:

* MoE targets: #28809 (FULL here, skip dropped) took DeepSeek-V3 FP4 MTP to gsm8k 0.0 (reported in #28870), and
  #28386 / #29248 report FP4 / TRTLLM-MoE state perturbed by the target's prefill capture;
* hybrid linear-attention / Mamba targets (their recurrent state on this graph is not exercised with a draft here).

Why the replay gives the eager hidden states: the graph holds the decoder stack only (``patch_model`` /
``install_torch_compiled`` on ``language_model.model``, 0.5.12+'s ``layer_model``); ``LogitsProcessor``, the one
reader of the capture mode in these releases (nothing under ``models/`` or elsewhere in ``layers/`` reads it), runs
eagerly on the graph's outputs at replay with the batch's own mode (``replay_prepare`` copies
``forward_batch.capture_hidden_mode``). The decoder returns the EAGLE3 auxiliary layers whatever the mode
(``layers_to_capture`` is set at load), so the captured graph is the same kernels as the NULL one, the capture
batches stay NULL as the release builds them for ``--enable-return-hidden-states``, and ``replay`` slices FULL
hidden states to the live token count. EAGLE3's are a fresh ``torch.cat`` of the auxiliary layers; EAGLE's are the
graph's own output buffer, read once: the target's hidden states leave ``forward_batch_generation`` only through
``_draft_extend_for_prefill`` in the same call, an eager draft forward that runs before any other graph replays.

Proof: CPU (tests/cpu/test_fix_eagle_target_prefill_graph.py: the release's real ``__init__`` up to its buffers, then
its ``can_run`` on a FULL prefill batch; targets, drafts, spec v1, MoE and hybrid targets). GPU:
tests/registered/test_eagle_target_prefill_graph.py (greedy output equal to the target alone, the piecewise graph on;
the probe's count of target prefills the graph replayed: none on stock).

Removal: delete when 0.5.13.post1 leaves the supported releases (0.5.14 has no such capture; from 0.5.15 the default
breakable prefill graph captures FULL for the EAGLE target).
"""

from __future__ import annotations

import logging

from ..catalog import Fix

logger = logging.getLogger("sglang_specv2_fixes")

FIX = Fix(
    name="eagle-target-prefill-graph",
    upstream=(),
    related=("#28809", "#28870", "#28386", "#29248"),
    title="the spec-v2 EAGLE target's prefills replay the piecewise CUDA graph",
    what=(
        "PiecewiseCudaGraphRunner.__init__ (0.5.11 - 0.5.13.x) captures FULL hidden states for the EAGLE / EAGLE3 "
        "target of a spec-v2 worker on a dense model (not MoE, not hybrid linear attention), as it does for "
        "--enable-return-hidden-states; drafts and every other runner keep the release's NULL"
    ),
    why=(
        "the piecewise prefill graph is captured with NULL hidden states while the spec-v2 target asks FULL on every "
        "prefill, and can_run rejects the mismatch: the graph is never replayed and every target prefill runs eagerly "
        "(slower time to first token; text unaffected)"
    ),
    removal=(
        "delete when 0.5.13.post1 leaves the supported releases (0.5.14 captures nothing there; from 0.5.15 the "
        "default breakable prefill graph captures FULL for the EAGLE target)"
    ),
    # the runner's module is imported by model_runner, in a scheduler only
    on_import=True,
)

_logged = set()


def skip_reason(model_runner, spec_v2: bool):
    """Why the piecewise prefill graph of ``model_runner`` keeps the release's capture mode; None where it captures
    FULL (the EAGLE / EAGLE3 target of a spec-v2 worker on a dense model). ``spec_v2``: whether this release runs the
    EAGLE target through ``EAGLEWorkerV2`` (the patch's answer for its release)."""
    algo = model_runner.spec_algorithm
    if algo is None or not algo.is_eagle():
        return "not an EAGLE / EAGLE3 server"
    if model_runner.is_draft_worker:
        return "the draft's runner"
    if not spec_v2:
        return "spec v1 (overlap scheduler off)"
    if model_runner.server_args.enable_multi_layer_eagle:
        return "multi-layer EAGLE"
    return dense_reason(model_runner)


def dense_reason(model_runner):
    """None for a dense target; else what it has: MoE layers (the release's own per-layer list that
    ``init_piecewise_cuda_graphs`` builds for this graph, or any fused MoE module) or a hybrid linear-attention /
    Mamba config."""
    if any(m is not None for m in getattr(model_runner, "moe_layers", None) or ()):
        return "a MoE target"
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE

    model = getattr(model_runner, "model", None)
    if model is not None and any(isinstance(m, FusedMoE) for m in model.modules()):
        return "a MoE target"
    if model_runner.mambaish_config is not None:
        return "a hybrid linear-attention / Mamba target"
    return None


def capture_full(model_runner, spec_v2: bool) -> bool:
    """Called by the patched ``PiecewiseCudaGraphRunner.__init__`` after the release chose its capture mode: True
    where the graph captures FULL hidden states (``skip_reason`` is None). The decision for an EAGLE server is logged
    once per process."""
    reason = skip_reason(model_runner, spec_v2)
    algo = model_runner.spec_algorithm
    if algo is not None and algo.is_eagle() and reason not in _logged:
        _logged.add(reason)
        if reason is None:
            logger.info("sglang-specv2-fixes: eagle-target-prefill-graph: the piecewise prefill CUDA graph captures "
                        "FULL hidden states for the spec-v2 EAGLE target (its prefills replay it)")
        else:
            logger.info("sglang-specv2-fixes: eagle-target-prefill-graph: the piecewise prefill CUDA graph keeps the "
                        "release's capture mode: %s", reason)
    return reason is None
