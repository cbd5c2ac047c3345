"""fa3-draft-extend-graph (#40762, upstream 0.5.23), on every release it patches (0.5.11 - 0.5.22).

The capture decision: the release's real ``EagleDraftWorker`` function that tests the backend list
(``_capture_cuda_graphs`` from 0.5.14, ``init_cuda_graphs`` before), stock vs the plugin's, on a worker whose
draft-extend backend is a real ``FlashAttentionBackend`` (its CUDA state left out) with the CUDA platform flag set as
on a GPU machine and the graph runners replaced by recorders (they capture CUDA graphs).
* stock builds no draft-extend runner for fa3 (the draft extend runs eagerly every decode step) while it builds one
  for triton;
* the plugin builds it for an fa3 chain unless SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH is off (the default), for a tree
  (at its width) only with that switch at 1 (opt-in: no clear gain for a tree at real size), never for fa4 or a hybrid-SWA pool without a full-to-SWA mapping (0.5.16's
  draft_extend_metadata_captured_in_graph; before 0.5.16, which lacks it, the same test on the pool), and never off
  CUDA; the decision reaches /server_info (``serving.draft_extend_graph``);
* a triton worker gets exactly stock's runners, and no decision is written for it;
* 0.5.11 / 0.5.12.x: tree-drafting replaces the same init_cuda_graphs; the composed function (this file after tree-
  drafting's) decides fa3 chains as fa3's alone and every tree as tree-drafting's alone, whose rule takes an fa3 tree
  only where this file's list ran (tree-drafting alone keeps it eager), and SGLang's load_plugins()
  installs that composed function even where eagle_worker_v2 is imported only by the plugin's own build (an
  on_import fix deferred there was built alone and replaced tree-drafting's: core.register).

The graph's metadata (0.5.11 - 0.5.16, a child interpreter per release): the release's real fa3 backend on CPU (a
model-runner stand-in holding a real ReqToTokenPool / MHATokenToKVPool), driven as the release's
EAGLEDraftExtendCudaGraphRunner drives it (its buffers; capture for bs 3, then a replay of raw bs 2 at prefix + 4;
0.5.11 / 0.5.12.x through init_forward_metadata_capture_cuda_graph / _replay_cuda_graph, from 0.5.13 through
init_forward_metadata_out_graph), then the graph body's ``forward_extend`` on the metadata object the capture bound,
with fa3's kernel replaced by its reference semantics (paged KV, queries aligned to the end of each request's KV).
The replay refills the very tensors the capture bound, the query width the graph keeps (max_seq_len_q) is the
captured one (a chain's 4, a topk 4 tree's 8), and every row equals causal attention over its request's KV (page size
1 and 4); without the replay the rows differ (the check is not vacuous). 0.5.16 is the release whose row met on a GPU: the same result there.
"""

import importlib
import json
import subprocess
import sys
import types

import pytest

from conftest import LINE, ROOT, VERSION, child_env, patched_here, run_script_json, where_patched
from sglang_specv2_fixes import core, patchfile, releases
from sglang_specv2_fixes.selection import ENV_FA3_GRAPH
from sglang_specv2_fixes.testing import fa3_cpu
from sglang_specv2_fixes.testing.causal_ref import D, H, KVH, causal_errors
from sglang_specv2_fixes.fixes.draft_extend_graph import DRAFT_EXTEND_GRAPH

FIX = "fa3-draft-extend-graph"
pytestmark = [
    pytest.mark.release_scoped,
    where_patched(FIX, "the patch adds fa3 to the draft-extend graph's backend list"),
]

WORKER_MOD = "sglang.srt.speculative.eagle_worker_v2"
STEPS = 3
TREE_W = 8  # a tree's draft tokens per request (topk 4)


def _target():
    """The function this release's patch file replaces (``EagleDraftWorker.<qualname>``)."""
    (t,) = patchfile.load(FIX, releases.entry(FIX, LINE).name).targets
    return t


def _backend(kind, fa_impl_ver=3, swa=None):
    """``swa``: None (no hybrid-SWA pool), "mapped" or "unmapped" (its full-to-SWA index mapping)."""
    if kind == "triton":
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

        return TritonAttnBackend.__new__(TritonAttnBackend)
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    b = FlashAttentionBackend.__new__(FlashAttentionBackend)  # the class the release tests; no CUDA state needed
    b.fa_impl_ver = fa_impl_ver
    b.use_sliding_window_kv_pool = swa is not None
    b.token_to_kv_pool = types.SimpleNamespace(full_to_swa_index_mapping=object() if swa == "mapped" else None)
    b.kv_index_translator = types.SimpleNamespace(is_translating=False)  # 0.5.19 on (read first there)
    return b


