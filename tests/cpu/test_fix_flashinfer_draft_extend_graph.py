"""#28782 flashinfer-draft-extend-graph on 0.5.11 / 0.5.12.x (patches/flashinfer-draft-extend-graph/0.5.11.patch):
flashinfer's spec-v2 draft-extend CUDA-graph metadata at tree width, on the release's real ``FlashInferAttnBackend``
(stock vs patched). 0.5.13.x (the init_forward_metadata_out_graph API): test_fix_flashinfer_draft_extend_graph_0513.py.

Runs in a fresh interpreter with ``TRITON_INTERPRET=1`` (the release's real ``create_flashinfer_kv_indices_triton``
runs on CPU). flashinfer itself does not import on CPU, so its three wrapper classes are replaced in the backend's
module by stand-ins that keep flashinfer's CUDA-graph plan contract (a plan copies ``qo_indptr`` / ``kv_indptr`` /
``kv_indices`` into the buffers the wrapper was built on; the batch size is fixed; a replay may not plan more query
rows than the capture did) and whose ``forward`` computes flashinfer's batch paged prefill from those buffers (causal:
each request's queries aligned to the end of its KV). Everything else is SGLang's: the backend's ``__init__`` (from a
model-runner stand-in holding a real ``ReqToTokenPool`` / ``MHATokenToKVPool`` on CPU) and ``init_cuda_graph_state``,
``FlashInferIndicesUpdaterPrefill``, ``EagleDraftInput.generate_attn_arg_prefill`` and ``forward_extend``.

The scenario is a tree's draft extend as tree-drafting's ``EAGLEDraftExtendCudaGraphRunner`` runs it (steps 3, 8
draft tokens per request, raw bs 2 padded to 3): capture with the runner's buffers (``seq_lens`` at the fill value,
``num_accepted_*`` at the width), then replay with ``seq_lens = prefix + 8`` and the spec info of
``_draft_extend_for_decode`` (``num_accepted_tokens`` = the accept lengths 3 and 5, padded with the width as the
runner does), then the graph body's attention (``forward_extend``: writes the 8 rows' K/V, runs the paged prefill).

* stock: the capture raises "Invalid mode" (no DRAFT_EXTEND_V2 branch: flashinfer's draft extend is eager);
* patched: ``qo_indptr`` [0, 8, 16, 24] at capture and replay, ``kv_indptr`` over prefix + extend, every row equal to
  causal attention over the prefix and the draft rows up to itself; the caller's spec info is left as it was;
* patched without the constant width (``fixed_width_spec_info`` as the identity): the replay plans the accept
  lengths' layout [0, 3, 8, 16] and the rows of request 1 read request 0's queries - what the width part prevents;
* spec v1's DRAFT_EXTEND through the patched functions: the accepted-length layout, as stock;
* a chain's draft extend (4 = steps + 1 rows per request, accept lengths 2 and 4): the same as the tree's at its
  width.

The sync-free plan (the default; SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=0 turns it off; the fix's patched
``call_begin_forward`` of ``FlashInferIndicesUpdaterPrefill`` runs in every patched scenario, the backend marked as
``plan_decision`` marks it). The wrapper stand-in records whether each indptr its plan got is one of the host tensors
the fix built (``host_layout``, tracked by storage) or what the release's device path computed:

* fast: the replay's plan gets host ``qo_indptr`` = arange * 8, ``paged_kv_indptr`` = cumsum of the lengths,
  ``paged_kv_last_page_len`` = ones and those lengths as ``seq_lens``; the capture's plan is stock; the kv indices
  (the device kernel's) and every attention row equal the stock-plan graph's; counted "sync-free";
* patched (the switch off: backend unmarked), and marked with ``seq_lens_cpu`` None, one shorter than the batch, or
  stale (its sum is not the replay's ``seq_lens_sum``): every indptr from the device path, no ``seq_lens``, attention
  right, the refusal counted with its reason;
* why nothing is guessed: a mirror with the replay's sum but other lengths than the device's (one row moved from
  request 1 to request 0) is taken, plans a wrong ``kv_indptr`` and the rows read the wrong keys, silently. The sum
  is only a second check; that ``seq_lens_cpu`` is the device lengths' mirror comes from where the release sets it
  (``fast_plan_reason``).
"""

import json
import os
import subprocess
import sys
import types

import pytest
from conftest import LINE, ROOT, check_fast_plan_replay, child_env, patched_here, requires_sglang, where_patched

