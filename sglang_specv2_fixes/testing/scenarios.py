"""Stale overlap results on real SGLang request objects (shared by the in-process and subprocess tests).

State is produced with SGLang's own methods where it has them (``reset_for_retract``, finish reasons);
the KV counters are set to what ``prepare_for_decode`` leaves behind (allocation grown, bonus slot
pre-claimed), which needs a GPU pool to produce for real.

Also shared by the CPU tests: ``server_args`` / ``published_server_args`` (the flags a launch publishes) and
``capture_tree_mask`` (the GPU-only tree kernel replaced by one that records the tree mask a draft tail allocates).
"""

import contextlib
import dataclasses
import functools
import sys
import types

import torch

from sglang_specv2_fixes import core, installed, releases
from sglang_specv2_fixes.fixes import live_accept_metrics, skip_stale_overlap_updates


def stale_batch_case():
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.sampling.sampling_params import SamplingParams

    def req(rid):
        r = Req(rid, "", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], SamplingParams(max_new_tokens=64))
        r.req_pool_idx = 0
        # 10 prompt tokens + the bonus slot pre-claimed for this decode (releases before #28754 pre-claim it)
        set_kv(r, committed=11, allocated=18)
        return r

    live, finished, retracted = req("live"), req("finished"), req("retracted")
    finished.finished_reason = FINISH_LENGTH(length=1)  # finished by the previous result
    if getattr(retracted, "kv", "") is not None and _kv_released_is_none():
        retracted.kv = None  # what release_kv_cache leaves before reset_for_retract (0.5.16 … 0.5.22)
    retracted.reset_for_retract()  # retracted while this batch was in flight
    reqs = [live, finished, retracted]
    stride = 4
    accept_lens = [3, 3, 3]
    result = GenerationBatchResult(
        next_token_ids=torch.arange(stride * len(reqs), dtype=torch.int64),
        accept_lens=torch.tensor(accept_lens, dtype=torch.int32),
    )
    if hasattr(result, "speculative_num_draft_tokens"):  # 0.5.12 records the stride on the result
        result.speculative_num_draft_tokens = stride
    batch = types.SimpleNamespace(reqs=reqs)
    scheduler = types.SimpleNamespace(
        draft_worker=types.SimpleNamespace(speculative_num_draft_tokens=stride),
        model_worker=types.SimpleNamespace(on_verify_complete_cpu=lambda *a, **k: None),
    )
    return scheduler, result, batch


@functools.lru_cache(maxsize=None)
def _kv_released_is_none():
    """The release's Req starts with ``kv = None`` (set on allocation, dropped on release): 0.5.16 … 0.5.22."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    r = Req("probe", "", [1], SamplingParams(max_new_tokens=1))
    return hasattr(r, "kv") and r.kv is None


def token_ids(values):
    """Token ids as the release's Req keeps them (lists up to 0.5.12.x, ``array('q')`` from 0.5.13)."""
    from array import array

    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    probe = Req("probe", "", [1], SamplingParams(max_new_tokens=1))
    return array("q", values) if isinstance(probe.output_ids, array) else list(values)


def kv_len(req, name):
    """A request's ``kv_committed_len`` / ``kv_allocated_len`` where its release keeps it (see set_kv)."""
    kv = getattr(req, "kv", None)
    return getattr(kv if kv is not None and hasattr(kv, name) else req, name)


def set_kv(req, committed, allocated):
    """Set a request's committed / allocated KV lengths where its release keeps them: on the request (0.5.11 …
    0.5.15), allocated on ``req.kv`` (0.5.16+, a ``ReqKvInfo`` the scheduler creates on allocation), both on
    ``req.kv`` (0.5.23)."""
    import dataclasses

    if hasattr(req, "kv") and req.kv is None:
        from sglang.srt.managers.schedule_batch import ReqKvInfo

        req.kv = (ReqKvInfo(**{f.name: 0 for f in dataclasses.fields(ReqKvInfo)}) if dataclasses.is_dataclass(ReqKvInfo)
                  else ReqKvInfo())
    kv = getattr(req, "kv", None)
    for name, value in (("kv_committed_len", committed), ("kv_allocated_len", allocated)):
        setattr(kv if kv is not None and hasattr(kv, name) else req, name, value)


def spec_counter(req):
    return getattr(req, "spec_accepted_drafts", getattr(req, "spec_num_correct_drafts", None))


