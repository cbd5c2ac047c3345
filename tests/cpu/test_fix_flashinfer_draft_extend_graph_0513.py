"""#28782 flashinfer-draft-extend-graph on 0.5.13 / 0.5.13.post1 (patches/flashinfer-draft-extend-graph/0.5.13.patch):
flashinfer's spec-v2 draft-extend CUDA graph, chains and trees, on the release's real objects, stock vs patched.

**The graph, captured and replayed by the release's real runner** (fresh interpreter, ``TRITON_INTERPRET=1``: the
release's ``create_flashinfer_kv_indices_triton`` runs on CPU). The real ``EAGLEDraftExtendCudaGraphRunner.__init__``
(0.5.13's: ``num_draft_tokens`` rows per request) builds its buffers and captures every batch size through its real
``capture_one_batch_size``; its real ``replay`` copies a draft extend in (raw bs 2 padded to 3) and plans the attention
through the real ``FlashInferAttnBackend`` (``__init__``, ``init_cuda_graph_state``, ``_prepare_cuda_graph_metadata``,
``init_forward_metadata_out_graph``, ``FlashInferIndicesUpdaterPrefill``, ``EagleDraftExtendInput.
generate_attn_arg_prefill``, ``forward_extend``). Stand-ins, for what needs a GPU: flashinfer's wrapper classes (those
of tests/cpu/test_fix_flashinfer_draft_extend_graph.py: flashinfer's CUDA-graph plan contract, a paged prefill computed
from the wrapper's buffers), the CUDA graph (it records the captured forward and the metadata object it was captured
with; a replay runs that forward again on the runner's buffers and writes the results into the captured output
tensors, as a graph's kernels do), a one-layer model whose q / k / v come from the input ids and whose output is the
attention (the real ``RadixAttention`` through ``forward_extend``), and the model runner's fields.

* stock: the capture raises "Invalid mode" (``_prepare_cuda_graph_metadata`` has no DRAFT_EXTEND_V2 branch) - the
  reason 0.5.13 keeps flashinfer off its draft-extend graph list;
* patched, chain (3 steps, 4 tokens) and tree (topk 4, 8 tokens): the capture plans ``qo_indptr`` at the constant
  width, the replay too although the draft input carries the accept lengths (1 and 3 / 3 and 5); every output row of
  the real requests equals causal attention over the prefix and the extend rows up to itself; the worker's draft input
  keeps its accept lengths;
* patched without the constant width (``fixed_width_spec_info`` passing the accept lengths on): the replay plans the
  accept lengths' layout and request 1's rows read request 0's queries - what the width part prevents;
* patched, on a backend the capture rule did not mark (multi-layer EAGLE's runner captures DRAFT_EXTEND_V2 on every
  backend): stock's "Invalid mode";
* a sliding-window model (two flashinfer wrappers): this release's ``update_sliding_window`` cannot plan
  ``prefix_lens=None`` (TypeError) - why the rule keeps such a model's draft extend eager;
* the sync-free plan (the default; SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=0 turns it off: the backend marked as
  ``plan_decision`` marks it; the fix's ``FlashInferIndicesUpdaterPrefill.call_begin_forward`` runs in every patched
  scenario), chain and tree: the replay's plan gets the fix's host tensors (the stand-in tracks them by storage) with
  ``qo_indptr`` = arange * width, ``paged_kv_indptr`` = cumsum of the lengths, ones, and the lengths as ``seq_lens``,
  while the kv indices stay the device kernel's and every row is right; the capture plans as stock;
* the same with a draft extend that has no host mirror (``seq_lens_cpu`` and ``seq_lens_sum`` None, this release's
  GPU-only path): the real runner still hands the metadata its own host buffer (here its fill values), which is not
  this replay's lengths; the plan refuses it (its sum is not the replay's) and plans as stock, rows right.

**The capture decision**, in process: the release's real ``EagleDraftWorker.init_cuda_graphs``, stock vs patched, with
the draft-extend backend a real ``FlashInferAttnBackend`` (its CUDA state left out), the CUDA platform flag set and
the graph runners replaced by recorders. Stock builds no draft-extend runner for flashinfer (chain or tree) and one for
triton; the plugin builds it for flashinfer chains and trees (by default since its rows met on a GPU; with the
switch unset or on) and the metadata patched, marks the backend's width, and otherwise keeps it eager with the reason
in ``serving.draft_extend_graph`` (switch =0, a tree with
SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=0, metadata not applied, FR-Spec, two wrappers); off CUDA and for triton it does
what stock does.

With the release's own functions in place of the patched ones (the plugin not installed) 14 of the first 19 fail: the
patched-graph, variable-width and sliding-window tests (stock's capture raises "Invalid mode" first) and every
decision case (stock builds no flashinfer runner and records no decision); the stock-fact tests, the unmarked-backend
test (stock's answer) and the triton / non-CUDA test (stock's behaviour) pass on both.
"""

