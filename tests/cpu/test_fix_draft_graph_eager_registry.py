"""draft-graph-eager-registry on the release's real ``ModelRunner._ensure_eager_registry`` (0.5.13.x; it does not use
``self``), with the release's real ``_EagerBufferRegistry`` and ``build_decode_registry`` called with the arguments
``_ensure_eager_decode_registry`` passes, on CPU.

The calls follow the multi-step EAGLE draft CUDA graph's capture: ``CudaGraphRunner.capture`` captures the largest bs
first (8, with ``--cuda-graph-bs 1 2 4 8``), whose warm-up builds the draft runner's decode registry; the captures of
bs 4, 2 and 1 get the same registry, so every draft graph bakes its buffers' addresses. Then one eager draft decode
above the largest captured bs (15 running requests) asks for a larger registry. The test holds weak references and
``data_ptr``s of the buffers the graphs baked.

Stock: the rebuild drops the only reference to the baked registry, so every buffer is freed (on a GPU the caching
allocator reuses the memory, and ``/flush_cache``'s ``empty_cache`` unmaps it under the graph). Plugin: the baked
buffers stay alive at the same addresses, and the function still returns what stock returns: the new larger registry
for the large batch, and that same registry for later small batches.

That capture runs ``forward_decode`` -> ``_eager_fb_view`` (which only copies into the registry on CUDA) is read from
the source, not run here; the GPU row is tests/registered/test_draft_graph_eager_registry.py. Elsewhere: 0.5.11 /
0.5.12.x have no eager registry (not applicable), 0.5.14+ build one fixed-size registry in ``EagerRunner.__init__`` and
never replace it (upstream).
"""

import gc
import inspect
import weakref

import pytest
import torch
from conftest import LINE, VERSION, requires_sglang, where_patched

from sglang_specv2_fixes import catalog, core, releases
from sglang_specv2_fixes.fixes import draft_graph_eager_registry

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = draft_graph_eager_registry.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's ModelRunner._ensure_eager_registry")
TARGET = "sglang.srt.model_executor.model_runner.ModelRunner._ensure_eager_registry"
CAPTURE_BS = (8, 4, 2, 1)  # CudaGraphRunner.capture's order for --cuda-graph-bs 1 2 4 8
EAGER_BS = 15  # an eager draft decode above the largest captured bs


def build(bs, num_tokens):
    """The registry _ensure_eager_decode_registry builds (its arguments for a dense EAGLE draft), on CPU."""
    from sglang.srt.model_executor.cuda_graph_buffer_registry import build_decode_registry

    return build_decode_registry(
        device=torch.device("cpu"), max_bs=bs, max_num_token=num_tokens, seq_len_fill_value=0,
        cache_loc_dtype=torch.int64, enable_mamba_track=False, is_encoder_decoder=False, encoder_len_fill_value=0,
        enable_num_token_non_padded=False, register_global_num_tokens=False, require_gathered_buffer=False,
        require_mlp_tp_gather=False, dp_size=1, share_pool=False, source=None)


def ensure_fn(plugin):
    from sglang.srt.model_executor.model_runner import ModelRunner

    return core.build_fix(FIX)[TARGET] if plugin else ModelRunner._ensure_eager_registry


def capture_then_grow(fn):
    """The draft graphs' captures, then one eager draft decode at EAGER_BS: the cache, weak references and data_ptrs of
    the buffers the captured graphs baked, and the registry the large batch got."""
    from sglang.srt.model_executor.model_runner import _EagerBufferRegistry

    cache = _EagerBufferRegistry()
    reg = fn(None, cache, CAPTURE_BS[0], CAPTURE_BS[0], build)
    assert (cache.max_bs, cache.max_num_tokens) == (8, 8)
    names = sorted(reg.slot_names())
    assert {"input_ids", "positions", "out_cache_loc", "req_pool_indices", "seq_lens"} <= set(names)
    baked = {n: weakref.ref(reg.get_slot(n).buffer) for n in names}
    ptrs = {n: reg.get_slot(n).buffer.data_ptr() for n in names}
    for bs in CAPTURE_BS[1:]:
        assert fn(None, cache, bs, bs, build) is reg  # every bucket's capture bakes the same buffers
    del reg
    big = fn(None, cache, EAGER_BS, EAGER_BS, build)
    gc.collect()
    return cache, baked, ptrs, big


