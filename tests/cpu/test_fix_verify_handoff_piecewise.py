"""verify-handoff on 0.5.13 / 0.5.13.post1 (#28633, in 0.5.14), on the release's real functions: with piecewise CUDA
graphs on (the release's default) a triton EAGLE server no longer publishes the host mirror ``seq_lens_cpu``, so the
scheduler's ``FutureMap.resolve_seq_lens_cpu`` never makes the host wait for the verify; every other server keeps the
release's decision.

* ``decide_needs_cpu_seq_lens`` (real, stock and patched) on the release's ``ServerArgs`` defaults (piecewise graphs
  on) and the backends the real ``EAGLEWorkerV2.spec_v2_attn_backends`` returns (real triton / fa3 / flashinfer
  backend objects, made without their ``__init__``: ``needs_cpu_seq_lens`` is a class attribute): stock True, patched
  False for a triton chain or tree; with two-batch overlap, breakable CUDA graphs, multi-layer EAGLE, another
  algorithm or a non-triton backend the patched decision is stock's; with piecewise graphs off both are the backends'.
* ``FutureMap`` (real ``__init__`` and ``resolve_seq_lens_cpu``, on CPU tensors) built with either decision, its CUDA
  members stand-ins (the D2H stream records ``synchronize``, the publish event ``wait``; torch.cuda's classes replaced
  so that the probe's counter wraps them): with stock's decision the host waits (the probe's ``verify_host_waits``
  counts it) and reads the mirror; with the patch it does not, ``seq_lens`` is still gathered behind the event.
* The premises the patch rests on, in the release's code: ``PiecewiseCudaGraphRunner.can_run`` refuses TARGET_VERIFY,
  and a draft model runner captures no piecewise graph unless forced (``init_piecewise_cuda_graphs``).
Checked to fail against stock: the patched-side assertions of the first two items fail with the release's function.
Not covered (GPU only): the real streams and events, the timing (tests/registered/test_verify_handoff_piecewise.py).
"""

import dataclasses
import types

import pytest
import torch
from conftest import requires_sglang, where_patched

from sglang_specv2_fixes import core, probe
from sglang_specv2_fixes.fixes import verify_handoff

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = verify_handoff.FIX.name
DECIDE = "sglang.srt.managers.overlap_utils.decide_needs_cpu_seq_lens"
FIXED_HERE = where_patched(FIX, "piecewise CUDA graphs' host mirror", target="decide_needs_cpu_seq_lens")


@pytest.fixture(scope="module")
def patched():
    return core.build_fix(FIX)[DECIDE]


def _args(**kw):
    """The release's ServerArgs defaults (piecewise CUDA graphs on, no two-batch overlap), EAGLE3, ``kw`` set."""
    from sglang.srt.server_args import ServerArgs

    args = object.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            setattr(args, f.name, f.default)
    args.speculative_algorithm = "EAGLE3"
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def _backend(name):
    if name == "triton":
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend as cls
    elif name == "triton-draft":
        from sglang.srt.layers.attention.triton_backend import TritonMultiStepDraftBackend as cls
    elif name == "fa3":
        from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend as cls
    else:
        from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend as cls
    return object.__new__(cls)


def _backends(target="triton", draft="triton-draft", extend="triton"):
    """What the real EAGLEWorkerV2.spec_v2_attn_backends hands the decision (target, draft, draft extend)."""
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    worker = types.SimpleNamespace(
        _target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(attn_backend=_backend(target))),
        _draft_worker=types.SimpleNamespace(draft_attn_backend=_backend(draft),
                                            draft_extend_attn_backend=None if extend is None else _backend(extend)))
    return EAGLEWorkerV2.spec_v2_attn_backends.fget(worker)


@FIXED_HERE
def test_stock_forces_the_mirror_under_piecewise_graphs():
    from sglang.srt.managers.overlap_utils import decide_needs_cpu_seq_lens

    assert _args().disable_piecewise_cuda_graph is False  # the release's default
    assert decide_needs_cpu_seq_lens(_args(), _backends()) is True
    assert decide_needs_cpu_seq_lens(_args(disable_piecewise_cuda_graph=True), _backends()) is False


