"""overlap-war-barrier (#26380, in 0.5.13) on the release's real overlap loop and batch getters: the schedule stream's
writes for the next batch are ordered after the previous forward's reads with the plugin, and not on stock.

Stream model (CPU stand-ins for torch.cuda streams and events, ``Streams``): an operation queued on a stream runs after
the operation queued before it there; ``a.wait_stream(b)`` makes what ``a`` queues later wait for what ``b`` has queued
so far; ``Event.record()`` marks the current stream's last operation, ``s.wait_event(e)`` makes what ``s`` queues later
wait for it, and ``Event.synchronize()`` is a host wait, so every operation the host queues afterwards waits for it.
``ordered(x, y)``: ``y`` can only run after ``x``.

The scenario (0.5.11 / 0.5.12.x): a speculative (EAGLE3, spec v2) decode batch B of two requests runs two steps
through the release's real ``Scheduler.event_loop_overlap`` (stock, and grammar-result-order's patched loop, as the
plugin serves these releases) and the release's real ``get_next_batch_to_run`` (stock, or the plugin's). The decode
preparation is the release's real ``ScheduleBatch.prepare_for_decode`` -> ``EagleDraftInputV2Mixin.prepare_for_decode``
(``maybe_wait_verify_done``, KV lengths, ``assign_req_to_token_pool_func``): its ``req_to_token`` write (a Triton
kernel on the GPU) is recorded on the stream current at that moment, and ``alloc_token_slots`` returns fresh slots
(page size 1: a free-list slice, no shared-buffer write). Stand-ins: ``update_running_batch`` is its last statement
(``batch.prepare_for_decode()``; no retraction, memory is ample), ``run_batch`` launches the step as the release does
under ``forward_stream_ctx`` (``forward_stream.wait_stream(schedule_stream)``, then the draft, the verify, whose
``verify_done`` event becomes the next draft input's, and the draft extend, each reading ``req_to_token``), receiving
requests and ``process_batch_result`` do nothing. Expected: stock orders step 2's write after step 1's verify only
(its host wait on ``verify_done``), not after step 1's draft extend; the plugin orders it after the whole forward.
The PD-disaggregation getters (``get_next_disagg_prefill_batch_to_run`` / ``get_next_disagg_decode_batch_to_run``)
are run directly after a forward was queued, their write (the prefill allocation / the decode preparation) recorded.
"""

import itertools
import types

import pytest
import torch
from conftest import VERSION, requires_sglang, where_patched

from sglang_specv2_fixes import core
from sglang_specv2_fixes.fixes import grammar_result_order, overlap_war_barrier

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = overlap_war_barrier.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's get_next_batch_to_run and PD batch getters")


class StopLoop(Exception):
    pass


class Op:
    def __init__(self, name, deps):
        self.name, self.deps = name, [d for d in deps if d is not None]

    def __repr__(self):
        return self.name


class Streams:
    """The CUDA ordering the overlap scheduler relies on, recorded (see the module docstring)."""

    def __init__(self):
        self.ops, self.host_fence = [], []
        self.schedule, self.forward = FakeStream(self, "schedule"), FakeStream(self, "forward")
        self.current = self.schedule  # run_event_loop: StreamContext(schedule_stream)

    def use(self, stream):
        """A reusable stream context (``forward_stream_ctx``)."""
        return _StreamContext(self, stream)

    def find(self, text):
        (op,) = [o for o in self.ops if o.name == text]
        return op

    @staticmethod
    def ordered(first, then):
        seen, todo = set(), [then]
        while todo:
            op = todo.pop()
            if op is first:
                return True
            if id(op) not in seen:
                seen.add(id(op))
                todo.extend(op.deps)
        return False

    def waits(self):
        return [o.name for o in self.ops if ".wait_stream(" in o.name]


class _StreamContext:
    def __init__(self, streams, stream):
        self.streams, self.stream, self.prev = streams, stream, []

    def __enter__(self):
        self.prev.append(self.streams.current)
        self.streams.current = self.stream

    def __exit__(self, *exc):
        self.streams.current = self.prev.pop()


class FakeStream:
    def __init__(self, streams, name):
        self.streams, self.name, self.tail = streams, name, None

    def _queue(self, name, *deps):
        op = Op(name, [self.tail, *deps, *self.streams.host_fence])
        self.tail = op
        self.streams.ops.append(op)
        return op

    def enqueue(self, name):
        return self._queue(name)

    def wait_stream(self, other):
        return self._queue(f"{self.name}.wait_stream({other.name})", other.tail)

    def wait_event(self, event):  # what this stream queues later waits for the event's operation (no host wait)
        return self._queue(f"{self.name}.wait_event({event.op})", event.op)


