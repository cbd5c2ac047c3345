#!/usr/bin/env python3
"""Process-start cost of the plugin (benchmark, not a test): CPU, CI-runnable.

Measures, in fresh interpreters that have already imported SGLang's scheduler (as every SGLang
process has by the time it loads plugins), the wall time of ``load_plugins()`` with this plugin
allowed (``SGLANG_PLUGINS=specv2_fixes``) versus with no plugin allowed, side by side, N times.
The difference is what the plugin adds: import, planning (fingerprints read from the source files),
applying the patch files, compiling and registering/applying the hooks. Goal: <= 100 ms. The time SGLang's
``HookRegistry._propagate_patch`` walk spends (every loaded module, once per hooked target; the plugin skips it
for its own class-method targets, where it can find nothing) is timed separately.

    PYTHONPATH=.venv-cpu/releases/0.5.11 .venv-cpu/bin/python bench/import_overhead.py [-n 7] [--out docs/bench]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from sglang_specv2_fixes.testing import standins

CODE = r"""
import sys, time, json
import sglang.srt.managers.scheduler  # what a scheduler process has imported before load_plugins()
import sglang.srt.speculative.eagle_worker_v2
from sglang.srt.plugins import load_plugins, hook_registry
# measurement only: how much of load_plugins() is HookRegistry's per-target sys.modules walk
_orig, _spent = hook_registry._propagate_patch, [0.0, 0]
def _timed(*a, **k):
    t = time.perf_counter()
    try:
        return _orig(*a, **k)
    finally:
        _spent[0] += time.perf_counter() - t; _spent[1] += 1
hook_registry._propagate_patch = _timed
t0 = time.perf_counter(); load_plugins(); t1 = time.perf_counter()
ours = [t for t, hs in hook_registry.HookRegistry._hooks.items() if any(s and s.plugin_name == "specv2_fixes" for _, _, s in hs)]
print("T", json.dumps([t1 - t0, _spent[0], _spent[1], len(sys.modules), len(ours)]))
"""


def one(allow):
    # the sgl_kernel stand-in reaches the child through PYTHONPATH when this machine has no sgl_kernel
    env = standins.child_env(names=("sgl_kernel",), SGLANG_PLUGINS=allow)
    p = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=300)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("T ")]
    if p.returncode or not line:
        raise SystemExit(p.stderr[-2000:])
    # [load_plugins s, of which in SGLang's _propagate_patch walk s, walks, modules loaded, targets hooked by us]
    return json.loads(line[-1][2:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    standins.use_sgl_kernel_stand_in()
    import importlib.metadata

    with_p, without, prop, walks, targets, modules = [], [], [], 0, 0, 0
    for i in range(a.n):  # interleaved pairs: drift affects both sides alike
        without.append(one("__none__")[0])
        w = one("specv2_fixes")
        with_p.append(w[0]); prop.append(w[1]); walks, modules, targets = w[2], w[3], w[4]
        print(f"pair {i + 1}/{a.n}: without {without[-1] * 1e3:.1f} ms, with {with_p[-1] * 1e3:.1f} ms "
              f"({w[4]} targets hooked; HookRegistry's sys.modules walk ran {w[2]} times, {w[1] * 1e3:.1f} ms)",
              flush=True)
    res = dict(sglang=importlib.metadata.version("sglang"), n=a.n,
               without_ms=statistics.median(without) * 1e3, with_ms=statistics.median(with_p) * 1e3)
    res["added_ms"] = res["with_ms"] - res["without_ms"]
    # the added time splits into SGLang's HookRegistry walking sys.modules (skipped by the plugin for its own
    # class-method targets: plugin._install_fast_propagate) and the rest (import, planning, fingerprints,
    # applying the patch files, compiling, registering)
    res["hook_registry_propagate_ms"] = statistics.median(prop) * 1e3
    res["hook_registry_walks"] = walks
    res["hooked_targets"], res["modules_loaded"] = targets, modules
    res["plugin_own_ms"] = res["added_ms"] - res["hook_registry_propagate_ms"]
    res["goal_ms"] = 100
    print(json.dumps(res))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, f"import_overhead-{res['sglang']}.json"), "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
