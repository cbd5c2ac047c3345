#!/usr/bin/env python3
"""Per-call host cost of the plugin's bodies on the scheduler's decode hot path (benchmark, not a test):
CPU, CI-runnable, the release's real functions on real SGLang objects (the CPU tests' scenarios).

Times, interleaved and N times each, the stock function of the installed release and the plugin's body
on the same prepared case (a late spec-v2 overlap result with one live, one finished and one retracted
request, sglang_specv2_fixes/testing/scenarios.py):

* ``process_batch_result_decode`` (replaced by live-accept-metrics; runs once per decode step, with or
  without speculation);
* the overlap resolve step (``_resolve_spec_overlap_token_ids``, replaced by skip-stale-overlap-updates on
  0.5.11 only).

Only the call is timed (the case is rebuilt outside the timer). The medians bound what the plugin adds to
a decode step on the host, to compare with the serving benchmark's TPOT (~0.7-0.9 ms on the tiny models),
whose pair-to-pair noise is far larger than 1 %.

    PYTHONPATH=.venv-cpu/releases/0.5.11 .venv-cpu/bin/python bench/hot_path_overhead.py [-n 2000] [--out docs/bench]
"""

import argparse
import json
import os
import statistics
import time

from sglang_specv2_fixes.testing import standins

standins.use_sgl_kernel_stand_in()


def timed(make, n):
    out = []
    for _ in range(n):
        fn, args = make()
        t0 = time.perf_counter_ns()
        fn(*args)
        out.append(time.perf_counter_ns() - t0)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--out")
    a = ap.parse_args()
    import importlib.metadata

    from sglang_specv2_fixes import installed, releases
    from sglang_specv2_fixes.fixes import skip_stale_overlap_updates
    from sglang_specv2_fixes.testing.scenarios import body, decode_case, resolve_name, stale_batch_case

    line = releases.code_line(installed.version())

    def decode(plugin):
        def make():
            fn, sched, batch, result, _ = decode_case(plugin)
            return fn, (sched, batch, result)
        return make

    cases = {"process_batch_result_decode": (decode(False), decode(True))}
    if line == "0.5.11":
        from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin as M

        ours, stock = body(skip_stale_overlap_updates, "skip-stale-overlap-updates"), M.__dict__[resolve_name()]

        def resolve(fn):
            def make():
                scheduler, result, batch = stale_batch_case()
                return fn, (scheduler, result, batch)
            return make

        cases[resolve_name()] = (resolve(stock), resolve(ours))
    res = dict(sglang=importlib.metadata.version("sglang"), n=a.n, unit="us per call, median", cases={})
    for name, (mk_stock, mk_plugin) in cases.items():
        timed(mk_stock, 50), timed(mk_plugin, 50)  # warm-up
        s, p = [], []
        for _ in range(10):  # interleaved blocks: drift hits both sides alike
            s += timed(mk_stock, a.n // 10)
            p += timed(mk_plugin, a.n // 10)
        ms, mp = statistics.median(s) / 1e3, statistics.median(p) / 1e3
        res["cases"][name] = dict(stock_us=round(ms, 2), plugin_us=round(mp, 2), added_us=round(mp - ms, 2))
        print(f"{name}: stock {ms:.2f} us, plugin {mp:.2f} us, added {mp - ms:+.2f} us per call (median of {len(s)})")
    print(json.dumps(res))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, f"hot_path_overhead-{res['sglang']}.json"), "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
