"""reasoning-tokens-through-stop (#39826) on the release's real decode step and output streamer.

A real ``Req`` that is still reasoning (``require_reasoning``, the model's think-end token never sampled) gets
a verify run of 3 tokens whose 2nd token is a stop token. The release's real ``process_batch_result_decode``
(stock, the late-overlap-result case of ``testing.scenarios``: the request is the batch's live request) extends
``output_ids``, counts reasoning tokens (``_maybe_update_reasoning_tokens`` -> ``Req.update_reasoning_tokens``)
and runs the finish check, in the release's own order. The release's real streamer then builds the request's
output: ``SchedulerOutputProcessorMixin.stream_output_generation`` (0.5.11 / 0.5.12.x) or
``SchedulerOutputStreamer.stream_output`` with ``_GenerationStreamAccumulator.accept`` (0.5.13+), and the test
reads the ``BatchTokenIDOutput`` the streamer sends. Stock sends reasoning_tokens 3 with completion_tokens 2;
the patched streamer sends 2 (the request reasoned through the stop token, which is its last token sent).
Plumbing outside the counters (KV release, the detokenizer socket, load reporting) is stubbed.
"""

import contextlib
import dataclasses
from array import array

import pytest
import torch
from conftest import LINE, VERSION, requires_sglang

from sglang_specv2_fixes import core, releases
from sglang_specv2_fixes.catalog import Patched
from sglang_specv2_fixes.fixes import reasoning_tokens_through_stop as fix_module
from sglang_specv2_fixes.testing.scenarios import Unset, decode_case, mixin_layout

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = fix_module.FIX.name
THINK_END = 1000  # the model's think-end token (in the case's 1024-token vocab); sampled only where a case says so
STOP = 7
STRIDE = 4  # the stale case's draft width: the live request's run is next_token_ids[0:accept_len]


def test_table_patches_every_release():
    """Every release from 0.5.11 counts reasoning tokens in the decode loop before the finish check, and none
    caps them when sending (this file's stock tests show it on the release under test)."""
    assert isinstance(releases.entry(FIX, LINE), Patched)
    assert fix_module.FIX.upstream == () and fix_module.FIX.related == ("#39826", "#37450")
    assert fix_module.FIX.refs == "beyond upstream (#39826, #37450)"


class _Sink:
    def __init__(self):
        self.sent = []

    def send_output(self, payload, *a, **k):
        self.sent.append(payload)


class _Inert:
    def __getattr__(self, name):
        return lambda *a, **k: None


@contextlib.contextmanager
def _plain_config():
    """0.5.16+: publish a plain launch's config for the streamer's config reads, restored afterwards."""
    rc = _runtime_context()
    if rc is None:
        yield
        return
    with rc.get_context().override_server_args(), contextlib.ExitStack() as stack:
        par = rc.get_parallel()
        for name in ("attn_tp_rank", "dp_rank"):  # the ranks a process writes when it builds its groups
            try:
                getattr(par, name)
            except Exception:  # none built here: rank 0 where the release's context takes the name
                with contextlib.suppress(ValueError):
                    stack.enter_context(par.override(**{name: 0}))
        yield


def _runtime_context():
    """``sglang.srt.runtime_context`` where it has the scoped config override (0.5.16+), else None."""
    try:
        import sglang.srt.runtime_context as rc
    except ImportError:
        return None
    return rc if hasattr(rc.get_context(), "override_server_args") else None


def _finished_live_request(run, monkeypatch, max_new_tokens=64):
    """The stale case's live request after one real decode step (stock) whose verify run is ``run``; the request
    requires reasoning and stops on STOP."""
    fn, sched, batch, result, live = decode_case(False)
    result.next_token_ids[: len(run)] = torch.tensor(run, dtype=result.next_token_ids.dtype)
    result.accept_lens[0] = len(run)
    live.require_reasoning = True
    live.sampling_params.max_new_tokens = max_new_tokens
    live.sampling_params.stop_token_ids = {STOP}
    # the model config a reasoning parser leaves: the think-end token id (up to 0.5.16), ids (0.5.17+)
    sched.model_config.think_end_id = THINK_END
    sched.model_config.think_end_ids = [THINK_END]
    if not mixin_layout():
        # KV release on finish: a KV pool this case does not build (not under test)
        from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor

        monkeypatch.setattr(SchedulerBatchResultProcessor, "_handle_finish_state_updated_req",
                            lambda *a, **k: None)
    fn(sched, batch, result)
    return sched, live