class FakeEvent:
    def __init__(self, streams):
        self.streams, self.op = streams, None

    def record(self):
        self.op = self.streams.current.tail

    def synchronize(self):  # a host wait
        self.streams.host_fence.append(self.op)


def plugin_fn(qualname):
    (fn,) = [f for t, f in core.build_fix(FIX).items() if t.endswith("." + qualname)]
    return fn


@pytest.fixture
def cuda(monkeypatch):
    """The barrier's gate as on a CUDA build with a GPU (upstream's is_cuda())."""
    monkeypatch.setattr(overlap_war_barrier, "_CUDA", True)


def draft_input(verify_done=None):
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    d = object.__new__(EagleDraftInput)
    d.verify_done = verify_done
    return d


def decode_batch(monkeypatch, streams):
    """A real ScheduleBatch: a spec-v2 EAGLE3 decode step of two requests (3 steps, topk 1, 4 draft tokens)."""
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.speculative import spec_utils
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang_specv2_fixes.testing import scenarios

    reqs = []
    for i in range(2):
        r = Req(f"r{i}", "", list(range(1, 11)), SamplingParams(max_new_tokens=64))
        r.req_pool_idx = i + 1
        scenarios.set_kv(r, committed=11, allocated=18)
        reqs.append(r)
    fields = set(ScheduleBatch.__dataclass_fields__)
    kw = dict(reqs=reqs, forward_mode=ForwardMode.DECODE, spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
              enable_overlap=True, device="cpu", has_grammar=False, return_logprob=False)
    batch = ScheduleBatch(**{k: v for k, v in kw.items() if k in fields})
    batch.__dict__.update(
        spec_info=draft_input(),
        req_pool_indices=torch.tensor([r.req_pool_idx for r in reqs]),
        seq_lens=torch.tensor([11, 11]),
        req_to_token_pool=types.SimpleNamespace(req_to_token=torch.zeros(4, 64, dtype=torch.int32)),
        tree_cache=types.SimpleNamespace(supports_swa=lambda: False),
        token_to_kv_pool_allocator=types.SimpleNamespace(page_size=1),
        sampling_info=types.SimpleNamespace(penalizer_orchestrator=types.SimpleNamespace(is_required=False)),
    )

    def assign(req_pool_indices, req_to_token, start, end, out_cache_loc, bs):  # a Triton kernel on the GPU
        assert req_to_token is batch.req_to_token_pool.req_to_token
        streams.current.enqueue(f"write req_to_token #{next(writes)}")

    writes = itertools.count(1)
    monkeypatch.setattr(spec_utils, "assign_req_to_token_pool_func", assign)
    from sglang.srt.speculative import eagle_info_v2

    monkeypatch.setattr(eagle_info_v2, "alloc_token_slots", lambda tree_cache, n, *a, **k: torch.arange(n))
    return batch


def overlap_scheduler(monkeypatch, streams, plugin_getter):
    """The release's Scheduler (made without __init__) around ``decode_batch``, ready for two overlap iterations."""
    from sglang.srt.managers.scheduler import Scheduler
    from sglang_specv2_fixes.testing import scenarios

    batch = decode_batch(monkeypatch, streams)
    sched = object.__new__(Scheduler)
    sched.__dict__.update(
        _engine_paused=False, require_mlp_sync=False, is_generation=True, last_batch=None, cur_batch=None,
        running_batch=batch, chunked_req=None, dllm_config=None, enable_hisparse=False, enable_fpm=False,
        enable_overlap=True, is_hybrid_swa=True, spec_algorithm=batch.spec_algorithm, schedule_stream=streams.schedule,
        forward_stream=streams.forward, forward_stream_ctx=streams.use(streams.forward),
        server_args=scenarios.Unset(enable_unified_memory=False),
    )
    nothing = lambda *a, **k: []  # noqa: E731
    sched.recv_requests = sched.ingest_requests = nothing
    sched.request_receiver = types.SimpleNamespace(recv_requests=nothing)
    sched.process_input_requests = lambda recv_reqs: None
    sched._abort_on_waiting_timeout = sched._abort_on_running_timeout = lambda: None
    sched.get_new_batch_prefill = lambda: None
    sched.maybe_prepare_mlp_sync_batch = lambda b, need_sync=True: b
    sched._maybe_prepare_ngram_embedding = lambda b: b
    sched.process_batch_result = lambda b, result: None
    steps = itertools.count(1)

    def update_running_batch(b):  # the release's update_running_batch without retraction: its last statement
        if next(steps) > 2:
            raise StopLoop()
        b.prepare_for_decode()
        return b

    def run_batch(b):  # Scheduler.run_batch (overlap): the forward on forward_stream after the schedule stream
        name = f"B{next(launches)}"
        with sched.forward_stream_ctx:
            sched.forward_stream.wait_stream(sched.schedule_stream)
            streams.forward.enqueue(f"{name} draft")
            streams.forward.enqueue(f"{name} verify")
            verify_done = FakeEvent(streams)
            verify_done.record()
            streams.forward.enqueue(f"{name} draft extend")
        b.spec_info = draft_input(verify_done)  # batch.spec_info = batch_result.next_draft_input
        return types.SimpleNamespace(delay_sample_func=None)

    launches = itertools.count(1)
    sched.update_running_batch = update_running_batch
    sched.run_batch = run_batch
    if plugin_getter:
        sched.get_next_batch_to_run = plugin_fn("Scheduler.get_next_batch_to_run").__get__(sched)
    return sched