from sglang_specv2_fixes import releases
from sglang_specv2_fixes.testing.causal_ref import D, H, KVH, causal_errors

FIX_NAME = "flashinfer-draft-extend-graph"

pytestmark = [requires_sglang, where_patched(FIX_NAME, "flashinfer's DRAFT_EXTEND_V2 graph metadata"),
              pytest.mark.skipif(patched_here(FIX_NAME) and releases.entry(FIX_NAME, LINE).name != "0.5.11",
                                 reason="the capture / replay metadata API of 0.5.11 / 0.5.12.x; 0.5.13.x: "
                                        "test_fix_flashinfer_draft_extend_graph_0513.py"),
              pytest.mark.release_scoped]

# the host layouts the fix built in this process (track_host_layout), kept alive: a freed storage's address can come
# back for a later, unrelated tensor
HOST_LAYOUTS = []


def host_built(t) -> bool:
    """Whether tensor ``t`` lives in the storage of a host layout the fix built (HOST_LAYOUTS)."""
    ptr = t.untyped_storage().data_ptr()
    return any(ptr == h.untyped_storage().data_ptr() for layout in HOST_LAYOUTS for h in layout)
STEPS, TREE_ND = 3, 8
PREFIX = [5, 9]
ACCEPT = [3, 5]  # accept_lens of the verify before this draft extend
CHAIN_ACCEPT = [2, 4]  # a chain's (steps + 1 = 4 draft tokens)
CAPTURE_BS = 3
MAX_BS, CTX = 4, 32
TARGETS = (
    "sglang.srt.layers.attention.flashinfer_backend.FlashInferAttnBackend.init_forward_metadata_capture_cuda_graph",
    "sglang.srt.layers.attention.flashinfer_backend.FlashInferAttnBackend.init_forward_metadata_replay_cuda_graph",
)


# ------------------------------------------------------------------ the scenario (child interpreter)
class _PagedPrefill:
    """flashinfer.BatchPrefillWithPagedKVCacheWrapper as far as SGLang uses it here (page size 1, NHD)."""

    def __init__(self, workspace, layout, use_cuda_graph=False, backend="auto", qo_indptr_buf=None,
                 paged_kv_indptr_buf=None, paged_kv_indices_buf=None, paged_kv_last_page_len_buf=None,
                 custom_mask_buf=None, mask_indptr_buf=None):
        self.use_cuda_graph, self._backend = use_cuda_graph, backend
        self.qo_indptr_buf, self.kv_indptr_buf, self.kv_indices_buf = qo_indptr_buf, paged_kv_indptr_buf, \
            paged_kv_indices_buf
        self.max_total_rows, self.plans = None, []

    def begin_forward(self, qo_indptr, kv_indptr, kv_indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
                      page_size, custom_mask=None, seq_lens=None, **kwargs):
        assert page_size == 1 and custom_mask is None
        if self.use_cuda_graph:  # flashinfer's plan contract in CUDA-graph mode
            assert len(qo_indptr) == len(self.qo_indptr_buf), "batch size differs from the captured one"
            rows = int(qo_indptr[-1])
            if self.max_total_rows is None:
                self.max_total_rows = rows
            assert rows <= self.max_total_rows, "more query rows than the graph was captured with"
            self.qo_indptr_buf.copy_(qo_indptr)
            self.kv_indptr_buf.copy_(kv_indptr)
            self.kv_indices_buf[: len(kv_indices)].copy_(kv_indices)
        else:
            self.qo_indptr_buf, self.kv_indptr_buf, self.kv_indices_buf = qo_indptr, kv_indptr, kv_indices
        self.plans.append(dict(
            qo_indptr=qo_indptr.tolist(), kv_indptr=kv_indptr.tolist(), kv_indices=kv_indices[: int(kv_indptr[-1])].tolist(),
            last_page_len=last_page_len.tolist(), seq_lens=None if seq_lens is None else seq_lens.tolist(),
            # qo_indptr, kv_indptr, last_page_len: a host tensor of the fix's layout, or the device path's
            host=[host_built(t) for t in (qo_indptr, kv_indptr, last_page_len)]))

    def forward(self, q, kv_cache, causal=True, sm_scale=None, **kwargs):
        import torch

        k_buf, v_buf = kv_cache
        out = torch.zeros_like(q)
        qo, kv, idx = self.qo_indptr_buf, self.kv_indptr_buf, self.kv_indices_buf
        for b in range(len(qo) - 1):
            q0, q1, k0, k1 = int(qo[b]), int(qo[b + 1]), int(kv[b]), int(kv[b + 1])
            slots = idx[k0:k1].long()
            keys, vals = k_buf[slots], v_buf[slots]  # [kv_len, KVH, D]
            for i in range(q1 - q0):
                visible = (k1 - k0) - (q1 - q0) + i + 1 if causal else k1 - k0
                if visible <= 0:
                    continue
                att = torch.softmax((q[q0 + i][:, None, :] * keys[:visible].transpose(0, 1)).sum(-1) * sm_scale, -1)
                out[q0 + i] = (att[:, :, None] * vals[:visible].transpose(0, 1)).sum(1)
        return out


