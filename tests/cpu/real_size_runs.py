"""Synthetic ``bench/serving.py --real-size`` results for the report tests (test_real_size_report.py) and the GPU
driver's stub runs (test_real_size_bench.py, test_profile_steps.py): ``points`` (the a/b points of one concurrency),
``synthetic`` (a run's results.json) and the summary schema they check."""

import copy

ENV = "SGLANG_SIMULATE_ACC_LEN"
SCHEMA_TOP = {"device", "date", "commit", "model", "acc_len", "points"}
SCHEMA_POINT = {"release", "config", "concurrency", "plugin_over_stock", "pairs", "stock_tok_s", "plugin_tok_s"}


def points(c, reps, stock, plugin, accept=3.0, fail=()):
    """``reps`` a/b pairs at concurrency ``c`` (order alternating), output tok/s ``stock[rep]`` / ``plugin[rep]``;
    ``fail``: the (side, rep) points that failed."""
    pts = []
    for rep in range(reps):
        order = ("stock", "plugin") if rep % 2 == 0 else ("plugin", "stock")
        for k, side in enumerate(order):
            tput = (stock if side == "stock" else plugin)[rep]
            ok = (side, rep) not in fail
            pts.append(dict(side=side, concurrency=c, rep=rep, order=k, num_prompts=8, ok=ok,
                            error=None if ok else "synthetic failure", output_throughput=tput if ok else None,
                            median_tpot_ms=1000.0 / tput, p99_tpot_ms=1.2e3 / tput, median_itl_ms=1000.0 / tput,
                            p99_itl_ms=1.5e3 / tput, median_ttft_ms=50.0, accept_length=accept))
    return pts


SIDES_TREE = {"stock": {"speculative": True, "overlap_schedule": False, "fixes": {}, "launch_s": 90},
              "plugin": {"speculative": True, "overlap_schedule": True, "fixes": {"tree-drafting": "applied"}, "launch_s": 95}}
SIDES_CHAIN = {s: {"speculative": True, "overlap_schedule": True, "fixes": {}, "launch_s": 80} for s in ("stock", "plugin")}


def synthetic(release, configs, date="2026-11-23 08:00 UTC", acc=3.0, commit="abc123def456", device="NVIDIA H200",
              tp=None, model=None):
    out = {"schema": "specv2-bench-serving/1", "configs": {},
           "meta": {"date": date, "device": device, "sglang": release, "torch": "2.9", "complete": True,
                    "stop_reason": None, "cuda_visible_devices": "0", "args": {"input_len": 200, "output_len": 256},
                    "common_server_args": ["--load-format", "dummy"],
                    "real_size": {"acc_len": acc, "env": {ENV: str(acc)}, "commit": commit,
                                  "model": model or {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 128256}}}}
    if tp is not None:  # runs before the TP option recorded none (read as 1)
        out["meta"]["real_size"]["tp"] = tp
    for name, pts in configs.items():
        out["configs"][name] = {"about": name, "points": pts, "greedy": {"skipped": "dummy weights", "identical": None},
                                "sides": copy.deepcopy(SIDES_TREE if name.startswith("tree") else SIDES_CHAIN)}
    return out
