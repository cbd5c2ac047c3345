"""The plugin through SGLang's real ``load_plugins()`` in fresh interpreters (as each SGLang process)."""

import json

import pytest
from conftest import LINE, OPT_IN_SUBJECT, OPT_IN_TEST_SWITCH, VERSION, opt_in_code, requires_sglang, run_py

from sglang_specv2_fixes import patchfile, releases
from sglang_specv2_fixes.catalog import Patched
from sglang_specv2_fixes.fixes import ALL_FIXES

pytestmark = requires_sglang
# every fix the table patches on the release under test, with the targets of its patch file
PATCHED_HERE = {f.name: [t.dotted for t in patchfile.load(f.name, releases.entry(f.name, LINE).name).targets]
                for f in ALL_FIXES if LINE and isinstance(releases.entry(f.name, LINE), Patched)}
# patched when SGLang imports their modules, which a process that only imports the scheduler never does: READY there
ON_IMPORT = {f.name for f in ALL_FIXES if f.on_import and f.name in PATCHED_HERE}


# the opt-in fixes (their switches are on in the tests: conftest; off: test_opt_in_fixes_stay_out_without_their_switch),
# with the mechanism's test subject (conftest.opt_in_code) where it is not one of them
OPT_IN = {f.name: f.opt_in for f in ALL_FIXES if f.opt_in}
OPT_IN.setdefault(OPT_IN_SUBJECT, OPT_IN_TEST_SWITCH)


def loaded_states(fix):
    """A patched fix's possible states after load_plugins() alone: an on_import fix is READY until its modules are
    imported (they may be, by the other fixes' targets)."""
    return ("ready", "applied") if fix in ON_IMPORT else ("applied",)

PRELUDE = """
import json, sys, logging
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
"""

LOAD_AND_REPORT = PRELUDE + """
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins(); load_plugins()
from sglang_specv2_fixes import plugin, core
plugin.register()  # second registration in the same process: no-op
from sglang.srt.managers.scheduler import Scheduler
from sglang_specv2_fixes.testing.scenarios import observe, resolve_name, resolve_target

report = plugin.announce('scheduler')
ours = {t: len([h for h in hs if h[2] and h[2].plugin_name == 'specv2_fixes']) for t, hs in HookRegistry._hooks.items()}
# the stale case through the Scheduler's own resolve step (0.5.11 / 0.5.12.x layout only)
obs = observe(getattr(Scheduler, resolve_name())) if resolve_name() else None
print('RESULT ' + json.dumps(dict(report=report.as_dict(), hooks=ours, obs=obs,
      patched=core.is_patched(resolve_target()) if resolve_target() else False)))
"""


def result_of(proc):
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_auto_applies_and_is_idempotent():
    r = result_of(run_py(LOAD_AND_REPORT))
    fixes = r["report"]["fixes"]
    assert r["hooks"] and all(n == 1 for n in r["hooks"].values()), r["hooks"]  # each target hooked exactly once
    for f, targets in PATCHED_HERE.items():
        assert fixes[f]["state"] in loaded_states(f), (f, fixes[f]["reason"])
        assert set(targets) <= set(r["hooks"]) or f in ON_IMPORT
    assert PATCHED_HERE  # live-accept-metrics at least: every release has something to apply
    stale = releases.entry("skip-stale-overlap-updates", LINE)
    if isinstance(stale, Patched):
        assert fixes["skip-stale-overlap-updates"]["state"] == "applied"
        assert r["patched"] is True
        assert r["obs"]["retracted"]["committed"] == 0 and r["obs"]["finished"]["verify_ct"] == 0
    else:
        assert fixes["skip-stale-overlap-updates"]["state"] == stale.state
        assert r["patched"] is False
    for f in ALL_FIXES:  # every fix's reported state is the table's
        entry = releases.entry(f.name, LINE)
        assert fixes[f.name]["state"] in (loaded_states(f.name) if isinstance(entry, Patched) else (entry.state,)), f.name


