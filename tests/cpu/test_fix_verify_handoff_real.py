"""verify-handoff (#25879) on the releases' real batches (0.5.11 / 0.5.12.x); the rules and stand-in checks are
tests/cpu/test_fix_verify_handoff.py.

A real ``ScheduleBatch`` of three decoding requests over real ``ReqToTokenPool`` / ``TokenToKVPoolAllocator`` / ``MHATokenToKVPool`` / ``ChunkCache`` on CPU,
a real ``EagleDraftInput``, the release's ``prepare_for_decode`` / ``filter_batch`` / ``merge_batch`` and
``EAGLEWorkerV2.forward_batch_generation`` (its draft worker a recording stand-in), with verify N's ``seq_lens`` a
tensor whose host reads raise (``OnDevice``) and test_fix_overlap_war_barrier's stream model:
- ``prepare_for_decode`` (chain and tree server): the plugin allocates the same slots, ``req_to_token`` rows and KV
  counters as stock on the same batch, reads no ``seq_lens``, leaves ``seq_lens_cpu`` None and ``seq_lens_sum`` the allocated-length
  bound (>= the true sum); where ``applies`` is False (fa3, no graphs, logprob, grammar) it equals stock exactly.
  Stock raises ``HostRead`` (``seq_lens.cpu()``) after a host wait on verify N.
- ``filter_batch`` / ``merge_batch`` (a request finished; two prefilled requests join) on the handoff batch vs stock
  with the mirror: the same requests, pool indices, ``seq_lens`` and future indices, the sum the bound, no host wait
  or read; the merged batch's next preparation allocates as stock's. Stock: ``HostRead`` (``.sum().item()``) with
  the mirror, ``TypeError`` without it.
- the worker: a batch some graph cannot run (bs above a runner's max_bs, no draft graph, no draft-extend graph for a
  tree, ``replace_embeds``) reaches the draft with the exact mirror and sum (one ``seq_lens.cpu()``); one the graphs
  run keeps None and the bound (chain and tree);
  a batch with a mirror keeps it. Stock passes None on.
- stream order: stock orders the ``req_to_token`` write of N+1 after verify N through a host wait, the plugin
  through ``schedule.wait_event(verify_done)``.
Checked to fail against stock: with the plugin's functions not installed every plugin-side test above fails
(``HostRead`` in stock's ``prepare_for_decode``, or the asserted None / exact mirror); with only the stock
``maybe_wait_verify_done`` (the rest patched) the prepare / filter / merge / stream-order tests fail on the host wait.
Not covered (GPU only): the pinned non-blocking copies' timing, the real CUDA events and streams, the graphs' replay.
"""

import pkgutil
import types

import pytest
import torch
from conftest import requires_sglang, where_patched
from test_eagle_decode_page_align import _cpu_kernels, admit  # the release's decode allocation on CPU
from test_fix_overlap_war_barrier import FakeEvent, Streams  # the stream model

from sglang_specv2_fixes import core
from sglang_specv2_fixes.fixes import verify_handoff
from sglang_specv2_fixes.testing import scenarios
from sglang_specv2_fixes.testing.scenarios import kv_len

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = verify_handoff.FIX.name
# the decode-preparation patch (0.5.11 / 0.5.12.x); 0.5.13.x: test_fix_verify_handoff_piecewise.py
FIXED_HERE = where_patched(FIX, "the plugin's spec-v2 decode preparation",
                           target="ScheduleBatch.maybe_wait_verify_done")
TREE = dict(speculative_eagle_topk=4, speculative_num_steps=3, speculative_num_draft_tokens=8)


@pytest.fixture(scope="module")
def patched():
    return core.build_fix(FIX)


