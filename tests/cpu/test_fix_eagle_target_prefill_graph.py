"""eagle-target-prefill-graph on the release's real objects (0.5.11 - 0.5.13.x): the real
``PiecewiseCudaGraphRunner.__init__`` (stock, or the plugin's from the patch file) runs up to its input buffers on a
real ``ModelRunner`` (made without ``__init__``: the fields the constructor reads, on CPU), with the release's own
``SpeculativeAlgorithm``, ``ServerArgs`` field defaults, ``CompilationConfig`` and ``get_moe_a2a_backend``; the model
runner's ``req_to_token_pool`` stops it where the buffers would be allocated. Then the release's real ``can_run``
answers for a prefill ``ForwardBatch`` asking FULL hidden states, the batch ``EAGLEWorkerV2`` sends the target.

Stock: a spec-v2 EAGLE / EAGLE3 target's runner captures NULL and rejects every such batch (the graph is never
replayed). Plugin: FULL for that target of a dense model, accepted; the draft's runner, spec v1 (0.5.11 / 0.5.12.x),
multi-layer EAGLE, STANDALONE, MoE and hybrid linear-attention targets and servers without speculation keep the
release's mode. Its FULL runner is the one the release builds for ``--enable-return-hidden-states``.

Why the FULL replay gives the eager hidden states is read from the source here (the fix's module docstring): no code
under ``models/`` or ``layers/`` but ``LogitsProcessor`` reads ``capture_hidden_mode``, and the runner compiles the
decoder stack only (``language_model.model`` / ``layer_model``), not the logits processor. The probe's counters
(``prefill_graph_checks`` / ``_replays``, the GPU row's measure) around the same real ``can_run``. What CUDA runs
(capture, replay, the greedy text) is the GPU row, tests/registered/test_eagle_target_prefill_graph.py.
"""

import glob
import inspect
import os
import re
import types

import pytest
import torch
from conftest import LINE, VERSION, requires_sglang, where_patched

from sglang_specv2_fixes import core, installed, probe, releases
from sglang_specv2_fixes.fixes import eagle_target_prefill_graph as fix
from sglang_specv2_fixes.testing.scenarios import server_args

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = fix.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's PiecewiseCudaGraphRunner.__init__")
MODULE = "sglang.srt.model_executor.piecewise_cuda_graph_runner"
TARGET = f"{MODULE}.PiecewiseCudaGraphRunner.__init__"
ALL_EAGLE_V2 = LINE == "0.5.13"  # no spec v1 EAGLE worker: every EAGLE target runs EAGLEWorkerV2
LAYERS = 4


class Stop(Exception):
    """Raised where the constructor would allocate its input buffers (model_runner.req_to_token_pool.size)."""


class _Pool:
    @property
    def size(self):
        raise Stop


def model_runner(spec="EAGLE3", draft=False, overlap=True, moe=None, hf_config=None, **flags):
    """A real ModelRunner (no __init__) as init_piecewise_cuda_graphs hands it to the graph runner: its server args
    (field defaults plus ``flags``), speculative algorithm, per-layer MoE list (``moe``: "layers" marks one layer,
    "module" puts a FusedMoE module in the model) and HF config (default: a Llama one)."""
    from transformers import LlamaConfig

    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    model = torch.nn.Module()
    if moe == "module":
        experts = FusedMoE.__new__(FusedMoE)
        torch.nn.Module.__init__(experts)
        model.experts = experts
    mr = object.__new__(ModelRunner)
    args = dict(tp_size=1, dp_size=1, pp_size=1, piecewise_cuda_graph_tokens=[4, 8, 16],
                piecewise_cuda_graph_compiler="eager", enable_torch_compile_debug_mode=False,
                disable_overlap_schedule=not overlap, speculative_algorithm=spec)
    args.update(flags)
    mr.__dict__.update(
        server_args=server_args(**args), device="cpu", is_draft_worker=draft, model=model,
        spec_algorithm=SpeculativeAlgorithm.from_string(spec),
        model_config=types.SimpleNamespace(hf_config=hf_config or LlamaConfig(num_hidden_layers=LAYERS)),
        moe_layers=[object() if moe == "layers" and i == 1 else None for i in range(LAYERS)],
        req_to_token_pool=_Pool())
    from sglang.srt.model_executor import model_runner as mod

    if hasattr(mod, "_UNSET"):  # 0.5.13: __init__ starts the linear-attention registry cache unset
        mr._linear_attn_registry_cache = mod._UNSET
    return mr


