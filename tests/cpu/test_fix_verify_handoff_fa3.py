"""verify-handoff on fa3 (on unless SGLANG_SPECV2_FIXES_VERIFY_HANDOFF_FA3=0), on the releases' real functions
(0.5.11 / 0.5.12.x, where the fix patches).

* The server rule (``server_reason``): an fa3 server takes the handoff unless the switch is off, chains and trees alike
  (fa3's draft extend runs eagerly and needs no mirror, or in fa3-draft-extend-graph's graph, whose replay gets
  None), never mixed with another backend.
  ``graphs_run`` asks an fa3 server's batch for the draft and target-verify graphs only.
* The metadata (a child interpreter per release): the release's real ``FlashAttentionBackend`` on CPU (a model-runner
  stand-in holding a real ``ReqToTokenPool`` / ``MHATokenToKVPool``; fa3's kernel replaced by its reference semantics,
  paged KV with each request's queries aligned to the end of its KV), driven as a handoff decode step drives it, with
  ``seq_lens_cpu`` None:
  - the eager draft extend (``init_forward_metadata``, DRAFT_EXTEND_V2, no ``extend_prefix_lens_cpu``) then
    ``forward_extend``: every row equals causal attention over its request's KV; stock raises;
  - the target verify of a chain (capture at bs 3, a replay of raw bs 2) then ``forward_extend``: the same, and equal
    to the replay with the exact mirror; with the stale lengths a runner buffer can hold (an earlier, shorter batch's:
    what ``CudaGraphRunner.replay_prepare`` passes stock-wise) the rows differ (the page table is cut short); stock
    raises on None;
  - the draft decode of a chain (fa3's fused triton gather replaced by its torch reference, which also checks that the
    gathered width never exceeds the page-table buffer) and the draft decode and cascade target verify of a topk 4
    tree: the metadata equals the mirror's on every column a request's KV reaches, ``max_seq_len_k`` is the static
    bound (``max_context_len``), never wider than the page tables.
  - fa3-draft-extend-graph's DRAFT_EXTEND_V2 graph (capture at bs 3, a replay of raw bs 2) then ``forward_extend``:
    without the mirror, every row equals causal attention; with a stale buffer's lengths the rows differ; stock
    raises on None.
* ``CudaGraphRunner.replay_prepare`` and ``EAGLEDraftExtendCudaGraphRunner.replay`` (real, with stand-in runners): a
  target verify or draft extend without the mirror hands the backend None, not the runner buffer's lengths; with
  the mirror, the buffer; stock hands the buffer either way.
"""

import json
import types

import pytest
import torch

from conftest import VERSION, requires_sglang, run_script_json, where_patched
from test_fix_verify_handoff import _server as triton_server  # the server args the handoff rule reads
from sglang_specv2_fixes import core
from sglang_specv2_fixes.fixes import verify_handoff
from sglang_specv2_fixes.selection import ENV_FA3_GRAPH, ENV_VERIFY_HANDOFF_FA3
from sglang_specv2_fixes.testing import fa3_cpu
from sglang_specv2_fixes.testing.causal_ref import D, H, KVH, causal_errors

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = verify_handoff.FIX.name
# the decode-preparation patch (0.5.11 / 0.5.12.x); 0.5.13.x: test_fix_verify_handoff_piecewise.py
FIXED_HERE = where_patched(FIX, "the plugin's spec-v2 decode preparation",
                           target="ScheduleBatch.maybe_wait_verify_done")
CGR = "sglang.srt.model_executor.cuda_graph_runner.CudaGraphRunner"
TREE = dict(speculative_eagle_topk=4, speculative_num_steps=3, speculative_num_draft_tokens=8)


def _server(**kw):
    return triton_server(**{"attention_backend": "fa3", **kw})


