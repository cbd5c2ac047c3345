"""The spec-v2 draft-extend CUDA graph at tree width (tree-drafting + draft-extend-kv-range, upstream 0.5.13 / #27545;
docs/design/tree-draft-extend-graph.md): the release's real ``EAGLEDraftExtendCudaGraphRunner.__init__`` and
``EagleDraftWorker.init_cuda_graphs``, stock vs the plugin's patched functions.

* runner: spec v2 (a draft worker without ``model_runner``, DRAFT_EXTEND_V2) is sized ``num_draft_tokens`` per request
  (every input buffer, the attention backend's graph state, the logits buffer); spec v1 (DRAFT_EXTEND) stays
  ``steps + 1``. Stock sizes both ``steps + 1``: a tree's extend (8 rows per request here) does not fit. The graph
  capture itself (``capture``) is CUDA-only and replaced by a recorder; the triton metadata of that graph is run
  by tests/cpu/test_fix_draft_extend_kv_range.py at tree width.
* init_cuda_graphs: for a tree on the triton backend stock builds the ``steps + 1``-wide runner (the graph whose
  width does not match); the plugin builds it only where ``draft_extend_graph_at_tree_width`` allows: on by
  default since the tree rows ran with it on a GPU (SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=0 turns it off), and only
  with draft-extend-kv-range's tree-width triton metadata in effect; the decision reaches /server_info
  (``serving.draft_extend_graph``).
* flashinfer (flashinfer-draft-extend-graph, upstream #28782): stock never captures flashinfer's draft-extend graph; the
  plugin captures it for a tree with that fix's metadata applied and no FR-Spec token map (its old off
  switch is gone: leaving the fix out does the same), and for a chain by the same rule (#28782 captures both; the chain's
  decision is flashinfer_graph_backends', called from the same init_cuda_graphs); a chain on any other unlisted
  backend keeps the release's eager draft extend. The metadata itself is run by
  tests/cpu/test_fix_flashinfer_draft_extend_graph.py.
"""

import types

import pytest
import torch
from conftest import patched_here, where_patched

from sglang_specv2_fixes import core, plugin, selection
from sglang_specv2_fixes.fixes import draft_extend_graph, flashinfer_draft_extend_graph, tree_drafting

pytestmark = [
    pytest.mark.release_scoped,
    where_patched("tree-drafting", "the tree-width draft-extend graph is part of its patch"),
]

RUNNER_MOD = "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner"
WORKER_MOD = "sglang.srt.speculative.eagle_worker_v2"
STEPS, TOPK, TREE_ND = 3, 4, 8
CAPTURE_BS = [1, 2, 4]
HIDDEN, VOCAB = 16, 32
# flashinfer-draft-extend-graph's old off switch: gone (auto,-flashinfer-draft-extend-graph does the same); set, it
# changes nothing
OLD_SWITCH = "SGLANG_SPECV2_FIXES_FLASHINFER_DRAFT_GRAPH"


def _server_args(nd, topk):
    return types.SimpleNamespace(  # the fields the runner and the require_* helpers read
        speculative_num_steps=STEPS, speculative_eagle_topk=topk, speculative_num_draft_tokens=nd,
        enable_torch_compile=False, disable_cuda_graph_padding=False, enable_profile_cuda_graph=False,
        enable_dp_attention=False, enable_dp_lm_head=False, moe_dense_tp_size=None, tp_size=1, dp_size=1,
        disable_cuda_graph=False, model_impl="auto", attention_backend="triton", speculative_algorithm="EAGLE3")


class _Backend:
    """Records what the runner sizes the attention backend's graph state for."""

    def __init__(self):
        self.state = None

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.state = (max_bs, max_num_tokens)

    def get_cuda_graph_seq_len_fill_value(self):
        return 1


