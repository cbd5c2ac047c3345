"""mamba-track-freed-rows on the release's real objects: the mamba track indices of a spec-v2 verify (built by
``EagleVerifyInputV2Mixin.prepare_for_v2_verify`` on 0.5.11 / 0.5.12.x, by ``set_mamba_track_indices_from_reqs`` from
0.5.13) for three requests in request-pool rows 0, 1, 2, the middle one freed before the verify launch
(``mamba_next_track_idx`` None) and its row 1 already given to a new live request.

The ping-pong mapping holds slot ``100 + 10 * row + position``, so every slot names its owner. Stock up to 0.5.15.post1:
``TypeError`` (#27325). Stock 0.5.16 - 0.5.21: the freed request's index is slot 110, position 0 of row 1, the new
request's track slot, into which the post-verify scatter would write the freed request's state (#29449). Plugin (and
0.5.22 / 0.5.23 by themselves): -1, which the scatter skips; the live rows' slots are stock's (101 and 120).

On 0.5.11 ``tbo-verify-seq-lens`` changes the same function: with both selected the function is built from both patch
files (the ``compose:`` line of this fix's file, ``patchfile.build_stack``), and both fixes hold at once (the freed row
is -1 and the verify input carries the batch's ``seq_lens_cpu`` / ``seq_lens_sum``); the plugin's real plan, register
and HookRegistry path hooks the function once, with that composed function, for both fixes.

Stand-ins: the batch and the request objects (only the fields the functions read), the request-to-token pool (the
mapping and ``req_to_token``), the global server args (``extra_buffer`` on), ``torch.tensor`` without pinned memory
(no CUDA here), and for ``prepare_for_v2_verify`` the forward batch / attention backend as in
test_fix_tbo_verify_seq_lens.py.
"""

import dataclasses
import types

import pytest
import torch
from conftest import LINE, VERSION, patched_here, requires_sglang, where_patched

from sglang_specv2_fixes import catalog, core, patchfile, releases, selection
from sglang_specv2_fixes.fixes import ALL_FIXES, mamba_track_freed_rows, tbo_verify_seq_lens

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = mamba_track_freed_rows.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's mamba track indices")
IN_VERIFY_PREP = VERSION in ("0.5.11", "0.5.12", "0.5.12.post1")  # later: set_mamba_track_indices_from_reqs
OLD = ("0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1")
MARKS_FREED = ("0.5.22", "0.5.23")
TRACK = [1, None, 0]  # mamba_next_track_idx of the requests in rows 0, 1 (freed), 2
D = 4  # verify tokens per request