@FIXED_HERE
@pytest.mark.parametrize("switch, graph, server, on", [
    (None, None, {}, True),
    (None, None, TREE, True),
    ("1", None, {}, True),
    ("1", None, TREE, True),
    (None, "1", {}, True),  # the draft-extend graph's replay passes no stale mirror either
    (None, None, dict(decode_attention_backend="triton"), False),
    ("0", None, {}, False),
    ("off", None, TREE, False),
], ids=["chain-default", "tree-default", "chain-switch", "tree-switch", "with-fa3-draft-graph", "mixed-backends",
        "switch-off", "tree-switch-off"])
def test_fa3_takes_the_handoff_unless_its_switch_is_off(monkeypatch, switch, graph, server, on):
    for name, value in ((ENV_VERIFY_HANDOFF_FA3, switch), (ENV_FA3_GRAPH, graph)):
        monkeypatch.delenv(name, raising=False) if value is None else monkeypatch.setenv(name, value)
    verify_handoff._SERVER.clear()
    reason = verify_handoff.server_reason(_server(**server))
    verify_handoff._SERVER.clear()
    if on:
        assert reason is None
    elif switch in ("0", "off"):
        assert reason == f"attention backend fa3: turned off by {ENV_VERIFY_HANDOFF_FA3}={switch}"
    else:
        assert reason == "attention backends ['fa3', 'triton']: only triton's and fa3's graph metadata were read for it"


@FIXED_HERE
@pytest.mark.parametrize("backend, runs", [("fa3", True), ("triton", False)])
def test_graphs_run_on_fa3_without_a_draft_extend_graph(monkeypatch, backend, runs):
    """No draft-extend runner (fa3's draft extend is eager): on fa3 the batch still runs every graph it needs."""
    import sglang.srt.server_args as sa

    monkeypatch.setattr(sa, "get_global_server_args", lambda: types.SimpleNamespace(attention_backend=backend))
    runner = types.SimpleNamespace(max_bs=8, disable_padding=False, require_mlp_sync=False)
    worker = types.SimpleNamespace(
        draft_worker=types.SimpleNamespace(cuda_graph_runner=runner, cuda_graph_runner_for_draft_extend=None),
        target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(graph_runner=runner)))
    batch = types.SimpleNamespace(seq_lens=torch.zeros(3), replace_embeds=None)
    assert verify_handoff.graphs_run(worker, batch) is runs


# ----------------------------------------------------------------- CudaGraphRunner.replay_prepare (real function)
class _Backend:
    def __init__(self):
        self.got = []

    def init_forward_metadata_replay_cuda_graph(self, *args, seq_lens_cpu=None, **kw):
        self.got.append(seq_lens_cpu)


def _replay_prepare(fn, mirror, mode):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    stale = torch.tensor([3, 3, 3, 3], dtype=torch.int32)  # an earlier batch's lengths, kept by the buffer
    buffers = types.SimpleNamespace(populate_from_forward_batch=lambda **kw: None, seq_lens_cpu=stale,
                                    req_pool_indices=torch.zeros(4, dtype=torch.int64),
                                    seq_lens=torch.zeros(4, dtype=torch.int32), encoder_lens=None)
    backend = _Backend()
    runner = types.SimpleNamespace(
        buffers=buffers, recapture_if_needed=lambda fb: None, num_tokens_per_bs=4, require_mlp_tp_gather=False,
        capture_bs=[4], seq_len_fill_value=1, require_gathered_buffer=False, nsa_enable_prefill_cp=False,
        model_runner=types.SimpleNamespace(
            spec_algorithm=types.SimpleNamespace(is_eagle=lambda: True, is_standalone=lambda: False,
                                                 is_dflash=lambda: False),
            server_args=types.SimpleNamespace(), is_draft_worker=False, hisparse_coordinator=None),
        enable_two_batch_overlap=False, enable_pdmux=False, attn_backend=backend, is_encoder_decoder=False,
        capture_forward_mode=mode)
    fb = types.SimpleNamespace(batch_size=3, forward_mode=mode, spec_info=None, input_ids=torch.zeros(12),
                               seq_lens_sum=30, seq_lens_cpu=torch.tensor([9, 10, 11]) if mirror else None,
                               input_embeds=None)
    import sglang.srt.model_executor.cuda_graph_runner as cgr

    real = cgr.enable_num_token_non_padded
    cgr.enable_num_token_non_padded = lambda *a, **k: False
    try:
        fn(runner, fb)
    finally:
        cgr.enable_num_token_non_padded = real
    (got,) = backend.got
    return got, stale