# ----------------------------------------------------------------- the releases' real batches (0.5.11 / 0.5.12.x)
# A real ScheduleBatch (ScheduleBatch.init_new) over the release's real MHATokenToKVPool / ReqToTokenPool /
# TokenToKVPoolAllocator / ChunkCache on CPU, requests admitted as after their prefill (test_eagle_decode_page_align's
# ``admit``), a real EagleDraftInput (future indices, as the overlap scheduler leaves it), the release's own decode
# preparation (ScheduleBatch.prepare_for_decode -> EagleDraftInputV2Mixin.prepare_for_decode: the KV counters,
# alloc_token_slots, assign_req_to_token_pool_func on CPU via test_eagle_decode_page_align's ``_cpu_kernels``).
# Streams and events: test_fix_overlap_war_barrier's model (``Streams``, ``FakeEvent``); verify N and its
# ``verify_done`` are recorded on the forward stream, the scheduler prepares N+1 on the schedule stream (its
# req_to_token write is an operation there). ``seq_lens`` after verify N is ``OnDevice``: what the forward stream
# wrote, so a host read of it (``.cpu()``, ``.item()``, ``.tolist()``, ``int()``) raises ``HostRead``. Stand-ins
# only for ``sampling_info`` (no penalties), ``Tensor.pin_memory`` (no CUDA here: the tensor itself, calls counted)
# and ``torch.get_device_module`` (its current stream is the model's current stream).
SPEC = dict(speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
            speculative_num_draft_tokens=4, attention_backend="triton", page_size=1)
PROMPTS = (9, 14, 6)  # the decoding requests' prompt lengths
JOINING = (5, 11)  # two requests whose prefill joins the running batch (merge_batch)
ACCEPTED = ((3, 1, 4), (2, 4, 1))  # tokens verify N / N+1 accept per request (bonus included)


class HostRead(AssertionError):
    pass


class OnDevice(torch.Tensor):
    """``seq_lens`` as the verify left them on the forward stream (its ``new_seq_lens``): a host read raises, unless
    ``OnDevice.reads`` is a list (then it is recorded and served)."""

    reads = None

    def _host(self, name, *a, **k):
        if OnDevice.reads is None:
            raise HostRead(f"host read of the device seq_lens: {name}")
        OnDevice.reads.append(name)
        return getattr(self.as_subclass(torch.Tensor), name)(*a, **k)

    def cpu(self, *a, **k):
        return self._host("cpu", *a, **k)

    def item(self):
        return self._host("item")

    def tolist(self):
        return self._host("tolist")

    def numpy(self, *a, **k):
        return self._host("numpy", *a, **k)

    def __int__(self):
        return self._host("__int__")

    def __float__(self):
        return self._host("__float__")

    def __bool__(self):
        return self._host("__bool__")


def plain(t):
    return t.as_subclass(torch.Tensor) if isinstance(t, torch.Tensor) else t


def _install(monkeypatch, patched):
    """The plugin's functions in place of the release's, as the plugin registers them."""
    for target, fn in patched.items():
        owner_path, attr = target.rsplit(".", 1)
        owner = pkgutil.resolve_name(owner_path)
        monkeypatch.setattr(owner, attr, classmethod(fn) if isinstance(owner.__dict__[attr], classmethod) else fn)


@pytest.fixture
def real(monkeypatch):
    """The release's objects on CPU (see the section comment): a namespace with ``streams``, ``pins`` (the
    ``pin_memory`` calls), ``allocs`` (each ``alloc_token_slots`` result of a decode preparation), ``reset()`` (fresh
    streams and records, for a second run in the same test) and ``server(**flags)`` (other published server flags)."""
    import sglang.srt.server_args as sa
    from sglang.srt.speculative import eagle_info_v2, spec_utils

    ns = types.SimpleNamespace()

    def reset():
        ns.streams, ns.pins, ns.allocs = Streams(), [], []

    reset()
    ns.reset = reset
    _cpu_kernels(monkeypatch)
    monkeypatch.setattr(torch, "get_device_module", lambda device=None: types.SimpleNamespace(
        current_stream=lambda: ns.streams.current))

    def pin_memory(self, *a, **k):
        ns.pins.append(tuple(self.tolist()))
        return self

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    real_alloc, real_assign = eagle_info_v2.alloc_token_slots, spec_utils.assign_req_to_token_pool_func

    def alloc_token_slots(tree_cache, n, *a, **k):
        out = real_alloc(tree_cache, n, *a, **k)
        ns.allocs.append(out.tolist())
        return out

    def assign(*args):  # the Triton kernel: a write of req_to_token on the current stream
        ns.streams.current.enqueue(f"write req_to_token #{len(ns.allocs)}")
        return real_assign(*args)

    monkeypatch.setattr(eagle_info_v2, "alloc_token_slots", alloc_token_slots)
    monkeypatch.setattr(spec_utils, "assign_req_to_token_pool_func", assign)
    monkeypatch.setattr(OnDevice, "reads", None)

    def server(**kw):
        monkeypatch.setattr(sa, "_global_server_args", scenarios.server_args(**dict(SPEC, **kw)))
        verify_handoff._SERVER.clear()

    ns.server = server
    verify_handoff._SERVER.clear()
    with scenarios.published_server_args(monkeypatch, **SPEC):
        yield ns
    verify_handoff._SERVER.clear()