EVERY_PATCHED_FIX = PRELUDE + """
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
HookRegistry.apply_hooks()  # load_plugins() applies them already; a second call must change nothing
from sglang_specv2_fixes import plugin, core
import inspect
import sglang.srt.managers.scheduler, sglang.srt.speculative.eagle_worker_v2  # what a scheduler has imported
first = plugin.announce('scheduler').as_dict()
waiting = {m: list(fs) for m, fs in core.STATE.on_import.items()}  # modules not imported yet -> on_import fixes waiting
imported_before = [m for m in waiting if m in sys.modules]
import importlib
for module in waiting:
    importlib.import_module(module)  # as SGLang does for the path the fix is about
report = plugin.announce('scheduler').as_dict()
targets = json.loads(sys.argv[1])
# a plain def's compile waits for its first call (patchfile.compile_target): before and after it, the registered
# function shows the patched source; once compiled it is what an eager build gives (code, file, defaults)
import os
from sglang_specv2_fixes import installed, patchfile
built = {t: fn for b in core.STATE.built.values() for t, fn in b.items()}
later = {t: patchfile.is_deferred(fn) for t, fn in built.items()}
shown = {t: inspect.getsource(fn) for t, fn in built.items()}
for fn in built.values():
    patchfile.materialize(fn)
eager = {}  # the same groups register built (core._stacks: a file's line numbers depend on which files it got)
for stack in core._stacks([(st, core._patch_file(st)) for st in core.STATE.report.fixes if st.name in core.STATE.built]):
    eager.update(patchfile.build_stack([pf for _, pf in stack], os.path.dirname(installed.sglang_root())))
same = {t: dict(code=fn.__code__ == eager[t].__code__, file=fn.__code__.co_filename == eager[t].__code__.co_filename,
                defaults=repr((fn.__defaults__, fn.__kwdefaults__)) == repr((eager[t].__defaults__, eager[t].__kwdefaults__)),
                source=shown[t] == inspect.getsource(eager[t]), still_deferred=patchfile.is_deferred(fn))
        for t, fn in built.items()}
import re
plain_def = {t: bool(re.match(r'\\s*(@(classmethod|staticmethod)\\n\\s*)?def ', shown[t])) for t in shown}
print('RESULT ' + json.dumps(dict(later=later, plain_def=plain_def,
    same=same,
    first={f: first['fixes'][f]['state'] for f in targets}, waiting=waiting, imported_before=imported_before,
    still_waiting=dict(core.STATE.on_import),
    states={f: report['fixes'][f]['state'] for f in targets},
    reasons={f: report['fixes'][f]['reason'] for f in targets},
    patched={t: core.is_patched(t) for ts in targets.values() for t in ts},
    ours={t: any(f is core.STATE.built.get(fix, {}).get(t) for f in core.chain(core.resolve_raw(t)))
          for fix, ts in targets.items() for t in ts},
    plain={t: inspect.isfunction(core.STATE.built[fix][t]) for fix, ts in targets.items() for t in ts},
    warnings=report['warnings'])))
"""


# module-level functions among the targets (``from X import name`` copies of them can exist in other modules)
MODULE_LEVEL = sorted((t.module, t.qualname) for f in PATCHED_HERE
                      for t in patchfile.load(f, releases.entry(f, LINE).name).targets if "." not in t.qualname)

COPIES = PRELUDE + """
import importlib, types
import sglang.srt.managers.scheduler, sglang.srt.speculative.eagle_worker_v2  # before load_plugins(), as a scheduler
targets = json.loads(sys.argv[1])
original = {name: getattr(importlib.import_module(module), name) for module, name in targets}
def holders(obj, name):
    return sorted(n for n, m in list(sys.modules.items()) if isinstance(m, types.ModuleType)
                  and getattr(m, '__dict__', {}).get(name) is obj)
before = {name: holders(original[name], name) for module, name in targets}
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang_specv2_fixes import core
print('RESULT ' + json.dumps({name: dict(
    before=before[name], stale=holders(original[name], name),
    ours=holders(getattr(importlib.import_module(module), name), name),
    patched=core.is_patched(module + '.' + name)) for module, name in targets}))
"""


