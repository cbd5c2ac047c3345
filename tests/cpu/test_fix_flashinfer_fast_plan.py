"""flashinfer-draft-extend-graph's sync-free replay plan (the default; SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=0) on
0.5.11 - 0.5.13.post1: the flashinfer side and the fix's own rules. The graph path through the release's real backend
(capture, replay, ``call_begin_forward``) is in test_fix_flashinfer_draft_extend_graph.py (0.5.11 / 0.5.12.x) and
test_fix_flashinfer_draft_extend_graph_0513.py (0.5.13.x).

**flashinfer's own plan with host inputs** (fresh interpreter): the release's real flashinfer package (0.6.8.post1 for
0.5.11, 0.6.11.post1 for 0.5.12.x, 0.6.12 for 0.5.13.x; it imports on CPU with a ``pynvml`` stand-in) and its real
``BatchPrefillWithPagedKVCacheWrapper`` in CUDA-graph mode with the fa2 backend, as SGLang builds it, planned with the
arguments the patched ``call_begin_forward`` passes. What would be on the GPU there (the wrapper's buffers, its
workspaces, the kv indices) is tagged by storage, and a ``TorchFunctionMode`` follows the tags through every tensor
operation of ``plan``: a ``.to("cpu")`` / ``.cpu()`` / ``.item()`` / ``int()`` / ``bool()`` / ``.tolist()`` of a tagged
tensor, or a ``copy_`` from one into an untagged one, is a device-to-host copy (on a GPU: a wait on the stream). Only
flashinfer's compiled module (a JIT build) is a recorder.

* with ``host_layout``'s tensors (CPU; pinned on a GPU): no device-to-host copy; the graph's buffers are filled by
  non-blocking copies from exactly those tensors (the kv indices device to device); the compiled module's ``plan``
  gets them as its host arrays; no custom-mask helper runs;
* with the device indptrs of the stock call: ``qo_indptr.to("cpu")`` and the rest, the copies the fix removes.

**The rules**, in process, on the release's real classes: the switch (default off), the host layout's values and
refusals (none, wrong shape, not on the CPU, a sum other than the replay's), the pinned allocation on a GPU,
``replay_spec_info`` (only on a marked single-wrapper backend), ``host_plan_args`` (only for the causal fa2 plan it
was read for), ``fast_plan_reason`` (two wrappers, a backend that asks for no host mirror, verify-handoff admitting the
server) and the counts in ``serving.draft_extend_plans``.
"""

import json
import sys
import types

import pytest
import torch
from conftest import VERSION, requires_sglang, run_script_json, where_patched

from sglang_specv2_fixes import core, plugin, runtime, selection
from sglang_specv2_fixes.fixes import flashinfer_draft_extend_graph as fix

FIX_NAME = "flashinfer-draft-extend-graph"
# the flashinfer each release pins, whose plan() was read for the host layout (a new pin must be read again)
READ = {"0.5.11": "0.6.8.post1", "0.5.12": "0.6.11.post1", "0.5.12.post1": "0.6.11.post1", "0.5.13": "0.6.12",
        "0.5.13.post1": "0.6.12"}

pytestmark = [requires_sglang, where_patched(FIX_NAME, "the sync-free replay plan is part of its patch"),
              pytest.mark.release_scoped]

BS, WIDTH = 3, 4
LENS = [9, 13, 1]  # prefix + extend of two requests, the padded one at the fill value