def build(monkeypatch, mr, plugin):
    """The runner as the release's (or the plugin's) __init__ leaves it at its buffers; attention TP queries answer
    for one rank and the global torch.compile settings are left alone (no process group, no compile on CPU)."""
    from sglang.srt.model_executor import piecewise_cuda_graph_runner as mod

    monkeypatch.setattr(mod, "get_attention_tp_size", lambda: 1)
    monkeypatch.setattr(mod, "get_attention_tp_rank", lambda: 0)
    monkeypatch.setattr(mod, "set_torch_compile_config", lambda: None)
    init = core.build_fix(FIX)[TARGET] if plugin else mod.PiecewiseCudaGraphRunner.__init__
    runner = object.__new__(mod.PiecewiseCudaGraphRunner)
    with pytest.raises(Stop):
        init(runner, mr)
    assert runner.capture_num_tokens == [4, 8, 16] and runner.max_num_tokens == 16  # the decision ran, then the stop
    return runner


def prefill(mode, num_tokens=12):
    """A one-request prefill of ``num_tokens`` as the target's ForwardBatch carries it (``mode``: a CaptureHiddenMode
    name; EAGLEWorkerV2 sets FULL on the target's prefills)."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

    return ForwardBatch(
        forward_mode=ForwardMode.EXTEND, batch_size=1, input_ids=torch.zeros(num_tokens, dtype=torch.int64),
        req_pool_indices=torch.zeros(1, dtype=torch.int64), seq_lens=torch.tensor([num_tokens]),
        out_cache_loc=torch.arange(num_tokens), seq_lens_sum=num_tokens, extend_seq_lens_cpu=[num_tokens],
        extend_logprob_start_lens_cpu=[num_tokens], capture_hidden_mode=getattr(CaptureHiddenMode, mode))


def verify():
    """A target verify that reaches ``forward_extend`` (no decode graph of its size): the runner must say no."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    fb = prefill("FULL", num_tokens=4)
    fb.forward_mode = ForwardMode.TARGET_VERIFY
    return fb


def mode_and_answer(monkeypatch, mr, plugin):
    """(the runner's capture mode name, can_run's answer for a FULL prefill batch)."""
    runner = build(monkeypatch, mr, plugin)
    return runner.capture_hidden_mode.name, type(runner).can_run(runner, prefill("FULL"))


@FIXED_HERE
@pytest.mark.parametrize("spec", ["EAGLE3", "EAGLE"])
def test_stock_rejects_every_spec_v2_target_prefill(monkeypatch, spec):
    assert mode_and_answer(monkeypatch, model_runner(spec), plugin=False) == ("NULL", False)


@FIXED_HERE
@pytest.mark.parametrize("spec", ["EAGLE3", "EAGLE"])
def test_plugin_captures_full_for_the_spec_v2_target_and_replays_its_prefills(monkeypatch, spec):
    runner = build(monkeypatch, model_runner(spec), plugin=True)
    assert runner.capture_hidden_mode.name == "FULL"
    assert type(runner).can_run(runner, prefill("FULL"))
    assert type(runner).can_run(runner, prefill("FULL", num_tokens=16))  # the largest captured size
    assert not type(runner).can_run(runner, prefill("FULL", num_tokens=17))  # above it: eager, as stock
    assert not type(runner).can_run(runner, prefill("NULL"))  # the runner serves one mode, as stock