@pytest.mark.release_scoped
@pytest.mark.skipif(not MODULE_LEVEL, reason=f"sglang {VERSION}: every target is a method")
def test_module_level_targets_replace_every_imported_copy():
    """A module-level target (``set_mamba_track_indices_from_reqs`` from 0.5.13, ``run_eagle_verify`` from 0.5.16, which
    other modules import by name) is replaced in every module that imported it before the plugin loaded, as SGLang's own
    ``sys.modules`` walk would, through the plugin's name lookup (``plugin._install_fast_propagate``)."""
    import subprocess
    import sys

    from conftest import ROOT, child_env

    proc = subprocess.run([sys.executable, "-c", COPIES, json.dumps(MODULE_LEVEL)], capture_output=True, text=True,
                          timeout=240, env=child_env(), cwd=ROOT)
    r = result_of(proc)
    for module, name in MODULE_LEVEL:
        assert r[name]["patched"] and r[name]["stale"] == [], r[name]
        # every module that held the original (its home, and each `from X import name` importer) holds ours now
        assert module in r[name]["ours"] and r[name]["ours"] == r[name]["before"], r[name]
    # not vacuous: some target was copied into another module before the plugin loaded (eagle_prepare_for_decode,
    # imported inside a function only, has its home alone)
    assert any(len(r[name]["before"]) >= 2 for _, name in MODULE_LEVEL), r


@pytest.mark.release_scoped  # runs on every release in CI (ci/run_cpu_tests.sh)
def test_every_patched_fix_is_applied_through_load_plugins():
    """Every fix the release table patches on this release reaches 'applied' through SGLang's real
    load_plugins() in a fresh interpreter, and every target of its patch file runs the plugin's
    compiled function (not only something marked as ours). Fails if core.register did nothing. An ``on_import``
    fix is first READY, its module not imported by a process that has imported the scheduler and the EAGLE v2
    worker (no start cost); importing the module builds, applies, verifies and logs it there."""
    assert VERSION in releases.release_set("patched")
    assert PATCHED_HERE and all(PATCHED_HERE.values()), f"nothing patched on {VERSION}: the check would be vacuous"
    import subprocess
    import sys

    from conftest import ROOT, child_env

    proc = subprocess.run([sys.executable, "-c", EVERY_PATCHED_FIX, json.dumps(PATCHED_HERE)], capture_output=True,
                          text=True, timeout=240, env=child_env(), cwd=ROOT)
    r = result_of(proc)
    assert r["warnings"] == []
    # an on_import fix waits for its module, then is applied when it is imported
    waited = set().union(*r["waiting"].values())
    # an on_import fix waits, unless building the others imported its modules (0.5.11's scheduler imports
    # model_runner): then it is applied at load with them (the finder would never see that import)
    assert waited <= ON_IMPORT and r["imported_before"] == [] and r["still_waiting"] == {}
    assert r["first"] == {f: "ready" if f in waited else "applied" for f in PATCHED_HERE}
    for f in waited:  # built, applied, verified and logged in SGLang's import
        assert f"sglang-specv2-fixes: {f} applied on import of " in proc.stderr
    assert r["states"] == {f: "applied" for f in PATCHED_HERE}, r["reasons"]
    for f in PATCHED_HERE:
        assert r["reasons"][f] == f"patches/{f}/{releases.entry(f, LINE).name}.patch applied (fingerprints match)"
    expected = {t: True for ts in PATCHED_HERE.values() for t in ts}
    composed = sum(len(patchfile.load(f, releases.entry(f, LINE).name).composes) for f in PATCHED_HERE)
    assert len(expected) == sum(map(len, PATCHED_HERE.values())) - composed, \
        "two fixes replace the same function without a compose line"
    assert r["patched"] == expected and r["ours"] == expected
    # every hook is a plain function (a classmethod target's hook in a classmethod is not callable: HookRegistry
    # wraps the original's classmethod around it again)
    assert r["plain"] == expected
    # a plain def (bare, or a classmethod / staticmethod) is compiled on its first call, a decorated one at load;
    # compiled, each is the eager build's
    assert r["later"].keys() == expected.keys() and r["later"] == r["plain_def"] and any(r["later"].values())
    want = dict(code=True, file=True, defaults=True, source=True, still_deferred=False)
    assert {t: v for t, v in r["same"].items() if v != want} == {} and r["same"].keys() == expected.keys()