def _stream(sched, req, use_plugin_body, monkeypatch):
    """The release's real streamer on ``req`` (stock or the patched function): the output batch it sends."""
    sink = _Sink()
    if isinstance(req.output_ids, array):  # 0.5.13+ keep token ids in arrays (the stale case builds lists)
        req.origin_input_ids = req.origin_input_ids_unpadded = array("q", req.origin_input_ids)
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    if mixin_layout():
        from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin as M

        sched.send_to_detokenizer, sched.get_loads = sink, (lambda *a, **k: None)
        sched.spec_algorithm, sched.stream_interval = SpeculativeAlgorithm.EAGLE3, 1
        sched.attn_tp_rank, sched.dp_rank = 0, 0
        sched.server_args.enable_request_time_stats_logging = False
        from sglang.srt.disaggregation.utils import DisaggregationMode

        sched.disaggregation_mode = DisaggregationMode.NULL
        fn = core.build_fix(FIX)[f"{releases.MIXIN}.SchedulerOutputProcessorMixin.stream_output_generation"] \
            if use_plugin_body else M.__dict__["stream_output_generation"]
        fn(sched, [req], False)
    else:
        from sglang.srt.disaggregation.utils import DisaggregationMode
        from sglang.srt.managers.scheduler_components import output_streamer as mod

        if use_plugin_body:
            (fn,) = core.build_fix(FIX).values()
            monkeypatch.setattr(mod._GenerationStreamAccumulator, "accept", fn)
        given = dict(send_to_detokenizer=sink, server_args=Unset(stream_interval=1), is_generation=True,
                     spec_algorithm=SpeculativeAlgorithm.EAGLE3, disaggregation_mode=DisaggregationMode.NULL,
                     ps=Unset(dp_rank=0, attn_tp_rank=0), load_inquirer_get_loads=lambda *a, **k: None,
                     rust_server=None)
        S = mod.SchedulerOutputStreamer
        streamer = S(**{f.name: given.get(f.name, _Inert()) for f in dataclasses.fields(S) if f.init})
        with _plain_config():
            streamer.stream_output([req], False)
    (out,) = sink.sent
    return dict(reasoning=out.reasoning_tokens[0], completion=out.completion_tokens[0], output=list(out.output_ids[0]))


def sent(run, use_plugin_body, monkeypatch, **kw):
    sched, live = _finished_live_request(run, monkeypatch, **kw)
    assert live.finished()
    return _stream(sched, live, use_plugin_body, monkeypatch)


def test_stock_counts_the_run_past_the_stop(monkeypatch):
    s = sent([5, STOP, 9], False, monkeypatch)
    assert s["output"] == [5, STOP] and s["completion"] == 2
    assert s["reasoning"] == 3  # the token past the stop counted as reasoning: reasoning_tokens > completion_tokens


def test_plugin_counts_the_tokens_sent(monkeypatch):
    s = sent([5, STOP, 9], True, monkeypatch)
    assert s == dict(reasoning=2, completion=2, output=[5, STOP])


def test_run_crossing_max_new_tokens(monkeypatch):
    """#37450's case: the run crosses max_new_tokens (no stop token in it)."""
    stock, ours = (sent([5, 6, 8], p, monkeypatch, max_new_tokens=2) for p in (False, True))
    assert stock["completion"] == ours["completion"] == 2 and stock["output"] == ours["output"] == [5, 6]
    assert (stock["reasoning"], ours["reasoning"]) == (3, 2)


def test_reasoning_that_ended_before_the_stop_is_unchanged(monkeypatch):
    """The think-end token inside the run: both count the reasoning through it (2), the answer is not reasoning."""
    for use_plugin_body in (False, True):
        s = sent([5, THINK_END, STOP, 9], use_plugin_body, monkeypatch)
        assert s == dict(reasoning=2, completion=3, output=[5, THINK_END, STOP]), use_plugin_body


def test_unfinished_request_is_unchanged(monkeypatch):
    """A request that did not finish sends its whole count on both sides."""
    for use_plugin_body in (False, True):
        fn, sched, batch, result, live = decode_case(False)
        live.require_reasoning = True
        sched.model_config.think_end_id, sched.model_config.think_end_ids = THINK_END, [THINK_END]
        fn(sched, batch, result)
        assert not live.finished()
        live.stream = True
        s = _stream(sched, live, use_plugin_body, monkeypatch)
        assert s["reasoning"] == s["completion"] == len(live.output_ids) == 3, use_plugin_body