import importlib
import json
import os
import subprocess
import sys
import types

import pytest
import torch
from conftest import LINE, ROOT, check_fast_plan_replay, child_env, patched_here, requires_sglang

from sglang_specv2_fixes import core, plugin, releases, selection
from sglang_specv2_fixes.testing.causal_ref import D, H, KVH, causal_errors

FIX_NAME = "flashinfer-draft-extend-graph"
# flashinfer-draft-extend-graph's old off switch: gone (auto,-flashinfer-draft-extend-graph does the same); set, it
# changes nothing
OLD_SWITCH = "SGLANG_SPECV2_FIXES_FLASHINFER_DRAFT_GRAPH"


def _on_out_graph_line():
    return patched_here(FIX_NAME) and releases.entry(FIX_NAME, LINE).name == "0.5.13"


pytestmark = [requires_sglang, pytest.mark.release_scoped, pytest.mark.skipif(
    not _on_out_graph_line(), reason=f"{FIX_NAME}'s 0.5.13 patch (the init_forward_metadata_out_graph API) is not the "
                                     f"one the table applies on this release")]

VOCAB = 24
STEPS = 3
PREFIX = [5, 9]
CAPTURE_BS = [1, 3]
CTX = 32
ROWS = [1, 2]  # req_to_token rows of the two real requests
WORKER_MOD = "sglang.srt.speculative.eagle_worker_v2"
RUNNER_MOD = "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner"
FI_MOD = "sglang.srt.layers.attention.flashinfer_backend"
TARGETS = tuple(f"{FI_MOD}.FlashInferAttnBackend.{n}"
                for n in ("_prepare_cuda_graph_metadata", "init_forward_metadata_out_graph"))


# ------------------------------------------------------------------ the graph scenario (child interpreter)
class _Graph:
    """A CUDA graph as the runner uses it: capture records the forward and the metadata object the kernels were
    recorded with; replay runs the forward again on the runner's buffers and writes into the captured outputs."""

    def __init__(self, backend):
        self.backend, self.fn, self.meta, self.out = backend, None, None, None

    def pool(self):
        return None

    def record(self, fn):
        self.fn, self.meta = fn, self.backend.forward_metadata
        self.out = fn()
        return self.out

    def replay(self):
        self.backend.forward_metadata = self.meta
        new = self.fn()
        for name in ("next_token_logits", "hidden_states", "topk_p", "topk_index"):
            if getattr(self.out, name, None) is not None:
                getattr(self.out, name).copy_(getattr(new, name))


class _Model:
    """One attention layer: q / k / v from the input ids (and positions), output = attention rows, logits = a
    projection of them."""

    def __init__(self, backend):
        from sglang.srt.layers.radix_attention import RadixAttention

        g = torch.Generator().manual_seed(1)
        self.backend = backend
        self.eq, self.ek, self.ev = (torch.randn(VOCAB, n, generator=g) for n in (H * D, KVH * D, KVH * D))
        self.w = torch.randn(H * D, VOCAB, generator=g)
        self.layer = RadixAttention(H, D, scaling=D**-0.5, num_kv_heads=KVH, layer_id=0)

    def qkv(self, input_ids, positions):
        p = positions.to(torch.float32)[:, None] * 0.01
        return self.eq[input_ids] + p, (self.ek[input_ids] + p).view(-1, KVH, D), (self.ev[input_ids] - p).view(-1, KVH, D)

    def forward(self, input_ids, positions, forward_batch):
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput

        q, k, v = self.qkv(input_ids, positions)
        o = self.backend.forward_extend(q, k, v, self.layer, forward_batch)
        return LogitsProcessorOutput(next_token_logits=o @ self.w, hidden_states=o)