def _make_runner(monkeypatch, init, nd, topk, v2=True):
    import importlib

    mod = importlib.import_module(RUNNER_MOD)
    cls = mod.EAGLEDraftExtendCudaGraphRunner
    captured = []
    monkeypatch.setattr(mod, "get_batch_sizes_to_capture", lambda model_runner: (list(CAPTURE_BS), []))
    monkeypatch.setattr(cls, "capture", lambda self: captured.append(self.num_tokens_per_bs))  # CUDA only
    backend = _Backend()
    model_config = types.SimpleNamespace(spec_hidden_size=HIDDEN, hidden_size=HIDDEN, vocab_size=VOCAB,
                                         dtype=torch.float32, hf_config=types.SimpleNamespace())
    runner_ns = types.SimpleNamespace(
        server_args=_server_args(nd, topk), tp_size=1, dp_size=1, device="cpu", dtype=torch.float32,
        attn_backend=backend, model_config=model_config)
    worker = types.SimpleNamespace(  # 0.5.12.x sizes the hidden states through the target's model config
        draft_extend_attn_backend=backend, eagle_use_aux_hidden_state=False,
        target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(model_config=model_config)),
        speculative_algorithm=types.SimpleNamespace(is_eagle3=lambda: False, is_standalone=lambda: False))
    if v2:
        worker.draft_runner = runner_ns  # EagleDraftWorker: no model_runner attribute -> DRAFT_EXTEND_V2
    else:
        worker.model_runner = runner_ns  # spec v1 EAGLEWorker -> DRAFT_EXTEND
    runner = cls.__new__(cls)
    init(runner, worker)
    assert captured == [runner.num_tokens_per_bs], "the runner did not reach its capture step"
    return runner, backend


def _stock_init():
    import importlib

    return importlib.import_module(RUNNER_MOD).EAGLEDraftExtendCudaGraphRunner.__init__


def _patched(fix, qualname):
    built = core.build_fix(fix)
    (fn,) = [f for t, f in built.items() if t.endswith("." + qualname)]
    return fn


def _sizes(runner, backend):
    b = runner.buffers
    return dict(width=runner.num_tokens_per_bs, max_num_token=runner.max_num_token, input_ids=b.input_ids.shape[0],
                hidden=b.hidden_states.shape[0], extend_seq_lens=b.extend_seq_lens.tolist(),
                logits_rows=b.next_token_logits_buffer.shape[0], backend_state=backend.state,
                extend_seq_lens_cpu=runner.extend_seq_lens_cpu)


def test_runner_width_stock_vs_plugin(monkeypatch):
    max_bs = max(CAPTURE_BS)
    stock = _sizes(*_make_runner(monkeypatch, _stock_init(), TREE_ND, TOPK))
    ours = _sizes(*_make_runner(monkeypatch, _patched("tree-drafting", "EAGLEDraftExtendCudaGraphRunner.__init__"),
                                TREE_ND, TOPK))
    # stock: sized steps + 1 per request although the spec-v2 tree extend runs TREE_ND rows per request
    assert stock["width"] == STEPS + 1 and stock["input_ids"] == max_bs * (STEPS + 1)
    # plugin: every buffer at tree width
    n = max_bs * TREE_ND
    assert ours["width"] == TREE_ND and ours["max_num_token"] == n
    assert ours["input_ids"] == ours["hidden"] == ours["logits_rows"] == n
    assert ours["backend_state"] == (max_bs, n)
    assert ours["extend_seq_lens"] == [TREE_ND] * max_bs and ours["extend_seq_lens_cpu"] == [TREE_ND] * max_bs


@pytest.mark.parametrize("case", ["v2 chain", "v1 tree"])
def test_runner_width_unchanged_where_it_already_fits(monkeypatch, case):
    nd, topk, v2 = (STEPS + 1, 1, True) if case == "v2 chain" else (TREE_ND, TOPK, False)
    stock = _sizes(*_make_runner(monkeypatch, _stock_init(), nd, topk, v2))
    ours = _sizes(*_make_runner(monkeypatch, _patched("tree-drafting", "EAGLEDraftExtendCudaGraphRunner.__init__"),
                                nd, topk, v2))
    assert stock["width"] == STEPS + 1 and stock == ours


