"""overlap-war-barrier (#26380 in 0.5.13, at #31687's place in 0.5.16) on the release's real overlap loops: the
schedule stream's work after a launch (the previous batch's result processing, then the next batch's writes) is ordered
after the forward just launched with the plugin, and not on stock nor with the barrier at the loop top.

Stream model (CPU stand-ins for torch.cuda streams and events, ``Streams``): an operation queued on a stream runs after
the operation queued before it there; ``a.wait_stream(b)`` makes what ``a`` queues later wait for what ``b`` has queued
so far; ``Event.record()`` marks the current stream's last operation, ``s.wait_event(e)`` makes what ``s`` queues later
wait for it, and ``Event.synchronize()`` is a host wait, so every operation the host queues afterwards waits for it.
``ordered(x, y)``: ``y`` can only run after ``x``.

Scenario 1, the loops (every release the fix applies to, and 0.5.16 as the reference): the release's real
``event_loop_overlap``, ``event_loop_overlap_disagg_prefill`` or ``event_loop_overlap_disagg_decode`` (stock, the
plugin's, and the plugin's composed with grammar-result-order's where both patch the loop) runs two batches B1, B2
(real ScheduleBatch objects). Stand-ins: the batch getter queues "build Bn" on the current stream and hands out the
next batch (a third call stops the loop); ``run_batch`` launches "Bn forward" under ``forward_stream_ctx`` after
``forward_stream.wait_stream(schedule_stream)``, as the release does; ``process_batch_result`` queues "process Bn"
(radix insert, frees: schedule-stream writes). The barrier itself is the release's (``_war_barrier_enabled`` on
0.5.13, ``_apply_war_barrier`` from 0.5.14, with no read-done event published) or, on 0.5.11 / 0.5.12.x, the plugin's
``war_barrier``. Expected (#31687): the loop processes B1's result after launching B2, so "process B1" must be ordered
after "B2 forward": the barrier's wait comes after B2's launch and before B1's result processing. Stock 0.5.13 -
0.5.15.post1 (loop top) and this fix's former place on 0.5.11 / 0.5.12.x (the first statement of the batch getter,
re-created here with the real ``war_barrier``) order "build B2" after B1's forward but not "process B1" after B2's.

Scenario 2 (0.5.11 / 0.5.12.x): a speculative (EAGLE3, spec v2) decode batch B of two requests runs two steps through
the release's real ``Scheduler.event_loop_overlap`` (the plugin's, or composed with grammar-result-order's) and the
release's real ``get_next_batch_to_run``. The decode preparation is the release's real
``ScheduleBatch.prepare_for_decode`` -> ``EagleDraftInputV2Mixin.prepare_for_decode`` (``maybe_wait_verify_done``, KV
lengths, ``assign_req_to_token_pool_func``): its ``req_to_token`` write (a Triton kernel on the GPU) is recorded on the
stream current at that moment, and ``alloc_token_slots`` returns fresh slots (page size 1: a free-list slice, no
shared-buffer write). Stand-ins: ``update_running_batch`` is its last statement (``batch.prepare_for_decode()``; no
retraction, memory is ample), ``run_batch`` launches the step as the release does under ``forward_stream_ctx``
(``forward_stream.wait_stream(schedule_stream)``, then the draft, the verify, whose ``verify_done`` event becomes the
next draft input's, and the draft extend, each reading ``req_to_token``), receiving requests and
``process_batch_result`` do nothing. Expected: stock orders step 2's write after step 1's verify only (its host wait on
``verify_done``), not after step 1's draft extend; the plugin orders it after the whole forward.
"""

import itertools
import types

import pytest
import torch
from conftest import VERSION, requires_sglang, where_patched

from sglang_specv2_fixes import core, releases
from sglang_specv2_fixes.fixes import grammar_result_order, overlap_war_barrier

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = overlap_war_barrier.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's overlap loops")
OLD_LINES = ("0.5.11", "0.5.12", "0.5.12.post1")  # no barrier upstream


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


