"""#28986 on the release's real ``Scheduler.event_loop_overlap`` or PD-disaggregation decode loop
(``event_loop_overlap_disagg_decode``, #28039) (CPU): a speculative grammar decode batch and a pending result that
finishes one of its requests (or, ``finishes=False``, does not).

The loop body, ``is_disable_overlap_for_batch`` (with ``ScheduleBatch.grammar_needs_sync`` /
``SpeculativeAlgorithm.supports_grammar_overlap`` from 0.5.17), ``ScheduleBatch.is_spec_v2`` (0.5.11 … 0.5.13),
``ScheduleBatch.copy``, ``launch_batch_sample_if_needed`` and the ``pop_and_process`` ordering are the release's
own. The scheduler is built without ``__init__`` (``object.__new__(Scheduler)``) and only its I/O and GPU edges are
stubbed on the instance:

* receiving requests (``recv_requests`` / ``request_receiver.recv_requests`` / ``ingest_requests``) and
  ``process_input_requests``: nothing arrives;
* ``_apply_war_barrier`` (a CUDA stream wait);
* PD decode only: ``process_decode_queue`` and the prefill-rank prefetch (KV transfer queues: nothing arrives),
  ``ngram_embedding_manager.prepare_for_forward`` (returns the batch, as without n-gram embeddings);
* ``get_next_batch_to_run`` (PD: ``get_next_disagg_decode_batch_to_run``): the prepared batches in order (in a
  ``NextBatchPlan`` from 0.5.16), each recorded with its requests' finished state at that moment and, as the
  scheduler's running-batch filter does, without the requests already finished (no request left: no batch); then
  ``StopLoop`` ends the loop;
* ``run_batch``: records the batch it launches (and whether each request is finished at that moment), wrapped by
  the probe's real ``_around_run_batch``; it returns the prepared result;
* ``process_batch_result``: the release's real decode step (``process_batch_result_decode`` of
  ``scenarios.decode_case``: resolve step, ``output_ids``, ``Req.check_finished``) on the popped result's request
  objects; the request R finishes there on a stop token, as on a real server. B1's result (launched only where R
  is still live) is recorded, not processed.

Sequence: iteration 1 launches B0 (R's previous decode step; its result, queued as ``B0.copy()``, carries R's stop
token); iteration 2 builds B1, the next speculative decode step of R with ``has_grammar``, while B0's result is
pending: where ``is_disable_overlap_for_batch(B1)`` is True the loop processes B0's result first (R finishes) and
then launches B1 with R in it; otherwise it launches B1 and processes B0's result after: the verify's vocab mask
is built from a grammar that has not accepted B0's tokens (what the PD loop does on every grammar step up to
0.5.13, which never asks ``is_disable_overlap_for_batch``). With the plugin's ``grammar-result-order`` loop, B0's
result is processed before B1 is built wherever that sync would happen: R is finished when B1 is built, so no batch
is left to launch (``finishes=False``: B1 is launched with the grammar advanced). Iteration 3 stops (the plugin's
loop first processes a launched B1's result where B1 syncs too).
"""

import inspect
import types

from . import scenarios

STOP_TOKEN = 2  # the last token the prepared result gives R (next_token_ids arange, accept length 3)


# the decode step's per-request finish hand-off: 0.5.11 / 0.5.12.x (mixin), 0.5.13+ (batch result processor)
_FINISH_HANDLERS = ("_handle_finished_req", "_handle_finish_state_updated_req")


class StopLoop(Exception):
    """Raised by the stub ``get_next_batch_to_run`` once the prepared batches are used up."""


def _batch(reqs, algorithm, has_grammar, mode="DECODE"):
    """A real ScheduleBatch of the release: a speculative decode step of ``reqs`` (what ``prepare_for_decode`` leaves
    on the fields the loop and the probe read), or with ``mode`` "EXTEND" their prefill."""
    import torch
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    seq_lens = [len(r.origin_input_ids) + len(r.output_ids) for r in reqs]
    fields = {f for f in ScheduleBatch.__dataclass_fields__}
    kw = dict(reqs=list(reqs), forward_mode=getattr(ForwardMode, mode), spec_algorithm=algorithm, has_grammar=has_grammar,
              enable_overlap=True, seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int64), seq_lens_sum=sum(seq_lens))
    return ScheduleBatch(**{k: v for k, v in kw.items() if k in fields})