def _backend(max_bs, sliding_window=None):
    import sglang.srt.layers.attention.flashinfer_backend as fb
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from test_fix_flashinfer_draft_extend_graph import _Other, _PagedPrefill

    fb.BatchPrefillWithPagedKVCacheWrapper = _PagedPrefill
    fb.BatchPrefillWithRaggedKVCacheWrapper = fb.BatchDecodeWithPagedKVCacheWrapper = _Other
    fb.get_attention_tp_size = lambda: 1  # no parallel state in this process
    pool = MHATokenToKVPool(size=256, page_size=1, dtype=torch.float32, head_num=KVH, head_dim=D, layer_num=1,
                            device="cpu", enable_memory_saver=False)
    req_pool = ReqToTokenPool(size=max_bs + 1, max_context_len=CTX, device="cpu", enable_memory_saver=False)
    runner = types.SimpleNamespace(  # the ModelRunner attributes FlashInferAttnBackend.__init__ reads
        req_to_token_pool=req_pool, token_to_kv_pool=pool, token_to_kv_pool_allocator=None,
        sliding_window_size=sliding_window, device="cpu", kv_cache_dtype=torch.float32, dtype=torch.float32,
        server_args=types.SimpleNamespace(enable_mis=False, enable_deterministic_inference=False,
                                          disable_piecewise_cuda_graph=True, dllm_algorithm=None),
        model_config=types.SimpleNamespace(
            num_attention_heads=H, get_num_kv_heads=lambda tp: KVH, head_dim=D, context_len=CTX,
            is_multimodal=False, is_encoder_decoder=False, hf_config=types.SimpleNamespace(architectures=["X"])),
    )
    return fb.FlashInferAttnBackend(runner, skip_prefill=False), pool, req_pool


def _runner(backend, width, topk):
    """The release's EAGLEDraftExtendCudaGraphRunner for a spec-v2 draft worker (no ``model_runner`` attribute),
    captured by its own capture_one_batch_size through the graph stand-in."""
    import unittest.mock

    import sglang.srt.model_executor.input_buffers as input_buffers

    mod = importlib.import_module(RUNNER_MOD)
    cls = mod.EAGLEDraftExtendCudaGraphRunner
    input_buffers._forward_input_buffer_pool.clear()  # the process-wide pool: one runner per scenario
    mod.get_batch_sizes_to_capture = lambda model_runner: (list(CAPTURE_BS), [])
    mod.DeepEPCudaGraphRunnerAdapter = lambda: types.SimpleNamespace(capture=lambda **k: None, replay=lambda: None)

    def capture(self):
        for bs in reversed(self.capture_bs):
            self.graphs[bs], self.output_buffers[bs] = self.capture_one_batch_size(bs, None)

    cls.capture = capture
    cls._create_graph = lambda self: _Graph(backend)
    cls._capture_init = lambda self, run_once: None
    cls._capture_graph = lambda self, graph, pool, stream, run_once: graph.record(run_once)
    cls.stream = None
    server_args = types.SimpleNamespace(
        speculative_num_steps=STEPS, speculative_eagle_topk=topk, speculative_num_draft_tokens=width,
        enable_torch_compile=False, disable_cuda_graph_padding=False, enable_profile_cuda_graph=False,
        enable_dp_attention=False, enable_dp_lm_head=False, moe_dense_tp_size=None, tp_size=1, dp_size=1,
        pp_size=1, enable_two_batch_overlap=False, moe_a2a_backend="none", disable_attn_tp_gather=False)
    model_config = types.SimpleNamespace(spec_hidden_size=H * D, hidden_size=H * D, vocab_size=VOCAB,
                                         dtype=torch.float32, hf_config=types.SimpleNamespace())
    draft_runner = types.SimpleNamespace(
        server_args=server_args, tp_size=1, dp_size=1, device="cpu", attn_backend=backend, model_config=model_config,
        model=_Model(backend), canary_manager=None, device_timer=None,
        spec_algorithm=types.SimpleNamespace(is_eagle=lambda: True, is_standalone=lambda: False))
    worker = types.SimpleNamespace(
        draft_runner=draft_runner, draft_extend_attn_backend=backend, eagle_use_aux_hidden_state=False,
        target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(model_config=model_config)),
        speculative_algorithm=types.SimpleNamespace(is_eagle3=lambda: False, is_standalone=lambda: False))
    zeros = torch.zeros
    # the backend's init_cuda_graph_state (called by the runner) allocates on "cuda"
    with unittest.mock.patch("torch.zeros", lambda *a, device=None, **k: zeros(*a, **k)):
        return cls(worker)