def _set(monkeypatch, mod, name, value):
    if hasattr(mod, name):  # the release's module-level names differ (0.5.14 on: check_cuda_graph_backend, ...)
        monkeypatch.setattr(mod, name, value)


# backends the function imports lazily on CUDA only (so the CUDA flag set here imports them on CPU)
CUDA_ONLY = (("sglang.srt.layers.attention.dsa_backend", "DeepseekSparseAttnBackend"),
             ("sglang.srt.layers.attention.deepseek_v4_backend", "DeepseekV4AttnBackend"),
             ("sglang.srt.layers.attention.flashmla_backend", "FlashMLABackend"))


def _cuda_only_imports(monkeypatch):
    """A module of CUDA_ONLY that does not import on CPU (0.5.15's dsa_backend imports cutlass at module level) gets a
    stand-in holding a class of that name, which no backend here is an instance of."""
    for name, cls in CUDA_ONLY:
        try:
            importlib.import_module(name)
        except ImportError:
            stand_in = types.ModuleType(name)
            setattr(stand_in, cls, type(cls, (), {}))
            monkeypatch.setitem(sys.modules, name, stand_in)


def _run(monkeypatch, fn, backend, topk=1, cuda=True):
    """Call ``fn`` (the release's stock or patched function) on an EagleDraftWorker-shaped object; returns the runners
    it built and the scheduler's server_args (the target worker's: /server_info reads them). The draft worker holds a
    copy of its own, as from 0.5.17 on (draft_server_args_copy deep-copies them); the decision must reach both."""
    mod = importlib.import_module(WORKER_MOD)
    built = []

    def recorder(kind):
        return lambda worker: built.append(kind) or kind

    monkeypatch.setattr(mod, "_is_cuda", cuda)
    _cuda_only_imports(monkeypatch)
    _set(monkeypatch, mod, "_is_cpu", False)
    _set(monkeypatch, mod, "check_cuda_graph_backend", lambda *a, **k: False)  # graphs not disabled (0.5.14 on)
    _set(monkeypatch, mod, "get_batch_sizes_to_capture", lambda runner: ([1, 2, 4], []))
    monkeypatch.setattr(mod, "get_available_gpu_memory", lambda *a, **k: 0.0)
    monkeypatch.setattr(mod, "EAGLEDraftCudaGraphRunner", recorder("draft"))
    monkeypatch.setattr(mod, "EAGLEDraftExtendCudaGraphRunner", recorder("draft_extend"))
    nd = STEPS + 1 if topk == 1 else TREE_W
    server_args = types.SimpleNamespace(
        speculative_eagle_topk=topk, speculative_num_steps=STEPS, speculative_num_draft_tokens=nd,
        model_impl="auto", disable_cuda_graph=False,  # up to 0.5.13: init_cuda_graphs reads disable_cuda_graph
        cuda_graph_config=types.SimpleNamespace(decode=types.SimpleNamespace(backend="full")))
    worker = types.SimpleNamespace(
        server_args=server_args, speculative_num_steps=STEPS, speculative_num_draft_tokens=nd, topk=topk,
        draft_extend_attn_backend=backend, draft_attn_backend=None, draft_runner=object(),
        target_worker=types.SimpleNamespace(device="cuda", server_args=types.SimpleNamespace()), device="cuda", gpu_id=0,
        _specialized_graph_memory_usage={}, _specialized_graph_time_usage={})  # 0.5.19 on: per graph phase
    # 0.5.19 on read the model / graph settings from the runtime context, not server_args
    if hasattr(mod, "get_model"):
        monkeypatch.setattr(mod, "get_model", lambda: types.SimpleNamespace(model_impl="auto"))
    if hasattr(mod, "get_exec"):
        graph = types.SimpleNamespace(cuda_graph_config=server_args.cuda_graph_config)
        monkeypatch.setattr(mod, "get_exec", lambda: types.SimpleNamespace(graph=graph))
    fn(worker)
    scheduler_args = worker.target_worker.server_args
    assert server_args.__dict__.get(DRAFT_EXTEND_GRAPH) == scheduler_args.__dict__.get(DRAFT_EXTEND_GRAPH)
    return built, scheduler_args


def _stock():
    return core.resolve_raw(_target().dotted)


def _patched():
    (fn,) = core.build_fix(FIX).values()
    return fn