# ------------------------------------------------------------------ flashinfer's plan (child interpreter)
def _plan_scenario():
    import unittest.mock

    sys.modules.setdefault("pynvml", types.ModuleType("pynvml"))  # flashinfer imports it at module level
    from torch.overrides import TorchFunctionMode

    import flashinfer
    import flashinfer.prefill as fp

    class DeviceTags(TorchFunctionMode):
        """Follows what would live on the GPU (tagged storages) through every tensor operation."""

        def __init__(self, device_tensors):
            super().__init__()
            self.dev = {t.untyped_storage().data_ptr() for t in device_tensors}
            self.keep, self.d2h, self.h2d, self.d2d = [], [], [], []

        def on_device(self, t):
            return isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in self.dev

        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", repr(func))
            if name in ("to", "cpu", "item", "tolist", "__int__", "__bool__", "__float__", "__index__", "numpy") \
                    and args and self.on_device(args[0]):
                if name != "to" or "cpu" in repr(args[1:]) + repr(kwargs.get("device")):
                    self.d2h.append(name)
            elif name == "copy_":
                dst, src = args[0], args[1]
                non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
                if self.on_device(dst):
                    (self.d2d if self.on_device(src) else self.h2d).append((src, non_blocking))
                elif self.on_device(src):
                    self.d2h.append("copy_")
            out = func(*args, **kwargs)
            inputs = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
            if name not in ("to", "cpu") and any(self.on_device(t) for t in inputs):
                for o in out if isinstance(out, (tuple, list)) else [out]:
                    if isinstance(o, torch.Tensor):
                        self.keep.append(o)
                        self.dev.add(o.untyped_storage().data_ptr())
            return out

    class CompiledModule:  # flashinfer's JIT-built module: records what its plan gets
        def __init__(self):
            self.calls = []

        def plan(self, *args):
            self.calls.append(args)
            return ["plan info"]

    def forbidden(*args, **kwargs):
        raise AssertionError("a custom-mask helper ran")

    module = CompiledModule()
    fp.get_batch_prefill_module = lambda backend, *args: module
    fp._compute_page_mask_indptr = fp.segment_packbits = forbidden
    empty = torch.empty
    with unittest.mock.patch("torch.empty", lambda *a, pin_memory=False, **k: empty(*a, **k)):  # no CUDA to pin
        wrapper = fp.BatchPrefillWithPagedKVCacheWrapper(  # as FlashInferAttnBackend's graph wrappers (fa2)
            torch.empty(1 << 16, dtype=torch.uint8), "NHD", use_cuda_graph=True, backend="fa2",
            qo_indptr_buf=torch.zeros(BS + 1, dtype=torch.int32),
            paged_kv_indptr_buf=torch.zeros(BS + 1, dtype=torch.int32),
            paged_kv_indices_buf=torch.zeros(256, dtype=torch.int32),
            paged_kv_last_page_len_buf=torch.zeros(BS, dtype=torch.int32))
    kv_indices = torch.arange(sum(LENS), dtype=torch.int32) + 100  # the kv-indices kernel's output
    on_gpu = [wrapper._qo_indptr_buf, wrapper._paged_kv_indptr_buf, wrapper._paged_kv_indices_buf,
              wrapper._paged_kv_last_page_len_buf, wrapper._kv_lens_buffer, wrapper._int_workspace_buffer,
              wrapper._float_workspace_buffer, kv_indices]
    sglang_kwargs = dict(  # what call_begin_forward passes besides the layout
        q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16, custom_mask=None, non_blocking=True,
        fixed_split_size=None, prefix_len_ptr=None, token_pos_in_items_ptr=None, token_pos_in_items_len=0,
        max_item_len_ptr=None)

    def plan(qo, kv, last, device_args, **extra):
        tags = DeviceTags(on_gpu + ([qo, kv, last] if device_args else []))
        with tags:
            wrapper.begin_forward(qo, kv, kv_indices, last, 2, 2, 64, 1, **sglang_kwargs, **extra)
        return tags

    layout, why = fix.host_layout(BS, WIDTH, torch.tensor(LENS, dtype=torch.int32), sum(LENS), pin=False)
    assert why is None, why
    qo, kv, last, lens = layout
    out = {"flashinfer": flashinfer.__version__}
    # stock: the device indptrs the release's generate_attn_arg_prefill computes (same values)
    tags = plan(qo.clone(), kv.clone(), last.clone(), device_args=True)
    out["stock"] = dict(d2h=tags.d2h)
    tags = plan(qo, kv, last, device_args=False, seq_lens=lens)
    names = {id(t): n for n, t in zip(("qo_indptr", "kv_indptr", "last_page_len", "kv_lens"), layout)}

    def source(src):  # which of the layout's tensors (kv_indptr and kv_lens are views of one block)
        return next((names[id(t)] for t in layout if (src.data_ptr(), src.shape) == (t.data_ptr(), t.shape)), "other")

    args = module.calls[-1]
    out["host"] = dict(
        d2h=tags.d2h, h2d=sorted((source(src), nb) for src, nb in tags.h2d),
        d2d=[(src.untyped_storage().data_ptr() == kv_indices.untyped_storage().data_ptr(), nb) for src, nb in tags.d2d],
        module_host_arrays=[args[3] is qo, args[4] is kv, args[5] is lens],
        buffers=dict(qo=wrapper._qo_indptr_buf.tolist(), kv=wrapper._paged_kv_indptr_buf.tolist(),
                     last=wrapper._paged_kv_last_page_len_buf.tolist(),
                     kv_indices=wrapper._paged_kv_indices_buf[: sum(LENS)].tolist()),
        plan_info=wrapper._plan_info)
    return out