def _scenario(which, width):
    """One scenario in this interpreter: "stock", "patched", "variable-width", "unmarked", "sliding-window", "fast"
    or "fast-no-mirror"."""
    import sglang.srt.layers.attention.flashinfer_backend as fb
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput

    from sglang_specv2_fixes.fixes import flashinfer_draft_extend_graph as fix

    topk = 1 if width == STEPS + 1 else 4
    accept = [1, 3] if topk == 1 else [3, 5]  # accept_lens of the verify before this draft extend
    torch.manual_seed(0)
    backend, pool, req_pool = _backend(max(CAPTURE_BS), sliding_window=4 if which == "sliding-window" else None)
    if which != "stock":
        fns = core.build_fix(FIX_NAME)
        for target, fn in fns.items():
            if target in TARGETS:
                setattr(fb.FlashInferAttnBackend, target.rsplit(".", 1)[1], fn)
        fb.FlashInferIndicesUpdaterPrefill.call_begin_forward = fns[fix.PLAN_TARGET]
        if which != "unmarked":
            backend.__dict__[fix.GRAPH_WIDTH] = width  # what flashinfer_graph_backends does when it allows the graph
    if which.startswith("fast"):  # SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=1: what plan_decision marks
        from test_fix_flashinfer_draft_extend_graph import track_host_layout

        backend.__dict__[fix.FAST_PLAN] = True
        track_host_layout(fix)
    if which == "variable-width":  # the branch without #28782's constant query layout: the plan gets the accepted
        # lengths the runner copied, in the class it captured with (the worker's draft input has no plan method)
        fix.fixed_width_spec_info = lambda spec_info, bs, width=None: EagleDraftExtendInput(
            hidden_states=spec_info.hidden_states, num_accept_tokens=spec_info.num_accept_tokens,
            num_correct_drafts=spec_info.num_correct_drafts)
    try:
        runner = _runner(backend, width, topk)
    except (ValueError, TypeError) as e:
        return dict(capture_error=f"{type(e).__name__}: {e}")
    wrapper = backend.draft_extend_cuda_graph_metadata[max(CAPTURE_BS)][0]
    capture_plan = wrapper.plans[0]

    # the draft extend _draft_extend_for_decode hands the runner (prepare_for_extend_to_fill_draft_kvcache's
    # forward batch): width rows per request, seq_lens = prefix + width, the worker's EagleDraftInput with the
    # accept lengths
    k_buf, v_buf = pool.get_key_buffer(0), pool.get_value_buffer(0)
    k_buf.copy_(torch.randn_like(k_buf))
    v_buf.copy_(torch.randn_like(v_buf))
    for r, p in zip(ROWS, PREFIX):
        req_pool.req_to_token[r, : p + width] = torch.arange(p + width, dtype=torch.int32) + 1 + 60 * r
    raw_bs, n = len(ROWS), len(ROWS) * width
    seq_lens = torch.tensor(PREFIX, dtype=torch.int64) + width
    input_ids = torch.randint(0, VOCAB, (n,))
    positions = torch.cat([torch.arange(p, p + width) for p in PREFIX])
    out_cache_loc = torch.cat([req_pool.req_to_token[r, p : p + width].long() for r, p in zip(ROWS, PREFIX)])
    accept_t = torch.tensor(accept, dtype=torch.int32)
    spec = EagleDraftInput(hidden_states=torch.zeros(n, H * D), num_tokens_per_req=width,
                           num_tokens_for_logprob_per_req=width)
    spec.num_correct_drafts, spec.num_accept_tokens = accept_t - 1, accept_t
    mirror = which != "fast-no-mirror"  # prepare_for_extend_to_fill_draft_kvcache's GPU-only path: neither
    forward_batch = types.SimpleNamespace(
        forward_mode=ForwardMode.DRAFT_EXTEND_V2, batch_size=raw_bs, input_ids=input_ids, positions=positions,
        seq_lens=seq_lens, seq_lens_cpu=seq_lens.clone() if mirror else None,
        seq_lens_sum=int(seq_lens.sum()) if mirror else None,
        req_pool_indices=torch.tensor(ROWS), out_cache_loc=out_cache_loc, extend_seq_lens=None,
        extend_seq_lens_cpu=[width] * raw_bs, spec_info=spec)
    assert runner.can_run(forward_batch)
    out = runner.replay(forward_batch)
    replay_plan = backend.draft_extend_cuda_graph_metadata[3][0].plans[-1]

    # reference: causal attention of each row over its request's prefix and extend rows up to itself
    q, k, v = runner.model_runner.model.qkv(input_ids, positions)
    errs = causal_errors(out.hidden_states.view(-1, H, D), q, pool, req_pool, ROWS, PREFIX, width)
    keep = [float((out.next_token_logits[i] - out.hidden_states[i] @ runner.model_runner.model.w).abs().max())
            for i in range(n)]
    return dict(capture=capture_plan, replay=replay_plan, errs=errs, rows=out.hidden_states.shape[0],
                logits_consistent=max(keep) < 1e-4, caller_accept=spec.num_accept_tokens.tolist(), accept=accept,
                plans=dict(fix.PLANS))