# (earlier fix, later fix, target): two on_import fixes whose files compose on one function here (0.5.13.x:
# flashinfer-draft-extend-graph after fa3-draft-extend-graph on EagleDraftWorker.init_cuda_graphs)
COMPOSED_ON_IMPORT = [(c.fix, f, c.dotted) for f in PATCHED_HERE if f in ON_IMPORT
                      for c in patchfile.load(f, releases.entry(f, LINE).name).composes if c.fix in ON_IMPORT]

COMPOSED_ON_IMPORT_SCRIPT = PRELUDE + """
import importlib, inspect
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
from sglang_specv2_fixes import core, patchfile, plugin
first, later, target = json.loads(sys.argv[1])
modules = json.loads(sys.argv[2])  # the earlier fix's modules first
if sys.argv[3] == 'apart':  # each import ends before the next one starts (no module imports another)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, core._OnImport)]
    for module in modules:
        importlib.import_module(module)
    for module in modules:
        core._imported(module)
else:  # as SGLang imports them
    for module in modules:
        importlib.import_module(module)
report = plugin.announce('scheduler')
hooks = [h for _, h, _ in HookRegistry._hooks[target]]
runs = [f for f in core.chain(core.resolve_raw(target)) if getattr(f, patchfile.MARK, None)]
print('RESULT ' + json.dumps(dict(
    states={f: [report.get(f).state, report.get(f).reason] for f in (first, later)}, warnings=report.warnings,
    hooks=[getattr(h, patchfile.MARK, None) for h in hooks], runs=[getattr(f, patchfile.MARK) for f in runs],
    built=[core.STATE.built[f][target] is hooks[-1] for f in (first, later)],
    source=inspect.getsource(runs[0]) if runs else '')))
"""


@pytest.mark.release_scoped
@pytest.mark.skipif(not COMPOSED_ON_IMPORT, reason=f"sglang {VERSION}: no two on_import fixes compose on a function")
@pytest.mark.parametrize("order", ["imported", "apart"])
def test_on_import_fixes_that_compose_are_built_together(order):
    """Two on_import fixes whose files compose on one function: the function SGLang runs carries both changes, in
    whatever order their modules finish importing. On 0.5.13.x eagle_worker_v2 imports flashinfer_backend
    ('imported'); 'apart' lets eagle_worker_v2 (all of fa3-draft-extend-graph's modules) finish first: built on its
    own then, fa3's function kept the target, flashinfer-draft-extend-graph's REPLACE came after HookRegistry had
    patched it (apply_hooks skips it) and that fix failed."""
    import subprocess
    import sys

    from conftest import ROOT, child_env

    for first, later, target in COMPOSED_ON_IMPORT:
        own = [t.module for t in patchfile.load(first, releases.entry(first, LINE).name).targets]
        rest = [t.module for t in patchfile.load(later, releases.entry(later, LINE).name).targets]
        modules = list(dict.fromkeys(own + rest))
        proc = subprocess.run([sys.executable, "-c", COMPOSED_ON_IMPORT_SCRIPT, json.dumps([first, later, target]),
                               json.dumps(modules), order], capture_output=True, text=True, timeout=240,
                              env=child_env(), cwd=ROOT)
        r = result_of(proc)
        assert r["warnings"] == [] and all(s == "applied" for s, _ in r["states"].values()), r["states"]
        both = f"{first}+{later}:{target}"
        assert r["hooks"] == [both] and r["runs"] == [both] and r["built"] == [True, True], r
        for f in (first, later):
            assert f"specv2-fixes({f})" in r["source"], f


def test_off_patches_nothing_but_reports():
    proc = run_py(LOAD_AND_REPORT, SGLANG_SPECV2_FIXES="off")
    r = result_of(proc)
    assert r["patched"] is False
    assert all(r["report"]["fixes"][f]["state"] == "disabled" for f in PATCHED_HERE) and PATCHED_HERE
    if isinstance(releases.entry("skip-stale-overlap-updates", LINE), Patched):
        assert r["obs"]["retracted"]["committed"] > r["obs"]["retracted"]["allocated"]  # stock behaviour
    assert "[scheduler] sglang-specv2-fixes" in proc.stderr and "selection=off" in proc.stderr