def observe(resolve):
    """Run a resolve function on the stale case and return what happened to each request."""
    scheduler, result, batch = stale_batch_case()
    before = {r.rid: r.kv_committed_len for r in batch.reqs}
    tokens = resolve(scheduler, result, batch)
    out = {"tokens": tokens}
    for r in batch.reqs:
        out[r.rid] = dict(
            committed_before=before[r.rid],
            committed=r.kv_committed_len,
            allocated=r.kv_allocated_len,
            verify_ct=r.spec_verify_ct,
            accepted=spec_counter(r),
        )
    return out


def mixin_layout(line=None):
    """The release's decode path is ``SchedulerOutputProcessorMixin`` (0.5.11 / 0.5.12.x), where the stale-case
    scenarios below run; 0.5.13+ moved it to ``scheduler_components.batch_result_processor``. A table fact."""
    line = _line() if line is None else line
    return line is not None and releases.LINES[line].probe_decode.startswith(releases.MIXIN + ".")


def resolve_name():
    """Name of the mixin's spec-v2 resolve step on this release (renamed in 0.5.12); None without the mixin."""
    if not mixin_layout():
        return None
    from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin as M

    return "_resolve_spec_overlap_token_ids" if hasattr(M, "_resolve_spec_overlap_token_ids") else "_resolve_spec_overlap_tokens"


def resolve_target():
    """Dotted path of the resolve step (see resolve_name), or None without the mixin."""
    name = resolve_name()
    return f"{releases.MIXIN}.SchedulerOutputProcessorMixin.{name}" if name else None


def scheduler_class():
    import sglang.srt.managers.scheduler  # noqa: F401  (import order SGLang itself uses: no import cycle)
    from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin
    from sglang.srt.observability.scheduler_metrics_mixin import SchedulerMetricsMixin

    class Sched(SchedulerOutputProcessorMixin, SchedulerMetricsMixin):
        # plumbing outside the counters under test
        def _handle_finished_req(self, *a, **k):
            pass

        def stream_output(self, *a, **k):
            pass

        def report_decode_stats(self, *a, **k):
            self.reported = k

        def _mamba_prefix_cache_update(self, *a, **k):
            pass

    return Sched


@functools.lru_cache(maxsize=None)
def _line():
    # once per process: importlib.metadata scans sys.path, which right before a timed call would also
    # evict the caches that call runs on (bench/hot_path_overhead.py)
    return releases.code_line(installed.version())


_BODIES = {}


def body(fix_module, fix_name, target=None):
    """The fix's patched function for this release (its patch file applied to the installed source),
    compiled once per process, as the plugin does; the fix must patch exactly one function here, or ``target``
    names the one wanted (the end of its dotted path, e.g. ``"Scheduler.event_loop_overlap"``)."""
    key = (fix_name, target)
    if key not in _BODIES:
        built = core.build_fix(fix_module.FIX.name)
        (fn,) = built.values() if target is None else [f for t, f in built.items() if t.endswith("." + target)]
        _BODIES[key] = fn
    return _BODIES[key]


def _late_result(only_stale):
    """The stale case as a spec-v2 decode result, ready for a release's decode step (both layouts): (stand-in
    scheduler parts, result, batch, live request or None). ``only_stale``: a late result holding only the finished
    and the retracted request. Batch features not under test (mamba tracking, grammar, logprobs) read as unset."""
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    stand_in, result, batch = stale_batch_case()
    if only_stale:
        batch.reqs = batch.reqs[1:]
        result.accept_lens = result.accept_lens[1:]
        result.next_token_ids = result.next_token_ids[4:]
    batch = Unset(**vars(batch))
    batch.spec_algorithm = SpeculativeAlgorithm.EAGLE3
    batch.is_spec_v2, batch.return_logprob, batch.has_grammar = True, False, False
    batch.batch_size = lambda: len(batch.reqs)
    result.copy_done = result.routed_experts_output = None
    if hasattr(result, "indexer_topk_output"):
        result.indexer_topk_output = None
    result.logits_output, result.can_run_cuda_graph = LogitsProcessorOutput(next_token_logits=None), False
    for r in batch.reqs:
        r.vocab_size = 1024  # what the scheduler passes to Req() for the tiny vocab
        r.sampling_params.normalize(None)  # as the tokenizer manager does before a request reaches the scheduler
    return stand_in, result, batch, (None if only_stale else batch.reqs[0])