def grammar_sync_case(algorithm="EAGLE3", around_run_batch=None, pd=False, finishes=True, prefill=False):
    """The scheduler, ready for ``run_loop``: (sched, trace, R). ``algorithm``: the speculative algorithm of both
    batches; ``around_run_batch(original, self, batch)``: an AROUND hook for the stub run_batch (the probe's
    ``_around_run_batch``); ``pd``: stub for the PD decode loop; ``finishes``: B0's result ends R; ``prefill``: B0 is
    R's prefill (``ForwardMode.EXTEND``: a retracted request re-prefilled up to its grammar's end, whose first token
    ends it; its result is still processed by the decode step, which is where R's finish is decided either way: the
    loop's order is what is under test). ``trace``
    lists, in order, ``("schedule", name, {rid: finished when built})``, ``("launch", name, {rid: finished at
    launch})``,
    ``("process", name of the batch whose result was processed)`` and ``("finish-handler", rid)`` (the decode step
    handed a finished request to its KV release). On 0.5.11 the decode step's resolve is #23456 as the plugin ships
    it (``scenarios.decode_case``); with only R in the result it does what the stock one does."""
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algo = SpeculativeAlgorithm.from_string(algorithm)
    step, dsched, pending, result, live = scenarios.decode_case(False)
    # the pending result holds R only: the case's finished / retracted rows were finished / retracted by a result
    # processed after their launch, which this two-step sequence does not replay (at B0's launch they were live)
    pending.reqs = [live]
    result.accept_lens, result.next_token_ids = result.accept_lens[:1], result.next_token_ids[:4]
    if finishes:
        live.sampling_params.stop_token_ids = {STOP_TOKEN}  # R stops on the last token of the pending result
    b0 = _batch(pending.reqs, algo, has_grammar=True, mode="EXTEND" if prefill else "DECODE")  # nothing pending yet
    b1 = _batch([live], algo, has_grammar=True)  # the next step: finished / retracted rows already filtered out
    names = {id(b0): "B0", id(b1): "B1"}
    trace = []
    b1_result = types.SimpleNamespace(delay_sample_func=None)  # launch_batch_sample_if_needed: nothing delayed
    results = {"B0": result, "B1": b1_result}
    queue = [b0, b1]

    sched = object.__new__(Scheduler)
    sched.__dict__.update(
        _engine_paused=False, gracefully_exit=False, _war_barrier_enabled=False, require_mlp_sync=False,
        enable_unified_memory=False, server_args=scenarios.Unset(enable_unified_memory=False),
        is_generation=True, last_batch=None, cur_batch=None, running_batch=None,
    )
    nothing = lambda *a, **k: []  # noqa: E731
    sched.recv_requests = sched.ingest_requests = nothing
    sched.request_receiver = types.SimpleNamespace(recv_requests=nothing)
    sched.process_input_requests = lambda recv_reqs: None
    sched._apply_war_barrier = lambda *a, **k: None
    getter = "get_next_disagg_decode_batch_to_run" if pd else "get_next_batch_to_run"
    if pd:
        sched.__dict__.update(chunked_req=None, _sched_idled=False)
        sched.process_decode_queue = sched._record_scheduler_state_for_paused_engine = lambda *a, **k: None
        sched.disagg_decode_prealloc_queue = types.SimpleNamespace(prefetch_prefill_dp_rank_queries=lambda: None)
        sched.ngram_embedding_manager = types.SimpleNamespace(prepare_for_forward=lambda batch, **k: batch)

    takes_plan = "running_batch" in inspect.signature(getattr(Scheduler, getter)).parameters  # 0.5.16+

    def get_next_batch_to_run(*args, **kwargs):
        if not queue:
            raise StopLoop()
        batch = queue.pop(0)
        name = names[id(batch)]
        trace.append(("schedule", name, {r.rid: r.finished() for r in batch.reqs}))
        # what the scheduler's running-batch update does before a decode step (filter_batch): requests already
        # finished when the batch is built are not in it; none left, no batch
        batch.reqs = [r for r in batch.reqs if not r.finished()]
        if not batch.reqs:
            batch = None
        if not takes_plan:
            return batch
        from sglang.srt.managers.schedule_batch import NextBatchPlan

        return NextBatchPlan(batch_to_run=batch, running_batch=batch)

    def launch(self, batch):
        name = names.get(id(batch), "?")
        trace.append(("launch", name, {r.rid: r.finished() for r in batch.reqs}))
        return results[name]

    def run_batch(batch, *args, **kwargs):
        if around_run_batch is None:
            return launch(sched, batch)
        return around_run_batch(launch, sched, batch, *args, **kwargs)

    def process_batch_result(batch, res):
        # the popped entry is B0.copy(): a new ScheduleBatch over the same request objects
        name = next(n for n, r in results.items() if r is res)
        if name == "B1":  # the plugin's next iteration, where B1 syncs too: nothing of B1's result is under test
            trace.append(("process", name))
            return
        assert [r.rid for r in batch.reqs] == [r.rid for r in pending.reqs] and name == "B0", (name, batch.reqs)
        assert all(a is b for a, b in zip(batch.reqs, pending.reqs))
        trace.append(("process", name))
        step(dsched, pending, res)  # the release's decode step on those requests

    def finish_handler(req, *args, **kwargs):
        # the decode step's per-request hand-off after check_finished; for a finished request it is where SGLang
        # releases the KV and the req-pool slot (release_kv_cache): pool plumbing outside this scenario, recorded
        if req.finished():
            trace.append(("finish-handler", req.rid))

    # dsched may be a frozen, slotted dataclass (0.5.13+): its class is swapped for a subclass that only replaces the
    # finish hand-off, so no class of the release is changed
    handlers = {name: staticmethod(finish_handler) for name in _FINISH_HANDLERS if hasattr(type(dsched), name)}
    object.__setattr__(dsched, "__class__", type(type(dsched).__name__, (type(dsched),), dict(__slots__=(), **handlers)))

    setattr(sched, getter, get_next_batch_to_run)
    sched.run_batch = run_batch
    sched.process_batch_result = process_batch_result
    return sched, trace, live


def run_loop(sched, loop=None, pd=False):
    """Run the release's real ``Scheduler.event_loop_overlap`` (``pd``: ``event_loop_overlap_disagg_decode``) or
    ``loop`` (e.g. the plugin's patched one, called with ``sched``) until the stub stops it; the iteration count is
    bounded by the prepared batches."""
    try:
        if loop is None:
            getattr(sched, "event_loop_overlap_disagg_decode" if pd else "event_loop_overlap")()
        else:
            loop(sched)
    except StopLoop:
        return
    raise AssertionError("the event loop returned without asking for a third batch")