@FIXED_HERE
def test_plugin_target_runner_is_the_release_return_hidden_states_one(monkeypatch):
    """The FULL the plugin gives a spec-v2 target is the mode the release itself captures for a server without
    speculation under --enable-return-hidden-states (its capture batches stay NULL, as the release builds them)."""
    stock = build(monkeypatch, model_runner("NONE", enable_return_hidden_states=True), plugin=False)
    ours = build(monkeypatch, model_runner("EAGLE3"), plugin=True)
    assert stock.capture_hidden_mode == ours.capture_hidden_mode and ours.capture_hidden_mode.name == "FULL"
    assert {k: v for k, v in vars(stock).items() if k not in ("model_runner", "compile_config")} == \
        {k: v for k, v in vars(ours).items() if k not in ("model_runner", "compile_config")}
    from sglang.srt.model_executor import piecewise_cuda_graph_runner as mod

    capture = inspect.getsource(mod.PiecewiseCudaGraphRunner.capture_one_batch_size)
    assert "capture_hidden_mode=CaptureHiddenMode.NULL," in capture


KEEP = {
    "the draft's runner": dict(draft=True),
    "no speculation": dict(spec="NONE"),
    "STANDALONE": dict(spec="STANDALONE"),
    "multi-layer EAGLE": dict(enable_multi_layer_eagle=True),
    "a MoE target (the release's per-layer list)": dict(moe="layers"),
    "a MoE target (a FusedMoE module)": dict(moe="module"),
}


@FIXED_HERE
@pytest.mark.parametrize("case", sorted(KEEP))
def test_plugin_keeps_the_release_mode_elsewhere(monkeypatch, case):
    flags = dict(KEEP[case])
    spec = flags.pop("spec", "EAGLE3")
    for plugin in (False, True):
        assert mode_and_answer(monkeypatch, model_runner(spec, **flags), plugin) == ("NULL", False), (case, plugin)
        runner = build(monkeypatch, model_runner(spec, **flags), plugin)
        assert type(runner).can_run(runner, prefill("NULL"))  # a NULL prefill (no speculation) replays, as stock


@FIXED_HERE
def test_plugin_keeps_the_release_mode_for_a_hybrid_target(monkeypatch):
    """A hybrid Gated-DeltaNet target (the release's own Qwen3NextConfig: ModelRunner.mambaish_config is set)."""
    from sglang.srt.configs import Qwen3NextConfig

    mr = model_runner("EAGLE3", hf_config=Qwen3NextConfig(num_hidden_layers=LAYERS))
    assert mr.mambaish_config is not None and model_runner("EAGLE3").mambaish_config is None
    assert fix.skip_reason(mr, spec_v2=True) == "a hybrid linear-attention / Mamba target"
    for plugin in (False, True):
        assert mode_and_answer(monkeypatch, mr, plugin) == ("NULL", False)


@FIXED_HERE
def test_spec_v1_keeps_the_release_mode_where_the_release_has_it(monkeypatch):
    """Overlap scheduler off: spec v1's EAGLEWorker up to 0.5.12.x (left as the release runs it); 0.5.13.x has no spec
    v1 EAGLE worker (SpeculativeAlgorithm.create_worker gives EAGLEWorkerV2 either way), so its target captures FULL."""
    from sglang.srt.speculative import spec_info

    worker = spec_info.SpeculativeAlgorithm.EAGLE3.create_worker(server_args(disable_overlap_schedule=True))
    assert (worker.__name__ == "EAGLEWorkerV2") == ALL_EAGLE_V2
    expected = ("FULL", True) if ALL_EAGLE_V2 else ("NULL", False)
    assert mode_and_answer(monkeypatch, model_runner("EAGLE3", overlap=False), plugin=True) == expected
    assert mode_and_answer(monkeypatch, model_runner("EAGLE3", overlap=False), plugin=False) == ("NULL", False)


@FIXED_HERE
def test_return_hidden_states_keeps_full(monkeypatch):
    for spec in ("NONE", "EAGLE3"):
        for plugin in (False, True):
            mr = model_runner(spec, enable_return_hidden_states=True)
            assert mode_and_answer(monkeypatch, mr, plugin) == ("FULL", True), (spec, plugin)