@pytest.mark.release_scoped
def test_sglang_plugins_allow_list():
    code = PRELUDE + """
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang_specv2_fixes import plugin
print('RESULT ' + json.dumps(plugin.current_report() is not None))
"""
    assert result_of(run_py(code, SGLANG_PLUGINS="specv2_fixes")) is True
    assert result_of(run_py(code, SGLANG_PLUGINS="some_other_plugin")) is False


@pytest.mark.parametrize("value", ["bogus", "23456,nope"])
def test_bad_selection_stops_startup(value):
    proc = run_py(PRELUDE + "from sglang.srt.plugins import load_plugins\nload_plugins()\nprint('STARTED')", SGLANG_SPECV2_FIXES=value)
    assert proc.returncode != 0 and "STARTED" not in proc.stdout
    assert "unknown fix name" in proc.stderr and "skip-stale-overlap-updates (#23456)" in proc.stderr


def test_flag_on_command_line_reaches_environment_and_parser():
    code = PRELUDE + """
import argparse, os
sys.argv = ['launch_server', '--model-path', 'x', '--specv2-fixes', 'off']
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import ServerArgs
from sglang_specv2_fixes import plugin, selection
parser = argparse.ArgumentParser(); ServerArgs.add_cli_args(parser)
args = parser.parse_args(sys.argv[1:])
bad = parser.parse_args(['--model-path', 'x', '--specv2-fixes', 'bogus'])
try:
    ServerArgs.from_cli_args(bad); err = None
except selection.SelectionError as e:
    err = str(e)
print('RESULT ' + json.dumps(dict(env=os.environ.get('SGLANG_SPECV2_FIXES'), parsed=args.specv2_fixes,
      selection=plugin.current_report().selection, err=err)))
"""
    r = result_of(run_py(code))
    assert r["env"] == "off" and r["parsed"] == "off" and r["selection"] == "off"
    assert r["err"] and "unknown fix name(s): bogus" in r["err"]


def test_unsupported_release_warns_once_and_patches_nothing():
    code = PRELUDE + """
from sglang_specv2_fixes import installed
installed.version = lambda: '0.5.10.post1'
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
ours = [t for t, hs in HookRegistry._hooks.items() if any(h[2] and h[2].plugin_name == 'specv2_fixes' for h in hs)]
print('RESULT ' + json.dumps(ours))
"""
    proc = run_py(code)
    assert result_of(proc) == []
    assert proc.stderr.count("is not a known release") == 1
    assert "sglang 0.5.10.post1 is not a known release" in proc.stderr and "nothing patched" in proc.stderr
    proc = run_py(code, SGLANG_SPECV2_FIXES="23456")
    assert proc.returncode != 0 and "sglang 0.5.10.post1 is not a release this plugin knows" in proc.stderr


def test_spawned_scheduler_process_patches_itself(tmp_path):
    """A scheduler started by multiprocessing's spawn (as SGLang starts its schedulers) loads the plugin itself
    and patches every fix's targets in its own interpreter."""
    code = PRELUDE + """
import multiprocessing as mp
def child(q, targets):
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang_specv2_fixes import plugin, core
    r = plugin.announce('scheduler').as_dict()
    for ts in targets.values():  # imports each target's module: an on_import fix is applied once all of its are in
        [core.is_patched(t) for t in ts]
    q.put({f: [r['fixes'][f]['state'], [core.is_patched(t) for t in ts]] for f, ts in targets.items()})
if __name__ == '__main__':
    ctx = mp.get_context('spawn'); q = ctx.Queue()
    p = ctx.Process(target=child, args=(q, json.loads(sys.argv[1]))); p.start(); res = q.get(timeout=200); p.join()
    print('RESULT ' + json.dumps(res))
"""
    import subprocess
    import sys

    from conftest import child_env

    script = tmp_path / "spawned_scheduler.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script), json.dumps(PATCHED_HERE)], capture_output=True, text=True,
                          timeout=400, env=child_env(SGLANG_SPECV2_FIXES="auto"))
    got = result_of(proc)
    assert PATCHED_HERE and set(got) == set(PATCHED_HERE)
    for f, targets in PATCHED_HERE.items():  # is_patched imports an on_import fix's module: patched then
        assert got[f][0] in loaded_states(f) and got[f][1] == [True] * len(targets), (f, got[f])