@FIXED_HERE
@pytest.mark.parametrize("mirror", [False, True])
def test_replay_prepare_passes_no_stale_mirror(mirror):
    from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    patched = core.build_fix(FIX)[f"{CGR}.replay_prepare"]
    got, stale = _replay_prepare(patched, mirror, ForwardMode.TARGET_VERIFY)
    assert (got is None) if not mirror else torch.equal(got, stale)
    stock, stale = _replay_prepare(CudaGraphRunner.replay_prepare, mirror, ForwardMode.TARGET_VERIFY)
    assert torch.equal(stock, stale)  # stock: the buffer's earlier lengths either way
    got, stale = _replay_prepare(patched, mirror, ForwardMode.DECODE)  # not a target verify: as stock
    assert torch.equal(got, stale)


# ------------------------------------------------ EAGLEDraftExtendCudaGraphRunner.replay (real function)
class _Stop(Exception):
    """Raised by the stand-in's graph replay: everything after it needs a captured CUDA graph."""


def _draft_extend_replay(fn, mirror):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import eagle_info

    bs, width = 4, 4
    stale = torch.tensor([3, 3, 3, 3], dtype=torch.int32)  # an earlier batch's lengths, kept by the buffer
    fields = eagle_info.EagleDraftInput.__dataclass_fields__
    drafts = next(f for f in ("num_accepted_drafts", "num_correct_drafts") if f in fields)
    tokens = next(f for f in ("num_accepted_tokens", "num_accept_tokens") if f in fields)
    buffers = types.SimpleNamespace(
        seq_lens=torch.zeros(bs, dtype=torch.int32), seq_lens_cpu=stale.clone(), out_cache_loc=torch.zeros(bs * width),
        positions=torch.zeros(bs * width), input_ids=torch.zeros(bs * width), hidden_states=torch.zeros(bs * width, 2),
        extend_seq_lens=torch.zeros(bs, dtype=torch.int32), req_pool_indices=torch.zeros(bs, dtype=torch.int64),
        **{drafts: torch.zeros(bs, dtype=torch.int32), tokens: torch.zeros(bs, dtype=torch.int32)})
    backend = _Backend()

    def _replay(fb):
        raise _Stop

    runner = types.SimpleNamespace(
        buffers=buffers, deepep_adapter=types.SimpleNamespace(replay=lambda: None), require_mlp_tp_gather=False,
        capture_bs=[bs], num_tokens_per_bs=width, seq_len_fill_value=1, require_gathered_buffer=False,
        extend_seq_lens_cpu=[width] * bs, forward_mode=ForwardMode.DRAFT_EXTEND_V2,
        draft_extend_attn_backend=backend, _replay=_replay)
    n = 3 * width  # raw bs 3, padded to the captured 4
    spec = types.SimpleNamespace(hidden_states=torch.zeros(n, 2), **{drafts: None, tokens: None})
    fb = types.SimpleNamespace(
        out_cache_loc=torch.zeros(n), batch_size=3, input_ids=torch.zeros(n), seq_lens=torch.tensor([9, 10, 11]),
        extend_seq_lens=None, positions=torch.zeros(n), req_pool_indices=torch.zeros(3, dtype=torch.int64),
        seq_lens_cpu=torch.tensor([9, 10, 11], dtype=torch.int32) if mirror else None, extend_seq_lens_cpu=None,
        seq_lens_sum=30, spec_info=spec)
    with pytest.raises(_Stop):
        fn(runner, fb)
    (got,) = backend.got
    return got, buffers.seq_lens_cpu