def _real_pools():
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.chunk_cache import ChunkCache
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    kv = MHATokenToKVPool(size=256, page_size=1, dtype=torch.float32, head_num=1, head_dim=4, layer_num=1,
                          device="cpu", enable_memory_saver=False)
    rtp = ReqToTokenPool(size=8, max_context_len=128, device="cpu", enable_memory_saver=False)
    alloc = TokenToKVPoolAllocator(256, torch.float32, "cpu", kv, need_sort=False)
    return alloc, ChunkCache(CacheInitParams(disable=True, req_to_token_pool=rtp, token_to_kv_pool_allocator=alloc,
                                             page_size=1))


class Sampling(types.SimpleNamespace):
    """sampling_info without penalties; its filter / merge keep a request count."""

    def __init__(self, n):
        super().__init__(penalizer_orchestrator=types.SimpleNamespace(is_required=False), n=n, grammars=None)

    def filter_batch(self, keep_indices, keep_indices_device):
        self.n = len(keep_indices)

    def merge_batch(self, other):
        self.n += other.n


def _batch(alloc, cache, reqs, first_future):
    """The release's ScheduleBatch of ``reqs`` (admitted: committed = allocated = prompt) as after their prefill:
    host mirror exact, a draft input with future indices and no verify event."""
    from sglang.srt.managers.overlap_utils import FutureIndices
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.speculative.eagle_info import EagleDraftInput
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    model_config = types.SimpleNamespace(vocab_size=1000, is_encoder_decoder=False, is_multimodal=False,
                                         hf_config=None, context_len=128, is_matryoshka=False, is_hybrid_swa=False)
    b = ScheduleBatch.init_new(reqs, cache.req_to_token_pool, alloc, cache, model_config, True,
                               SpeculativeAlgorithm.from_string("EAGLE3"))
    lens = [kv_len(r, "kv_committed_len") for r in reqs]
    b.req_pool_indices = torch.tensor([kv_len(r, "req_pool_idx") for r in reqs])
    b.seq_lens, b.seq_lens_cpu, b.seq_lens_sum = torch.tensor(lens), torch.tensor(lens), sum(lens)
    b.orig_seq_lens = torch.tensor(lens, dtype=torch.int32)
    b.sampling_info = Sampling(len(reqs))
    b.spec_info = EagleDraftInput(future_indices=FutureIndices(
        indices=torch.arange(first_future, first_future + len(reqs))))
    return b


def _verify(real, batch, accepted, step, on_device=True):
    """Verify ``step`` queued on the forward stream, and the batch as run_batch leaves it: the next draft input
    (future indices, ``verify_done`` recorded after the verify) and seq_lens = the verify's new_seq_lens (``OnDevice``
    unless ``on_device`` is False). Returns the true new seq_lens."""
    from sglang.srt.managers.overlap_utils import FutureIndices
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    streams = real.streams
    with streams.use(streams.forward):
        streams.forward.wait_stream(streams.schedule)  # run_batch: the forward waits for the schedule stream
        streams.forward.enqueue(f"verify {step}")
        done = FakeEvent(streams)
        done.record()
        streams.forward.enqueue(f"draft extend {step}")
    new = plain(batch.seq_lens) + torch.tensor(accepted)
    batch.spec_info = EagleDraftInput(future_indices=FutureIndices(indices=torch.arange(len(batch.reqs)) + 10 * step),
                                      verify_done=done)
    batch.seq_lens = new.clone().as_subclass(OnDevice) if on_device else new.clone()
    return new