def track_host_layout(fix):
    """Keep every host layout ``fix.host_layout`` returns in this process (HOST_LAYOUTS), wrapping it once however
    often this is called. Kept alive: the per-replay kv buffer of one scenario is freed otherwise, and the allocator
    may hand its address to a later scenario's capture-time indptr, which would then read as host-built (a CI run on
    0.5.13 saw exactly that for the tree capture after the chain scenario)."""
    build = fix.host_layout
    if getattr(build, "_tracked", False):
        return

    def tracked(*args, **kwargs):
        layout, why = build(*args, **kwargs)
        if layout is not None:
            HOST_LAYOUTS.append(layout)
        return layout, why

    tracked._tracked = True
    fix.host_layout = tracked


class _Other:
    def __init__(self, *args, **kwargs):
        pass


def _backend():
    import unittest.mock

    import torch

    import sglang.srt.layers.attention.flashinfer_backend as fb
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    fb.BatchPrefillWithPagedKVCacheWrapper = _PagedPrefill
    fb.BatchPrefillWithRaggedKVCacheWrapper = fb.BatchDecodeWithPagedKVCacheWrapper = _Other
    fb.get_attention_tp_size = lambda: 1  # no parallel state in this process
    pool = MHATokenToKVPool(size=256, page_size=1, dtype=torch.float32, head_num=KVH, head_dim=D, layer_num=1,
                            device="cpu", enable_memory_saver=False)
    req_pool = ReqToTokenPool(size=MAX_BS + 1, max_context_len=CTX, device="cpu", enable_memory_saver=False)
    runner = types.SimpleNamespace(  # the ModelRunner attributes FlashInferAttnBackend.__init__ reads
        req_to_token_pool=req_pool, token_to_kv_pool=pool, token_to_kv_pool_allocator=None, sliding_window_size=None,
        device="cpu", kv_cache_dtype=torch.float32, dtype=torch.float32,
        server_args=types.SimpleNamespace(enable_mis=False, enable_deterministic_inference=False,
                                          disable_piecewise_cuda_graph=True, dllm_algorithm=None),
        model_config=types.SimpleNamespace(
            num_attention_heads=H, get_num_kv_heads=lambda tp: KVH, head_dim=D, context_len=CTX,
            is_multimodal=False, is_encoder_decoder=False, hf_config=types.SimpleNamespace(architectures=["X"])),
    )
    backend = fb.FlashInferAttnBackend(runner, skip_prefill=False)
    zeros = torch.zeros
    with unittest.mock.patch("torch.zeros", lambda *a, device=None, **k: zeros(*a, **k)):  # it allocates on "cuda"
        backend.init_cuda_graph_state(MAX_BS, MAX_BS * TREE_ND)
    return backend, pool, req_pool


