"""A quantized KV cache read through FlashInfer's dequant workspace (NVFP4 KV) with speculative decoding is refused at
startup, with the way out (0.5.16 - 0.5.23; upstream #36001 / #36010, open; candidate fixes #36038, #36045).

With ``--kv-cache-dtype nvfp4`` (a KV cache method whose FlashInfer prefill access is ``DEQUANT_WORKSPACE``) the
FlashInfer backend's prefill path reads the KV through an FP8 workspace it fills first: the workspace metadata
(``_prepare_dequant_workspace_metadata_for_extend``: page table, paged lengths, CPU request ids) is built only for an
extend without speculation (``is_extend_without_speculative``), and ``forward_extend`` hands the batch's
``extend_prefix_lens_cpu`` / ``extend_seq_lens_cpu`` to ``get_flashinfer_dequant_workspace_kv_buffer``. A speculative
verify (and the draft extend) runs ``forward_extend`` too, with those host lists None: it crashes (``TypeError:
'NoneType' object is not subscriptable``, in the verify CUDA graph's capture or the first verify) or reads a workspace
this step did not fill. The lengths a verify would need are known (prefix: ``seq_lens``, which excludes the draft
tokens; extend: the draft tokens per request), but the workspace is filled from host lists, which a CUDA-graph replay
cannot refresh: upstream's candidates replace the fill by a graph-safe kernel (#36045) or route the verify to another
backend (#36038). Neither is a change this plugin can prove on a CPU, so the combination is refused where it is
decided, at startup: ``FlashInferAttnBackend._resolve_swa_kv_pool``, the first thing ``__init__`` asks of the model
runner (target and draft; ``__init__`` itself, with its zero-argument ``super()``, cannot be rebuilt from a patch),
resolves the KV cache method's FlashInfer prefill access as ``__init__`` does next and raises ValueError when that
access is the dequant workspace and the model runner has a speculative algorithm, naming the combination and the way
out (an FP8 / auto KV cache dtype with speculative decoding, or no speculative decoding). It is conservative for a
hybrid setup whose verify runs on another prefill backend.

Removal: per release once upstream fills the dequant workspace for speculative batches (open as of 0.5.23).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="fp4-kv-verify-workspace",
    upstream=(),
    related=("#36001", "#36010"),
    title="NVFP4 KV on FlashInfer + speculative decoding: refused at startup, not a verify crash",
    what=(
        "FlashInferAttnBackend._resolve_swa_kv_pool (the first step of its __init__) raises ValueError at startup when "
        "the KV cache method's FlashInfer prefill access is the dequant workspace (NVFP4 KV) and the model runner has "
        "a speculative algorithm, naming the "
        "combination and the way out (--kv-cache-dtype fp8_e4m3 or auto, or no speculative decoding)"
    ),
    why=(
        "the dequant workspace is prepared only for extends without speculation; a speculative verify hands "
        "extend_prefix_lens_cpu = None to get_flashinfer_dequant_workspace_kv_buffer and the server crashes"
    ),
    removal="per release once upstream fills the dequant workspace for speculative batches (open as of 0.5.23)",
    on_import=True,  # flashinfer_backend: imported by a flashinfer server's attention backend, not by every process
)


def refuse_spec_on_dequant_workspace(prefill_access, spec_algorithm) -> None:
    """Raise ValueError when ``prefill_access`` (the KV cache method's FlashInfer prefill access) is the dequant
    workspace and ``spec_algorithm`` (the model runner's SpeculativeAlgorithm) is not NONE."""
    if spec_algorithm is None or spec_algorithm.is_none() or prefill_access is None:
        return
    if getattr(prefill_access.kind, "name", prefill_access.kind) != "DEQUANT_WORKSPACE":
        return
    speculative_algorithm = getattr(spec_algorithm, "name", spec_algorithm)
    raise ValueError(
        f"a quantized KV cache read through FlashInfer's dequant workspace (--kv-cache-dtype nvfp4) does not work "
        f"with --speculative-algorithm {speculative_algorithm}: the workspace is prepared for plain prefills only, and "
        "a speculative verify would crash in it. Use --kv-cache-dtype fp8_e4m3 (or auto) with speculative decoding, "
        "or drop --speculative-algorithm to keep the NVFP4 KV cache (sglang-specv2-fixes: fp4-kv-verify-workspace, "
        "upstream #36010)."
    )
