"""draft-extend-read-done-order (#37988 / #37936; upstream's SharedReadEnds from 0.5.22) on each release's real
``EAGLEDraftExtendCudaGraphRunner.execute``: the read-done event the overlap scheduler's WAR barrier waits on is
recorded after the draft-extend graph's replay with the plugin, before it on stock (0.5.14 - 0.5.21).

The runner is the release's class made without ``__init__`` (``object.__new__``) with the attributes ``execute``
touches: CPU tensors for its input buffers, the release's own ``_pad_to_bucket`` / ``_make_graph_key`` and
``LogitsProcessorOutput``, and stand-ins that append to one log for what runs on the GPU: the attention backend's
out-of-graph metadata, the graph replay (``_replay_graph``) and ``device_module.Event().record()`` (an event marks the
stream's work queued so far, so its place in the log is what the scheduler's ``wait_event`` waits for). The event the
runner publishes is then handed to the release's real ``Scheduler._apply_war_barrier`` (made without ``__init__``),
which must wait on that very object: the attribute names (``war_fastpath_read_done_event`` up to 0.5.17,
``shared_read_done_event`` from 0.5.18) are the release's own on both sides.
"""

import inspect
import types

import pytest
import torch
from conftest import LINE, VERSION, patched_here, requires_sglang, where_patched

from sglang_specv2_fixes import catalog, core, releases, selection
from sglang_specv2_fixes.fixes import draft_extend_read_done_order

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = draft_extend_read_done_order.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's EAGLEDraftExtendCudaGraphRunner.execute")
WIDTH, HIDDEN, VOCAB, RAW_BS = 4, 8, 16, 3  # chain of 3 steps: 4 tokens per request; 3 requests pad to the bucket 4
EVENT_ATTRS = ("war_fastpath_read_done_event", "shared_read_done_event")


class Event:
    def __init__(self, log):
        self.log = log

    def record(self):
        self.log.append(("record", self))

    def __repr__(self):
        return "Event"


class Backend:
    def __init__(self, log, shared_read_ends=None):
        self.log, self.ends = log, shared_read_ends

    def init_forward_metadata_out_graph(self, fb):
        self.log.append(("metadata", fb.batch_size))

    def shared_read_ends(self, forward_mode):  # 0.5.22+: where this backend's shared reads end (SharedReadEnds)
        return self.ends


def _runner(log, shared_read_ends=None):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner

    n, capture_bs = 4 * WIDTH, [1, 2, 4]
    r = object.__new__(EAGLEDraftExtendCudaGraphRunner)
    ints = lambda *shape: torch.zeros(*shape, dtype=torch.int64)  # noqa: E731
    r.__dict__.update(
        deepep_adapter=types.SimpleNamespace(replay=lambda: None),
        buffers=types.SimpleNamespace(
            input_ids=ints(n), seq_lens=ints(4), out_cache_loc=ints(n), positions=ints(n), req_pool_indices=ints(4),
            num_correct_drafts=ints(4), num_accept_tokens=ints(4), extend_seq_lens=ints(4), select_index=ints(4),
            mrope_positions=ints(3, n), hidden_states=torch.zeros(n, HIDDEN), seq_lens_cpu=ints(4),
            global_num_tokens_gpu=ints(1), global_num_tokens_for_logprob_gpu=ints(1), mamba_track_indices=None),
        require_mlp_tp_gather=False, require_gathered_buffer=False, capture_bs=capture_bs, seq_len_fill_value=1,
        captured_req_width=WIDTH, num_tokens_per_bs=WIDTH, extend_seq_lens_cpu=[0] * 4,
        forward_mode=ForwardMode.DRAFT_EXTEND_V2, draft_extend_attn_backend=Backend(log, shared_read_ends),
        device_module=types.SimpleNamespace(Event=lambda: Event(log)),
        model_runner=types.SimpleNamespace(device_timer=None, model_config=types.SimpleNamespace(model_is_mrope=False),
                                           **{a: None for a in EVENT_ATTRS}),
    )

    def replay(shape_key, forward_batch):  # the captured graph, metadata reads inside it included
        log.append(("replay", shape_key))
        return types.SimpleNamespace(next_token_logits=torch.zeros(n, VOCAB), hidden_states=torch.zeros(n, HIDDEN))

    r._replay_graph = replay
    return r