def overlap_scheduler(monkeypatch, streams):
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
    return sched


def loop_fn(qualname, variant):
    """The loop ``qualname`` (``Owner.name``) as ``variant`` serves it: "stock" (the release's), "plugin" (this fix's
    patch alone) or "composed" (with grammar-result-order's, as the plugin serves both selected)."""
    from sglang.srt.disaggregation.decode import SchedulerDisaggregationDecodeMixin
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
    from sglang.srt.managers.scheduler import Scheduler

    if variant == "stock":
        owners = {c.__name__: c for c in (Scheduler, SchedulerDisaggregationPrefillMixin,
                                          SchedulerDisaggregationDecodeMixin)}
        owner, name = qualname.split(".")
        return getattr(owners[owner], name)
    built = core.build_fix(FIX) if variant == "plugin" else core.build_fixes([grammar_result_order.FIX.name, FIX])
    (fn,) = [f for t, f in built.items() if t.endswith("." + qualname)]
    return fn


def run_two_steps(monkeypatch, variant):
    from sglang_specv2_fixes.testing import scenarios

    streams = Streams()
    with scenarios.published_server_args(monkeypatch, speculative_algorithm="EAGLE3", speculative_num_steps=3,
                                         speculative_eagle_topk=1, speculative_num_draft_tokens=4, page_size=1):
        sched = overlap_scheduler(monkeypatch, streams)
        with pytest.raises(StopLoop):
            loop_fn("Scheduler.event_loop_overlap", variant)(sched)
    return streams


LOOPS = pytest.mark.parametrize("variant", ["plugin", "composed"])


OLD_ONLY = pytest.mark.skipif(VERSION not in OLD_LINES,
                              reason=f"sglang {VERSION}: the scenario is 0.5.11 / 0.5.12.x's decode preparation")


@OLD_ONLY
def test_stock_write_races_the_previous_draft_extend(monkeypatch, cuda):
    s = run_two_steps(monkeypatch, "stock")
    write2 = s.find("write req_to_token #2")
    assert s.ordered(s.find("B1 verify"), write2)  # maybe_wait_verify_done: a host wait on the verify only
    assert not s.ordered(s.find("B1 draft extend"), write2)  # the race: nothing orders it after the draft extend
    assert s.waits() == ["forward.wait_stream(schedule)"] * 2  # only the read-after-write direction
    assert s.ordered(write2, s.find("B2 draft"))


@OLD_ONLY
@FIXED_HERE
@LOOPS
def test_plugin_orders_the_write_after_the_previous_forward(monkeypatch, cuda, variant):
    s = run_two_steps(monkeypatch, variant)
    write1, write2 = s.find("write req_to_token #1"), s.find("write req_to_token #2")
    for op in ("B1 draft", "B1 verify", "B1 draft extend"):
        assert s.ordered(s.find(op), write2), op
    assert s.ordered(write2, s.find("B2 draft"))  # and the read-after-write direction still holds
    # one barrier per launch, right after it (the third iteration stops before anything is launched)
    assert s.waits() == ["forward.wait_stream(schedule)", "schedule.wait_stream(forward)"] * 2
    barriers = [o for o in s.ops if o.name == "schedule.wait_stream(forward)"]
    assert s.ordered(barriers[0], write2) and not s.ordered(write2, barriers[0])
    assert not s.ordered(barriers[0], write1)  # the first batch is built before anything was launched


@OLD_ONLY
@FIXED_HERE
def test_plugin_no_barrier_off_cuda_or_without_overlap(monkeypatch):
    """Upstream's gate: CUDA only (#26646), and only in an overlap loop (the normal loop shares one stream)."""
    monkeypatch.setattr(overlap_war_barrier, "_CUDA", False)
    assert run_two_steps(monkeypatch, "plugin").waits() == ["forward.wait_stream(schedule)"] * 2
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