def test_stock_runs_fa3_draft_extend_eagerly(monkeypatch):
    built, _ = _run(monkeypatch, _stock(), _backend("fa3"))
    assert built == ["draft"]  # the draft decode graph, no draft-extend graph: the bug
    built, _ = _run(monkeypatch, _stock(), _backend("triton"))
    assert built == ["draft", "draft_extend"]  # the recorders do reach the draft-extend step


@pytest.mark.parametrize("env,topk,kw,cuda,captured,why", [
    (None, 1, {}, True, True, None),  # chains: the default since the GPU row met on every torch-2.11 release
    ("", 1, {}, True, True, None),
    ("0", 1, {}, True, False, "turned off by SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=0"),
    ("off", 4, {}, True, False, "turned off by SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=off"),
    ("1", 1, {}, True, True, None),
    ("on", 1, {}, True, True, None),
    ("1", 4, {}, True, True, None),  # a tree, at its width (as 0.5.23)
    (None, 4, {}, True, False, "a tree's fa3 draft-extend graph is opt-in (SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=1)"),
    ("", 4, {}, True, False, "(SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=1)"),
    ("1", 1, {"fa_impl_ver": 4}, True, False, "fa4: only fa3 has run here"),
    ("1", 1, {"swa": "unmapped"}, True, False, "without a full-to-SWA mapping"),
    ("1", 1, {"swa": "mapped"}, True, True, None),
    ("1", 1, {}, False, False, None),  # not CUDA: nothing added, no decision written
])
def test_plugin_fa3_graph_decision(monkeypatch, env, topk, kw, cuda, captured, why):
    if env is None:
        monkeypatch.delenv(ENV_FA3_GRAPH, raising=False)
    else:
        monkeypatch.setenv(ENV_FA3_GRAPH, env)
    built, server_args = _run(monkeypatch, _patched(), _backend("fa3", **kw), topk=topk, cuda=cuda)
    assert ("draft_extend" in built) == captured
    decision = server_args.__dict__.get(DRAFT_EXTEND_GRAPH)
    if not cuda:
        assert decision is None
    elif captured:
        assert decision == f"cuda graph (fa3), {STEPS + 1 if topk == 1 else TREE_W} tokens per request"
    else:
        assert decision.startswith("eager: ") and why in decision, decision


def test_swa_rule_before_0_5_16_is_the_pool_test():
    """Before 0.5.16 the backend has no draft_extend_metadata_captured_in_graph: the rule tests the pool itself (the
    decision cases above then run that branch); from 0.5.16 the backend's method decides."""
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    has = hasattr(FlashAttentionBackend, "draft_extend_metadata_captured_in_graph")
    assert has == (VERSION not in releases.release_set("up-to:0.5.15.post1")), VERSION


def test_plugin_leaves_other_backends_as_stock(monkeypatch):
    monkeypatch.setenv(ENV_FA3_GRAPH, "1")
    stock, _ = _run(monkeypatch, _stock(), _backend("triton"))
    ours, server_args = _run(monkeypatch, _patched(), _backend("triton"))
    assert ours == stock == ["draft", "draft_extend"]
    assert DRAFT_EXTEND_GRAPH not in server_args.__dict__


# ------------------------------------------------------------- 0.5.11 / 0.5.12.x: composed after tree-drafting
def _composes():
    return patched_here("tree-drafting") and bool(patchfile.load(FIX, releases.entry(FIX, LINE).name).composes)


COMPOSED = pytest.mark.skipif(not _composes(), reason=f"sglang {VERSION}: tree-drafting does not replace the function")


@COMPOSED
@pytest.mark.parametrize("kind,topk", [("fa3", 1), ("triton", 1), ("fa3", 4), ("triton", 4)])
def test_composed_function_keeps_both_fixes(monkeypatch, kind, topk):
    """The function both files build (register's stack): an fa3 chain as fa3-draft-extend-graph alone decides it,
    every tree as tree-drafting alone does (its tree-width decision, written last), triton chains as stock; an fa3
    tree only there: tree-drafting's rule takes fa3 where this fix's list ran (fa3_tree_reason), so the composed
    function captures it at tree width and tree-drafting alone keeps it eager."""
    monkeypatch.setenv(ENV_FA3_GRAPH, "1")
    both = core.build_fixes(["tree-drafting", FIX])[_target().dotted]
    tree_only = core.build_fix("tree-drafting")[_target().dotted]
    got = _run(monkeypatch, both, _backend(kind), topk=topk)
    alone = _run(monkeypatch, _patched() if (kind, topk) == ("fa3", 1) else tree_only, _backend(kind), topk=topk)
    if (kind, topk) == ("fa3", 4):
        assert got[0] == ["draft", "draft_extend"]
        assert got[1].__dict__[DRAFT_EXTEND_GRAPH] == f"cuda graph (fa3), {TREE_W} tokens per request"
        assert alone[0] == ["draft"]
        assert alone[1].__dict__[DRAFT_EXTEND_GRAPH] == (
            "eager: fa3-draft-extend-graph is not applied (fa3's draft-extend graph)")
        return
    assert got[0] == alone[0]
    assert got[1].__dict__.get(DRAFT_EXTEND_GRAPH) == alone[1].__dict__.get(DRAFT_EXTEND_GRAPH)
    if (kind, topk) == ("fa3", 1):
        assert got[0] == ["draft", "draft_extend"]