def _kv(alloc, cache, batch, real):
    """The KV allocation the decode preparations made (slots, rows, host counters, free slots)."""
    rtt = cache.req_to_token_pool.req_to_token
    return dict(
        allocs=list(real.allocs), free=alloc.available_size(),
        rows={r.rid: rtt[kv_len(r, "req_pool_idx"), : kv_len(r, "kv_allocated_len")].tolist() for r in batch.reqs},
        counters={r.rid: (kv_len(r, "kv_committed_len"), kv_len(r, "kv_allocated_len"), r.decode_batch_idx)
                  for r in batch.reqs},
    )


def _prepare_n1(real, on_device=True, **batch_fields):
    """The decoding requests' first decode preparation (no verify event yet: the release's synchronous path, plugin
    or not), verify N queued, then the preparation of N+1 (``batch_fields`` set before it). Returns (allocator,
    cache, batch, true seq_lens after verify N)."""
    alloc, cache = _real_pools()
    reqs = [admit(cache, alloc, f"r{i}", p, 1) for i, p in enumerate(PROMPTS)]
    batch = _batch(alloc, cache, reqs, 1)
    batch.prepare_for_decode()
    true = _verify(real, batch, ACCEPTED[0], 1, on_device)
    batch.__dict__.update(batch_fields)
    batch.prepare_for_decode()
    return alloc, cache, batch, true


def _bound_holds(batch, true):
    assert batch.seq_lens_cpu is None
    bound = sum(kv_len(r, "kv_allocated_len") for r in batch.reqs)
    assert batch.seq_lens_sum == verify_handoff.host_bound(batch) == bound
    assert bound >= int(true.sum())


@FIXED_HERE
def test_real_prepare_for_decode_stock_waits_and_reads_seq_lens(real):
    """Stock on the real batch, verify N in flight: the host waits for verify N (``verify_done.synchronize()``), then
    reads ``seq_lens.cpu()`` (HostRead); what the plugin's test below asserts absent."""
    with pytest.raises(HostRead, match="cpu"):
        _prepare_n1(real)
    assert [str(op) for op in real.streams.host_fence] == ["verify 1"]


@FIXED_HERE
@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_real_prepare_for_decode_same_kv_no_host_read(patched, real, monkeypatch, shape):
    """Plugin vs stock on the same real batch: the same slots, req_to_token rows and KV counters; no host read of
    seq_lens (stock raises HostRead on it, test above), seq_lens_cpu None, seq_lens_sum the allocated-length bound
    (>= the true sum), the KV lengths pinned for a non-blocking copy. The tree server (topk 4 / 8 tokens) allocates
    max(steps * topk, tokens) = 12 slots per request and decode, twice over, as the release does."""
    if shape == "tree":
        real.server(**TREE)
    alloc, cache, batch, true = _prepare_n1(real, on_device=False)
    stock = _kv(alloc, cache, batch, real)
    assert batch.seq_lens_cpu.tolist() == true.tolist() and batch.seq_lens_sum == int(true.sum())
    assert real.pins == []

    real.reset()
    _install(monkeypatch, patched)
    before = dict(verify_handoff.COUNTS)
    alloc, cache, batch, true2 = _prepare_n1(real)
    assert true2.tolist() == true.tolist()
    assert _kv(alloc, cache, batch, real) == stock
    assert plain(batch.seq_lens).tolist() == true.tolist()
    _bound_holds(batch, true)
    assert len(real.pins) == 2  # cur / nxt KV lengths
    assert real.streams.host_fence == []
    assert verify_handoff.COUNTS["stream_waits"] == before["stream_waits"] + 1
    assert verify_handoff.COUNTS["host_waits"] == before["host_waits"]


@FIXED_HERE
@pytest.mark.parametrize("server, fields", [
    (dict(attention_backend="flashinfer"), {}),
    (dict(disable_cuda_graph=True), {}),
    ({}, dict(return_logprob=True)),
    ({}, dict(has_grammar=True)),
], ids=["flashinfer", "no-graphs", "logprob", "grammar"])
def test_real_prepare_for_decode_elsewhere_is_stock(patched, real, monkeypatch, server, fields):
    """Where ``applies`` is False the plugin's decode preparation is the release's: same KV, same exact mirror and
    sum, the same host wait on verify N, nothing pinned."""
    real.server(**server)

    def run():
        alloc, cache, batch, true = _prepare_n1(real, on_device=False, **fields)
        return dict(_kv(alloc, cache, batch, real), mirror=batch.seq_lens_cpu.tolist(), sum=batch.seq_lens_sum,
                    host=[str(op) for op in real.streams.host_fence], pins=list(real.pins),
                    ops=[str(op) for op in real.streams.ops])

    stock = run()
    real.reset()
    _install(monkeypatch, patched)
    assert run() == stock
    assert stock["host"] == ["verify 1"] and stock["pins"] == []


