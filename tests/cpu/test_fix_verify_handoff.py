"""verify-handoff (#25879, in 0.5.13; on unless SGLANG_SPECV2_FIXES_VERIFY_HANDOFF=0) on the release's real functions: the
decode preparation of a triton chain or tree with CUDA graphs leaves the host free while the previous verify runs, and
everything else keeps the release's host wait.

* ``ScheduleBatch.maybe_wait_verify_done`` (real, stock and patched) on a steady spec-v2 decode batch of a triton
  chain or tree (topk 4 / 8 tokens) server: stock waits on the host (``verify_done.synchronize()``), the plugin makes
  the current stream wait for the event and the host does not. A logprob batch, a fa3 server and a tree whose draft
  extend runs eagerly (its tree-width graph switched off, or tree-drafting's recorded decision "eager: ...") keep the
  host wait with the plugin; a tree as wide as steps + 1 (the release's own draft-extend graph) does not need the
  switch. Stand-ins: the batch's attributes, the event (records ``synchronize`` / ``wait_event``), the
  device module (``torch.get_device_module``: its current stream records ``wait_event``), the global server args.
* ``prepare_for_extend_to_fill_draft_kvcache`` + ``ForwardBatch.init_new`` (both real) for a decode batch that
  arrives without the host mirror (``seq_lens_cpu`` None): stock raises (``None + int``), the plugin builds the
  draft extend's positions ``seq_len + 0 .. n-1`` from the device ``seq_lens`` on CPU tensors (compute_position's
  torch path, ``attention_backend`` torch_native for the model runner stand-in) and the extend's
  ``extend_prefix_lens_cpu`` is None; with the mirror present the result equals stock's.
* On the releases' real objects (a real ``ScheduleBatch`` and pools, ``prepare_for_decode`` / ``filter_batch`` /
  ``merge_batch`` / ``forward_batch_generation``, the stream order): tests/cpu/test_fix_verify_handoff_real.py.
Checked to fail against stock: with the plugin's functions not installed every plugin-side test above fails.
Not covered (GPU only): the pinned non-blocking copies' timing, the real CUDA events and streams, the graphs' replay.
"""

import dataclasses
import types

import pytest
import torch
from conftest import requires_sglang, where_patched

from sglang_specv2_fixes import core
from sglang_specv2_fixes.fixes import verify_handoff

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = verify_handoff.FIX.name
# the decode-preparation patch (0.5.11 / 0.5.12.x); 0.5.13.x: test_fix_verify_handoff_piecewise.py
FIXED_HERE = where_patched(FIX, "the plugin's spec-v2 decode preparation",
                           target="ScheduleBatch.maybe_wait_verify_done")
SB = "sglang.srt.managers.schedule_batch.ScheduleBatch"
EI = "sglang.srt.speculative.eagle_info_v2.EagleDraftInputV2Mixin"


@pytest.fixture(scope="module")
def patched():
    return core.build_fix(FIX)


class Event:
    def __init__(self, log):
        self.log = log

    def synchronize(self):
        self.log.append("host")


class Stream:
    def __init__(self, log):
        self.log = log

    def wait_event(self, event):
        self.log.append("stream")


def _server(**kw):
    args = dict(speculative_algorithm="EAGLE3", speculative_eagle_topk=1, attention_backend="triton",
                decode_attention_backend=None, prefill_attention_backend=None, speculative_draft_attention_backend=None,
                disable_cuda_graph=False, disable_cuda_graph_padding=False, page_size=1, disaggregation_mode="null")
    args.update(kw)
    return types.SimpleNamespace(**args)


def _pools():
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    return object.__new__(ReqToTokenPool), object.__new__(TokenToKVPoolAllocator)


def _decode_batch(log, **kw):
    req_pool, allocator = _pools()
    spec = types.SimpleNamespace(verify_done=Event(log))
    fields = dict(is_spec_v2=True, spec_info=spec, return_logprob=False, return_hidden_states=False,
                  has_grammar=False, model_config=types.SimpleNamespace(is_encoder_decoder=False),
                  is_hybrid_swa=False, hisparse_coordinator=None, req_to_token_pool=req_pool,
                  token_to_kv_pool_allocator=allocator, device="cuda")
    fields.update(kw)
    return types.SimpleNamespace(**fields)


def _wait(fn, monkeypatch, server, **kw):
    import sglang.srt.server_args as sa

    log = []
    monkeypatch.setattr(sa, "get_global_server_args", lambda: server)
    monkeypatch.setattr(torch, "get_device_module", lambda device=None: types.SimpleNamespace(
        current_stream=lambda: Stream(log)))
    verify_handoff._SERVER.clear()
    fn(_decode_batch(log, **kw))
    return log