def run_two_steps(monkeypatch, plugin_getter, plugin_loop):
    from sglang.srt.managers.scheduler import Scheduler
    from sglang_specv2_fixes.testing import scenarios

    streams = Streams()
    with scenarios.published_server_args(monkeypatch, speculative_algorithm="EAGLE3", speculative_num_steps=3,
                                         speculative_eagle_topk=1, speculative_num_draft_tokens=4, page_size=1):
        sched = overlap_scheduler(monkeypatch, streams, plugin_getter)
        loop = (scenarios.body(grammar_result_order, grammar_result_order.FIX.name, target="Scheduler.event_loop_overlap")
                if plugin_loop else Scheduler.event_loop_overlap)
        with pytest.raises(StopLoop):
            loop(sched)
    return streams


LOOPS = pytest.mark.parametrize("plugin_loop", [False, True], ids=["stock-loop", "grammar-result-order-loop"])


@pytest.mark.skipif(VERSION not in ("0.5.11", "0.5.12", "0.5.12.post1"),
                    reason=f"sglang {VERSION}: the scenario is 0.5.11 / 0.5.12.x's decode preparation")
@pytest.mark.parametrize("plugin_loop", [False], ids=["stock-loop"])
def test_stock_write_races_the_previous_draft_extend(monkeypatch, cuda, plugin_loop):
    s = run_two_steps(monkeypatch, plugin_getter=False, plugin_loop=plugin_loop)
    write2 = s.find("write req_to_token #2")
    assert s.ordered(s.find("B1 verify"), write2)  # maybe_wait_verify_done: a host wait on the verify only
    assert not s.ordered(s.find("B1 draft extend"), write2)  # the race: nothing orders it after the draft extend
    assert s.waits() == ["forward.wait_stream(schedule)"] * 2  # only the read-after-write direction
    assert s.ordered(write2, s.find("B2 draft"))


@FIXED_HERE
@LOOPS
def test_plugin_orders_the_write_after_the_previous_forward(monkeypatch, cuda, plugin_loop):
    s = run_two_steps(monkeypatch, plugin_getter=True, plugin_loop=plugin_loop)
    write1, write2 = s.find("write req_to_token #1"), s.find("write req_to_token #2")
    for op in ("B1 draft", "B1 verify", "B1 draft extend"):
        assert s.ordered(s.find(op), write2), op
    assert s.ordered(write2, s.find("B2 draft"))  # and the read-after-write direction still holds
    # one barrier per batch built, before its write (the first has no forward to wait for yet; the third iteration's
    # comes before the stand-in stops the loop)
    assert s.waits() == ["schedule.wait_stream(forward)", "forward.wait_stream(schedule)"] * 2 + [
        "schedule.wait_stream(forward)"]
    barriers = [o for o in s.ops if o.name == "schedule.wait_stream(forward)"]
    assert s.ordered(barriers[1], write2) and not s.ordered(write2, barriers[1]) and s.ordered(barriers[0], write1)


@FIXED_HERE
def test_plugin_no_barrier_off_cuda_or_without_overlap(monkeypatch):
    """Upstream's gate: CUDA only (#26646), and only in an overlap loop (the normal loop shares one stream)."""
    monkeypatch.setattr(overlap_war_barrier, "_CUDA", False)
    assert run_two_steps(monkeypatch, plugin_getter=True, plugin_loop=False).waits() == [
        "forward.wait_stream(schedule)"] * 2
    monkeypatch.setattr(overlap_war_barrier, "_CUDA", True)
    s = Streams()
    sched = types.SimpleNamespace(enable_overlap=False, is_hybrid_swa=True, schedule_stream=s.schedule,
                                  forward_stream=s.forward)
    overlap_war_barrier.war_barrier(sched)
    assert s.waits() == []
    sched.enable_overlap = True
    overlap_war_barrier.war_barrier(sched)
    assert s.waits() == ["schedule.wait_stream(forward)"]