def _forward_batch():
    m = RAW_BS * WIDTH
    return types.SimpleNamespace(
        batch_size=RAW_BS, input_ids=torch.arange(m), seq_lens=torch.full((RAW_BS,), 20), out_cache_loc=torch.arange(m),
        positions=torch.arange(m), req_pool_indices=torch.arange(1, RAW_BS + 1), extend_seq_lens=None,
        seq_lens_cpu=torch.full((RAW_BS,), 20), extend_seq_lens_cpu=[WIDTH] * RAW_BS, seq_lens_sum=20 * RAW_BS,
        global_num_tokens_cpu=None, mrope_positions=None, out_cache_loc_virtual=None, kv_loc_plan=None,
        kv_loc_cols=None, out_cache_loc_dsv4=None, mamba_track_indices=None,
        spec_info=types.SimpleNamespace(num_correct_drafts=torch.full((RAW_BS,), 2),
                                        num_accept_tokens=torch.full((RAW_BS,), 3),
                                        hidden_states=torch.zeros(m, HIDDEN)),
    )


def _execute(fn, shared_read_ends=None):
    """Run ``fn`` (the release's execute or the plugin's) once; returns (log of kinds, runner, recorded events)."""
    log = []
    runner = _runner(log, shared_read_ends)
    args = [_forward_batch()]
    if "select_index" in inspect.signature(fn).parameters:  # 0.5.20+
        args.append(torch.arange(RAW_BS))
    out = fn(runner, *args)
    assert out.next_token_logits.shape[0] in (RAW_BS, RAW_BS * WIDTH, 4 * WIDTH)  # the release's own trim ran
    return [kind for kind, _ in log], runner, [obj for kind, obj in log if kind == "record"]


def _stock():
    from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner

    return EAGLEDraftExtendCudaGraphRunner.execute


def _patched():
    (fn,) = core.build_fix(FIX).values()
    return fn


def _published(runner):
    """The event the runner left for the scheduler (the attribute this release writes), and that attribute."""
    found = [(a, getattr(runner.model_runner, a)) for a in EVENT_ATTRS if getattr(runner.model_runner, a) is not None]
    assert len(found) <= 1, found
    return found[0] if found else (None, None)


def _barrier_waits_on(runner):
    """The release's real Scheduler._apply_war_barrier after this forward: what the schedule stream waited on."""
    from sglang.srt.managers.scheduler import Scheduler

    waits = []
    stream = types.SimpleNamespace(wait_event=lambda ev: waits.append(("wait_event", ev)),
                                   wait_stream=lambda s: waits.append(("wait_stream", s)))
    sched = object.__new__(Scheduler)
    worker = types.SimpleNamespace(war_fastpath_runner=runner.model_runner, last_shared_read_runner=runner.model_runner)
    sched.__dict__.update(_war_barrier_enabled=True, model_worker=worker, schedule_stream=stream,
                          forward_stream="forward stream")
    sched._apply_war_barrier()
    assert all(getattr(runner.model_runner, a) is None for a in EVENT_ATTRS)  # the barrier clears what it read
    return waits


@FIXED_HERE
def test_stock_publishes_the_read_done_event_before_the_replay():
    kinds, runner, (event,) = _execute(_stock())
    assert kinds == ["metadata", "record", "replay"]  # the bug: the graph's own reads come after the event
    attr, published = _published(runner)
    assert published is event
    assert attr == ("shared_read_done_event" if VERSION in releases.release_set("from:0.5.18")
                    else "war_fastpath_read_done_event")
    assert _barrier_waits_on(runner) == [("wait_event", event)]  # the schedule stream waits for the graph's start only


@FIXED_HERE
def test_plugin_publishes_the_read_done_event_after_the_replay():
    kinds, runner, (event,) = _execute(_patched())
    assert kinds == ["metadata", "replay", "record"]
    stock_attr, _ = _published(_execute(_stock())[1])
    attr, published = _published(runner)
    assert published is event and attr == stock_attr  # the release's own attribute, one event
    assert _barrier_waits_on(runner) == [("wait_event", event)]  # the scheduler's writes wait for the graph's end


