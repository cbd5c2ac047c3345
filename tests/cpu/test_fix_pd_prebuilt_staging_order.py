"""pd-prebuilt-staging-order (#35748, in 0.5.19) on the release's real ``get_new_prebuilt_batch``: with the overlap
scheduler the prebuilt staging (``process_prebuilt``, which seeds the new requests' FutureMap rows) is ordered after
everything queued on the forward stream (a finished request's redundant forward, whose tail writes its reused row) with
the plugin, and not on stock 0.5.14 - 0.5.18.

Stream model: test_fix_overlap_war_barrier's (``Streams``). Stand-ins: the waiting request (``init_next_round_input``
does nothing: its KV has arrived), ``set_time_batch``, the grammar manager (nothing waiting), from 0.5.21 the n-gram
embedding manager (returns the batch; no KV checksums configured) and ``ScheduleBatch.init_new``, whose batch records ``process_prebuilt`` as "staging" on the stream current at that
moment. Everything else the function does (queue split, batch size, the order of its statements) is the release's.
"""

import inspect
import types

import pytest
from conftest import VERSION, requires_sglang, where_patched
from test_fix_overlap_war_barrier import Streams

from sglang_specv2_fixes import core, releases
from sglang_specv2_fixes.fixes import pd_prebuilt_staging_order

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = pd_prebuilt_staging_order.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's get_new_prebuilt_batch")
STOCK_RACES = VERSION in releases.release_set("from:0.5.14&up-to:0.5.18")
UPSTREAM_HERE = VERSION in releases.release_set("from:0.5.19")


def _fn(plugin):
    from sglang.srt.disaggregation.decode import SchedulerDisaggregationDecodeMixin

    if not plugin:
        return SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch
    (fn,) = core.build_fix(FIX).values()
    return fn


def stage(monkeypatch, fn, enable_overlap=True):
    from sglang.srt.disaggregation import decode
    from sglang.srt.managers.scheduler import Scheduler
    from sglang_specv2_fixes.testing import scenarios

    s = Streams()
    tail = s.forward.enqueue("in-flight forward's FutureMap tail")

    class Batch:
        @classmethod
        def init_new(cls, reqs, *args, **kwargs):
            b = cls()
            b.reqs = reqs
            return b

        def prepare_for_prebuilt(self):
            pass

        def process_prebuilt(self, *args, **kwargs):
            s.current.enqueue("staging")

        def is_empty(self):  # 0.5.21 on: asked after the KV checksum step
            return not self.reqs

    monkeypatch.setattr(decode, "ScheduleBatch", Batch)
    monkeypatch.setattr(decode, "set_time_batch", lambda *a, **k: None, raising=False)
    sched = object.__new__(Scheduler)
    req = types.SimpleNamespace(init_next_round_input=lambda *a, **k: None, kv_committed_len=None, last_node=None,
                                kv=types.SimpleNamespace(kv_committed_len=None), prefix_indices=[])
    running = types.SimpleNamespace(batch_size=lambda: 0, reqs=[], is_empty=lambda: True)
    sched.__dict__.update(
        grammar_manager=types.SimpleNamespace(has_waiting_grammars=lambda: False), waiting_queue=[req],
        enable_priority_scheduling=False, req_to_token_pool=types.SimpleNamespace(size=8), max_running_requests=8,
        server_args=scenarios.Unset(disaggregation_decode_enable_radix_cache=False), tree_cache=None,
        token_to_kv_pool_allocator=None, model_config=None, enable_overlap=enable_overlap, spec_algorithm=None, future_map=object(),
        schedule_stream=s.schedule, forward_stream=s.forward, running_batch=running, chunked_req=None,
        kv_checksum_computer=None,  # 0.5.21 on: no KV checksums configured
        ngram_embedding_manager=types.SimpleNamespace(prepare_for_forward=lambda batch, **k: batch),
    )
    args = (running,) if "running_batch" in inspect.signature(fn).parameters else ()
    with scenarios.published_server_args(monkeypatch, disaggregation_decode_enable_radix_cache=False):
        batch = fn(sched, *args)
    assert batch is not None and batch.reqs == [req]
    return s, tail


@pytest.mark.skipif(not (STOCK_RACES or UPSTREAM_HERE), reason=f"sglang {VERSION}: not-applicable here")
def test_stock_staging_order(monkeypatch):
    """0.5.14 - 0.5.18: the staging is not ordered after the forward in flight; 0.5.19 on (upstream) it is."""
    s, tail = stage(monkeypatch, _fn(False))
    assert s.ordered(tail, s.find("staging")) == UPSTREAM_HERE


@FIXED_HERE
def test_plugin_stages_after_the_forward_in_flight(monkeypatch):
    s, tail = stage(monkeypatch, _fn(True))
    assert s.ordered(tail, s.find("staging")) and s.waits() == ["schedule.wait_stream(forward)"]


@FIXED_HERE
def test_plugin_no_wait_without_overlap(monkeypatch):
    s, tail = stage(monkeypatch, _fn(True), enable_overlap=False)
    assert s.waits() == [] and not s.ordered(tail, s.find("staging"))