class _PinlessTorch:
    """The module's ``torch`` with ``tensor(..., pin_memory=True)`` made on plain host memory (no CUDA here)."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def tensor(*args, pin_memory=False, **kwargs):
        return torch.tensor(*args, **kwargs)


def _req(track):
    kv = types.SimpleNamespace(mamba_next_track_idx=track)  # 0.5.19 on: the request's KV record
    return types.SimpleNamespace(mamba_next_track_idx=track, kv=kv)


def _pool(bs):
    rows = torch.arange(bs, dtype=torch.int64).unsqueeze(1)
    return types.SimpleNamespace(  # slot 100 + 10 * row + position
        req_index_to_mamba_ping_pong_track_buffer_mapping=100 + 10 * rows + torch.arange(2, dtype=torch.int64),
        req_to_token=torch.arange(bs * 64).view(bs, 64))


def _via_set_mamba_track_indices(plugin, monkeypatch, track):
    from sglang.srt.managers import schedule_batch as mod

    monkeypatch.setattr(mod, "torch", _PinlessTorch())
    fn = core.build_fix(FIX)[f"{mod.__name__}.set_mamba_track_indices_from_reqs"] if plugin \
        else mod.set_mamba_track_indices_from_reqs
    batch = types.SimpleNamespace(req_to_token_pool=_pool(len(track)), req_pool_indices=torch.arange(len(track)),
                                  reqs=[_req(t) for t in track])
    fn(batch)
    return batch.mamba_track_indices


def _via_prepare_for_v2_verify(plugin, monkeypatch, track, fixes=(FIX,), spec_out=None):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import eagle_info_v2 as mod
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    monkeypatch.setattr(mod, "torch", _PinlessTorch())
    monkeypatch.setattr(mod, "get_global_server_args",
                        lambda: types.SimpleNamespace(enable_mamba_extra_buffer=lambda: True))
    monkeypatch.setattr(mod.ForwardBatch, "init_new", staticmethod(lambda batch, runner: types.SimpleNamespace()))
    bs = len(track)
    spec = EagleVerifyInput(
        draft_token=torch.arange(bs * D), custom_mask=None, positions=torch.arange(bs * D),
        retrieve_index=torch.zeros(bs, D, dtype=torch.long), retrieve_next_token=torch.zeros(bs, D, dtype=torch.long),
        retrieve_next_sibling=torch.zeros(bs, D, dtype=torch.long), retrieve_cum_len=None, spec_steps=D - 1, topk=1,
        draft_token_num=D, capture_hidden_mode=None, seq_lens_sum=None, seq_lens_cpu=None)
    seq_lens = torch.tensor([5, 9, 3], dtype=torch.int64)
    batch = types.SimpleNamespace(
        forward_mode=ForwardMode.DECODE, req_pool_indices=torch.arange(bs), seq_lens=seq_lens.clone(),
        seq_lens_cpu=seq_lens, seq_lens_sum=int(seq_lens.sum()), spec_info=spec, reqs=[_req(t) for t in track],
        device="cpu", model_config=types.SimpleNamespace(vocab_size=1024))
    backend = types.SimpleNamespace(init_forward_metadata=lambda fb: None)
    worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(
        graph_runner=None, attn_backend=backend, spec_algorithm=types.SimpleNamespace(is_standalone=lambda: False)))
    fn = core.build_fixes(fixes)[f"{mod.__name__}.EagleVerifyInputV2Mixin.prepare_for_v2_verify"] if plugin \
        else mod.EagleVerifyInputV2Mixin.prepare_for_v2_verify
    if spec_out is not None:
        spec_out.update(spec=spec, batch=batch)
    fn(spec, _pool(bs), batch, worker)
    return batch.mamba_track_indices


def track_indices(plugin, monkeypatch, track=tuple(TRACK)):
    via = _via_prepare_for_v2_verify if IN_VERIFY_PREP else _via_set_mamba_track_indices
    return via(plugin, monkeypatch, list(track)).tolist()


@pytest.mark.skipif(VERSION not in OLD, reason=f"sglang {VERSION}: a None track position is guarded (0.5.16 on)")
def test_stock_verify_stops_on_a_freed_request(monkeypatch):
    with pytest.raises(TypeError):
        track_indices(False, monkeypatch)


@pytest.mark.skipif(VERSION in OLD or VERSION in MARKS_FREED,
                    reason=f"sglang {VERSION}: not the 0.5.16 - 0.5.21 guard that picks position 0")
def test_stock_freed_row_points_at_the_new_owners_slot(monkeypatch):
    assert track_indices(False, monkeypatch) == [101, 110, 120]


@FIXED_HERE
def test_plugin_skips_the_freed_row_only(monkeypatch):
    assert track_indices(True, monkeypatch) == [101, -1, 120]


@FIXED_HERE
def test_plugin_builds_live_rows_as_stock(monkeypatch):
    """With every request live the plugin's indices are stock's (no row marked)."""
    live = (1, 0, 1)
    assert track_indices(True, monkeypatch, live) == track_indices(False, monkeypatch, live) == [101, 110, 121]


@pytest.mark.skipif(VERSION not in MARKS_FREED, reason=f"sglang {VERSION}: upstream marks freed rows from 0.5.22")
def test_upstream_marks_the_freed_row(monkeypatch):
    """What the release table's upstream note says of 0.5.22 / 0.5.23, on the release's own function."""
    assert track_indices(False, monkeypatch) == [101, -1, 120]


# ---------------------------------------------------------- with tbo-verify-seq-lens, which changes the same function
TBO = tbo_verify_seq_lens.FIX.name
BOTH = (TBO, FIX)
TARGET = "sglang.srt.speculative.eagle_info_v2.EagleVerifyInputV2Mixin.prepare_for_v2_verify"


def _shares_the_function():
    """Both fixes are patched here and replace one function (0.5.11)."""
    if not all(patched_here(f) for f in BOTH):
        return False
    targets = [{t.dotted for t in patchfile.load(f, releases.entry(f, LINE).name).targets} for f in BOTH]
    return bool(targets[0] & targets[1])


SHARED = pytest.mark.skipif(not _shares_the_function(),
                            reason=f"sglang {VERSION}: {TBO} and {FIX} do not both patch one function")


@SHARED
def test_both_fixes_hold_at_once_in_the_composed_function(monkeypatch):
    seen = {}
    assert _via_prepare_for_v2_verify(True, monkeypatch, list(TRACK), fixes=BOTH, spec_out=seen).tolist() == \
        [101, -1, 120]
    spec, batch = seen["spec"], seen["batch"]
    assert spec.seq_lens_cpu is batch.seq_lens_cpu and spec.seq_lens_sum == batch.seq_lens_sum == 17  # tbo's part


@SHARED
def test_each_fix_alone_does_only_its_own_part(monkeypatch):
    seen = {}
    with pytest.raises(TypeError):  # tbo-verify-seq-lens alone leaves the track indices as stock
        _via_prepare_for_v2_verify(True, monkeypatch, list(TRACK), fixes=(TBO,))
    assert _via_prepare_for_v2_verify(True, monkeypatch, list(TRACK), fixes=(FIX,), spec_out=seen).tolist() == \
        [101, -1, 120]
    assert seen["spec"].seq_lens_cpu is None and seen["spec"].seq_lens_sum is None  # stock's, without tbo's part


@SHARED
def test_plan_composes_the_two_and_refuses_an_undeclared_or_stale_pairing(monkeypatch):
    auto = selection.parse("auto", ALL_FIXES)
    report = core.plan(auto)
    tbo, mamba = report.get(TBO), report.get(FIX)
    assert (tbo.state, mamba.state) == (catalog.READY, catalog.READY) and report.warnings == []
    assert "composed with tbo-verify-seq-lens on EagleVerifyInputV2Mixin.prepare_for_v2_verify" in mamba.reason
    # alone, each is an ordinary patch of the upstream function
    for name in BOTH:
        st = core.plan(selection.parse(name, ALL_FIXES)).get(name)
        assert st.state == catalog.READY and "composed" not in st.reason
    # the compose line removed (as if written for another release), or left behind by a changed tbo patch file
    real = patchfile.load(FIX, releases.entry(FIX, LINE).name)
    c = real.composes[0]
    for composes, expected in (((), f"{TARGET} is also replaced by {TBO}"),
                               ((dataclasses.replace(c, before="0123456789abcdef"),),
                                f"composes with {TBO} on {TARGET} after fingerprint 0123456789abcdef, but "
                                f"patches/{TBO}/0.5.11.patch now gives {c.before}")):
        fake = dataclasses.replace(real, composes=composes)
        monkeypatch.setattr(patchfile, "load", lambda fix, name, _l=patchfile.load, _f=fake: _f if fix == FIX else _l(fix, name))
        report = core.plan(auto)
        st = report.get(FIX)
        assert st.state == catalog.REFUSED and expected in st.reason, st.reason
        assert "refusing to let one fix replace the other's function" in st.reason
        assert report.get(TBO).state == catalog.READY  # the earlier fix still applies alone
        assert f"{FIX} refused: {st.reason}" in report.warnings
        monkeypatch.undo()


@SHARED
def test_stack_refuses_a_text_that_is_not_what_the_compose_line_expects(tmp_path):
    """build_stack checks the function between the two files: a tbo patch file that gives other text (here: one more
    comment line in its hunk, with its own after= updated so it builds alone) stops the composed build."""
    import os

    from sglang_specv2_fixes import installed
    from sglang_specv2_fixes.fingerprint import fingerprint_source, function_source

    root = os.path.dirname(installed.sglang_root())
    tbo = patchfile.load(TBO, releases.entry(TBO, LINE).name)
    mamba = patchfile.load(FIX, releases.entry(FIX, LINE).name)
    text = open(tbo.path, encoding="utf-8").read().replace(
        "+            self.seq_lens_cpu = batch.seq_lens_cpu\n",
        "+            # one more line\n+            self.seq_lens_cpu = batch.seq_lens_cpu\n")
    text = text.replace("@@ -279,6 +279,12 @@", "@@ -279,6 +279,13 @@")
    (rel, _), = tbo.files
    other = patchfile.parse(text, "changed-tbo.patch")
    src = open(os.path.join(root, rel), encoding="utf-8").read()
    new_after = fingerprint_source(function_source(patchfile.apply_text(other, rel, src), "EagleVerifyInputV2Mixin.prepare_for_v2_verify")[0])
    other = patchfile.parse(text.replace(tbo.targets[0].after, new_after), "changed-tbo.patch")
    assert patchfile.build(other, root)  # alone it builds
    with pytest.raises(patchfile.PatchError, match=f"compose line for {TBO} expects {mamba.composes[0].before}"):
        patchfile.build_stack([other, mamba], root)
    with pytest.raises(patchfile.PatchError, match=f"no compose line for {FIX}"):  # the other order
        patchfile.build_stack([mamba, tbo], root)


REGISTER_BOTH = """
import json, sys
from sglang.srt.plugins.hook_registry import HookRegistry
from sglang.srt.speculative import eagle_info_v2
from sglang.srt.plugins import load_plugins
load_plugins()  # SGLang's own loader: plan, register, apply_hooks, verify
from sglang_specv2_fixes import core, plugin
report = plugin.announce('scheduler')
target = sys.argv[1]
hooks = [h for h in HookRegistry._hooks.get(target, []) if h[2] and h[2].plugin_name == 'specv2_fixes']
fn = core.resolve_raw(target)
print('RESULT ' + json.dumps(dict(
    states={f: report.get(f).state for f in ('tbo-verify-seq-lens', 'mamba-track-freed-rows')},
    warnings=report.warnings, hooks=len(hooks),
    same=core.STATE.built['tbo-verify-seq-lens'][target] is core.STATE.built['mamba-track-freed-rows'][target],
    ours=any(f is core.STATE.built['mamba-track-freed-rows'][target] for f in core.chain(fn)),
    mark=[getattr(f, '__specv2_fix__', None) for f in core.chain(fn) if getattr(f, '__specv2_fix__', None)])))
"""


@SHARED
def test_register_hooks_the_composed_function_once_for_both_fixes():
    import json
    import subprocess
    import sys

    from conftest import ROOT, child_env

    proc = subprocess.run([sys.executable, "-c", REGISTER_BOTH, TARGET], capture_output=True, text=True, timeout=240,
                          env=child_env(SGLANG_SPECV2_FIXES=f"{TBO},{FIX}"), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1][len("RESULT "):])
    assert r["states"] == {TBO: "applied", FIX: "applied"} and r["warnings"] == [], r
    assert r["hooks"] == 1 and r["same"] and r["ours"], r
    assert r["mark"] == [f"{TBO}+{FIX}:{TARGET}"]