# ---------------------------------------------------------------------------------------- init_cuda_graphs
def _worker(monkeypatch, nd, triton=True, backend_kind=None):
    """An EagleDraftWorker-shaped object for init_cuda_graphs, with the runner classes replaced by recorders (they
    capture CUDA graphs) and the CUDA platform flag set as on a GPU machine. ``backend_kind``: "triton", "flashinfer"
    (the real backend classes, uninitialised) or "other" (default: triton / other by ``triton``)."""
    import importlib

    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    mod = importlib.import_module(WORKER_MOD)
    built = []

    def recorder(kind):
        return lambda worker: built.append(kind) or kind

    monkeypatch.setattr(mod, "_is_cuda", True)
    monkeypatch.setattr(mod, "EAGLEDraftCudaGraphRunner", recorder("draft"))
    monkeypatch.setattr(mod, "EAGLEDraftExtendCudaGraphRunner", recorder("draft_extend"))
    monkeypatch.setattr(mod, "get_available_gpu_memory", lambda *a, **k: 0.0)
    backend_kind = backend_kind or ("triton" if triton else "other")
    classes = {"triton": TritonAttnBackend, "flashinfer": FlashInferAttnBackend}
    backend = classes[backend_kind].__new__(classes[backend_kind]) if backend_kind in classes else object()
    worker = types.SimpleNamespace(
        server_args=_server_args(nd, TOPK if nd > STEPS + 1 else 1), speculative_num_steps=STEPS,
        speculative_num_draft_tokens=nd, draft_extend_attn_backend=backend, draft_attn_backend=None,
        target_worker=types.SimpleNamespace(device="cuda"), device="cuda", gpu_id=0)
    return worker, built


def _init_cuda_graphs(which):
    import importlib

    if which == "stock":
        return importlib.import_module(WORKER_MOD).EagleDraftWorker.init_cuda_graphs
    return _patched("tree-drafting", "EagleDraftWorker.init_cuda_graphs")


def _triton_metadata(monkeypatch, patched):
    """draft-extend-kv-range's functions on TritonAttnBackend (as the plugin registers them), or stock ones."""
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    if patched:
        for target, fn in core.build_fix("draft-extend-kv-range").items():
            monkeypatch.setattr(TritonAttnBackend, target.rsplit(".", 1)[1], fn)
    assert all(core.is_patched(t) for t in draft_extend_graph.TRITON_DRAFT_EXTEND_METADATA) == patched


def test_stock_captures_a_draft_extend_graph_of_the_wrong_width(monkeypatch):
    worker, built = _worker(monkeypatch, TREE_ND)
    _init_cuda_graphs("stock")(worker)
    assert built == ["draft", "draft_extend"]  # sized steps + 1 (test_runner_width_stock_vs_plugin) for a tree


@pytest.mark.parametrize("env,kv_range,triton,captured,why", [
    (None, True, True, True, None),  # the default
    ("1", True, True, True, None),
    ("0", True, True, False, "turned off by SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=0"),
    ("off", True, True, False, "turned off by SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=off"),
    (None, False, True, False, "draft-extend-kv-range is not applied"),
    (None, True, False, False, "only the triton, flashinfer and fa3 draft-extend graph metadata"),  # another backend
])
def test_plugin_tree_width_graph_decision(monkeypatch, env, kv_range, triton, captured, why):
    if env is None:
        monkeypatch.delenv(selection.ENV_TREE_GRAPH, raising=False)
    else:
        monkeypatch.setenv(selection.ENV_TREE_GRAPH, env)
    _triton_metadata(monkeypatch, kv_range)
    worker, built = _worker(monkeypatch, TREE_ND, triton=triton)
    _init_cuda_graphs("plugin")(worker)
    assert built[:1] == ["draft"], "init_cuda_graphs did not run to its draft-extend decision"
    decision = plugin.serving_facts(worker.server_args)["draft_extend_graph"]
    if captured:
        assert built == ["draft", "draft_extend"] and worker.cuda_graph_runner_for_draft_extend == "draft_extend"
        assert decision == f"cuda graph, {TREE_ND} tokens per request"
    else:
        assert built == ["draft"] and worker.cuda_graph_runner_for_draft_extend is None
        assert decision.startswith("eager: ") and why in decision