def _filtered(real, on_device=True, n1_on_device=None):
    """After the preparation of N+1, verify N+1 queued and r1 finished: update_running_batch's filter_batch
    (``n1_on_device``: verify N's seq_lens ``OnDevice``, default ``on_device``)."""
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    alloc, cache, batch, _ = _prepare_n1(real, on_device if n1_on_device is None else n1_on_device)
    true = _verify(real, batch, ACCEPTED[1], 2, on_device)
    batch.reqs[1].finished_reason = FINISH_LENGTH(length=1)
    batch.filter_batch(v1_spec_info_filtered=True)
    return batch, true[[0, 2]]


@FIXED_HERE
def test_real_filter_batch_handoff(patched, real, monkeypatch):
    """filter_batch on the handoff batch (seq_lens_cpu None) vs stock on the same batch with its mirror: the same
    requests, req_pool_indices, seq_lens, future indices; on the plugin's no host wait, no host read (stock:
    ``seq_lens.sum().item()``, test below), seq_lens_sum the bound of the kept requests."""
    stock, true = _filtered(real, on_device=False)
    assert stock.seq_lens_sum == int(true.sum())
    real.reset()
    _install(monkeypatch, patched)
    batch, true2 = _filtered(real)
    assert true2.tolist() == true.tolist()
    assert [r.rid for r in batch.reqs] == [r.rid for r in stock.reqs] == ["r0", "r2"]
    assert batch.req_pool_indices.tolist() == stock.req_pool_indices.tolist()
    assert plain(batch.seq_lens).tolist() == plain(stock.seq_lens).tolist() == true.tolist()
    assert batch.spec_info.future_indices.indices.tolist() == stock.spec_info.future_indices.indices.tolist()
    assert batch.sampling_info.n == 2
    _bound_holds(batch, true)
    assert real.streams.host_fence == []
    assert any(".wait_event(verify 2)" in str(op) for op in real.streams.ops)


@FIXED_HERE
def test_real_filter_batch_stock_needs_the_host(patched, real, monkeypatch):
    """Stock filter_batch: with the mirror it waits for verify N+1 on the host and reads ``seq_lens.sum().item()``
    (HostRead); on a handoff batch (no mirror) it fails on ``seq_lens_cpu[keep_indices]``."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    with pytest.raises(HostRead, match="item"):
        _filtered(real, n1_on_device=False)
    assert "verify 2" in [str(op) for op in real.streams.host_fence]
    stock_filter = ScheduleBatch.filter_batch
    real.reset()
    _install(monkeypatch, patched)
    monkeypatch.setattr(ScheduleBatch, "filter_batch", stock_filter)
    with pytest.raises(TypeError, match="not subscriptable"):
        _filtered(real)


def _merged(real, on_device=True, then_prepare=False):
    """After the preparation of N+1 and with verify N+1 queued, two new requests' prefill batch (its own exact
    mirror) joins: get_next_batch_to_run's ``running_batch.merge_batch(last_batch)``; ``then_prepare``: the merged
    batch's next decode preparation (N+2) follows."""
    alloc, cache, batch, _ = _prepare_n1(real, on_device)
    joining = [admit(cache, alloc, f"j{i}", p, 1) for i, p in enumerate(JOINING)]
    new = _batch(alloc, cache, joining, 50)
    true = torch.cat([_verify(real, batch, ACCEPTED[1], 2, on_device), torch.tensor(JOINING)])
    batch.merge_batch(new)
    if then_prepare:
        batch.prepare_for_decode()
    return alloc, cache, batch, true