@FIXED_HERE
@pytest.mark.parametrize("mirror", [False, True])
def test_draft_extend_replay_passes_no_stale_mirror(mirror):
    """fa3-draft-extend-graph's graph with the handoff: the replay hands fa3 None for a draft extend without the
    mirror (fa3 then takes the static bound), not the buffer's earlier lengths; with the mirror, the buffer refreshed
    from it. Stock hands the buffer either way."""
    from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner

    target = "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner.EAGLEDraftExtendCudaGraphRunner.replay"
    got, buf = _draft_extend_replay(core.build_fix(FIX)[target], mirror)
    if mirror:
        assert got is buf and got[:3].tolist() == [9, 10, 11] and got[3].item() == 1, got  # refreshed, padded
    else:
        assert got is None
    stock, buf = _draft_extend_replay(EAGLEDraftExtendCudaGraphRunner.replay, mirror)
    assert stock is buf  # stock: the buffer, holding [3, 3, 3, 3] without the mirror
    assert stock.tolist() == ([9, 10, 11, 1] if mirror else [3, 3, 3, 3])


# ----------------------------------------------------------------- fa3's metadata (child interpreter)
STEPS = 3
PREFIX = [5, 9]
MAX_BS, CTX, CAPTURE_BS = 4, 64, 3


def _gather_reference(cache_seqlens_int32, cu_seqlens_k, page_table, req_to_token, req_pool_indices,
                      strided_indices, max_seq_pages, seq_lens, seq_len_delta, page_size, *args):
    """fa3's fused triton ``normal_decode_set_metadata`` (page size 1) in torch; the kernel writes ``max_seq_pages``
    columns without a bound check, so a width past the buffer would write into the next row."""
    assert max_seq_pages <= page_table.shape[1], (max_seq_pages, page_table.shape)
    lens = (seq_lens + seq_len_delta).to(torch.int32)
    cache_seqlens_int32.copy_(lens)
    cu_seqlens_k[1:].copy_(torch.cumsum(lens, 0, dtype=torch.int32))
    page_table[:, :max_seq_pages].copy_(req_to_token[req_pool_indices[:, None], strided_indices[None, :max_seq_pages]])


def _install(fa):
    """The plugin's patched FlashAttentionBackend functions, as register installs them."""
    fns = core.build_fix(FIX)
    prefix = "sglang.srt.layers.attention.flashattention_backend.FlashAttentionBackend."
    for name in ("init_forward_metadata", "init_forward_metadata_replay_cuda_graph"):
        setattr(fa.FlashAttentionBackend, name, fns[prefix + name])


def _backend(topk, draft_step=None):
    """The target's (and the draft extend's) fa3 backend, or one draft step's, on CPU (page size 1), its fused gather
    replaced by the reference."""
    import sglang.srt.layers.attention.flashattention_backend as fa

    w = STEPS + 1 if topk == 1 else 8
    backend, pool, req_pool = fa3_cpu.fa3_backend(page_size=1, max_bs=MAX_BS, ctx=CTX, topk=topk, steps=STEPS,
                                                  draft_tokens=w, draft_step=draft_step)
    fa.normal_decode_set_metadata = _gather_reference
    return backend, pool, req_pool, w


def _fill(req_pool, pool, w, rows=(1, 2)):
    slots = torch.randperm(500)[: 2 * CTX] + 1
    for i, (r, p) in enumerate(zip(rows, PREFIX)):
        req_pool.req_to_token[r, : p + w] = slots[i * CTX: i * CTX + p + w].to(torch.int32)
    for buf in (pool.get_key_buffer(0), pool.get_value_buffer(0)):
        buf.copy_(torch.randn_like(buf))