@pytest.fixture(scope="module")
def flashinfer_plan():
    return run_script_json(__file__)


def test_flashinfer_is_the_version_read(flashinfer_plan):
    assert flashinfer_plan["flashinfer"] == READ.get(VERSION), (
        f"sglang {VERSION} pins flashinfer {flashinfer_plan['flashinfer']}: read its plan() for the host layout first")


def test_stock_plan_copies_its_indptrs_to_the_host(flashinfer_plan):
    """The bug: flashinfer's plan reads the device qo / kv indptrs back (``qo_indptr.to("cpu")`` first)."""
    d2h = flashinfer_plan["stock"]["d2h"]
    assert d2h[:1] == ["to"] and d2h.count("to") == 3, d2h


def test_host_layout_plan_has_no_device_to_host_copy(flashinfer_plan):
    host = flashinfer_plan["host"]
    assert host["d2h"] == []
    # every buffer of the graph from the fix's host tensors, without blocking; the kv indices device to device
    assert host["h2d"] == [[n, True] for n in sorted(("qo_indptr", "kv_indptr", "last_page_len", "kv_lens"))]
    assert host["d2d"] == [[True, True]]
    assert host["module_host_arrays"] == [True, True, True]  # the compiled plan reads the layout itself
    assert host["buffers"] == dict(qo=[0, WIDTH, 2 * WIDTH, 3 * WIDTH], kv=[0, 9, 22, 23], last=[1, 1, 1],
                                   kv_indices=list(range(100, 100 + sum(LENS))))
    assert host["plan_info"] == ["plan info"]


# ------------------------------------------------------------------ the rules (in process)
@pytest.fixture
def plans(monkeypatch):
    """A fresh count of this process's replays."""
    monkeypatch.setattr(fix, "PLANS", {})
    monkeypatch.setattr(fix, "_WARNED", set())
    return fix.PLANS


@pytest.mark.parametrize("value,on", [
    (None, True), ("", True), ("1", True), ("on", True), ("0", False), ("off", False), ("false", False),
])
def test_switch_on_unless_off(monkeypatch, value, on):
    """The sync-free plan unless the switch is off, for chains and trees."""
    if value is None:
        monkeypatch.delenv(selection.ENV_FLASHINFER_FAST_PLAN, raising=False)
    else:
        monkeypatch.setenv(selection.ENV_FLASHINFER_FAST_PLAN, value)
    assert selection.flashinfer_fast_plan_enabled() is on


def test_host_layout_values():
    layout, why = fix.host_layout(BS, WIDTH, torch.tensor(LENS), sum(LENS), pin=False)  # int64 like a batch's mirror
    assert why is None
    qo, kv, last, lens = layout
    assert all(t.device.type == "cpu" and t.dtype == torch.int32 for t in layout)
    assert qo.tolist() == [0, 4, 8, 12] and kv.tolist() == [0, 9, 22, 23] and last.tolist() == [1, 1, 1]
    assert lens.tolist() == LENS