@COMPOSED
def test_composed_fa3_tree_stays_eager_without_the_switch(monkeypatch):
    """Chains by default, trees opt-in: with the switch unset the composed function captures an fa3 chain and keeps
    an fa3 tree eager, tree-drafting's rule reporting this fix's reason (the decision made where its list ran)."""
    monkeypatch.delenv(ENV_FA3_GRAPH, raising=False)
    both = core.build_fixes(["tree-drafting", FIX])[_target().dotted]
    chain = _run(monkeypatch, both, _backend("fa3"), topk=1)
    assert chain[0] == ["draft", "draft_extend"]
    tree = _run(monkeypatch, both, _backend("fa3"), topk=4)
    assert tree[0] == ["draft"]
    assert tree[1].__dict__[DRAFT_EXTEND_GRAPH].startswith("eager: a tree's fa3 draft-extend graph is opt-in"), tree[1]


LOAD_WITHOUT_WORKER = """
import json, sys
import sglang.srt.managers.scheduler  # a scheduler's imports; eagle_worker_v2 not among them on 0.5.11 / 0.5.12.x
before = 'sglang.srt.speculative.eagle_worker_v2' in sys.modules
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang_specv2_fixes import core, plugin
report = plugin.announce('scheduler')
target = sys.argv[1]
fn = core.resolve_raw(target)
print('RESULT ' + json.dumps(dict(
    imported_before=before, states={f: report.get(f).state for f in ('tree-drafting', sys.argv[2])},
    warnings=report.warnings,
    mark=[getattr(f, '__specv2_fix__', None) for f in core.chain(fn) if getattr(f, '__specv2_fix__', None)])))
"""


@COMPOSED
def test_load_plugins_installs_the_composed_function():
    """On import of nothing but the scheduler, load_plugins() builds tree-drafting (which imports eagle_worker_v2)
    and fa3-draft-extend-graph (on_import) in one stack: one REPLACE hook, marked with both. Deferred as an on_import
    fix, fa3's file was built alone afterwards and its hook replaced tree-drafting's (mark: two separate fixes)."""
    target = _target().dotted
    proc = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_WORKER, target, FIX], capture_output=True, text=True,
                          timeout=240, env=child_env(**{ENV_FA3_GRAPH: "1"}), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1][len("RESULT "):])
    assert r["imported_before"] is False, r  # the case the composition must survive
    assert r["states"] == {"tree-drafting": "applied", FIX: "applied"} and r["warnings"] == [], r
    assert r["mark"] == [f"tree-drafting+{FIX}:{target}"], r


# ------------------------------------------------------------------ the graph's metadata (child interpreter)
W = STEPS + 1  # a chain: num_draft_tokens = steps + 1
PREFIX = [5, 9]
MAX_BS, CTX, CAPTURE_BS = 4, 64, 3


def _fa3_backend(page_size, topk, w):
    """The draft-extend backend DraftBackendFactory._create_fa3_prefill_backend builds (FlashAttentionBackend(draft
    runner, skip_prefill=False)), on CPU, with its graph state for MAX_BS."""
    return fa3_cpu.fa3_backend(page_size=page_size, max_bs=MAX_BS, ctx=CTX, topk=topk, steps=STEPS, draft_tokens=w,
                               is_draft_worker=True)