@FIXED_HERE
def test_real_merge_batch_handoff(patched, real, monkeypatch):
    """merge_batch of the handoff batch (seq_lens_cpu None) and a prefill batch with its mirror, vs stock with the
    mirror: the same requests, req_pool_indices, seq_lens, future indices; on the plugin's no host wait or read,
    seq_lens_cpu stays None and seq_lens_sum is the bound; the merged batch's next decode preparation (N+2)
    allocates what stock's does. Stock fails on the handoff batch (``torch.cat([None, ...])``, test below)."""
    alloc, cache, stock, true = _merged(real, on_device=False)
    real.reset()
    _install(monkeypatch, patched)
    alloc, cache, batch, true2 = _merged(real)
    assert true2.tolist() == true.tolist()
    assert [r.rid for r in batch.reqs] == [r.rid for r in stock.reqs] == ["r0", "r1", "r2", "j0", "j1"]
    assert batch.req_pool_indices.tolist() == stock.req_pool_indices.tolist()
    assert plain(batch.seq_lens).tolist() == plain(stock.seq_lens).tolist() == true.tolist()
    assert batch.spec_info.future_indices.indices.tolist() == stock.spec_info.future_indices.indices.tolist()
    assert batch.sampling_info.n == 5
    _bound_holds(batch, true)
    assert real.streams.host_fence == []


@FIXED_HERE
def test_real_merge_then_prepare(patched, real, monkeypatch):
    """The merged batch's next decode preparation (N+2): plugin and stock allocate the same slots and rows; the
    plugin reads no seq_lens and leaves the bound."""
    alloc, cache, stock, _ = _merged(real, on_device=False, then_prepare=True)
    want = _kv(alloc, cache, stock, real)
    real.reset()
    _install(monkeypatch, patched)
    alloc, cache, batch, true = _merged(real, then_prepare=True)
    assert _kv(alloc, cache, batch, real) == want
    _bound_holds(batch, true)
    assert real.streams.host_fence == []


@FIXED_HERE
def test_real_merge_batch_stock_needs_the_mirror(patched, real, monkeypatch):
    """Stock merge_batch on the handoff batch (the plugin's decode preparation left no mirror) fails on
    ``torch.cat([None, ...])``."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    stock_merge = ScheduleBatch.merge_batch
    _install(monkeypatch, patched)
    monkeypatch.setattr(ScheduleBatch, "merge_batch", stock_merge)
    with pytest.raises(TypeError, match="NoneType"):
        _merged(real)


class DraftCalled(Exception):
    pass


def _eagle_worker(draft_bs=8, extend_bs=8, verify_bs=8):
    """The release's EAGLEWorkerV2 (made without __init__) whose draft worker records what ``draft`` gets and stops
    there; its graph runners (None: no graph) as ``verify_handoff.graphs_run`` reads them. Returns (worker, seen)."""
    import contextlib

    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    def runner(max_bs):
        return None if max_bs is None else types.SimpleNamespace(max_bs=max_bs, disable_padding=False,
                                                                 require_mlp_sync=False)

    seen = {}

    def draft(model_worker_batch):
        seen.update(mirror=model_worker_batch.seq_lens_cpu, sum=model_worker_batch.seq_lens_sum)
        raise DraftCalled

    draft_worker = types.SimpleNamespace(
        draft_tp_context=lambda group: contextlib.nullcontext(), draft_runner=types.SimpleNamespace(tp_group=None),
        cuda_graph_runner=runner(draft_bs), cuda_graph_runner_for_draft_extend=runner(extend_bs), draft=draft)
    target_worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(graph_runner=runner(verify_bs)))
    worker = object.__new__(EAGLEWorkerV2)
    worker.__dict__.update(_draft_worker=draft_worker, _target_worker=target_worker, device="cpu", topk=1,
                           plan_stream=None)
    return worker, seen


def _forward(real, worker, on_device=True, **fields):
    """The plugin's decode preparation of N+1 (verify N in flight), then run_batch's get_model_worker_batch and the
    worker's forward_batch_generation up to the draft. Returns (true seq_lens, the model worker batch)."""
    _, _, batch, true = _prepare_n1(real, on_device)
    model_worker_batch = batch.get_model_worker_batch()
    model_worker_batch.__dict__.update(fields)
    with pytest.raises(DraftCalled):
        worker.forward_batch_generation(model_worker_batch)
    return true, model_worker_batch


FALLBACKS = {"draft bs": dict(draft_bs=2), "draft-extend bs": dict(extend_bs=2), "verify bs": dict(verify_bs=2),
             "no draft graph": dict(draft_bs=None), "no draft-extend graph": dict(extend_bs=None)}