def decode_case(use_plugin_body, only_stale=False, log_interval=40):
    """``process_batch_result_decode`` (stock, or the live-accept-metrics body) on the stale case, ready to run:
    (fn, sched, batch, result, live request or None); ``fn(sched, batch, result)`` runs it once (the
    live-accept-metrics tests run it, bench/hot_path_overhead.py times exactly that call). ``sched`` is the
    object the release's decode step is a method of (``decode_counters`` reads its counters); 0.5.13+ layout:
    ``processor_decode_case``."""
    if not mixin_layout():
        return processor_decode_case(use_plugin_body, only_stale, log_interval)
    from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin as M

    stand_in, result, batch, live = _late_result(only_stale)
    sched = scheduler_class()()
    sched.server_args = types.SimpleNamespace(decode_log_interval=log_interval)
    sched.__dict__.update(vars(stand_in))
    sched.enable_overlap, sched.enable_overlap_mlx, sched.enable_metrics = True, False, False
    sched.num_generated_tokens = sched.forward_ct_decode = 0
    # the release's own counter names (renamed in 0.5.12): the probe finds them by name, as on a real scheduler
    accept = "accepted" if _line() == "0.5.11" else "accept"
    for name in (f"spec_num_{accept}_tokens", "spec_num_forward_ct", f"spec_total_num_{accept}_tokens",
                 "spec_total_num_forward_ct"):
        setattr(sched, name, 0)
    sched.token_to_kv_pool_allocator = types.SimpleNamespace(free_group_begin=lambda: None, free_group_end=lambda: None)
    sched.model_config = types.SimpleNamespace(think_end_id=None)
    if _line() == "0.5.11":  # resolve with #23456 as the plugin ships it (the stock one corrupts the stale requests)
        setattr(sched, resolve_name(), body(skip_stale_overlap_updates, "skip-stale-overlap-updates").__get__(sched))
    fn = body(live_accept_metrics, "live-accept-metrics") if use_plugin_body else M.__dict__["process_batch_result_decode"]
    return fn, sched, batch, result, live


class _Inert:
    """Scheduler plumbing outside the counters under test (hisparse, offload, grammar, beam, logprob results): any
    attribute is a call that does nothing and returns None."""

    def __getattr__(self, name):
        return lambda *a, **k: None


class Unset(types.SimpleNamespace):
    """Server flags of a plain launch: the named ones as given, every other feature flag unset (None)."""

    def __getattr__(self, name):
        return None


class _Unset:
    """An unset config leaf or group of a plain launch: false, and so is everything read from it."""

    def __bool__(self):
        return False

    def __getattr__(self, name):
        return self


class _UnsetBags(dict):
    """Every runtime-context config namespace, with every switch unset (see processor_decode_case)."""

    def __contains__(self, name):
        return True

    def __bool__(self):
        return True

    def __missing__(self, name):
        return _Unset()

    def get(self, name, default=None):
        return self[name]


def processor_decode_case(use_plugin_body, only_stale=False, log_interval=40):
    """0.5.13+ layout: ``SchedulerBatchResultProcessor.process_batch_result_decode`` (stock, or the
    live-accept-metrics body) on the stale case; same return value as ``decode_case`` but ``sched`` is the
    release's real ``SchedulerMetricsReporter`` (built without its scheduler: only the counters exist), whose
    real ``update_spec_metrics`` the decode step calls. The processor is the release's real frozen dataclass;
    its resolve step ``_resolve_spec_v2_tokens`` runs for real."""
    import dataclasses

    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor as P
    from sglang.srt.managers.scheduler_components.metrics_reporter import SchedulerMetricsReporter

    stand_in, result, batch, live = _late_result(only_stale)
    reporter = object.__new__(SchedulerMetricsReporter)  # the counters as __post_init__ zeroes them
    for name in ("num_generated_tokens", "forward_ct_decode", "spec_num_accept_tokens", "spec_num_forward_ct",
                 "spec_total_num_accept_tokens", "spec_total_num_forward_ct", "spec_num_correct_drafts",
                 "spec_num_block_accept_tokens", "spec_num_cap_tokens"):
        setattr(reporter, name, 0)
    reporter.decode_log_interval = log_interval  # 0.5.22+ reads it from the reporter
    reporter.report_decode_stats = lambda *a, **k: setattr(reporter, "reported", k)
    reporter.snapshot_spec_decode_metrics = lambda *a, **k: None
    server_args = Unset(decode_log_interval=log_interval, enable_metrics=False)
    given = dict(
        is_generation=True, disaggregation_mode=DisaggregationMode.NULL, enable_overlap=True,
        enable_overlap_mlx=False, server_args=server_args, metrics_reporter=reporter,
        model_worker=stand_in.model_worker, draft_worker=stand_in.draft_worker,
        model_config=Unset(think_end_id=None, vocab_size=1024),  # no reasoning-model token ids
        token_to_kv_pool_allocator=types.SimpleNamespace(free_group_begin=lambda: None, free_group_end=lambda: None),
        hisparse_coordinator=None, decode_offload_manager=None,
    )
    kwargs = {f.name: given.get(f.name, _Inert()) for f in dataclasses.fields(P) if f.init}
    proc = P(**kwargs)
    decode = body(live_accept_metrics, "live-accept-metrics") if use_plugin_body else P.__dict__["process_batch_result_decode"]

    def fn(proc, batch, result):
        # 0.5.17+ read feature switches from the process-wide config a server publishes at start
        # (sglang.srt.runtime_context config bags); nothing is published in this process: every bag reads as
        # a plain launch's (every switch unset), for the duration of the call
        ctx = getattr(sys.modules.get("sglang.srt.runtime_context"), "_CONTEXT", None)
        if ctx is None or not hasattr(ctx, "_config_bags") or ctx._config_bags:
            return decode(proc, batch, result)
        saved, ctx._config_bags = ctx._config_bags, _UnsetBags()
        try:
            return decode(proc, batch, result)
        finally:
            ctx._config_bags = saved

    return fn, proc, batch, result, live