def _scenario(which):
    import torch

    import sglang.srt.layers.attention.flashinfer_backend as fb
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import eagle_info
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    from sglang_specv2_fixes import core
    from sglang_specv2_fixes.fixes import flashinfer_draft_extend_graph as fix

    # a tree's extend (8 rows per request), or a chain's (steps + 1 = num_draft_tokens rows: the stock runner's width)
    nd, accept_lens = (STEPS + 1, CHAIN_ACCEPT) if which == "patched-chain" else (TREE_ND, ACCEPT)
    torch.manual_seed(0)
    backend, pool, req_pool = _backend()
    cls = fb.FlashInferAttnBackend
    if which == "stock":
        capture, replay = cls.init_forward_metadata_capture_cuda_graph, cls.init_forward_metadata_replay_cuda_graph
    else:
        fns = core.build_fix(FIX_NAME)
        capture, replay = (fns[t] for t in TARGETS)
        fb.FlashInferIndicesUpdaterPrefill.call_begin_forward = fns[fix.PLAN_TARGET]
    if which.startswith("fast"):  # SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=1: what plan_decision marks
        backend.__dict__[fix.FAST_PLAN] = True
        track_host_layout(fix)
    fix.draft_extend_width = lambda: nd  # the global server args' speculative_num_draft_tokens
    mode = ForwardMode.DRAFT_EXTEND_V2 if which != "patched-v1" else ForwardMode.DRAFT_EXTEND

    rows = [1, 2]
    for r, p in zip(rows, PREFIX):
        req_pool.req_to_token[r, : p + nd] = torch.arange(p + nd, dtype=torch.int32) + 1 + 40 * r
    k_buf, v_buf = pool.get_key_buffer(0), pool.get_value_buffer(0)
    k_buf.copy_(torch.randn_like(k_buf))
    v_buf.copy_(torch.randn_like(v_buf))

    # the runner's graph input buffers at tree width (tree-drafting's EAGLEDraftExtendCudaGraphRunner.__init__)
    seq_lens = torch.full((MAX_BS,), backend.get_cuda_graph_seq_len_fill_value(), dtype=torch.int32)
    req_pool_indices = torch.zeros(MAX_BS, dtype=torch.int64)
    num_accepted_drafts = torch.full((MAX_BS,), nd, dtype=torch.int32)
    num_accepted_tokens = torch.full((MAX_BS,), nd, dtype=torch.int32)
    hidden = torch.zeros(MAX_BS * nd, 4)
    tokens, drafts = fix.accept_fields(EagleDraftInput)  # 0.5.12 renamed them num_accept_tokens / num_correct_drafts
    # the runner's capture input: EagleDraftInput on 0.5.11, EagleDraftExtendInput on 0.5.12.x
    capture_cls = getattr(eagle_info, "EagleDraftExtendInput", EagleDraftInput)
    if which == "patched-variable-width":  # the branches without #28782's constant query layout: the plan gets the
        # accepted lengths the runner copied (in the class it captured with: 0.5.12's worker input has no plan method)
        fix.fixed_width_spec_info = lambda spec_info, bs, width=None: capture_cls(
            hidden_states=spec_info.hidden_states, **{tokens: getattr(spec_info, tokens), drafts: getattr(spec_info, drafts)})
    spec = capture_cls(hidden_states=hidden[: CAPTURE_BS * nd], **{
        drafts: num_accepted_drafts[:CAPTURE_BS], tokens: num_accepted_tokens[:CAPTURE_BS]})
    try:
        capture(backend, bs=CAPTURE_BS, num_tokens=CAPTURE_BS * nd, req_pool_indices=req_pool_indices[:CAPTURE_BS],
                seq_lens=seq_lens[:CAPTURE_BS], encoder_lens=None, forward_mode=mode, spec_info=spec)
    except ValueError as e:
        return dict(capture_error=str(e))
    meta = backend.forward_metadata
    (wrapper,) = meta.prefill_wrappers
    assert backend.prefill_cuda_graph_metadata[CAPTURE_BS] is meta.prefill_wrappers

    # replay: _draft_extend_for_decode's spec info, the runner's copies into its buffers (raw bs 2 padded to 3)
    raw_bs = len(rows)
    accept = torch.tensor(accept_lens, dtype=torch.int32)
    seq_lens[:raw_bs] = torch.tensor(PREFIX, dtype=torch.int32) + nd  # prepare_for_extend_to_fill_draft_kvcache
    req_pool_indices[:raw_bs] = torch.tensor(rows)
    num_accepted_drafts[:raw_bs], num_accepted_tokens[:raw_bs] = accept - 1, accept
    # spec v2: _draft_extend_for_decode's EagleDraftInput; spec v1 (DRAFT_EXTEND): the class the runner captured with
    replay_cls = EagleDraftInput if mode == ForwardMode.DRAFT_EXTEND_V2 else capture_cls
    spec = replay_cls(hidden_states=hidden[: raw_bs * nd], num_tokens_per_req=STEPS + 1,
                      num_tokens_for_logprob_per_req=STEPS + 1)
    setattr(spec, drafts, num_accepted_drafts[:CAPTURE_BS])
    setattr(spec, tokens, num_accepted_tokens[:CAPTURE_BS])
    # the runner's host mirror (its buffer, padded at the fill value like the device one) and the replay's sum
    seq_lens_cpu, seq_lens_sum = seq_lens.clone(), int(seq_lens[:CAPTURE_BS].sum())
    if which == "fast-no-cpu":
        seq_lens_cpu = None
    elif which == "fast-short":  # a mirror of the raw batch only: fewer entries than the padded batch
        seq_lens_cpu = seq_lens_cpu[:raw_bs]
    elif which == "fast-stale":  # a mirror one step behind on the real rows
        seq_lens_cpu[:raw_bs] += 1
    elif which == "fast-same-sum":  # other lengths with the replay's sum: nothing left to refuse it
        seq_lens_cpu[0] += 1
        seq_lens_cpu[1] -= 1
    replay(backend, bs=CAPTURE_BS, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
           seq_lens_sum=seq_lens_sum, encoder_lens=None, forward_mode=mode, spec_info=spec,
           seq_lens_cpu=seq_lens_cpu)
    caller_untouched = getattr(spec, tokens).tolist() == accept_lens + [nd]

    # the graph body's attention: forward_extend with the captured metadata (the buffers now hold the replay plan)
    n = CAPTURE_BS * nd
    out_cache_loc = torch.zeros(n, dtype=torch.int64)
    for i, (r, p) in enumerate(zip(rows, PREFIX)):
        out_cache_loc[i * nd : (i + 1) * nd] = req_pool.req_to_token[r, p : p + nd]
    q, k, v = torch.randn(n, H * D), torch.randn(n, KVH, D), torch.randn(n, KVH, D)
    layer = RadixAttention(H, D, scaling=D**-0.5, num_kv_heads=KVH, layer_id=0)
    fb_ns = types.SimpleNamespace(token_to_kv_pool=pool, out_cache_loc=out_cache_loc, forward_mode=mode)
    backend.forward_metadata = meta
    o = backend.forward_extend(q, k, v, layer, fb_ns).view(n, H, D)
    errs = causal_errors(o, q, pool, req_pool, rows, PREFIX, nd)
    return dict(capture=wrapper.plans[0], replay=wrapper.plans[-1], errs=errs, caller_untouched=caller_untouched,
                plans=dict(fix.PLANS))