@FIXED_HERE
@pytest.mark.parametrize("args", [{}, dict(speculative_algorithm="EAGLE", speculative_eagle_topk=4,
                                           speculative_num_steps=3, speculative_num_draft_tokens=8)],
                         ids=["eagle3-chain", "eagle-tree"])
@pytest.mark.parametrize("extend", ["triton", None], ids=["draft-extend", "no-draft-extend-backend"])
def test_triton_needs_no_mirror_under_piecewise_graphs(patched, args, extend):
    backends = _backends(extend=extend)
    assert verify_handoff.piecewise_reason(_args(**args), backends) is None
    assert patched(_args(**args), backends) is False


@FIXED_HERE
@pytest.mark.parametrize("args, backends, reason", [
    (dict(enable_two_batch_overlap=True), {}, None),  # the release's own branch, before the patched one
    (dict(enable_breakable_cuda_graph=True), {}, "enable-breakable-cuda-graph: the draft runner captures piecewise "
                                                 "graphs too"),
    (dict(enable_multi_layer_eagle=True), {}, "enable-multi-layer-eagle"),
    (dict(speculative_algorithm="NGRAM"), {}, "speculative algorithm NGRAM: only EAGLE / EAGLE3 were read for it"),
    (dict(speculative_algorithm="STANDALONE"), {}, "speculative algorithm STANDALONE: only EAGLE / EAGLE3 were read "
                                                   "for it"),
    ({}, dict(target="fa3", draft="fa3", extend="fa3"), "attention backends ['FlashAttentionBackend']: only "
                                                        "triton's were read for it"),
    ({}, dict(target="flashinfer"), "attention backends ['FlashInferAttnBackend', 'TritonAttnBackend', "
                                    "'TritonMultiStepDraftBackend']: only triton's were read for it"),
], ids=["tbo", "breakable", "multi-layer", "ngram", "standalone", "fa3", "flashinfer-target"])
def test_every_other_server_keeps_the_release_decision(patched, args, backends, reason):
    from sglang.srt.managers.overlap_utils import decide_needs_cpu_seq_lens

    server, bs = _args(**args), _backends(**backends)
    if reason is not None:
        assert verify_handoff.piecewise_reason(server, bs) == reason
    assert patched(server, bs) is True
    assert decide_needs_cpu_seq_lens(server, bs) is True


@FIXED_HERE
@pytest.mark.parametrize("backends, want", [({}, False), (dict(target="fa3", draft="fa3", extend="fa3"), True)],
                         ids=["triton", "fa3"])
def test_without_piecewise_graphs_the_backends_decide_as_stock(patched, backends, want):
    from sglang.srt.managers.overlap_utils import decide_needs_cpu_seq_lens

    server, bs = _args(disable_piecewise_cuda_graph=True), _backends(**backends)
    assert patched(server, bs) is want and decide_needs_cpu_seq_lens(server, bs) is want


@FIXED_HERE
@pytest.mark.parametrize("name, value", [("SGLANG_SPECV2_FIXES_VERIFY_HANDOFF_FA3", "0"),
                                         ("SGLANG_SPECV2_FIXES_VERIFY_HANDOFF", "0")])
def test_switches(patched, monkeypatch, name, value):
    """The fa3 switch and the old off switch (no longer read) change nothing for triton here; fa3 keeps the mirror
    either way (its backend asks for it on 0.5.13.x); ``auto,-verify-handoff`` leaves the release's function."""
    from sglang_specv2_fixes import selection
    from sglang_specv2_fixes.fixes import ALL_FIXES

    monkeypatch.setenv(name, value)
    assert patched(_args(), _backends()) is False
    assert patched(_args(), _backends("fa3", "fa3", "fa3")) is True
    assert not selection.parse("auto,-verify-handoff", ALL_FIXES).wants(FIX)