def _scenario(page_size, replay, topk=1):
    import inspect

    import torch

    import sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner as runner_mod
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import eagle_info

    torch.manual_seed(0)
    W = STEPS + 1 if topk == 1 else TREE_W  # noqa: N806 - the draft tokens per request, as the runner captures them
    backend, pool, req_pool = _fa3_backend(page_size, topk, W)
    mode = ForwardMode.DRAFT_EXTEND_V2
    runner = runner_mod.EAGLEDraftExtendCudaGraphRunner
    capture_src = inspect.getsource(getattr(runner, "capture_one_shape", None) or runner.capture_one_batch_size)
    legacy = not hasattr(backend, "init_forward_metadata_out_graph")  # 0.5.11 / 0.5.12.x

    rows = [1, 2]  # each request's KV on pages scattered over the pool
    per_req = CTX // page_size
    pages = torch.randperm(512 // page_size - 1)[: 2 * per_req] + 1
    for i, (r, p) in enumerate(zip(rows, PREFIX)):
        mine = pages[i * per_req: (i + 1) * per_req]
        slots = (mine[:, None] * page_size + torch.arange(page_size)).reshape(-1)[: p + W]
        req_pool.req_to_token[r, : p + W] = slots.to(torch.int32)
    k_buf, v_buf = pool.get_key_buffer(0), pool.get_value_buffer(0)
    k_buf.copy_(torch.randn_like(k_buf))
    v_buf.copy_(torch.randn_like(v_buf))

    # the runner's graph inputs (EAGLEDraftExtendCudaGraphRunner.__init__) and its capture input
    fill = backend.get_cuda_graph_seq_len_fill_value()
    seq_lens = torch.full((MAX_BS,), fill, dtype=torch.int32)
    seq_lens_cpu = torch.full((MAX_BS,), fill, dtype=torch.int32)
    req_pool_indices = torch.zeros(MAX_BS, dtype=torch.int64)
    extend_seq_lens = torch.full((MAX_BS,), W, dtype=torch.int32)
    out_cache_loc = torch.ones(MAX_BS * W, dtype=torch.int64)
    positions = torch.zeros(MAX_BS * W, dtype=torch.int64)
    hidden = torch.zeros(MAX_BS * W, 4)
    capture_cls = getattr(eagle_info, "EagleDraftExtendInput", eagle_info.EagleDraftInput)  # 0.5.11: EagleDraftInput
    fields = capture_cls.__dataclass_fields__
    drafts = next(f for f in ("num_accepted_drafts", "num_correct_drafts") if f in fields)
    tokens = next(f for f in ("num_accepted_tokens", "num_accept_tokens") if f in fields)
    kw = {drafts: torch.full((CAPTURE_BS,), W, dtype=torch.int32),
          tokens: torch.full((CAPTURE_BS,), W, dtype=torch.int32)}
    if "num_tokens_per_req=self." in capture_src:  # 0.5.14 on: the runner gives its capture input the width
        kw["num_tokens_per_req"] = W
    n_cap = CAPTURE_BS * W
    spec = capture_cls(hidden_states=hidden[:n_cap], **kw)
    if legacy:
        backend.init_forward_metadata_capture_cuda_graph(
            bs=CAPTURE_BS, num_tokens=n_cap, req_pool_indices=req_pool_indices[:CAPTURE_BS],
            seq_lens=seq_lens[:CAPTURE_BS], encoder_lens=None, forward_mode=mode, spec_info=spec)
    else:
        backend.init_forward_metadata_out_graph(types.SimpleNamespace(
            forward_mode=mode, batch_size=CAPTURE_BS, req_pool_indices=req_pool_indices[:CAPTURE_BS],
            seq_lens=seq_lens[:CAPTURE_BS], seq_lens_cpu=seq_lens_cpu[:CAPTURE_BS], encoder_lens=None,
            out_cache_loc=out_cache_loc[:n_cap], positions=positions[:n_cap], spec_info=spec,
            extend_seq_lens=extend_seq_lens[:CAPTURE_BS], extend_seq_lens_cpu=[W] * CAPTURE_BS), in_capture=True)
    captured = backend.forward_metadata
    bound = {k: getattr(captured, k) for k in ("cache_seqlens_int32", "cu_seqlens_q", "cu_seqlens_k", "page_table")}
    kept_width = captured.max_seq_len_q  # a host scalar: the graph keeps its capture value

    # the replay: raw bs 2 padded to 3 at prefix + W (prepare_for_extend_to_fill_draft_kvcache), copied by the runner
    raw_bs, n = len(rows), len(rows) * W
    lens = torch.tensor(PREFIX, dtype=torch.int32) + W
    seq_lens.fill_(fill)
    seq_lens[:raw_bs] = lens
    seq_lens_cpu.fill_(fill)
    seq_lens_cpu[:raw_bs] = lens
    req_pool_indices[:raw_bs] = torch.tensor(rows)
    out_cache_loc.zero_()
    out_cache_loc[:n] = torch.cat([req_pool.req_to_token[r, p: p + W] for r, p in zip(rows, PREFIX)]).long()
    spec = eagle_info.EagleDraftInput(hidden_states=hidden[:n], num_tokens_per_req=W, num_tokens_for_logprob_per_req=W)
    spec.extend_seq_lens_cpu = [W] * CAPTURE_BS  # the runner's replay sets both on the draft input
    spec.extend_seq_lens_tensor = extend_seq_lens[:CAPTURE_BS]
    if replay and legacy:
        backend.init_forward_metadata_replay_cuda_graph(
            bs=CAPTURE_BS, req_pool_indices=req_pool_indices, seq_lens=seq_lens, seq_lens_sum=int(lens.sum()) + fill,
            encoder_lens=None, forward_mode=mode, spec_info=spec, seq_lens_cpu=seq_lens_cpu)
    elif replay:
        backend.init_forward_metadata_out_graph(types.SimpleNamespace(
            batch_size=CAPTURE_BS, forward_mode=mode, input_ids=None, req_pool_indices=req_pool_indices,
            seq_lens=seq_lens, seq_lens_sum=int(lens.sum()) + fill, seq_lens_cpu=seq_lens_cpu, encoder_lens=None,
            out_cache_loc=out_cache_loc[:n_cap], spec_info=spec))
    refilled_in_place = backend.forward_metadata is captured and all(
        getattr(captured, k) is t for k, t in bound.items())

    # the graph body's attention: forward_extend on the object the capture bound, with the width it kept
    backend.forward_metadata = captured
    captured.max_seq_len_q = kept_width
    q, k, v = torch.randn(n_cap, H * D), torch.randn(n_cap, KVH, D), torch.randn(n_cap, KVH, D)
    layer = RadixAttention(H, D, scaling=D**-0.5, num_kv_heads=KVH, layer_id=0)
    fb = types.SimpleNamespace(token_to_kv_pool=pool, out_cache_loc=out_cache_loc[:n_cap], forward_mode=mode,
                               batch_size=CAPTURE_BS, attn_cp_metadata=None, attn_attend_prefix_cache=None)
    o = backend.forward_extend(q, k, v, layer, fb).view(n_cap, H, D)
    errs = causal_errors(o, q, pool, req_pool, rows, PREFIX, W)
    return dict(legacy=legacy, refilled_in_place=refilled_in_place, kept_width=kept_width, errs=errs)


METADATA = pytest.mark.skipif(VERSION not in releases.release_set("up-to:0.5.16"),
                              reason="the CPU stand-in builds fa3's backend up to 0.5.16 (the GPU-met release)")


@pytest.fixture(scope="module")
def metadata():
    return run_script_json(__file__)


@METADATA
@pytest.mark.parametrize("page_size", [1, 4])
def test_graph_metadata_is_refilled_for_each_replay(metadata, page_size):
    r = metadata[f"replay-{page_size}"]
    assert r["legacy"] == (VERSION in releases.release_set("up-to:0.5.12.post1"))
    assert r["refilled_in_place"] and r["kept_width"] == W, r
    assert max(r["errs"]) < 1e-5, r["errs"]


@METADATA
def test_without_the_replay_the_rows_differ(metadata):
    assert max(metadata["no-replay-1"]["errs"]) > 0.1


@METADATA
@pytest.mark.parametrize("page_size", [1, 4])
def test_tree_width_graph_metadata(metadata, page_size):
    """A tree's draft extend (topk 4, 8 tokens per request): the same capture and replay at the tree width, the query
    width the graph keeps is the tree's, every row equals causal attention (fa3's draft extend is causal at any
    topk); without the replay the rows differ."""
    r = metadata[f"tree-replay-{page_size}"]
    assert r["refilled_in_place"] and r["kept_width"] == TREE_W, r
    assert max(r["errs"]) < 1e-5, r["errs"]
    assert max(metadata["tree-no-replay-1"]["errs"]) > 0.1


if __name__ == "__main__":  # the metadata fixture's child interpreter
    out = {f"replay-{ps}": _scenario(ps, True) for ps in (1, 4)}
    out["no-replay-1"] = _scenario(1, False)
    out.update({f"tree-replay-{ps}": _scenario(ps, True, topk=4) for ps in (1, 4)})
    out["tree-no-replay-1"] = _scenario(1, False, topk=4)
    print(json.dumps(out))