SCENARIOS = ("stock", "patched", "patched-variable-width", "patched-v1", "patched-chain", "fast", "fast-no-cpu",
             "fast-short", "fast-stale", "fast-same-sum")
FI_MOD = "sglang.srt.layers.attention.flashinfer_backend"


@pytest.fixture(scope="module")
def results():
    """Every scenario in one child interpreter (one import of the release), each on a pristine module."""
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "all"], capture_output=True, text=True,
                       timeout=900, cwd=ROOT, env=child_env(TRITON_INTERPRET="1"))
    assert p.returncode == 0, p.stderr[-4000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert sorted(out) == sorted(SCENARIOS)
    return out


def expected_indices(lens):
    return [s for r, n in zip((1, 2), lens) for s in range(40 * r + 1, 40 * r + 1 + n)]


def test_stock_has_no_draft_extend_v2_graph_metadata(results):
    assert "Invalid mode" in results["stock"]["capture_error"]


def _check_constant_width_graph(run, nd):
    """One captured-and-replayed graph of ``nd`` rows per request: that constant query layout at capture and replay,
    paged KV over prefix + the nd draft rows (already in the pool; the padded row keeps its fill-value length 1), rows
    equal to causal attention, and the caller's draft input untouched."""
    width = [0, nd, 2 * nd, 3 * nd]
    assert run["capture"]["qo_indptr"] == width and run["replay"]["qo_indptr"] == width
    lens = [p + nd for p in PREFIX]
    assert run["replay"]["kv_indptr"] == [0, lens[0], lens[0] + lens[1], lens[0] + lens[1] + 1]
    assert run["replay"]["kv_indices"][: sum(lens)] == expected_indices(lens)
    assert len(run["errs"]) == 2 * nd and max(run["errs"]) < 1e-4
    assert run["caller_untouched"], "the shared draft input's accept lengths were overwritten"


def test_patched_tree_width_layout_and_causal_attention(results):
    _check_constant_width_graph(results["patched"], TREE_ND)


def test_patched_chain_width_layout_and_causal_attention(results):
    """A chain's graph (tree-drafting's init_cuda_graphs captures it on these releases too): the same branches at the
    runner's steps + 1 rows per request, which is num_draft_tokens for a chain."""
    _check_constant_width_graph(results["patched-chain"], STEPS + 1)


def test_variable_width_layout_reads_the_wrong_queries(results):
    bad = results["patched-variable-width"]
    assert bad["replay"]["qo_indptr"] == [0, ACCEPT[0], sum(ACCEPT), sum(ACCEPT) + TREE_ND]
    assert max(bad["errs"]) > 0.1


def test_spec_v1_draft_extend_keeps_the_accepted_layout(results):
    v1 = results["patched-v1"]
    assert v1["replay"]["qo_indptr"] == [0, ACCEPT[0], sum(ACCEPT), sum(ACCEPT) + TREE_ND]


def test_fast_plan_gets_host_indptrs(results):
    """SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=1, seq_lens_cpu present: the replay's plan gets the fix's host tensors
    with the exact layout (0.5.14's fast_prefill_plan: qo = arange * width, kv = cumsum of seq_lens_cpu), the kv
    indices are the device kernel's (equal to the stock-plan graph's) and the rows are right; the capture plans as
    stock."""
    fast = results["fast"]
    check_fast_plan_replay(fast, results["patched"], TREE_ND, PREFIX)
    assert len(fast["errs"]) == 2 * TREE_ND and max(fast["errs"]) < 1e-4


@pytest.mark.parametrize("which,why", [
    ("patched", None),  # switch off: the backend is not marked, nothing counted
    ("fast-no-cpu", "flashinfer: no seq_lens_cpu"),
    ("fast-short", "flashinfer: seq_lens_cpu of shape (2,) on cpu for a batch of 3"),
    ("fast-stale", "flashinfer: seq_lens_cpu does not sum to the replay's seq_lens_sum"),
])
def test_fast_plan_refused_plans_as_stock(results, which, why):
    """Switch off, no host mirror, or one that cannot be the replay's: the stock plan (device indptrs, no seq_lens),
    right rows, and the refusal counted with its reason (a warning in the log)."""
    r = results[which]
    assert r["replay"]["host"] == [False, False, False] and r["replay"]["seq_lens"] is None
    assert r["replay"]["kv_indptr"] == results["patched"]["replay"]["kv_indptr"]
    assert max(r["errs"]) < 1e-4
    assert r["plans"] == ({why: 1} if why else {})


def test_wrong_host_lengths_corrupt_silently(results):
    """Why the plan never guesses: host lengths that are not the device's (here with the right sum, so the per-replay
    check passes) give a kv_indptr that disagrees with the device kv indices: the plan runs, the rows read the wrong
    keys."""
    bad = results["fast-same-sum"]
    assert bad["replay"]["host"] == [True, True, True] and bad["plans"] == {"sync-free": 1}
    assert max(bad["errs"]) > 0.1


def test_fixed_width_spec_info_is_a_copy():
    """On the release's own draft input class (0.5.12 renamed the accept fields)."""
    import torch
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    from sglang_specv2_fixes.fixes.flashinfer_draft_extend_graph import accept_fields, fixed_width_spec_info

    tokens, drafts = accept_fields(EagleDraftInput)
    assert (tokens, drafts) == (("num_accepted_tokens", "num_accepted_drafts") if LINE == "0.5.11"
                                else ("num_accept_tokens", "num_correct_drafts"))
    spec = EagleDraftInput(hidden_states=torch.zeros(2, 4), **{tokens: torch.tensor([3, 5]),
                                                               drafts: torch.tensor([2, 4])})
    out = fixed_width_spec_info(spec, 3, width=TREE_ND)
    assert out is not spec and getattr(spec, tokens).tolist() == [3, 5]
    assert hasattr(out, "generate_attn_arg_prefill")  # 0.5.12.x: EagleDraftExtendInput, the runner's capture class
    out_tokens, out_drafts = accept_fields(out)
    assert getattr(out, out_tokens).tolist() == [TREE_ND] * 3 and getattr(out, out_drafts).tolist() == [TREE_ND - 1] * 3


if __name__ == "__main__":
    if sys.argv[1] == "all":
        import importlib

        out = {}
        for which in SCENARIOS:
            # each scenario on a pristine backend module and fix module (the scenarios patch both)
            for name in (FI_MOD, "sglang_specv2_fixes.fixes.flashinfer_draft_extend_graph"):
                importlib.reload(sys.modules[name]) if name in sys.modules else importlib.import_module(name)
            out[which] = _scenario(which)
        print(json.dumps(out))
    else:
        print(json.dumps(_scenario(sys.argv[1])))