# ------------------------------------------------------------------ scenario 1: the barrier's place in the loops (#31687)
KINDS = {  # kind -> (loop, batch getter, the batches' mode)
    "overlap": ("Scheduler.event_loop_overlap", "get_next_batch_to_run", "DECODE"),
    "pd-prefill": ("SchedulerDisaggregationPrefillMixin.event_loop_overlap_disagg_prefill",
                   "get_next_disagg_prefill_batch_to_run", "EXTEND"),
    "pd-decode": ("SchedulerDisaggregationDecodeMixin.event_loop_overlap_disagg_decode",
                  "get_next_disagg_decode_batch_to_run", "DECODE"),
}


def loop_scheduler(streams, kind, old_place=False):
    """A Scheduler (made without __init__) whose overlap loop ``kind`` runs B1 and B2 (see scenario 1). ``old_place``:
    the batch getter first calls ``war_barrier``, this fix's place before #31687 (0.5.11 / 0.5.12.x)."""
    import inspect

    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang_specv2_fixes.testing import overlap_loop, scenarios

    _, getter, mode = KINDS[kind]
    algo = SpeculativeAlgorithm.from_string("EAGLE3")
    batches = []
    for i in (1, 2):
        req = Req(f"r{i}", "", list(range(1, 11)), SamplingParams(max_new_tokens=64))
        batches.append(overlap_loop._batch([req], algo, has_grammar=False, mode=mode))
    names = {id(b): f"B{i}" for i, b in enumerate(batches, 1)}
    sched = object.__new__(Scheduler)
    sched.__dict__.update(
        _engine_paused=False, gracefully_exit=False, _war_barrier_enabled=True, require_mlp_sync=False,
        enable_unified_memory=False, server_args=scenarios.Unset(enable_unified_memory=False), is_generation=True,
        last_batch=None, cur_batch=None, running_batch=None, chunked_req=None, enable_overlap=True, is_hybrid_swa=True,
        spec_algorithm=algo, schedule_stream=streams.schedule, forward_stream=streams.forward,
        forward_stream_ctx=streams.use(streams.forward), waiting_queue=[], enable_staging=False, _sched_idled=False,
        # _apply_war_barrier's read-done event (0.5.14+): none published, so it waits for the whole forward stream
        model_worker=types.SimpleNamespace(war_fastpath_runner=types.SimpleNamespace(war_fastpath_read_done_event=None)),
    )
    nothing = lambda *a, **k: []  # noqa: E731
    sched.recv_requests = sched.ingest_requests = nothing
    sched.request_receiver = types.SimpleNamespace(recv_requests=nothing)
    sched.process_input_requests = lambda recv_reqs: None
    sched.process_decode_queue = sched._record_scheduler_state_for_paused_engine = lambda *a, **k: None
    sched.disagg_decode_prealloc_queue = types.SimpleNamespace(prefetch_prefill_dp_rank_queries=lambda: None)
    sched.disagg_prefill_bootstrap_queue = types.SimpleNamespace(pop_bootstrapped=lambda *a, **k: [])
    sched.process_disagg_prefill_inflight_queue = lambda *a, **k: None
    sched.ngram_embedding_manager = types.SimpleNamespace(prepare_for_forward=lambda batch, **k: batch)
    sched.on_idle = lambda: None
    takes_plan = "running_batch" in inspect.signature(getattr(Scheduler, getter)).parameters  # 0.5.16+

    def get_next(*args, **kwargs):
        if old_place:
            overlap_war_barrier.war_barrier(sched)
        if not batches:
            raise StopLoop()
        batch = batches.pop(0)
        streams.current.enqueue(f"build {names[id(batch)]}")
        if not takes_plan:
            return batch
        from sglang.srt.managers.schedule_batch import NextBatchPlan

        return NextBatchPlan(batch_to_run=batch, running_batch=batch)

    def run_batch(batch, *args, **kwargs):
        name = names[id(batch)]
        with sched.forward_stream_ctx:
            sched.forward_stream.wait_stream(sched.schedule_stream)
            streams.forward.enqueue(f"{name} forward")
        return types.SimpleNamespace(delay_sample_func=None, name=name)

    def process_batch_result(batch, result):
        streams.current.enqueue(f"process {result.name}")

    setattr(sched, getter, get_next)
    sched.run_batch = run_batch
    sched.process_batch_result = process_batch_result
    return sched