@FIXED_HERE
def test_stock_waits_on_the_host(monkeypatch):
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    assert _wait(ScheduleBatch.maybe_wait_verify_done, monkeypatch, _server()) == ["host"]


@FIXED_HERE
def test_triton_chain_waits_on_the_stream(patched, monkeypatch):
    assert _wait(patched[f"{SB}.maybe_wait_verify_done"], monkeypatch, _server()) == ["stream"]


@FIXED_HERE
@pytest.mark.parametrize("server, batch", [
    (dict(attention_backend="flashinfer"), {}),  # fa3 takes the handoff too: test_fix_verify_handoff_fa3.py
    (dict(disable_cuda_graph=True), {}),
    (dict(enable_two_batch_overlap=True), {}),
    (dict(disaggregation_mode="decode"), {}),
    ({}, dict(return_logprob=True)),
    ({}, dict(has_grammar=True)),
    ({}, dict(is_hybrid_swa=True)),
])
def test_everything_else_keeps_the_host_wait(patched, monkeypatch, server, batch):
    assert _wait(patched[f"{SB}.maybe_wait_verify_done"], monkeypatch, _server(**server), **batch) == ["host"]


TREE = dict(speculative_eagle_topk=4, speculative_num_steps=3, speculative_num_draft_tokens=8)


@FIXED_HERE
def test_triton_tree_waits_on_the_stream(patched, monkeypatch):
    """A tree (topk 4 / 8 tokens: tree-drafting's path, its draft extend in the tree-width graph) takes the handoff
    as a chain does."""
    assert _wait(patched[f"{SB}.maybe_wait_verify_done"], monkeypatch, _server(**TREE)) == ["stream"]
    assert verify_handoff.server_reason(_server(**TREE)) is None


@FIXED_HERE
@pytest.mark.parametrize("switch, decision, server, wait", [
    ("0", None, TREE, "host"),
    ("", "eager: draft-extend-kv-range is not applied: it carries the tree-width query stride", TREE, "host"),
    ("", "cuda graph, 8 tokens per request", TREE, "stream"),
    ("0", None, dict(TREE, speculative_num_draft_tokens=4), "stream"),
], ids=["switch-off", "recorded-eager", "recorded-graph", "steps+1-wide"])
def test_tree_draft_extend_without_its_graph_keeps_the_host_wait(patched, monkeypatch, switch, decision, server, wait):
    """A tree wider than steps + 1 whose draft extend runs eagerly (SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=0, or the
    decision tree-drafting records on the server args says "eager: ...") keeps the host wait: every step would need
    ``materialize``. A tree as wide as steps + 1 runs the release's own draft-extend graph: the switch does not
    matter there."""
    from sglang_specv2_fixes.fixes.draft_extend_graph import DRAFT_EXTEND_GRAPH
    from sglang_specv2_fixes.selection import ENV_TREE_GRAPH

    monkeypatch.setenv(ENV_TREE_GRAPH, switch)
    args = _server(**server)
    if decision is not None:
        args.__dict__[DRAFT_EXTEND_GRAPH] = decision
    assert _wait(patched[f"{SB}.maybe_wait_verify_done"], monkeypatch, args) == [wait]
    reason = verify_handoff.server_reason(args)
    if wait == "stream":
        assert reason is None
    elif decision is None:
        assert reason == f"tree draft extend without its CUDA graph ({ENV_TREE_GRAPH}=0)"
    else:
        assert reason == f"tree draft extend {decision}"


@FIXED_HERE
@pytest.mark.parametrize("value", ["0", "off", "", "1"])
def test_no_off_switch_the_selection_leaves_it_out(patched, monkeypatch, value):
    """On by default (since its GPU row met). Its old off switch went (``auto,-verify-handoff`` does the same: the
    release's functions stay): the variable changes nothing in the patched code, and ``status`` warns that it is no
    longer read."""
    from sglang_specv2_fixes import selection
    from sglang_specv2_fixes.fixes import ALL_FIXES

    name = "SGLANG_SPECV2_FIXES_VERIFY_HANDOFF"
    monkeypatch.setenv(name, value)
    assert _wait(patched[f"{SB}.maybe_wait_verify_done"], monkeypatch, _server()) == ["stream"]
    assert verify_handoff.server_reason(_server()) is None
    assert [w for w in selection.unknown_variables(ALL_FIXES) if w.startswith(f"{name} is no longer read: "
                                                                             "auto,-verify-handoff")]
    assert not selection.parse("auto,-verify-handoff", ALL_FIXES).wants("verify-handoff")