class Event:
    log = None

    def wait(self, stream=None):
        Event.log.append("stream waits for the publish event")

    def synchronize(self):
        Event.log.append("host waits for the publish event")


class Stream:
    log = None

    def wait_event(self, event):
        Stream.log.append("d2h stream waits for the publish event")

    def synchronize(self):
        Stream.log.append("host waits for the d2h stream")


SEQ_LENS = [7, 12, 3, 30]


def _resolve(needs, monkeypatch):
    """The release's FutureMap built with ``needs`` (a decision), its CUDA members stand-ins, after a publish of
    SEQ_LENS for rows 1 .. 4; resolve_seq_lens_cpu of a decode batch of those rows, the probe counting host waits."""
    from sglang.srt.managers.overlap_utils import FutureMap
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    log = Event.log = Stream.log = []
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(Event, "synchronize", Event.synchronize)  # the probe wraps them: undone after the test
    monkeypatch.setattr(Stream, "synchronize", Stream.synchronize)
    probe.reset()
    probe._count_verify_host_waits()
    pool = types.SimpleNamespace(req_to_token=torch.zeros(8, 64, dtype=torch.int32))
    fm = FutureMap(torch.device("cpu"), SpeculativeAlgorithm.from_string("EAGLE3"), pool, needs)
    fm.new_seq_lens_cpu_pinned = torch.zeros(8, dtype=torch.int64)  # CUDA only in the release
    fm.fwd_prepare_d2h_stream, fm.publish_ready = torch.cuda.Stream(), torch.cuda.Event()
    rows = torch.arange(1, 5)
    fm.new_seq_lens_buf[rows] = torch.tensor(SEQ_LENS)
    batch = types.SimpleNamespace(spec_info=types.SimpleNamespace(future_indices=rows), req_pool_indices_cpu=rows,
                                  seq_lens=None, seq_lens_cpu="stale", seq_lens_sum="stale")
    fm.resolve_seq_lens_cpu(batch)
    waits = probe.STATS["verify_host_waits"]
    probe.reset()
    return batch, log, waits


@FIXED_HERE
def test_stock_decision_makes_the_host_wait_for_the_verify(monkeypatch):
    from sglang.srt.managers.overlap_utils import decide_needs_cpu_seq_lens

    batch, log, waits = _resolve(decide_needs_cpu_seq_lens(_args(), _backends()), monkeypatch)
    assert "host waits for the d2h stream" in log and waits == 1
    assert batch.seq_lens_cpu.tolist() == SEQ_LENS and batch.seq_lens_sum == sum(SEQ_LENS)


@FIXED_HERE
def test_patched_decision_leaves_the_host_free(patched, monkeypatch):
    batch, log, waits = _resolve(patched(_args(), _backends()), monkeypatch)
    assert log == ["stream waits for the publish event"] and waits == 0
    assert batch.seq_lens.tolist() == SEQ_LENS  # gathered on the device, behind the publish event
    assert batch.seq_lens_cpu is None and batch.seq_lens_sum is None


@FIXED_HERE
def test_no_decode_or_verify_batch_reaches_a_piecewise_graph():
    """The release's code the patch rests on: the target runner's piecewise graphs refuse a target verify, and a draft
    model runner captures none unless its worker forces it (EagleDraftWorker does only for breakable CUDA graphs,
    which piecewise_reason leaves out)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.model_executor.piecewise_cuda_graph_runner import PiecewiseCudaGraphRunner

    verify = types.SimpleNamespace(input_embeds=None, forward_mode=ForwardMode.TARGET_VERIFY)
    assert PiecewiseCudaGraphRunner.can_run(object.__new__(PiecewiseCudaGraphRunner), verify) is False
    draft_runner = types.SimpleNamespace(server_args=_args(), is_draft_worker=True, piecewise_cuda_graph_runner="old")
    ModelRunner.init_piecewise_cuda_graphs(draft_runner)
    assert draft_runner.piecewise_cuda_graph_runner is None