def run_loop(kind, variant, old_place=False):
    s = Streams()
    sched = loop_scheduler(s, kind, old_place)
    with pytest.raises(StopLoop):
        loop_fn(KINDS[kind][0], variant)(sched)
    return s


POST_LAUNCH = ["forward.wait_stream(schedule)", "schedule.wait_stream(forward)"] * 2  # one barrier after each launch


def assert_post_launch_order(s):
    """#31687's order: B1's result is processed (after B2's launch) behind B2's forward, and the next batch is still
    built behind the forward before it."""
    names = [o.name for o in s.ops]
    assert names.index("B2 forward") < names.index("process B1")  # the loop launches B2, then processes B1
    assert s.ordered(s.find("B2 forward"), s.find("process B1"))
    assert s.ordered(s.find("B1 forward"), s.find("build B2"))
    # the barrier's wait: after B2's launch and before B1's result processing
    between = names[names.index("B2 forward") + 1:names.index("process B1")]
    assert between == ["schedule.wait_stream(forward)"]
    assert s.waits() == POST_LAUNCH


PD_KINDS = pytest.mark.parametrize("kind", list(KINDS))
UP_TO_0_5_16 = releases.release_set("up-to:0.5.16")


@pytest.mark.skipif(VERSION in OLD_LINES or VERSION not in UP_TO_0_5_16,
                    reason=f"sglang {VERSION}: the loop-top barrier is 0.5.13 - 0.5.15.post1's")
@PD_KINDS
def test_stock_loop_top_barrier_leaves_result_processing_unordered(cuda, kind):
    """0.5.13 - 0.5.15.post1: the barrier before the next batch is built orders that build after the previous forward,
    but B1's result, processed after B2's launch, races B2's reads. 0.5.16 (upstream #31687) has the order."""
    s = run_loop(kind, "stock")
    if VERSION == "0.5.16":
        assert_post_launch_order(s)
        return
    assert s.ordered(s.find("B1 forward"), s.find("build B2"))
    assert not s.ordered(s.find("B2 forward"), s.find("process B1"))


@pytest.mark.skipif(VERSION not in OLD_LINES, reason=f"sglang {VERSION}: no barrier upstream only up to 0.5.12.post1")
@PD_KINDS
@pytest.mark.parametrize("place", ["stock", "getter"])
def test_old_lines_stock_and_loop_top_placement_leave_result_processing_unordered(cuda, kind, place):
    """0.5.11 / 0.5.12.x: stock has no barrier; this fix's former place (first in the batch getter) orders the next
    build after the previous forward but not B1's result processing after B2's forward."""
    s = run_loop(kind, "stock", old_place=place == "getter")
    assert not s.ordered(s.find("B2 forward"), s.find("process B1"))
    assert s.ordered(s.find("B1 forward"), s.find("build B2")) == (place == "getter")


@FIXED_HERE
@PD_KINDS
@pytest.mark.parametrize("variant", ["plugin", "composed"])
def test_plugin_barrier_right_after_each_launch(cuda, kind, variant):
    if variant == "composed" and kind == "pd-prefill":
        pytest.skip("grammar-result-order does not patch the PD prefill loop")
    assert_post_launch_order(run_loop(kind, variant))


@FIXED_HERE
def test_plugin_patches_the_three_overlap_loops_only():
    assert sorted(t.rsplit(".", 2)[-2] + "." + t.rsplit(".", 1)[-1] for t in core.build_fix(FIX)) == sorted(
        q for q, _, _ in KINDS.values())