def decode_counters(sched):
    """The scheduler-wide counters a decode step fed, as the release keeps them (on the scheduler up to 0.5.12.x,
    on its ``metrics_reporter`` from 0.5.13): accepted tokens and verify steps of the current log interval,
    generated tokens, and whether the step reported its stats."""
    rep = getattr(sched, "metrics_reporter", sched)
    accepted = rep.spec_num_accepted_tokens if _line() == "0.5.11" else rep.spec_num_accept_tokens  # renamed in 0.5.12
    return dict(accepted=accepted, forward=rep.spec_num_forward_ct, generated=rep.num_generated_tokens,
                reported=hasattr(rep, "reported"))


def server_args(**fields):
    """ServerArgs field defaults without __post_init__ (no model to resolve) plus ``fields``."""
    from sglang.srt.server_args import ServerArgs

    sa = object.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            setattr(sa, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(sa, f.name, f.default_factory())
    for k, v in fields.items():
        setattr(sa, k, v)
    return sa


@contextlib.contextmanager
def published_server_args(monkeypatch, **fields):
    """The server flags scheduler-side code reads (``get_global_server_args()``), as a launch with ``fields``
    publishes them, for one test only: the scoped override (0.5.16+), the module global (0.5.11 … 0.5.14), the
    runtime context's slot (0.5.15)."""
    try:
        import sglang.srt.runtime_context as rc
    except ImportError:
        rc = None
    if rc is not None and hasattr(rc.get_context(), "override_server_args"):
        with rc.get_context().override_server_args(**fields):
            yield
        return
    import sglang.srt.server_args as mod

    sa = server_args(**fields)
    if hasattr(mod, "_global_server_args"):
        monkeypatch.setattr(mod, "_global_server_args", sa)
    else:
        monkeypatch.setattr(rc.get_context(), "_server_args", sa)
    yield


class TreeKernelStop(Exception):
    """Raised by :func:`capture_tree_mask`'s stand-in kernel: the call under test stops where the CUDA kernel runs."""


def capture_tree_mask(monkeypatch) -> dict:
    """Stand in, for one test, for the CUDA tree kernel that the release's ``eagle_utils.build_tree_kernel_efficient``
    calls (``sgl_build_tree_kernel_efficient``, GPU-only): the stand-in stores the tree mask it is handed under
    ``"tree_mask"`` in the returned dict and raises :class:`TreeKernelStop`. ``eagle_utils._is_npu`` is set False, so
    that the release takes the CUDA kernel's branch. What a test then reads is the mask the release allocated (or the
    preallocated buffer it filled)."""
    from sglang.srt.speculative import eagle_utils

    got = {}

    def kernel(parent_list, top_scores_index, seq_lens, tree_mask, *rest):
        got["tree_mask"] = tree_mask
        raise TreeKernelStop

    monkeypatch.setattr(eagle_utils, "sgl_build_tree_kernel_efficient", kernel, raising=False)
    monkeypatch.setattr(eagle_utils, "_is_npu", False, raising=False)
    return got