@FIXED_HERE
@pytest.mark.parametrize("case", [*FALLBACKS, "replace_embeds"])
def test_real_worker_gives_the_exact_mirror_where_a_graph_cannot_run(patched, real, monkeypatch, case):
    """EAGLEWorkerV2.forward_batch_generation (the plugin's) on a handoff batch that a CUDA graph cannot run (bs 3
    above a runner's max_bs 2, no draft graph, replace_embeds): the draft gets the exact mirror and sum, read once
    (``seq_lens.cpu()``). Stock passes seq_lens_cpu None on (test below)."""
    _install(monkeypatch, patched)
    monkeypatch.setattr(OnDevice, "reads", [])
    worker, seen = _eagle_worker(**FALLBACKS.get(case, {}))
    fields = dict(replace_embeds=torch.zeros(1)) if case == "replace_embeds" else {}
    before = verify_handoff.COUNTS["materialized"]
    true, _ = _forward(real, worker, **fields)
    assert plain(seen["mirror"]).tolist() == true.tolist() and seen["sum"] == int(true.sum())
    assert OnDevice.reads == ["cpu"]
    assert verify_handoff.COUNTS["materialized"] == before + 1


@FIXED_HERE
@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_real_worker_keeps_the_handoff_where_the_graphs_run(patched, real, monkeypatch, shape):
    """Every graph can run the batch (bs 3 <= 8): the draft gets seq_lens_cpu None and the bound, no host read
    (``OnDevice`` raises on one); for a tree (topk 4 / 8 tokens) as for a chain."""
    if shape == "tree":
        real.server(**TREE)
    _install(monkeypatch, patched)
    worker, seen = _eagle_worker()
    true, mwb = _forward(real, worker)
    assert seen["mirror"] is None and seen["sum"] == verify_handoff.host_bound(mwb) >= int(true.sum())


@FIXED_HERE
def test_real_worker_leaves_a_mirror_alone(patched, real, monkeypatch):
    """A batch prepared with the mirror (flashinfer: no handoff) keeps it, the same object, even where no graph runs."""
    real.server(attention_backend="flashinfer")
    _install(monkeypatch, patched)
    worker, seen = _eagle_worker(draft_bs=2)
    true, mwb = _forward(real, worker, on_device=False)
    assert seen["mirror"] is mwb.seq_lens_cpu and seen["mirror"].tolist() == true.tolist()


@FIXED_HERE
def test_real_stock_worker_passes_no_mirror_on(patched, real, monkeypatch):
    """Stock forward_batch_generation on a handoff batch that no draft graph can run: the eager draft would get
    seq_lens_cpu None (what the plugin's materialize prevents)."""
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    stock = EAGLEWorkerV2.forward_batch_generation
    _install(monkeypatch, patched)
    monkeypatch.setattr(EAGLEWorkerV2, "forward_batch_generation", stock)
    worker, seen = _eagle_worker(draft_bs=None)
    _forward(real, worker)
    assert seen["mirror"] is None


@FIXED_HERE
@pytest.mark.parametrize("plugin", [False, True], ids=["stock", "plugin"])
def test_real_stream_order(patched, real, monkeypatch, plugin):
    """The decode preparation of N+1 while verify N runs (stream model): stock waits on the host
    (``verify_done.synchronize()``: every later host launch waits for verify N); the plugin makes the schedule stream
    wait for the event instead (``schedule.wait_event``), the host is not held. Either way the req_to_token write of
    N+1 comes after verify N, and run_batch's ``forward.wait_stream(schedule)`` puts the draft of N+1 after it."""
    if plugin:
        _install(monkeypatch, patched)
    s = real.streams
    _prepare_n1(real, on_device=plugin)
    s.forward.wait_stream(s.schedule)
    s.forward.enqueue("draft 2")
    verify, write, draft = s.find("verify 1"), s.find("write req_to_token #2"), s.find("draft 2")
    assert s.ordered(verify, write) and s.ordered(write, draft)
    waits = [o for o in s.ops if ".wait_event(" in o.name]
    if plugin:
        assert s.host_fence == [] and [o.name for o in waits] == ["schedule.wait_event(verify 1)"]
        assert write.deps[0] is waits[0]  # ordered through the stream wait, not the host
    else:
        assert s.host_fence == [verify] and waits == []
