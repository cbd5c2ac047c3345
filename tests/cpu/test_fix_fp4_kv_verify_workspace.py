"""fp4-kv-verify-workspace on the release's real FlashInfer backend (#36001 / #36010): with a KV cache method whose
prefill access is the dequant workspace and a speculative algorithm, the plugin refuses at startup
(``_resolve_swa_kv_pool``, the first step of ``FlashInferAttnBackend.__init__``), naming the combination and the way out;
stock accepts it, and its verify then reaches the workspace with no host prefix lengths.

The bug, on the release's real objects: ``_prepare_dequant_workspace_metadata_for_extend`` (real) prepares nothing for
a TARGET_VERIFY batch (no page table, no CPU request ids), and the real ``forward_extend`` then hands the batch's
``extend_prefix_lens_cpu`` (None on a verify) to the pool's ``get_flashinfer_dequant_workspace_kv_buffer`` (a stand-in
that records its arguments and stops the call). The backend is made without ``__init__`` (only the fields these
functions read); the access is the release's real ``KVCacheAttentionAccess`` kind ``DEQUANT_WORKSPACE``. For
the startup rule: a model runner stand-in (a non-SWA pool whose KV cache method hands out that prefill access, and
the release's real SpeculativeAlgorithm).
"""

import types

import pytest
import torch
from conftest import requires_sglang, where_patched

from sglang_specv2_fixes import core
from sglang_specv2_fixes.fixes import fp4_kv_verify_workspace

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = fp4_kv_verify_workspace.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's FlashInferAttnBackend._resolve_swa_kv_pool")


class Stop(Exception):
    pass


def _backend():
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    be = object.__new__(FlashInferAttnBackend)
    be.kv_cache_quant_method = types.SimpleNamespace(name="nvfp4", describe_attention_accesses=lambda phase: [])
    return be


def _resolve(plugin):
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    if not plugin:
        return FlashInferAttnBackend._resolve_swa_kv_pool
    (fn,) = core.build_fix(FIX).values()
    return getattr(fn, "__func__", fn)


def startup(plugin, algorithm, prefill_kind="DEQUANT_WORKSPACE"):
    """The release's (or the plugin's) ``_resolve_swa_kv_pool``, the first step of FlashInferAttnBackend.__init__, on
    a model runner whose KV cache method reads prefill through ``prefill_kind``: what it returns (no SWA pool)."""
    from sglang.srt.layers.quantization.fp4_kv_cache_quant_method import KVCacheAttentionAccessKind
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    access = types.SimpleNamespace(kind=getattr(KVCacheAttentionAccessKind, prefill_kind), scale_recipe="nvfp4")
    asked = []

    def resolve(phase, backend):
        asked.append((phase, backend))
        return access

    method = types.SimpleNamespace(name="nvfp4", resolve_attention_access=resolve)
    runner = types.SimpleNamespace(
        token_to_kv_pool=types.SimpleNamespace(get_kv_cache_quant_method=lambda: method), is_draft_worker=False,
        token_to_kv_pool_allocator=types.SimpleNamespace(get_kvcache=lambda: None),
        spec_algorithm=SpeculativeAlgorithm.from_string(algorithm))
    out = _resolve(plugin)(runner)
    assert asked in ([], [("prefill", "flashinfer")])
    return out


@pytest.fixture
def fp4_release():
    pytest.importorskip("sglang.srt.layers.quantization.fp4_kv_cache_quant_method")
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    if not hasattr(FlashInferAttnBackend, "_check_kv_attention_access"):  # what the table's note checks
        pytest.skip("no dequant-workspace access in this release (not-applicable)")


def test_stock_verify_reaches_the_workspace_without_prefix_lens(fp4_release):
    """The real metadata step prepares nothing for a verify; the real forward_extend hands None prefix lengths."""
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    be = _backend()
    be.prefill_uses_dequant_workspace = True
    be.page_size = 1
    fb = types.SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, extend_prefix_lens_cpu=None,
                               extend_seq_lens_cpu=None, seq_lens_cpu=torch.tensor([11, 11]),
                               req_pool_indices=torch.tensor([1, 2]), out_cache_loc=torch.arange(8))
    be._prepare_dequant_workspace_metadata_for_extend(fb, use_ragged=False)
    assert be.dq_page_table is None and be.cpu_req_pool_indices is None  # nothing prepared for the verify
    got = {}

    def workspace(layer, req_to_token, req_pool_indices_cpu, prefix_lens, seq_lens, page_size, **kw):
        got.update(prefix=prefix_lens, extend=seq_lens, ids=req_pool_indices_cpu, **kw)
        raise Stop

    be.token_to_kv_pool = types.SimpleNamespace(get_flashinfer_dequant_workspace_kv_buffer=workspace)
    be.req_to_token_pool = types.SimpleNamespace(req_to_token=torch.zeros(4, 32, dtype=torch.int32))
    be.forward_metadata = types.SimpleNamespace(prefill_wrappers=[None], use_ragged=False)
    be._get_wrapper_idx = lambda layer: 0
    layer = types.SimpleNamespace(is_cross_attention=False, logit_cap=0.0, layer_id=0)
    with pytest.raises(Stop):
        FlashInferAttnBackend.forward_extend(be, torch.zeros(8, 4), torch.zeros(8, 4), torch.zeros(8, 4), layer, fb)
    assert got["prefix"] is None and got["extend"] is None and got["ids"] is None


ALGORITHMS = pytest.mark.parametrize("algorithm", ["EAGLE3", "EAGLE"])


@ALGORITHMS
def test_stock_accepts_the_combination(fp4_release, algorithm):
    assert startup(False, algorithm) is None


@FIXED_HERE
@ALGORITHMS
def test_plugin_refuses_the_combination(fp4_release, algorithm):
    with pytest.raises(ValueError) as e:
        startup(True, algorithm)
    msg = str(e.value)
    assert f"does not work with --speculative-algorithm {algorithm}" in msg and "--kv-cache-dtype fp8_e4m3" in msg
    assert "#36010" in msg


@FIXED_HERE
@pytest.mark.parametrize("algorithm,kind", [(None, "DEQUANT_WORKSPACE"), ("EAGLE3", "PLAIN")])
def test_plugin_keeps_the_rest(fp4_release, algorithm, kind):
    """No speculation, or a prefill access that is not the dequant workspace: the release's answer (no SWA pool)."""
    assert startup(True, algorithm, kind) is None