@FIXED_HERE
def test_plugin_changes_only_where_the_event_is_recorded():
    """The same buffers, metadata view and output as stock: only the record moved."""
    ours, stock = _runner([]), _runner([])
    outs = []
    for fn, r in ((_patched(), ours), (_stock(), stock)):
        args = [_forward_batch()] + ([torch.arange(RAW_BS)] if "select_index" in inspect.signature(fn).parameters
                                     else [])
        outs.append(fn(r, *args))
    for name, t in vars(stock.buffers).items():
        if isinstance(t, torch.Tensor):
            assert torch.equal(getattr(ours.buffers, name), t), name
    assert ours.extend_seq_lens_cpu == stock.extend_seq_lens_cpu and (ours.raw_bs, ours.bs) == (stock.raw_bs, stock.bs)
    assert outs[0].next_token_logits.shape == outs[1].next_token_logits.shape
    assert list(core.build_fix(FIX)) == [
        "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner.EAGLEDraftExtendCudaGraphRunner.execute"]


def test_default_and_table_state():
    """Patched releases: ``ready`` under ``auto`` with no switch set (the default since its cost was measured, session
    26), ``disabled`` only where the selection leaves it out (``auto,-NAME``, or ``-#37988``); elsewhere the table's
    note: not-applicable before 0.5.14, upstream from 0.5.22, for every selection."""
    fix = draft_extend_read_done_order.FIX
    assert fix.opt_in is None
    states = {}
    for value in ("auto", f"auto,-{FIX}", "-#37988"):
        (st,) = core.plan(selection.parse(value, [fix]), VERSION, fixes=[fix]).fixes
        states[value] = (st.state, st.reason)
    if patched_here(FIX):
        assert states["auto"][0] == catalog.READY and "fingerprints match" in states["auto"][1], states["auto"]
        for value in (f"auto,-{FIX}", "-#37988"):
            state, reason = states[value]
            assert state == catalog.DISABLED and reason.startswith("not selected"), states[value]
    else:
        note = releases.entry(FIX, LINE)
        expected = catalog.NOT_APPLICABLE if VERSION in releases.release_set("up-to:0.5.13.post1") else catalog.UPSTREAM
        assert note.state == expected
        assert {s for s, _ in states.values()} == {expected}
        assert all("(source verified)" in r for _, r in states.values()), states


def _shared_read_ends():
    from sglang.srt.layers.attention import base_attn_backend

    return getattr(base_attn_backend, "SharedReadEnds", None)


@pytest.mark.skipif(patched_here(FIX) or VERSION not in releases.release_set("from:0.5.22"),
                    reason=f"sglang {VERSION}: no per-backend SharedReadEnds (0.5.22+)")
def test_upstream_publishes_per_backend_declaration():
    """0.5.22+ (the table's upstream note): after the replay for IN_REPLAY / POST_REPLAY, before it only for
    PRE_REPLAY, and no event for UNKNOWN (the scheduler then waits for the whole forward stream)."""
    ends = _shared_read_ends()
    expected = {ends.PRE_REPLAY: ["metadata", "record", "replay"], ends.IN_REPLAY: ["metadata", "replay", "record"],
                ends.POST_REPLAY: ["metadata", "replay", "record"], ends.UNKNOWN: ["metadata", "replay"]}
    for declared, order in expected.items():
        kinds, runner, events = _execute(_stock(), declared)
        assert kinds == order, declared
        assert _published(runner)[1] is (events[0] if events else None)
        if not events:
            assert _barrier_waits_on(runner) == [("wait_stream", "forward stream")]


@pytest.mark.skipif(VERSION not in releases.release_set("up-to:0.5.13.post1"),
                    reason=f"sglang {VERSION} has the read-done event")
def test_no_read_done_event_before_0_5_14():
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.speculative import eagle_draft_extend_cuda_graph_runner as m

    assert not hasattr(Scheduler, "_apply_war_barrier")
    assert "read_done" not in inspect.getsource(m)
