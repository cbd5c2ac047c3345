"""fa3-draft-extend-graph (#40762, upstream 0.5.23): the release's real ``EagleDraftWorker._capture_cuda_graphs``,
stock vs the plugin's, on a worker whose draft-extend backend is a real ``FlashAttentionBackend`` (its CUDA state
left out) with the CUDA platform flag set as on a GPU machine and the graph runners replaced by recorders (they
capture CUDA graphs).
* stock builds no draft-extend runner for fa3 (the draft extend runs eagerly every decode step) while it builds one
  for triton;
* the plugin builds it for an fa3 chain only with SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=1 (opt-in until it has run on a
  GPU), never for a tree, fa4, or a hybrid-SWA pool whose draft-extend metadata is built outside the graph, and
  never off CUDA; the decision reaches /server_info (``serving.draft_extend_graph``);
* a triton worker gets exactly stock's runners, and no decision is written for it.
"""

import importlib
import types

import pytest

from conftest import where_patched
from sglang_specv2_fixes import core
from sglang_specv2_fixes.selection import ENV_FA3_GRAPH
from sglang_specv2_fixes.fixes.tree_drafting import DRAFT_EXTEND_GRAPH

pytestmark = [
    pytest.mark.release_scoped,
    where_patched("fa3-draft-extend-graph", "the patch adds fa3 to _capture_cuda_graphs' backend list"),
]

WORKER_MOD = "sglang.srt.speculative.eagle_worker_v2"
STEPS = 3


def _backend(kind, fa_impl_ver=3, swa_without_mapping=False):
    if kind == "triton":
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

        return TritonAttnBackend.__new__(TritonAttnBackend)
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    b = FlashAttentionBackend.__new__(FlashAttentionBackend)  # the class the release tests; no CUDA state needed
    b.fa_impl_ver = fa_impl_ver
    b.use_sliding_window_kv_pool = swa_without_mapping
    b.token_to_kv_pool = types.SimpleNamespace(full_to_swa_index_mapping=None)
    b.kv_index_translator = types.SimpleNamespace(is_translating=False)  # 0.5.19 on (read first there)
    return b


def _run(monkeypatch, fn, backend, topk=1, cuda=True):
    """Call ``fn`` (stock or patched _capture_cuda_graphs) on an EagleDraftWorker-shaped object; returns the runners
    it built and the scheduler's server_args (the target worker's: /server_info reads them). The draft worker holds a
    copy of its own, as from 0.5.17 on (draft_server_args_copy deep-copies them); the decision must reach both."""
    mod = importlib.import_module(WORKER_MOD)
    built = []

    def recorder(kind):
        return lambda worker: built.append(kind) or kind

    monkeypatch.setattr(mod, "_is_cuda", cuda)
    monkeypatch.setattr(mod, "_is_cpu", False)
    monkeypatch.setattr(mod, "check_cuda_graph_backend", lambda *a, **k: False)  # graphs not disabled
    monkeypatch.setattr(mod, "get_batch_sizes_to_capture", lambda runner: ([1, 2, 4], []))
    monkeypatch.setattr(mod, "get_available_gpu_memory", lambda *a, **k: 0.0)
    monkeypatch.setattr(mod, "EAGLEDraftCudaGraphRunner", recorder("draft"))
    monkeypatch.setattr(mod, "EAGLEDraftExtendCudaGraphRunner", recorder("draft_extend"))
    nd = STEPS + 1 if topk == 1 else 8
    server_args = types.SimpleNamespace(
        speculative_eagle_topk=topk, speculative_num_steps=STEPS, speculative_num_draft_tokens=nd,
        model_impl="auto",
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
    return importlib.import_module(WORKER_MOD).EagleDraftWorker._capture_cuda_graphs


def _patched():
    (fn,) = core.build_fix("fa3-draft-extend-graph").values()
    return fn


def test_stock_runs_fa3_draft_extend_eagerly(monkeypatch):
    built, _ = _run(monkeypatch, _stock(), _backend("fa3"))
    assert built == ["draft"]  # the draft decode graph, no draft-extend graph: the bug
    built, _ = _run(monkeypatch, _stock(), _backend("triton"))
    assert built == ["draft", "draft_extend"]  # the recorders do reach the draft-extend step


@pytest.mark.parametrize("env,topk,kw,cuda,captured,why", [
    (None, 1, {}, True, False, "opt-in until it has run on a GPU"),  # the default until the GPU run
    ("0", 1, {}, True, False, "opt-in until it has run on a GPU"),
    ("1", 1, {}, True, True, None),
    ("on", 1, {}, True, True, None),
    ("1", 4, {}, True, False, "tree drafting (topk 4)"),
    ("1", 1, {"fa_impl_ver": 4}, True, False, "fa4: only fa3 has run here"),
    ("1", 1, {"swa_without_mapping": True}, True, False, "draft-extend metadata outside the graph"),
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
        assert decision == f"cuda graph (fa3), {STEPS + 1} tokens per request"
    else:
        assert decision.startswith("eager: ") and why in decision, decision


def test_plugin_leaves_other_backends_as_stock(monkeypatch):
    monkeypatch.setenv(ENV_FA3_GRAPH, "1")
    stock, _ = _run(monkeypatch, _stock(), _backend("triton"))
    ours, server_args = _run(monkeypatch, _patched(), _backend("triton"))
    assert ours == stock == ["draft", "draft_extend"]
    assert DRAFT_EXTEND_GRAPH not in server_args.__dict__