def test_plugin_chain_keeps_its_graph(monkeypatch):
    monkeypatch.delenv(selection.ENV_TREE_GRAPH, raising=False)
    worker, built = _worker(monkeypatch, STEPS + 1)
    _init_cuda_graphs("plugin")(worker)
    assert built == ["draft", "draft_extend"]
    assert plugin.serving_facts(worker.server_args)["draft_extend_graph"] is None  # only trees are decided


# ------------------------------------------------- flashinfer's graph at tree width (flashinfer-draft-extend-graph)
def _flashinfer_metadata(monkeypatch, patched):
    """flashinfer-draft-extend-graph's functions on FlashInferAttnBackend and FlashInferIndicesUpdaterPrefill (as the
    plugin registers them), or stock."""
    import sglang.srt.layers.attention.flashinfer_backend as fb

    if patched:
        for target, fn in core.build_fix("flashinfer-draft-extend-graph").items():
            cls, name = target[len(fb.__name__) + 1:].split(".")
            monkeypatch.setattr(getattr(fb, cls), name, fn)
    assert all(core.is_patched(t) for t in flashinfer_draft_extend_graph.metadata_targets()) == patched


def _check_flashinfer_decision(monkeypatch, width, fi_env, tree_env, metadata, token_map, captured, why):
    """A flashinfer draft worker of ``width`` draft tokens per request through the release's init_cuda_graphs: stock
    never captures the draft-extend graph; the plugin captures it (and reports it) exactly when ``captured``, else
    stays eager with ``why`` in its reported decision. ``token_map`` "sliding-window" gives the backend two wrappers."""
    if not patched_here("flashinfer-draft-extend-graph"):
        pytest.skip("flashinfer-draft-extend-graph is not patched on this release")
    for env, value in ((OLD_SWITCH, fi_env), (selection.ENV_TREE_GRAPH, tree_env)):
        if value is None:
            monkeypatch.delenv(env, raising=False)
        else:
            monkeypatch.setenv(env, value)
    monkeypatch.setenv(selection.ENV_FLASHINFER_FAST_PLAN, "0")  # the plan: test_plugin_flashinfer_fast_plan_decision
    _flashinfer_metadata(monkeypatch, metadata)
    worker, built = _worker(monkeypatch, width, backend_kind="flashinfer")
    if token_map == "sliding-window":  # FlashInferAttnBackend.__init__'s two-wrapper dispatch
        worker.draft_extend_attn_backend.num_wrappers, token_map = 2, None
    worker.server_args.speculative_token_map = token_map
    _init_cuda_graphs("stock")(worker)
    assert built == ["draft"], "stock captured a flashinfer draft-extend graph"
    built.clear()
    _init_cuda_graphs("plugin")(worker)
    decision = plugin.serving_facts(worker.server_args)["draft_extend_graph"]
    if captured:
        assert built == ["draft", "draft_extend"] and worker.cuda_graph_runner_for_draft_extend == "draft_extend"
        assert decision == f"cuda graph (flashinfer), {width} tokens per request"
    else:
        assert built == ["draft"] and worker.cuda_graph_runner_for_draft_extend is None
        assert decision.startswith("eager: ") and why in decision


@pytest.mark.parametrize("fi_env,tree_env,metadata,token_map,captured,why", [
    (None, None, True, None, True, None),  # on by default
    ("0", None, True, None, True, None),  # the old off switch is gone: no effect (the "not applied" row is auto,-NAME)
    ("1", None, True, None, True, None),
    ("on", None, True, None, True, None),
    ("1", "0", True, None, False, "turned off by SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=0"),
    ("1", None, False, None, False, "flashinfer-draft-extend-graph is not applied"),
    ("1", None, True, "/m/token_map.pt", False, "FR-Spec (--speculative-token-map)"),
    ("1", None, True, "sliding-window", False, "two flashinfer wrappers (sliding window / cross attention)"),
])
def test_plugin_flashinfer_tree_graph_decision(monkeypatch, fi_env, tree_env, metadata, token_map, captured, why):
    """Stock (every release this fix patches) never captures flashinfer's draft-extend graph; the plugin does for a
    tree unless turned off, with flashinfer-draft-extend-graph's metadata, no FR-Spec token map (#28782) and one
    flashinfer wrapper (a sliding-window model's plan cannot take the graph metadata's prefix_lens=None)."""
    _check_flashinfer_decision(monkeypatch, TREE_ND, fi_env, tree_env, metadata, token_map, captured, why)