@pytest.mark.parametrize("seq_lens_cpu,seq_lens_sum,why", [
    (None, sum(LENS), "no seq_lens_cpu"),
    (torch.tensor(LENS[:2]), sum(LENS[:2]), "seq_lens_cpu of shape (2,) on cpu for a batch of 3"),
    (torch.tensor(LENS, device="meta"), sum(LENS), "seq_lens_cpu of shape (3,) on meta for a batch of 3"),
    (torch.tensor(LENS), sum(LENS) + 2, "seq_lens_cpu does not sum to the replay's seq_lens_sum"),
    (torch.tensor(LENS), None, "seq_lens_cpu does not sum to the replay's seq_lens_sum"),  # 0.5.13's GPU-only path
])
def test_host_layout_refuses(seq_lens_cpu, seq_lens_sum, why):
    assert fix.host_layout(BS, WIDTH, seq_lens_cpu, seq_lens_sum, pin=False) == (None, why)


def test_host_layout_is_pinned_on_a_gpu(monkeypatch):
    """On CUDA every host tensor is page-locked, so flashinfer's non-blocking copies never stage through pageable
    memory (which the driver may serialise with the stream). No CUDA here: the pinning calls are recorded."""
    pinned = []
    empty = torch.empty

    def recording_empty(*args, pin_memory=False, **kwargs):
        pinned.append(("empty", pin_memory))
        return empty(*args, **kwargs)

    monkeypatch.setattr(torch, "empty", recording_empty)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a, **k: pinned.append(("pin", True)) or self)
    monkeypatch.setattr(fix, "_HOST_CONST", {})
    layout, why = fix.host_layout(BS, WIDTH, torch.tensor(LENS), sum(LENS), pin=True)
    assert why is None and pinned == [("pin", True), ("pin", True), ("empty", True)]
    pinned.clear()
    fix.host_layout(BS, WIDTH, torch.tensor(LENS), sum(LENS), pin=True)
    assert pinned == [("empty", True)]  # the constant qo / last-page tensors are kept; the kv ones are new


def _spec_info():
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    tokens, drafts = fix.accept_fields(EagleDraftInput)
    return EagleDraftInput(hidden_states=torch.zeros(2 * WIDTH, 4),
                           **{tokens: torch.tensor([2, 4]), drafts: torch.tensor([1, 3])})


def _fi_backend(**attrs):
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    b = FlashInferAttnBackend.__new__(FlashInferAttnBackend)
    b.num_wrappers, b.use_sliding_window_kv_pool = 1, False
    b.__dict__.update(attrs)
    return b


@pytest.mark.parametrize("attrs,carried", [
    ({}, False),  # not marked: the switch off or refused by plan_decision
    ({fix.FAST_PLAN: True}, True),
    ({fix.FAST_PLAN: True, "num_wrappers": 2}, False),  # two wrappers: stock plan (never marked; checked again)
    ({fix.FAST_PLAN: True, "use_sliding_window_kv_pool": True}, False),
])
def test_replay_spec_info(plans, attrs, carried):
    spec = fix.replay_spec_info(_fi_backend(**attrs), _spec_info(), BS, torch.tensor(LENS), sum(LENS), WIDTH)
    tokens = fix.accept_fields(spec)[0]
    assert getattr(spec, tokens).tolist() == [WIDTH] * BS  # the constant width either way
    assert (fix.HOST_LAYOUT in spec.__dict__) is carried
    assert plans == {}  # counted where the plan takes it (host_plan_args), or refused below
    if carried:
        qo, kv, last, lens = spec.__dict__[fix.HOST_LAYOUT]
        assert qo.tolist() == [0, 4, 8, 12] and kv.tolist() == [0, 9, 22, 23]


def test_replay_spec_info_counts_a_refusal(plans):
    spec = fix.replay_spec_info(_fi_backend(**{fix.FAST_PLAN: True}), _spec_info(), BS, None, None, WIDTH)
    assert fix.HOST_LAYOUT not in spec.__dict__ and plans == {"flashinfer: no seq_lens_cpu": 1}