def _errors(backend, pool, req_pool, w, mode, rows=(1, 2), bs=2):
    """forward_extend on the backend's current metadata against causal attention over each request's KV (a graph's
    batch padded to bs: the padding's queries write the dummy slot 0 and are not compared)."""
    from sglang.srt.layers.radix_attention import RadixAttention

    n = bs * w
    out_cache_loc = torch.zeros(n, dtype=torch.long)
    out_cache_loc[: len(rows) * w] = torch.cat([req_pool.req_to_token[r, p: p + w] for r, p in zip(rows, PREFIX)])
    q, k, v = torch.randn(n, H * D), torch.randn(n, KVH, D), torch.randn(n, KVH, D)
    layer = RadixAttention(H, D, scaling=D**-0.5, num_kv_heads=KVH, layer_id=0)
    fb = types.SimpleNamespace(token_to_kv_pool=pool, out_cache_loc=out_cache_loc, forward_mode=mode,
                               batch_size=bs, attn_cp_metadata=None, attn_attend_prefix_cache=None)
    o = backend.forward_extend(q, k, v, layer, fb).view(n, H, D)
    return max(causal_errors(o, q, pool, req_pool, rows, PREFIX, w))


def _try(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the child reports what stock raises
        return f"raised {type(e).__name__}"


def _draft_extend(mirror):
    """The eager draft extend of a handoff step: DRAFT_EXTEND_V2 through init_forward_metadata."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    torch.manual_seed(0)
    backend, pool, req_pool, w = _backend(1)
    _fill(req_pool, pool, w)
    lens = torch.tensor(PREFIX) + w
    mode = ForwardMode.DRAFT_EXTEND_V2
    fb = types.SimpleNamespace(
        seq_lens=lens, batch_size=2, forward_mode=mode, spec_info=None, req_pool_indices=torch.tensor([1, 2]),
        req_to_token_pool=req_pool, seq_lens_cpu=lens.clone() if mirror else None,
        extend_prefix_lens_cpu=PREFIX if mirror else None, extend_seq_lens=torch.tensor([w, w], dtype=torch.int32),
        extend_seq_lens_cpu=[w, w], encoder_lens=None, attn_cp_metadata=None)
    backend.init_forward_metadata(fb)
    return dict(err=_errors(backend, pool, req_pool, w, mode), max_k=backend.forward_metadata.max_seq_len_k)


def _capture(backend, mode, w, topk):
    from sglang.srt.speculative.eagle_info import EagleDraftInput, EagleVerifyInput

    ri = torch.zeros(MAX_BS, dtype=torch.int64)
    sl = torch.full((MAX_BS,), backend.get_cuda_graph_seq_len_fill_value(), dtype=torch.int32)
    n = CAPTURE_BS * (w if mode.is_target_verify() else topk)
    spec = (EagleVerifyInput.__new__(EagleVerifyInput) if mode.is_target_verify()
            else EagleDraftInput.__new__(EagleDraftInput))
    backend.init_forward_metadata_capture_cuda_graph(
        bs=CAPTURE_BS, num_tokens=n, req_pool_indices=ri[:CAPTURE_BS], seq_lens=sl[:CAPTURE_BS], encoder_lens=None,
        forward_mode=mode, spec_info=spec)
    return backend.forward_metadata, ri, sl


def _replay(backend, mode, w, topk, seq_lens_cpu):
    """A replay of raw bs 2 padded to the captured 3 (the runner's buffers), at the lengths of a decode step."""
    ri = torch.tensor([1, 2, 0])
    lens = torch.tensor(PREFIX + [backend.get_cuda_graph_seq_len_fill_value()], dtype=torch.int32)
    spec = types.SimpleNamespace(positions=torch.zeros(2 * w, dtype=torch.int64),
                                 custom_mask=torch.ones(4096, dtype=torch.bool))
    backend.init_forward_metadata_replay_cuda_graph(
        CAPTURE_BS, ri, lens, int(lens.sum()), None, mode, spec, seq_lens_cpu=seq_lens_cpu,
        out_cache_loc=torch.arange(CAPTURE_BS * topk * STEPS))
    return lens


def _snapshot(metadata, width):
    return {k: getattr(metadata, k)[..., :width].clone() for k in ("cache_seqlens_int32", "page_table")
            if getattr(metadata, k, None) is not None}


def _replays(topk, mode_name):
    """Metadata of a replay without the mirror against one with it: equal where a request's KV reaches."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    mode = getattr(ForwardMode, mode_name)
    torch.manual_seed(0)
    backend, pool, req_pool, w = _backend(topk, None if mode.is_target_verify() else 1)
    _fill(req_pool, pool, w)
    _capture(backend, mode, w, topk)
    graph = (backend.target_verify_metadata if mode.is_target_verify() and topk == 1
             else backend.target_verify_metadata_topk_normal if mode.is_target_verify()
             else backend.decode_cuda_graph_metadata if topk == 1 else backend.draft_decode_metadata_topk_normal)
    metadata = graph[CAPTURE_BS]
    lens = _replay(backend, mode, w, topk, torch.tensor(PREFIX + [1], dtype=torch.int32))
    exact_k = metadata.max_seq_len_k  # the columns a request's KV reaches in this step
    exact = _snapshot(metadata, exact_k)
    out = dict(width=metadata.page_table.shape[1])
    out["none"] = _try(lambda: _replay(backend, mode, w, topk, None) is not None)
    if out["none"] is True:
        bounded = _snapshot(metadata, exact_k)
        out.update(equal=all(torch.equal(exact[k], bounded[k]) for k in exact), max_k=metadata.max_seq_len_k,
                   exact_k=exact_k)
        if topk == 1 and mode.is_target_verify():
            out["err_none"] = _errors(backend, pool, req_pool, w, mode, bs=CAPTURE_BS)
            _replay(backend, mode, w, topk, lens.clone())
            out["err_mirror"] = _errors(backend, pool, req_pool, w, mode, bs=CAPTURE_BS)
            metadata.page_table.zero_()  # as last written for other requests
            _replay(backend, mode, w, topk, torch.tensor([3, 3, 3], dtype=torch.int32))  # a buffer's stale lengths
            out["err_stale"] = _errors(backend, pool, req_pool, w, mode, bs=CAPTURE_BS)
    return out


def _draft_extend_graph(kind, topk=1):
    """fa3-draft-extend-graph's graph: DRAFT_EXTEND_V2 captured at bs 3, replayed for raw bs 2 at prefix + width with
    the mirror (``mirror``), without it (``none``: the handoff) or with a stale buffer's lengths (``stale``), then the
    graph body's ``forward_extend`` on the metadata the capture bound, with the query width it kept."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    torch.manual_seed(0)
    mode = ForwardMode.DRAFT_EXTEND_V2
    backend, pool, req_pool, w = _backend(topk)
    _fill(req_pool, pool, w)
    fill = backend.get_cuda_graph_seq_len_fill_value()
    backend.init_forward_metadata_capture_cuda_graph(
        bs=CAPTURE_BS, num_tokens=CAPTURE_BS * w, req_pool_indices=torch.zeros(CAPTURE_BS, dtype=torch.int64),
        seq_lens=torch.full((CAPTURE_BS,), fill, dtype=torch.int32), encoder_lens=None, forward_mode=mode,
        spec_info=EagleDraftInput.__new__(EagleDraftInput))
    captured = backend.forward_metadata
    kept = captured.max_seq_len_q
    ri = torch.tensor([1, 2, 0])
    lens = torch.tensor([p + w for p in PREFIX] + [fill], dtype=torch.int32)
    spec = types.SimpleNamespace(extend_seq_lens_tensor=torch.full((CAPTURE_BS,), w, dtype=torch.int32),
                                 extend_seq_lens_cpu=[w] * CAPTURE_BS, num_tokens_per_req=w)
    cpu = {"mirror": lens.clone(), "none": None, "stale": torch.tensor([3, 3, 3], dtype=torch.int32)}[kind]
    backend.init_forward_metadata_replay_cuda_graph(CAPTURE_BS, ri, lens, int(lens.sum()), None, mode, spec,
                                                    seq_lens_cpu=cpu)
    backend.forward_metadata = captured
    captured.max_seq_len_q = kept
    return dict(err=_errors(backend, pool, req_pool, w, mode, bs=CAPTURE_BS), max_k=captured.max_seq_len_k,
                width=captured.page_table.shape[1], kept=kept)


def _child(patched):
    import sglang.srt.layers.attention.flashattention_backend as fa

    if patched:
        _install(fa)
    out = {"draft-extend": _try(lambda: _draft_extend(False)), "draft-extend-mirror": _try(lambda: _draft_extend(True))}
    for topk, mode in ((1, "TARGET_VERIFY"), (1, "DECODE"), (4, "TARGET_VERIFY"), (4, "DECODE")):
        out[f"{mode}-{topk}"] = _try(lambda: _replays(topk, mode))
    for kind in ("mirror", "none", "stale"):
        out[f"draft-extend-graph-{kind}"] = _try(lambda: _draft_extend_graph(kind))
    return out


LEGACY = pytest.mark.skipif(VERSION not in ("0.5.11", "0.5.12", "0.5.12.post1"),
                            reason="the fa3 part of verify-handoff patches 0.5.11 / 0.5.12.x")


@pytest.fixture(scope="module")
def metadata():
    return run_script_json(__file__)


@LEGACY
def test_eager_draft_extend_without_the_mirror(metadata):
    got, stock = metadata["plugin"]["draft-extend"], metadata["stock"]["draft-extend"]
    assert isinstance(got, dict) and got["err"] < 1e-5 and got["max_k"] == CTX, got
    assert metadata["plugin"]["draft-extend-mirror"]["max_k"] == max(PREFIX) + STEPS + 1
    assert isinstance(stock, str) and stock.startswith("raised"), stock
    assert metadata["stock"]["draft-extend-mirror"]["err"] < 1e-5  # the same forward with the mirror: stock's own


@LEGACY
def test_chain_target_verify_replay_without_the_mirror(metadata):
    got = metadata["plugin"]["TARGET_VERIFY-1"]
    assert got["none"] is True and got["equal"] and got["max_k"] == CTX <= got["width"], got
    assert got["err_none"] < 1e-5 and got["err_mirror"] < 1e-5, got
    assert got["err_stale"] > 0.1, got  # what a stale buffer does: the reason replay_prepare passes None
    assert metadata["stock"]["TARGET_VERIFY-1"]["none"].startswith("raised")


@LEGACY
@pytest.mark.parametrize("key", ["DECODE-1", "TARGET_VERIFY-4", "DECODE-4"])
def test_other_replays_without_the_mirror(metadata, key):
    got = metadata["plugin"][key]
    assert got["none"] is True and got["equal"] and got["max_k"] == CTX <= got["width"], got
    assert got["exact_k"] < CTX
    assert metadata["stock"][key]["none"].startswith("raised")


@LEGACY
def test_draft_extend_graph_replay_without_the_mirror(metadata):
    """fa3-draft-extend-graph's graph with the handoff: the replay without the mirror (what the patched runner passes)
    takes the static bound and every row equals causal attention; the stale buffer it replaces cuts the page table
    short; stock raises on None."""
    got = {k: metadata["plugin"][f"draft-extend-graph-{k}"] for k in ("mirror", "none", "stale")}
    assert got["none"]["err"] < 1e-5 and got["none"]["max_k"] == CTX <= got["none"]["width"], got
    assert got["mirror"]["err"] < 1e-5 and got["mirror"]["max_k"] == max(PREFIX) + STEPS + 1, got
    assert got["none"]["kept"] == got["mirror"]["kept"] == STEPS + 1, got  # the chain's query width, captured
    assert got["stale"]["err"] > 0.1, got
    assert metadata["stock"]["draft-extend-graph-none"].startswith("raised")
    assert metadata["stock"]["draft-extend-graph-mirror"]["err"] < 1e-5  # with the mirror: stock's own


if __name__ == "__main__":  # the metadata fixture's child interpreter: stock first, then the plugin's functions
    result = {"stock": _child(False)}
    result["plugin"] = _child(True)
    print(json.dumps(result))