@FIXED_HERE
def test_decision_is_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(fix, "_logged", set())
    with caplog.at_level("INFO", logger="sglang_specv2_fixes"):
        for _ in range(2):
            build(monkeypatch, model_runner("EAGLE3"), plugin=True)
        build(monkeypatch, model_runner("EAGLE3", moe="layers"), plugin=True)
        build(monkeypatch, model_runner("NONE"), plugin=True)  # no speculation: nothing to say
    lines = [r.getMessage() for r in caplog.records if "eagle-target-prefill-graph" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "captures FULL hidden states for the spec-v2 EAGLE target" in lines[0]
    assert lines[1].endswith("keeps the release's capture mode: a MoE target")


@FIXED_HERE
def test_probe_counts_the_release_answers(monkeypatch):
    """The GPU row's measure: the probe around the release's can_run counts every prefill's question and the replays,
    not an eager verify's (the runner's no to it is no missed replay)."""
    from sglang.srt.model_executor import piecewise_cuda_graph_runner as mod

    assert releases.LINES[LINE].prefill_graph_can_run == f"{MODULE}.PiecewiseCudaGraphRunner.can_run"
    counts = {}
    for plugin in (False, True):
        runner = build(monkeypatch, model_runner("EAGLE3"), plugin)
        probe.reset()
        for _ in range(3):
            probe._around_prefill_graph_can_run(mod.PiecewiseCudaGraphRunner.can_run, runner, prefill("FULL"))
        # wrapped twice (an on_import apply inside the hook's own application), a question still counts once
        twice = lambda self, fb: probe._around_prefill_graph_can_run(mod.PiecewiseCudaGraphRunner.can_run, self, fb)
        probe._around_prefill_graph_can_run(twice, runner, prefill("FULL"))
        # an eager verify (a batch above the decode graph's sizes) asks too, and is not a prefill
        probe._around_prefill_graph_can_run(mod.PiecewiseCudaGraphRunner.can_run, runner, verify())
        s = probe.snapshot()
        counts[plugin] = (s["prefill_graph_checks"], s["prefill_graph_replays"])
    probe.reset()
    assert counts == {False: (4, 0), True: (4, 4)}


def _sources(pattern):
    root = installed.sglang_root()
    return sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "srt", pattern), recursive=True))


def test_only_the_logits_processor_reads_the_capture_mode_in_models_and_layers():
    """The source reading the fix rests on: the compiled decoder never branches on capture_hidden_mode (a change here
    would make NULL capture batches and FULL replays differ), only the eager LogitsProcessor does."""
    if LINE not in ("0.5.11", "0.5.12", "0.5.13"):
        pytest.skip(f"sglang {VERSION}: no PiecewiseCudaGraphRunner")
    root = installed.sglang_root()
    readers = [rel for rel in _sources("models/**/*.py") + _sources("layers/**/*.py")
               if "capture_hidden_mode" in open(os.path.join(root, rel), encoding="utf-8").read()]
    assert readers == [os.path.join("srt", "layers", "logits_processor.py")], readers
    from sglang.srt.model_executor import model_runner, piecewise_cuda_graph_runner as mod

    init = inspect.getsource(mod.PiecewiseCudaGraphRunner.__init__)
    compiled = re.search(r"with patch_model\(\s*(\w+(?:\.\w+)?),", init).group(1)
    assert compiled in ("language_model.model", "layer_model"), compiled  # the decoder stack, not the CausalLM
    setup = inspect.getsource(model_runner.ModelRunner.init_piecewise_cuda_graphs)
    assert 'hasattr(language_model.model, "layers")' in setup  # a runner is only built over a model with layers


@pytest.mark.skipif(LINE in ("0.5.11", "0.5.12", "0.5.13"), reason=f"sglang {VERSION}: the fix's releases")
def test_later_releases_have_no_piecewise_runner():
    """The table's notes: the runner module is gone from 0.5.14 (the prefill graph is PrefillCudaGraphRunner's)."""
    assert installed.module_file(MODULE) is None
    assert releases.LINES[LINE].prefill_graph_can_run is None