@pytest.mark.parametrize("mask,backend,host", [
    (None, "fa2", True),
    (torch.ones(4, dtype=torch.bool), "fa2", False),  # a custom mask: flashinfer packs it against the indptrs
    (None, "fa3", False),  # another wrapper backend than the fa2 the plan was read for
])
def test_host_plan_args(plans, mask, backend, host):
    spec = fix.replay_spec_info(_fi_backend(**{fix.FAST_PLAN: True}), _spec_info(), BS, torch.tensor(LENS),
                                sum(LENS), WIDTH)
    device = (torch.zeros(BS + 1), torch.zeros(BS + 1), torch.zeros(BS))
    qo, kv, last, extra = fix.host_plan_args(spec, types.SimpleNamespace(_backend=backend), *device, mask)
    layout = spec.__dict__[fix.HOST_LAYOUT]
    if host:
        assert (qo, kv, last) == layout[:3] and extra == {"seq_lens": layout[3]}
        assert plans == {"sync-free": 1}
    else:
        assert (qo, kv, last) == device and extra == {}
        assert list(plans) == ["flashinfer: a custom mask" if mask is not None else "flashinfer: wrapper backend fa3"]


@pytest.fixture
def plan_target(monkeypatch):
    """The fix's call_begin_forward in place, as the plugin registers it."""
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferIndicesUpdaterPrefill

    monkeypatch.setattr(FlashInferIndicesUpdaterPrefill, "call_begin_forward", core.build_fix(FIX_NAME)[fix.PLAN_TARGET])


@pytest.mark.parametrize("attrs,why", [
    ({}, None),
    ({"num_wrappers": 2}, "two flashinfer wrappers"),
    ({"use_sliding_window_kv_pool": True}, "two flashinfer wrappers"),
    ({"needs_cpu_seq_lens": False}, "does not ask the scheduler for seq_lens_cpu"),
])
def test_fast_plan_reason(monkeypatch, plan_target, attrs, why):
    monkeypatch.setenv(selection.ENV_FLASHINFER_FAST_PLAN, "1")
    worker = types.SimpleNamespace(server_args=types.SimpleNamespace(attention_backend="flashinfer",
                                                                     speculative_eagle_topk=1))
    backend = _fi_backend(**attrs)
    reason = fix.fast_plan_reason(worker, backend)
    assert reason is None if why is None else why in reason
    suffix = fix.plan_decision(worker, backend)
    assert suffix == (", sync-free plan (host-known indptrs)" if why is None else f", flashinfer's own plan: {reason}")
    assert backend.__dict__.get(fix.FAST_PLAN, False) is (why is None)


def test_fast_plan_reason_verify_handoff(monkeypatch, plan_target):
    """verify-handoff (0.5.11 / 0.5.12.x) leaves seq_lens_cpu None where its rule admits the server (every backend
    triton, so never a flashinfer draft extend in practice): the plan refuses such a server rather than rely on that."""
    from sglang_specv2_fixes.fixes import verify_handoff

    patched = runtime.is_patched
    monkeypatch.setattr(runtime, "is_patched", lambda t: t == fix._VERIFY_WAIT or patched(t))
    monkeypatch.setattr(verify_handoff, "_SERVER", {})
    admitted = types.SimpleNamespace(
        speculative_algorithm="EAGLE3", attention_backend="triton", decode_attention_backend=None,
        prefill_attention_backend=None, speculative_draft_attention_backend=None, page_size=1,
        speculative_eagle_topk=1, speculative_num_steps=3, speculative_num_draft_tokens=4)
    assert verify_handoff.server_reason(admitted) is None
    reason = fix.fast_plan_reason(types.SimpleNamespace(server_args=admitted), _fi_backend())
    assert reason == "verify-handoff leaves seq_lens_cpu None on this server"
    refused = types.SimpleNamespace(**{**vars(admitted), "attention_backend": "flashinfer"})
    assert fix.fast_plan_reason(types.SimpleNamespace(server_args=refused), _fi_backend()) is None


def test_plans_reach_server_info(plans):
    server_args = types.SimpleNamespace(attention_backend="flashinfer")
    assert plugin.serving_facts(server_args)["draft_extend_plans"] is None
    fix._count(fix.SYNC_FREE)
    fix._count(fix.SYNC_FREE)
    fix._count("flashinfer: no seq_lens_cpu")
    assert plugin.serving_facts(server_args)["draft_extend_plans"] == {"sync-free": 2, "flashinfer: no seq_lens_cpu": 1}


if __name__ == "__main__":
    print(json.dumps(_plan_scenario()))