def _worker_batch(seq_lens, with_mirror):
    from sglang.srt.managers.schedule_batch import ModelWorkerBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    fields = {f.name: None for f in dataclasses.fields(ModelWorkerBatch)}
    fields.update(
        forward_mode=ForwardMode.DECODE, seq_lens=seq_lens.clone(), req_pool_indices=torch.arange(len(seq_lens)),
        seq_lens_cpu=seq_lens.clone() if with_mirror else None, seq_lens_sum=int(seq_lens.sum()) + 99,
        out_cache_loc=torch.zeros(len(seq_lens) * 4, dtype=torch.int64), reqs=[types.SimpleNamespace(rid=str(i))
                                                                             for i in range(len(seq_lens))],
        sampling_info=None, return_logprob=False, is_extend_in_batch=False, all_extend_in_batch=False,
        can_run_dp_cuda_graph=False, is_prefill_only=False,
    )
    b = types.SimpleNamespace(**fields)
    return b


def _runner():
    server_args = types.SimpleNamespace(attention_backend="torch_native", enable_lora=False,
                                        enable_dp_attention=False, enable_dp_lm_head=False, moe_dense_tp_size=None,
                                        tp_size=1, enable_piecewise_cuda_graph=False)
    return types.SimpleNamespace(device="cpu", server_args=server_args, req_to_token_pool=None, token_to_kv_pool=None,
                                 attn_backend=None, use_ngram_embedding=False, model_is_mrope=False,
                                 is_hybrid_swa=False,
                                 spec_algorithm=types.SimpleNamespace(is_standalone=lambda: False))


def _draft_extend(fn, batch, monkeypatch, n=4):
    import sglang.srt.model_executor.forward_batch_info as fbi
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    monkeypatch.setattr(fbi, "enable_num_token_non_padded", lambda *a, **k: False)
    draft_input = object.__new__(EagleDraftInput)
    draft_input.positions = None
    predict = torch.arange(len(batch.seq_lens) * n)
    graph = types.SimpleNamespace(can_run=lambda forward_batch: True)
    return fn(draft_input, batch, predict, n, _runner(), graph)


@FIXED_HERE
@pytest.mark.parametrize("n", [4, 8], ids=["chain", "tree"])
def test_draft_extend_positions_from_device_seq_lens(patched, monkeypatch, n):
    """n draft tokens per request: 4 (chain 3 / 1 / 4), 8 (tree 3 / 4 / 8: tree-drafting's draft extend runs the whole
    verify block, the accepted path compacted to its front)."""
    import sglang.srt.model_executor.forward_batch_info as fbi

    monkeypatch.setattr(fbi.ForwardBatch, "init_new",
                        classmethod(patched["sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_new"]))
    seq_lens = torch.tensor([7, 12, 3])
    fb = _draft_extend(patched[f"{EI}.prepare_for_extend_to_fill_draft_kvcache"], _worker_batch(seq_lens, False),
                       monkeypatch, n)
    want = (seq_lens[:, None] + torch.arange(n)).flatten()
    assert fb.positions.tolist() == want.tolist()
    assert fb.extend_prefix_lens.tolist() == seq_lens.tolist() and fb.extend_prefix_lens_cpu is None
    assert fb.seq_lens.tolist() == (seq_lens + n).tolist() and fb.seq_lens_cpu is None
    assert fb.extend_seq_lens_cpu == [n] * 3 and fb.extend_num_tokens == 3 * n
    # with the mirror the plugin's result is stock's
    fb2 = _draft_extend(patched[f"{EI}.prepare_for_extend_to_fill_draft_kvcache"], _worker_batch(seq_lens, True),
                        monkeypatch, n)
    assert fb2.positions.tolist() == want.tolist() and fb2.extend_prefix_lens_cpu == seq_lens.tolist()


@FIXED_HERE
def test_stock_draft_extend_needs_the_host_mirror(monkeypatch):
    from sglang.srt.speculative.eagle_info_v2 import EagleDraftInputV2Mixin

    with pytest.raises(TypeError):
        _draft_extend(EagleDraftInputV2Mixin.prepare_for_extend_to_fill_draft_kvcache,
                      _worker_batch(torch.tensor([7, 12, 3]), False), monkeypatch)