@FIXED_HERE
def test_stock_frees_the_buffers_the_draft_graphs_baked():
    cache, baked, _, big = capture_then_grow(ensure_fn(False))
    assert big is cache.registry and (cache.max_bs, cache.max_num_tokens) == (16, 16)
    assert sorted(n for n, ref in baked.items() if ref() is None) == sorted(baked)  # every baked buffer freed


@FIXED_HERE
def test_plugin_keeps_the_baked_buffers_and_returns_what_stock_returns():
    fn = ensure_fn(True)
    cache, baked, ptrs, big = capture_then_grow(fn)
    alive = {n: ref() for n, ref in baked.items()}
    assert all(t is not None for t in alive.values()), sorted(n for n, t in alive.items() if t is None)
    assert {n: t.data_ptr() for n, t in alive.items()} == ptrs  # the addresses the graphs replay into
    old = cache.specv2_retired[0]
    assert cache.specv2_retired == [old] and all(old.get_slot(n).buffer is t for n, t in alive.items())
    # stock's results: the new larger registry for the large batch, the same one for every later smaller batch
    assert big is cache.registry and big is not old and (cache.max_bs, cache.max_num_tokens) == (16, 16)
    assert big.get_slot("input_ids").buffer.shape[0] >= EAGER_BS
    for bs in (1, 8, EAGER_BS, 16):
        assert fn(None, cache, bs, bs, build) is big
    assert cache.specv2_retired == [old]
    # a second growth keeps both earlier registries
    bigger = fn(None, cache, 20, 20, build)
    gc.collect()
    assert bigger is cache.registry and (cache.max_bs, cache.max_num_tokens) == (32, 32)
    assert cache.specv2_retired == [old, big] and all(ref() is not None for ref in baked.values())
    # the record itself is unchanged: the retired list lives in the instance's __dict__, not in a dataclass field
    import dataclasses

    assert [f.name for f in dataclasses.fields(cache)] == ["registry", "max_bs", "max_num_tokens"]


@pytest.mark.skipif(LINE not in ("0.5.11", "0.5.12"),
                    reason=f"sglang {VERSION}: has an eager input registry (0.5.13 on)")
def test_no_eager_registry_before_0_5_13():
    """The table's not-applicable note: an eager forward runs on the batch's own tensors."""
    from sglang.srt.model_executor import model_runner

    assert releases.entry(FIX, LINE).state == catalog.NOT_APPLICABLE
    assert not hasattr(model_runner.ModelRunner, "_ensure_eager_registry")
    assert not hasattr(model_runner.ModelRunner, "_eager_fb_view")


@pytest.mark.skipif(LINE is None or LINE in ("0.5.11", "0.5.12", "0.5.13"),
                    reason=f"sglang {VERSION}: not the EagerRunner design of 0.5.14+")
def test_eager_runner_builds_its_registry_once():
    """The table's upstream note: from 0.5.14 the eager registry is built once, in EagerRunner.__init__, and
    load_batch always fills that one."""
    from sglang.srt.model_executor import model_runner
    from sglang.srt.model_executor.runner.eager_runner import EagerRunner

    assert releases.entry(FIX, LINE).state == catalog.UPSTREAM
    assert not hasattr(model_runner.ModelRunner, "_ensure_eager_registry")
    src = inspect.getsource(EagerRunner)
    assert src.count("self._eager_registry =") == 1
    assert "self._eager_registry =" in inspect.getsource(EagerRunner.__init__)
    assert "registry = self._eager_registry" in inspect.getsource(EagerRunner.load_batch)