@pytest.mark.parametrize("fi_env,tree_env,metadata,token_map,captured,why", [
    (None, None, True, None, True, None),  # on by default
    ("1", None, True, None, True, None),  # #28782 captures chains and trees
    ("0", None, True, None, True, None),  # the old off switch is gone: no effect (the "not applied" row is auto,-NAME)
    ("1", "0", True, None, True, None),  # the tree switch is for trees only
    ("1", None, False, None, False, "flashinfer-draft-extend-graph is not applied"),
    ("1", None, True, "/m/token_map.pt", False, "FR-Spec (--speculative-token-map)"),
])
def test_plugin_flashinfer_chain_graph_decision(monkeypatch, fi_env, tree_env, metadata, token_map, captured, why):
    """A chain (num_draft_tokens == steps + 1, the runner's own width) on flashinfer: stock runs its draft extend
    eagerly; the plugin captures flashinfer's graph under the same rule as a tree's (flashinfer_graph_reason), through
    tree-drafting's init_cuda_graphs -> flashinfer_graph_backends."""
    _check_flashinfer_decision(monkeypatch, STEPS + 1, fi_env, tree_env, metadata, token_map, captured, why)


@pytest.mark.parametrize("width", [TREE_ND, STEPS + 1], ids=["tree", "chain"])
@pytest.mark.parametrize("fast_env", [None, "1", "0"])
def test_plugin_flashinfer_fast_plan_decision(monkeypatch, width, fast_env):
    """SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN: the captured graph's decision (a tree's through tree-drafting's rule, a
    chain's through flashinfer_graph_backends) names the sync-free plan and the backend is marked for replay_spec_info
    unless the switch is 0; with 0 neither (the decision reads as before)."""
    sync_free = fast_env != "0"
    suffix = ", sync-free plan (host-known indptrs)" if sync_free else ""
    if not patched_here("flashinfer-draft-extend-graph"):
        pytest.skip("flashinfer-draft-extend-graph is not patched on this release")
    monkeypatch.setenv(OLD_SWITCH, "1")
    monkeypatch.delenv(selection.ENV_TREE_GRAPH, raising=False)
    if fast_env is None:
        monkeypatch.delenv(selection.ENV_FLASHINFER_FAST_PLAN, raising=False)
    else:
        monkeypatch.setenv(selection.ENV_FLASHINFER_FAST_PLAN, fast_env)
    _flashinfer_metadata(monkeypatch, True)
    worker, built = _worker(monkeypatch, width, backend_kind="flashinfer")
    _init_cuda_graphs("plugin")(worker)
    assert built == ["draft", "draft_extend"]
    decision = plugin.serving_facts(worker.server_args)["draft_extend_graph"]
    assert decision == f"cuda graph (flashinfer), {width} tokens per request{suffix}"
    marked = worker.draft_extend_attn_backend.__dict__.get(flashinfer_draft_extend_graph.FAST_PLAN, False)
    assert marked == bool(suffix)


def test_plugin_other_chain_unchanged(monkeypatch):
    """A chain on a backend the release does not list and flashinfer is not (here: any other object) keeps the eager
    draft extend, and no decision is recorded."""
    monkeypatch.setenv(OLD_SWITCH, "1")
    worker, built = _worker(monkeypatch, STEPS + 1, backend_kind="other")
    _init_cuda_graphs("plugin")(worker)
    assert built == ["draft"] and plugin.serving_facts(worker.server_args)["draft_extend_graph"] is None