def test_init_info_carries_the_scheduler_view():
    code = PRELUDE + """
import types
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.managers import scheduler as sm
from sglang.srt.managers.scheduler import Scheduler
# 0.5.23+ also reads the HiCache L3 layout and the published serving config (gRPC): nothing configured here
if hasattr(sm, "get_serving"):
    sm.get_serving = lambda: types.SimpleNamespace(grpc_port=None, smg_grpc_mode=False, grpc_mode=False)
info = Scheduler.get_init_info(types.SimpleNamespace(max_total_num_tokens=1, max_req_input_len=1, startup_time=0.0,
                                                    _hicache_l3_layout=lambda: None))
print('RESULT ' + json.dumps(info))
"""
    proc = run_py(code)
    info = result_of(proc)
    assert info["status"] == "ready" and info["max_total_num_tokens"] == 1
    states = {f: v["state"] for f, v in info["specv2_fixes"]["fixes"].items()}
    assert set(states) == {f.name for f in ALL_FIXES}
    for f in ALL_FIXES:
        assert states[f.name] in (loaded_states(f.name) if f.name in PATCHED_HERE else (releases.entry(f.name, LINE).state,))
    assert "[scheduler] sglang-specv2-fixes" in proc.stderr


@pytest.mark.parametrize("env,expected", [({}, False), ({"SGLANG_SPECV2_FIXES_PROBE": "1"}, True),
                                          ({"SGLANG_SPECV2_FIXES_CHECK": "1", "SGLANG_SPECV2_FIXES": "off"}, True)])
def test_probe_and_check_mode_are_registered_only_when_enabled(env, expected):
    code = PRELUDE + """
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
from sglang_specv2_fixes import probe, plugin, releases
line = releases.LINES[plugin.current_report().code_line]
hooks = [h for t in (line.probe_decode, line.run_batch) for _, h, _ in HookRegistry._hooks.get(t, [])]
print('RESULT ' + json.dumps([probe._around in hooks and probe._around_run_batch in hooks, probe._strict]))
"""
    hooked, strict = result_of(run_py(code, **env))
    assert hooked is expected
    assert strict is ("SGLANG_SPECV2_FIXES_CHECK" in env)



@pytest.mark.skipif(not any(f in PATCHED_HERE for f in OPT_IN), reason="no opt-in fix is patched on this release")
def test_opt_in_fixes_stay_out_without_their_switch():
    subject = opt_in_code() if OPT_IN[OPT_IN_SUBJECT] == OPT_IN_TEST_SWITCH else ""
    # the switches off, as a server starts
    r = result_of(run_py(subject + LOAD_AND_REPORT, **{v: "" for v in OPT_IN.values()}))
    fixes = r["report"]["fixes"]
    on = {f for f in PATCHED_HERE if f not in OPT_IN}
    theirs = {t for f in on for t in PATCHED_HERE[f]}  # functions an applied fix also replaces (compose: lines)
    for f, switch in OPT_IN.items():
        if f not in PATCHED_HERE:
            continue
        assert fixes[f]["state"] == "disabled", (f, fixes[f])
        assert switch in fixes[f]["reason"]
        assert not (set(PATCHED_HERE[f]) - theirs) & set(r["hooks"]), f  # none of its own targets hooked
        # a shared one: the other fix's hook only (none yet where that fix waits for its module: on_import)
        assert all(r["hooks"].get(t, 0) <= 1 for t in set(PATCHED_HERE[f]) & theirs), f
    assert all(fixes[f]["state"] in loaded_states(f) for f in on)  # the rest load as always