@FIXED_HERE
def test_plugin_default_is_hybrid_swa_only_and_all_is_upstreams_rule(monkeypatch):
    """By default the barrier is issued for a hybrid-SWA pool only (its cost on other servers, measured, is in the
    fix's docstring); SGLANG_SPECV2_FIXES_WAR_BARRIER=all issues it for every overlap scheduler, as 0.5.13 does."""
    monkeypatch.setattr(overlap_war_barrier, "_CUDA", True)
    monkeypatch.delenv(overlap_war_barrier.ENV, raising=False)
    waits = []
    for swa, env in ((False, None), (True, None), (False, "all"), (False, "ALL "), (False, "swa")):
        if env is None:
            monkeypatch.delenv(overlap_war_barrier.ENV, raising=False)
        else:
            monkeypatch.setenv(overlap_war_barrier.ENV, env)
        monkeypatch.setattr(overlap_war_barrier, "_EVERYWHERE", None)  # a new process reads the variable again
        s = Streams()
        overlap_war_barrier.war_barrier(types.SimpleNamespace(enable_overlap=True, is_hybrid_swa=swa,
                                                              schedule_stream=s.schedule, forward_stream=s.forward))
        waits.append(len(s.waits()))
    assert waits == [0, 1, 1, 1, 0]
    monkeypatch.setattr(overlap_war_barrier, "_EVERYWHERE", None)
    s = Streams()  # a scheduler without the attribute (none of these releases lacks it): no SWA pool
    overlap_war_barrier.war_barrier(types.SimpleNamespace(enable_overlap=True, schedule_stream=s.schedule,
                                                          forward_stream=s.forward))
    assert s.waits() == []


def disagg_scheduler(streams):
    from sglang.srt.managers.scheduler import Scheduler

    sched = object.__new__(Scheduler)
    running = types.SimpleNamespace(batch_is_full=True, reqs=["r"], is_empty=lambda: False)
    sched.__dict__.update(enable_overlap=True, is_hybrid_swa=True, schedule_stream=streams.schedule,
                          forward_stream=streams.forward, running_batch=running, chunked_req=None, enable_hisparse=False)
    sched.maybe_prepare_mlp_sync_batch = lambda b, need_sync=True: b
    sched.process_prefill_chunk = lambda: None
    sched.get_new_prebuilt_batch = lambda: None

    def write(what):
        def fn(*a, **k):
            streams.current.enqueue(f"write {what}")
            return None  # no batch: set_schedule_time_batch is skipped
        return fn

    sched.get_new_batch_prefill = write("prefill allocation")  # prepare_for_extend's req_to_token rows
    sched.update_running_batch = lambda b: (write("decode preparation")(), b)[1]
    return sched


GETTERS = pytest.mark.parametrize("qualname,write", [
    ("SchedulerDisaggregationPrefillMixin.get_next_disagg_prefill_batch_to_run", "write prefill allocation"),
    ("SchedulerDisaggregationDecodeMixin.get_next_disagg_decode_batch_to_run", "write decode preparation"),
], ids=["pd-prefill", "pd-decode"])


def _getter(qualname, plugin):
    from sglang.srt.disaggregation.decode import SchedulerDisaggregationDecodeMixin
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin

    if plugin:
        return plugin_fn(qualname)
    cls = {c.__name__: c for c in (SchedulerDisaggregationPrefillMixin, SchedulerDisaggregationDecodeMixin)}
    owner, name = qualname.split(".")
    return getattr(cls[owner], name)


@pytest.mark.skipif(VERSION not in ("0.5.11", "0.5.12", "0.5.12.post1"),
                    reason=f"sglang {VERSION}: 0.5.13 has the barrier in the PD loops themselves")
@GETTERS
def test_stock_pd_getters_write_unordered(cuda, qualname, write):
    s = Streams()
    fwd = s.forward.enqueue("previous forward")
    _getter(qualname, plugin=False)(disagg_scheduler(s))
    assert not s.ordered(fwd, s.find(write)) and s.waits() == []


@FIXED_HERE
@GETTERS
def test_plugin_pd_getters_order_the_write(cuda, qualname, write):
    s = Streams()
    fwd = s.forward.enqueue("previous forward")
    _getter(qualname, plugin=True)(disagg_scheduler(s))
    assert s.ordered(fwd, s.find(write)) and s.waits() == ["schedule.wait_stream(forward)"]


@FIXED_HERE
def test_plugin_patches_the_three_getters_only():
    assert sorted(t.rsplit(".", 2)[-2] + "." + t.rsplit(".", 1)[-1] for t in core.build_fix(FIX)) == [
        "Scheduler.get_next_batch_to_run",
        "SchedulerDisaggregationDecodeMixin.get_next_disagg_decode_batch_to_run",
        "SchedulerDisaggregationPrefillMixin.get_next_disagg_prefill_batch_to_run",
    ]