CHAIN, TREE = STEPS + 1, 8


@pytest.fixture(scope="module")
def results():
    cases = [("stock", TREE), ("patched", CHAIN), ("patched", TREE), ("variable-width", TREE), ("unmarked", TREE),
             ("sliding-window", TREE), ("fast", CHAIN), ("fast", TREE), ("fast-no-mirror", TREE)]
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "all"], capture_output=True, text=True,
                       timeout=900, cwd=ROOT, env=child_env(TRITON_INTERPRET="1"))
    assert p.returncode == 0, p.stderr[-4000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert sorted(out) == sorted(f"{w}-{n}" for w, n in cases)
    return out


def test_stock_has_no_draft_extend_v2_graph_metadata(results):
    assert "ValueError: Invalid mode" in results[f"stock-{TREE}"]["capture_error"]


@pytest.mark.parametrize("width", [CHAIN, TREE], ids=["chain", "tree"])
def test_patched_graph_constant_layout_and_causal_attention(results, width):
    r = results[f"patched-{width}"]
    # capture (largest batch size first) and replay (raw bs 2 padded to 3) plan the constant width
    assert r["capture"]["qo_indptr"] == [width * i for i in range(max(CAPTURE_BS) + 1)]
    assert r["replay"]["qo_indptr"] == [0, width, 2 * width, 3 * width]
    # paged KV over prefix + the extend rows (already in the pool); the padded row keeps its fill-value length 1
    lens = [p + width for p in PREFIX]
    assert r["replay"]["kv_indptr"] == [0, lens[0], lens[0] + lens[1], lens[0] + lens[1] + 1]
    assert r["replay"]["kv_indices"][: sum(lens)] == [
        s for row, n in zip(ROWS, lens) for s in range(60 * row + 1, 60 * row + 1 + n)]
    assert r["rows"] == len(ROWS) * width and r["logits_consistent"]
    assert len(r["errs"]) == len(ROWS) * width and max(r["errs"]) < 1e-4
    # the runner itself points the draft input at its padded buffers; the plan's constant width is a copy
    assert r["caller_accept"] == r["accept"] + [width], "the worker's draft input lost its accept lengths"


def test_variable_width_layout_reads_the_wrong_queries(results):
    bad = results[f"variable-width-{TREE}"]
    accept = bad["accept"]
    assert bad["replay"]["qo_indptr"] == [0, accept[0], sum(accept), sum(accept) + TREE]
    assert max(bad["errs"]) > 0.1


def test_unmarked_backend_keeps_stock_error(results):
    """multi-layer EAGLE's draft-extend runner captures DRAFT_EXTEND_V2 on every backend; the plugin's branch serves
    only the graph its rule let capture, so that runner still gets stock's error on flashinfer."""
    assert "ValueError: Invalid mode" in results[f"unmarked-{TREE}"]["capture_error"]


def test_sliding_window_cannot_plan_the_graph_metadata(results):
    """Why flashinfer_graph_reason keeps two-wrapper backends eager: this release's update_sliding_window needs the
    extend's prefix lengths, and the DRAFT_EXTEND_V2 graph metadata passes prefix_lens=None (as upstream's does)."""
    assert results[f"sliding-window-{TREE}"]["capture_error"].startswith("TypeError")


@pytest.mark.parametrize("width", [CHAIN, TREE], ids=["chain", "tree"])
def test_fast_plan_gets_host_indptrs(results, width):
    """SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=1 through the real runner's replay: host tensors of the exact layout
    (0.5.14's fast_prefill_plan: qo = arange * width, kv = cumsum of seq_lens_cpu), the device kernel's kv indices
    (equal to the stock-plan graph's), right rows; the capture plans as stock."""
    fast, stock = results[f"fast-{width}"], results[f"patched-{width}"]
    check_fast_plan_replay(fast, stock, width, PREFIX)
    assert stock["replay"]["host"] == [False, False, False] and stock["plans"] == {}  # the switch off
    assert len(fast["errs"]) == len(ROWS) * width and max(fast["errs"]) < 1e-4 and fast["logits_consistent"]


def test_fast_plan_refuses_the_runners_stale_buffer(results):
    """A draft extend without a host mirror (0.5.13's GPU-only path): the real runner still passes its own host buffer
    (never refreshed here: the fill values). The plan refuses it - its sum is not the replay's (None) - and plans as
    stock."""
    r = results[f"fast-no-mirror-{TREE}"]
    assert r["replay"]["host"] == [False, False, False] and r["replay"]["seq_lens"] is None
    assert r["replay"]["kv_indptr"] == results[f"patched-{TREE}"]["replay"]["kv_indptr"]
    assert max(r["errs"]) < 1e-4
    assert r["plans"] == {"flashinfer: seq_lens_cpu does not sum to the replay's seq_lens_sum": 1}


# ------------------------------------------------------------------ the capture decision (in process)
def _fi_backend(num_wrappers=1):
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    b = FlashInferAttnBackend.__new__(FlashInferAttnBackend)  # the class the release tests; no CUDA state needed
    b.num_wrappers, b.use_sliding_window_kv_pool = num_wrappers, False
    return b


def _triton_backend():
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    return TritonAttnBackend.__new__(TritonAttnBackend)


def _init_cuda_graphs(monkeypatch, fn, backend, width, cuda=True, token_map=None):
    """Call ``fn`` (stock or patched init_cuda_graphs) on an EagleDraftWorker-shaped object; returns the runners it
    built and the scheduler's server_args (the target worker's: /server_info reads them)."""
    mod = importlib.import_module(WORKER_MOD)
    built = []

    def recorder(kind):
        return lambda worker: built.append(kind) or kind

    monkeypatch.setattr(mod, "_is_cuda", cuda)
    monkeypatch.setattr(mod, "EAGLEDraftCudaGraphRunner", recorder("draft"))
    monkeypatch.setattr(mod, "EAGLEDraftExtendCudaGraphRunner", recorder("draft_extend"))
    monkeypatch.setattr(mod, "get_available_gpu_memory", lambda *a, **k: 0.0)
    server_args = types.SimpleNamespace(
        speculative_eagle_topk=1 if width == CHAIN else 4, speculative_num_steps=STEPS,
        speculative_num_draft_tokens=width, disable_cuda_graph=False, model_impl="auto",
        speculative_token_map=token_map, attention_backend="flashinfer")
    worker = types.SimpleNamespace(
        server_args=server_args, speculative_num_steps=STEPS, speculative_num_draft_tokens=width,
        topk=server_args.speculative_eagle_topk, draft_extend_attn_backend=backend, draft_attn_backend=None,
        target_worker=types.SimpleNamespace(device="cuda", server_args=server_args), device="cuda", gpu_id=0)
    fn(worker)
    return built, server_args


def _stock():
    return importlib.import_module(WORKER_MOD).EagleDraftWorker.init_cuda_graphs


def _patched():
    (fn,) = [f for t, f in core.build_fix(FIX_NAME).items() if t.endswith("EagleDraftWorker.init_cuda_graphs")]
    return fn


def _metadata(monkeypatch, patched, plan=True):
    """The fix's graph metadata on FlashInferAttnBackend (as the plugin registers it; with ``plan`` its
    ``FlashInferIndicesUpdaterPrefill.call_begin_forward`` too), or stock's."""
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend, FlashInferIndicesUpdaterPrefill

    from sglang_specv2_fixes.fixes.flashinfer_draft_extend_graph import PLAN_TARGET, metadata_targets

    if patched:
        fns = core.build_fix(FIX_NAME)
        for target, fn in fns.items():
            if target in TARGETS:
                monkeypatch.setattr(FlashInferAttnBackend, target.rsplit(".", 1)[1], fn)
        if plan:
            monkeypatch.setattr(FlashInferIndicesUpdaterPrefill, "call_begin_forward", fns[PLAN_TARGET])
    assert metadata_targets() == TARGETS
    assert all(core.is_patched(t) for t in TARGETS) == patched


def _env(monkeypatch, name, value):
    if value is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("width", [CHAIN, TREE], ids=["chain", "tree"])
def test_stock_runs_flashinfer_draft_extend_eagerly(monkeypatch, width):
    built, _ = _init_cuda_graphs(monkeypatch, _stock(), _fi_backend(), width)
    assert built == ["draft"]  # the draft decode graph, no draft-extend graph: the bug
    built, _ = _init_cuda_graphs(monkeypatch, _stock(), _triton_backend(), width)
    assert built == ["draft", "draft_extend"]  # the recorders do reach the draft-extend step


@pytest.mark.parametrize("fi_env,tree_env,width,kw,captured,why", [
    (None, None, CHAIN, {}, True, None),  # on by default
    (None, None, TREE, {}, True, None),
    ("0", None, CHAIN, {}, True, None),  # the old off switch is gone: no effect (the "not applied" row is auto,-NAME)
    ("1", None, CHAIN, {}, True, None),
    ("on", None, TREE, {}, True, None),
    ("1", "0", TREE, {}, False, "turned off by SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=0"),
    ("1", "0", CHAIN, {}, True, None),  # the tree switch leaves chains alone
    ("1", None, TREE, {"metadata": False}, False, "flashinfer-draft-extend-graph is not applied"),
    ("1", None, CHAIN, {"token_map": "/m/token_map.pt"}, False, "FR-Spec (--speculative-token-map)"),
    ("1", None, TREE, {"num_wrappers": 2}, False, "two flashinfer wrappers (sliding window / cross attention)"),
])
def test_plugin_flashinfer_graph_decision(monkeypatch, fi_env, tree_env, width, kw, captured, why):
    from sglang_specv2_fixes.fixes.flashinfer_draft_extend_graph import GRAPH_WIDTH, graph_width

    _env(monkeypatch, OLD_SWITCH, fi_env)
    _env(monkeypatch, selection.ENV_TREE_GRAPH, tree_env)
    _env(monkeypatch, selection.ENV_FLASHINFER_FAST_PLAN, "0")  # the plan's part: test_plugin_fast_plan_decision
    _metadata(monkeypatch, kw.get("metadata", True))
    backend = _fi_backend(kw.get("num_wrappers", 1))
    built, server_args = _init_cuda_graphs(monkeypatch, _patched(), backend, width, token_map=kw.get("token_map"))
    decision = plugin.serving_facts(server_args)["draft_extend_graph"]
    if captured:
        assert built == ["draft", "draft_extend"]
        assert decision == f"cuda graph (flashinfer), {width} tokens per request"
        assert graph_width(backend) == width  # what the patched metadata reads
    else:
        assert built == ["draft"] and GRAPH_WIDTH not in backend.__dict__
        assert decision.startswith("eager: ") and why in decision, decision


_SYNC_FREE = ", sync-free plan (host-known indptrs)"
_NO_PLAN = (", flashinfer's own plan: flashinfer-draft-extend-graph's call_begin_forward is not applied: it hands the "
            "plan the host layout")
_NO_MIRROR = (", flashinfer's own plan: the backend does not ask the scheduler for seq_lens_cpu "
              "(needs_cpu_seq_lens False)")


@pytest.mark.parametrize("fast_env,kw,suffix", [
    (None, {}, _SYNC_FREE),  # the default for chains and trees
    (None, {"needs_cpu_seq_lens": False}, _NO_MIRROR),
    ("0", {}, ""),  # flashinfer's own plan; the decision reads as before the switch existed
    ("1", {}, _SYNC_FREE),
    ("1", {"plan": False}, _NO_PLAN),
    ("1", {"needs_cpu_seq_lens": False}, _NO_MIRROR),
])
def test_plugin_fast_plan_decision(monkeypatch, fast_env, kw, suffix):
    """SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN (on unless 0), chain and tree alike: where it applies, the captured
    graph's decision says which plan its replays take and the backend is marked for the host layout only where it is
    sync-free; this release's scheduler publishes seq_lens_cpu for a backend that needs it
    (FutureMap.needs_cpu_seq_lens), which flashinfer does unless it says otherwise."""
    from sglang_specv2_fixes.fixes.flashinfer_draft_extend_graph import FAST_PLAN

    monkeypatch.delenv(OLD_SWITCH, raising=False)
    _env(monkeypatch, selection.ENV_FLASHINFER_FAST_PLAN, fast_env)
    _metadata(monkeypatch, True, plan=kw.get("plan", True))
    for width in (CHAIN, TREE):
        backend = _fi_backend()
        if "needs_cpu_seq_lens" in kw:
            backend.needs_cpu_seq_lens = kw["needs_cpu_seq_lens"]
        built, server_args = _init_cuda_graphs(monkeypatch, _patched(), backend, width)
        assert built == ["draft", "draft_extend"]
        facts = plugin.serving_facts(server_args)
        assert facts["draft_extend_graph"] == f"cuda graph (flashinfer), {width} tokens per request{suffix}"
        assert backend.__dict__.get(FAST_PLAN, False) == suffix.startswith(", sync-free")
        assert facts["draft_extend_plans"] is None  # no replay in this process


def test_plugin_leaves_triton_and_non_cuda_as_stock(monkeypatch):
    monkeypatch.setenv(OLD_SWITCH, "1")
    _metadata(monkeypatch, True)
    for width in (CHAIN, TREE):
        stock, _ = _init_cuda_graphs(monkeypatch, _stock(), _triton_backend(), width)
        ours, server_args = _init_cuda_graphs(monkeypatch, _patched(), _triton_backend(), width)
        assert ours == stock == ["draft", "draft_extend"]
        assert plugin.serving_facts(server_args)["draft_extend_graph"] is None
    ours, server_args = _init_cuda_graphs(monkeypatch, _patched(), _fi_backend(), TREE, cuda=False)
    assert "draft_extend" not in ours and plugin.serving_facts(server_args)["draft_extend_graph"] is None


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sglang_specv2_fixes.testing import standins

    standins.use_sgl_kernel_stand_in()
    if sys.argv[1] == "all":
        out = {}
        for which, width in (("stock", 8), ("patched", STEPS + 1), ("patched", 8), ("variable-width", 8),
                             ("unmarked", 8), ("sliding-window", 8), ("fast", STEPS + 1), ("fast", 8),
                             ("fast-no-mirror", 8)):
            # each scenario on a pristine class / module: reload what the scenarios patch
            for name in (FI_MOD, RUNNER_MOD):
                importlib.reload(sys.modules[name]) if name in sys.modules else importlib.import_module(name)
            importlib.reload(importlib.import_module("sglang_specv2_fixes.fixes.flashinfer_draft_extend_graph"))
            out[f"{which}-{width}"] = _scenario(which, width)
        print(json.dumps(out))
    else:
        print(json.dumps(_scenario(sys.argv[1], int(sys.argv[2]))))
