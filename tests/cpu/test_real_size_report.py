"""The real-size report writer (``bench/real_size_report.py``) on synthetic results (tests/cpu/real_size_runs.py): the
schema of the real-size-latest.json it writes, medians over pairs, merging runs and ``--previous`` summaries, TP and
model shape (separate points, the TP column), run archives as inputs, a switch pairing's own sides, the upstream
parity summary, and its default output folder (build/bench, never the tracked docs/bench unless named)."""

import copy
import json
import os
import statistics
import sys

import pytest

from conftest import ROOT
from real_size_runs import ENV, SCHEMA_POINT, SCHEMA_TOP, points, synthetic

BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)
import real_size_report  # noqa: E402

sys.path.remove(BENCH)


def test_report_schema_medians_and_merging(tmp_path):
    s8, p8 = [100.0, 110.0, 90.0], [130.0, 120.0, 126.0]          # ratios 1.3, 1.0909, 1.4 -> median 1.3
    a = synthetic("0.5.11", {
        "tree-topk8": points(1, 3, s8, p8) + points(8, 3, [400.0] * 3, [380.0, 420.0, 400.0]),
        "eagle3-topk1": points(1, 3, [100.0] * 3, [101.0, 99.0, 100.0]),
        # cut by the budget: one pair at c=32, a failed plugin point in rep 1
        "tree-topk4": points(32, 2, [1000.0, 1000.0], [900.0, 950.0], fail={("plugin", 1)}),
    })
    b = synthetic("0.5.11", {"tree-topk4": points(32, 3, [1000.0, 1010.0, 990.0], [1100.0, 1111.0, 1089.0])},
                  date="2026-11-23 09:00 UTC")  # the re-run of the cut configuration, alone
    c = synthetic("0.5.12.post1", {"tree-topk8": points(1, 4, [100.0, 100.0, 100.0, 100.0], [120.0, 125.0, 130.0, 80.0],
                                                        accept=2.2)}, device="NVIDIA H100 80GB HBM3", commit=None)
    paths = []
    for k, r in enumerate((a, b, c)):
        paths.append(str(tmp_path / f"r{k}.json"))
        json.dump(r, open(paths[-1], "w"))
    rc = real_size_report.main(["--out-dir", str(tmp_path / "out"), *paths])
    assert rc == 0
    summary = json.load(open(tmp_path / "out" / "real-size-latest.json"))
    assert set(summary) == SCHEMA_TOP
    assert summary["model"] == {"hidden_size": 4096, "num_hidden_layers": 32} and summary["acc_len"] == 3.0
    assert summary["device"] == "NVIDIA H200 + NVIDIA H100 80GB HBM3" and summary["date"] == "2026-11-23 09:00 UTC"
    assert summary["commit"] == "abc123def456"
    for p in summary["points"]:
        assert set(p) == SCHEMA_POINT | {"tp"} and p["tp"] == 1, p
        assert isinstance(p["pairs"], int) and p["pairs"] >= 1
        assert all(isinstance(p[k], float) for k in ("plugin_over_stock", "stock_tok_s", "plugin_tok_s"))
    pts = {(p["release"], p["config"], p["concurrency"]): p for p in summary["points"]}
    assert [k for k in pts] == [("0.5.11", "eagle3-topk1", 1), ("0.5.11", "tree-topk4", 32), ("0.5.11", "tree-topk8", 1),
                                ("0.5.11", "tree-topk8", 8), ("0.5.12.post1", "tree-topk8", 1)]
    assert {k[1] for k in pts if k[1].startswith("tree")} == {"tree-topk4", "tree-topk8"}
    t8 = pts[("0.5.11", "tree-topk8", 1)]
    assert t8["pairs"] == 3 and t8["plugin_over_stock"] == round(statistics.median(x / y for x, y in zip(p8, s8)), 3) == 1.3
    assert t8["stock_tok_s"] == 100.0 and t8["plugin_tok_s"] == 126.0
    t4 = pts[("0.5.11", "tree-topk4", 32)]
    assert t4["pairs"] == 3 and t4["plugin_over_stock"] == 1.1, "the re-run with more pairs replaces the cut run"
    assert pts[("0.5.12.post1", "tree-topk8", 1)]["pairs"] == 4
    assert pts[("0.5.12.post1", "tree-topk8", 1)]["plugin_over_stock"] == round(statistics.median([1.2, 1.25, 1.3, 0.8]), 3)
    md = open(tmp_path / "out" / "real-size-latest.md").read()
    assert "| 0.5.11 | 1 | tree-topk8 | 1 | 3 | 100.0 | 126.0 | **1.300** |" in md  # release, TP, config, ...
    assert "mean accept length 2.20, not the simulated 3.0" in md  # the sanity check
    assert f"{ENV}=3.0" in md and "goal" not in md  # the retired 1.25x tree goal
    assert "Chain control (plugin / stock >= 0.99, median over pairs): met at 1 of 1 chain points; lowest 1.000" in md
    png = tmp_path / "out" / "real-size-latest.png"
    try:
        import matplotlib  # noqa: F401
        assert png.exists() and png.stat().st_size > 10000
    except ImportError:
        assert not png.exists()

    # a run that took the wrong path is called out
    bad = copy.deepcopy(a)
    bad["configs"]["tree-topk8"]["sides"]["plugin"]["overlap_schedule"] = False
    json.dump(bad, open(tmp_path / "bad.json", "w"))
    real_size_report.main(["--out-dir", str(tmp_path / "bad"), str(tmp_path / "bad.json")])
    assert "tree-topk8 plugin: spec v1 (overlap off), expected spec v2 (overlap)" in open(tmp_path / "bad" / "real-size-latest.md").read()
    # refused: a tiny-model run, and runs with different simulated acceptance
    tiny = copy.deepcopy(a)
    del tiny["meta"]["real_size"]
    json.dump(tiny, open(tmp_path / "tiny.json", "w"))
    with pytest.raises(SystemExit, match="not a real-size run"):
        real_size_report.main(["--out-dir", str(tmp_path / "x"), str(tmp_path / "tiny.json")])
    json.dump(synthetic("0.5.12.post1", {"tree-topk4": points(1, 3, [1.0] * 3, [1.0] * 3)}, acc=2.0),
              open(tmp_path / "acc2.json", "w"))
    with pytest.raises(SystemExit, match="acc_len"):
        real_size_report.main(["--out-dir", str(tmp_path / "x"), paths[0], str(tmp_path / "acc2.json")])
    # no recorded commit: --commit fills it in
    json.dump(c, open(tmp_path / "c.json", "w"))
    real_size_report.main(["--out-dir", str(tmp_path / "c"), "--commit", "feedbeef", str(tmp_path / "c.json")])
    assert json.load(open(tmp_path / "c" / "real-size-latest.json"))["commit"] == "feedbeef"


def test_report_tp_points_mixed_shapes_and_previous_summary(tmp_path):
    s, p1, p2 = [100.0, 100.0, 100.0], [120.0, 120.0, 120.0], [110.0, 110.0, 110.0]
    tp1 = synthetic("0.5.11", {"tree-topk4": points(8, 3, s, p1)})                  # an older run: no tp recorded
    tp2 = synthetic("0.5.11", {"tree-topk4": points(8, 3, s, p2)}, tp=2, date="2026-11-24 08:00 UTC")
    paths = []
    for k, r in enumerate((tp1, tp2)):
        paths.append(str(tmp_path / f"r{k}.json"))
        json.dump(r, open(paths[-1], "w"))
    assert real_size_report.main(["--out-dir", str(tmp_path / "a"), *paths]) == 0
    summary = json.load(open(tmp_path / "a" / "real-size-latest.json"))
    assert set(summary) == SCHEMA_TOP and summary["model"] == {"hidden_size": 4096, "num_hidden_layers": 32}
    got = {(p["tp"], p["plugin_over_stock"]) for p in summary["points"]}
    assert got == {(1, 1.2), (2, 1.1)}, "same release and config at TP 1 and TP 2: two points, not merged"
    assert all(set(p) == SCHEMA_POINT | {"tp"} for p in summary["points"])
    md = open(tmp_path / "a" / "real-size-latest.md").read()
    assert "| release | TP | config |" in md
    assert "| 0.5.11 | 1 | tree-topk4 | 8 | 3 | 100.0 | 120.0 | **1.200** |" in md
    assert "| 0.5.11 | 2 | tree-topk4 | 8 | 3 | 100.0 | 110.0 | **1.100** |" in md
    assert "* 0.5.11 TP2 tree-topk4: 2026-11-24 08:00 UTC" in md

    # a 70B-shaped run beside them: every point carries its model, the top level the shape most points have
    big = synthetic("0.5.12.post1", {"tree-topk4": points(1, 3, s, p2)}, tp=4,
                    model={"hidden_size": 8192, "num_hidden_layers": 80, "shape": "70b", "name": "Llama-3.1-70B-shaped"})
    json.dump(big, open(tmp_path / "big.json", "w"))
    real_size_report.main(["--out-dir", str(tmp_path / "b"), *paths, str(tmp_path / "big.json")])
    summary = json.load(open(tmp_path / "b" / "real-size-latest.json"))
    assert summary["model"] == {"hidden_size": 4096, "num_hidden_layers": 32}
    models = {(p["release"], p["tp"]): p["model"] for p in summary["points"]}
    assert models == {("0.5.11", 1): {"hidden_size": 4096, "num_hidden_layers": 32},
                      ("0.5.11", 2): {"hidden_size": 4096, "num_hidden_layers": 32},
                      ("0.5.12.post1", 4): {"hidden_size": 8192, "num_hidden_layers": 80}}
    md = open(tmp_path / "b" / "real-size-latest.md").read()
    assert "| release | model | TP | config |" in md and "| 0.5.12.post1 | 70b | 4 | tree-topk4 | 1 |" in md
    assert "Llama-3.1-70B-shaped target (hidden 8192, layers 80)" in md

    # --previous: a committed summary (no tp: TP 1; tests/cpu/data, a real graph-off run, fixed content) keeps its points
    # beside a new TP 2 run
    latest = os.path.join(ROOT, "tests", "cpu", "data", "real-size-summary-graph-off.json")
    prev = json.load(open(latest))
    assert prev["points"] and all("tp" not in p for p in prev["points"])
    real_size_report.main(["--out-dir", str(tmp_path / "c"), "--previous", latest, paths[1]])
    summary = json.load(open(tmp_path / "c" / "real-size-latest.json"))
    old = [p for p in summary["points"] if p["tp"] == 1]
    assert [{k: p[k] for k in SCHEMA_POINT} for p in old] == [{k: p[k] for k in SCHEMA_POINT} for p in prev["points"]]
    assert [p["plugin_over_stock"] for p in summary["points"] if p["tp"] == 2] == [1.1]
    assert summary["device"] == "NVIDIA H200 + " + prev["device"] and summary["commit"] == "abc123def456 + " + prev["commit"]
    assert summary["date"] == "2026-11-24 08:00 UTC"
    md = open(tmp_path / "c" / "real-size-latest.md").read()
    assert "| 0.5.12.post1 | 1 | tree-topk8 | 32 | 3 | 3394.2 | 3601.8 | **1.084** | - |" in md
    assert "kept from the previous summary" in md
    # a new TP 1 run of a (release, config) at c = 1 replaces the previous summary's point there and keeps c = 8 / 32
    new1 = synthetic("0.5.11", {"tree-topk4": points(1, 3, s, p1)})
    json.dump(new1, open(tmp_path / "new1.json", "w"))
    real_size_report.main(["--out-dir", str(tmp_path / "d"), "--previous", latest, str(tmp_path / "new1.json")])
    summary = json.load(open(tmp_path / "d" / "real-size-latest.json"))
    t4 = [p for p in summary["points"] if p["release"] == "0.5.11" and p["config"] == "tree-topk4"]
    kept = [(p["concurrency"], p["plugin_over_stock"]) for p in prev["points"]
            if p["release"] == "0.5.11" and p["config"] == "tree-topk4" and p["concurrency"] != 1]
    assert [c for c, _ in kept] == [8, 32]
    assert [(p["concurrency"], p["plugin_over_stock"]) for p in t4] == [(1, 1.2)] + kept
    assert len(summary["points"]) == len(prev["points"])
    with pytest.raises(SystemExit, match="acc_len"):
        json.dump(synthetic("0.5.11", {"tree-topk4": points(1, 3, s, p1)}, acc=2.0, tp=2), open(tmp_path / "a2.json", "w"))
        real_size_report.main(["--out-dir", str(tmp_path / "x"), "--previous", latest, str(tmp_path / "a2.json")])


def test_report_reads_results_inside_run_archives(tmp_path):
    """An input may be ARCHIVE.tar.gz:MEMBER (a run's results tarball): same summary as the
    unpacked file, the Markdown cites the archive member, and a wrong member names the archive's results.json."""
    import tarfile

    run = synthetic("0.5.11", {"tree-topk8": points(1, 3, [100.0, 110.0, 90.0], [130.0, 120.0, 126.0])})
    (tmp_path / "bench-0.5.11").mkdir()
    plain = tmp_path / "bench-0.5.11" / "results.json"
    json.dump(run, open(plain, "w"))
    archive = tmp_path / "call4-real-size-out.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(plain, arcname="bench-0.5.11/results.json")
    cited = f"{archive}:bench-0.5.11/results.json"
    assert real_size_report.main(["--out-dir", str(tmp_path / "a"), str(plain)]) == 0
    assert real_size_report.main(["--out-dir", str(tmp_path / "b"), cited]) == 0
    a, b = (json.load(open(tmp_path / d / "real-size-latest.json")) for d in "ab")
    assert a["points"] and a == b
    md = open(tmp_path / "b" / "real-size-latest.md").read()
    assert f"`{cited}`" in md and str(plain) not in md
    with pytest.raises(SystemExit, match=r"no file 'bench-0.5.12/results.json' .*bench-0.5.11/results.json"):
        real_size_report.main(["--out-dir", str(tmp_path / "c"), f"{archive}:bench-0.5.12/results.json"])


def test_report_of_a_switch_pairing_names_its_own_sides(tmp_path):
    """Sides named for a switch (off=auto / on=auto,ENV=1 on one release, session 26's read-done-order cost run): the
    report reads the run's own side records, not the default pair's (it raised KeyError 'off' before)."""
    run = synthetic("0.5.17", {"eagle3-topk1": points(1, 3, [100.0, 110.0, 90.0], [99.0, 108.0, 91.0])})
    env = {"SGLANG_SPECV2_FIXES_READ_DONE_AFTER_REPLAY": "1"}
    run["meta"]["sides"] = [dict(name="off", selection="auto", release=None, env={}),
                            dict(name="on", selection="auto", release=None, env=env)]
    cfg = run["configs"]["eagle3-topk1"]
    for p in cfg["points"]:
        p["side"] = {"stock": "off", "plugin": "on"}[p["side"]]
    cfg["sides"] = {"off": cfg["sides"]["stock"], "on": cfg["sides"]["plugin"]}
    path = tmp_path / "results.json"
    json.dump(run, open(path, "w"))
    assert real_size_report.main(["--out-dir", str(tmp_path / "out"), str(path)]) == 0
    md = open(tmp_path / "out" / "real-size-latest.md").read()
    assert "# Real size: off vs on" in md
    assert "SGLANG_SPECV2_FIXES_READ_DONE_AFTER_REPLAY=1" in md, md[:800]
    pts = json.load(open(tmp_path / "out" / "real-size-latest.json"))["points"]
    assert len(pts) == 1 and pts[0]["pairs"] == 3, pts


def upstream_run(release, baseline, configs, backend="triton", tp=2):
    """``synthetic``'s run with the sides of the upstream pairing: a = upstream=off@BASELINE, b = plugin=auto@RELEASE."""
    r = synthetic(release, {}, tp=tp)
    r["meta"]["sides"] = [dict(name="upstream", selection="off", release=baseline, env={}),
                          dict(name="plugin", selection="auto", release=release, env={})]
    for name, pts in configs.items():
        for p in pts:
            p["side"] = "upstream" if p["side"] == "stock" else p["side"]
        r["configs"][name] = {"about": name, "points": pts, "greedy": None,
                              "server_args": ["--attention-backend", backend, "--tp-size", str(tp)],
                              "sides": {"upstream": {"version": baseline}, "plugin": {"version": release}}}
    return r


def parity_of(tmp_path, **runs):
    """Each run written to tmp_path/NAME.json, the report over them into tmp_path/out; its upstream-parity.json."""
    paths = [str(tmp_path / f"{name}.json") for name in runs]
    for path, run in zip(paths, runs.values()):
        json.dump(run, open(path, "w"))
    assert real_size_report.main(["--out-dir", str(tmp_path / "out"), *paths]) == 0
    return json.load(open(tmp_path / "out" / "upstream-parity.json"))


def test_parity_points_keep_user_and_harness_invocations_apart(tmp_path):
    """A run of the user invocation (``meta.real_size.invocation``) and one of the harness's benchmark-only flags are
    separate points of the same configuration, each labelled, with both sides' server flags and launch environment."""
    up, pl = [100.0, 100.0, 100.0], [97.0, 98.0, 99.0]
    user = upstream_run("0.5.11", "0.5.17", {"eagle3-topk1": points(32, 3, up, pl)}, tp=1)
    user["meta"]["real_size"]["invocation"] = "user"
    user["configs"]["eagle3-topk1"]["sides"]["plugin"]["launch_env"] = {ENV: "3.0", "PYTHONPATH": "/x"}
    harness = upstream_run("0.5.11", "0.5.17", {"eagle3-topk1": points(32, 3, up, [101.0] * 3)}, tp=1)
    s = parity_of(tmp_path, u=user, h=harness)
    pts = {p["invocation"]: p for p in s["points"]}
    assert sorted(pts) == ["harness", "user"] and len(s["points"]) == 2
    assert pts["user"]["plugin_over_upstream"] == 0.98 and pts["harness"]["plugin_over_upstream"] == 1.01
    assert pts["user"]["env"]["plugin"] == {ENV: "3.0"}, "SGLANG variables of the launch environment, not PYTHONPATH"
    md = open(tmp_path / "out" / "upstream-parity.md").read()
    assert "| triton | user | 1 | chain | 32 |" in md and "| triton | harness | 1 | chain | 32 |" in md


def test_parity_backend_is_the_servers_own():
    """A point's backend: what both servers reported; else the last flag (a ``--server-args=`` backend after
    COMMON's triton, session 21's mislabel); else "default" (the default invocation names none)."""
    flags = ["--attention-backend", "triton", "--page-size", "1", "--attention-backend=flashinfer"]
    bare = {"upstream": {"version": "0.5.17"}, "plugin": {"version": "0.5.11"}}
    assert real_size_report._backend({"server_args": flags, "sides": bare}) == "flashinfer"
    assert real_size_report._backend({"server_args": flags[:4], "sides": bare}) == "triton"
    assert real_size_report._backend({"server_args": ["--page-size", "1"], "sides": bare}) == "default"
    told = {k: {**v, "server": {"attention_backend": "fa3"}} for k, v in bare.items()}
    assert real_size_report._backend({"server_args": ["--page-size", "1"], "sides": told}) == "fa3"
    told["plugin"]["server"] = {"attention_backend": "flashinfer"}
    assert real_size_report._backend({"server_args": flags, "sides": told}) == "fa3/flashinfer"


def test_parity_report_of_upstream_pairings(tmp_path):
    """``--parity``: plugin / upstream per (release, baseline, backend, config, TP, concurrency), the median over
    pairs; the issue's schema; chosen without --parity when every input has those sides; a side that did not start
    gives no point; --previous keeps the points of other (configuration, concurrency) pairs; each point
    names its run's device and date (a previous file from one run lends its own); a stock / plugin run is refused."""
    up, pl = [100.0, 110.0, 90.0], [95.0, 99.0, 93.0]  # 0.95, 0.9, 1.0333 -> median 0.95
    r = upstream_run("0.5.11", "0.5.17", {"eagle3-topk1": points(1, 3, up, pl),
                                           "tree-topk4": points(8, 3, [200.0] * 3, [210.0, 190.0, 200.0])})
    down = upstream_run("0.5.11", "0.5.17", {"tree-topk8": points(1, 3, up, pl)})
    down["configs"]["tree-topk8"]["sides"]["plugin"]["version"] = None  # never came up
    paths = [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    json.dump(r, open(paths[0], "w"))
    json.dump(down, open(paths[1], "w"))
    prev = {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-20 10:00 UTC", "commit": "0ld", "acc_len": 3.0,
            "model": {"hidden_size": 4096, "num_hidden_layers": 32},
            "points": [{"release": "0.5.12.post1", "baseline_release": "0.5.17", "backend": "flashinfer",
                        "config": "chain", "concurrency": 32, "plugin_over_upstream": 0.99, "pairs": 3, "tp": 1},
                       # the runs measure this configuration at c = 1 only: c = 1 is replaced, c = 32 kept
                       {"release": "0.5.11", "baseline_release": "0.5.17", "backend": "triton", "config": "chain",
                        "concurrency": 1, "plugin_over_upstream": 0.5, "pairs": 2, "tp": 2},
                       {"release": "0.5.11", "baseline_release": "0.5.17", "backend": "triton", "config": "chain",
                        "concurrency": 32, "plugin_over_upstream": 0.98, "pairs": 3, "tp": 2}]}
    json.dump(prev, open(tmp_path / "prev.json", "w"))
    # no --parity: every input has the upstream / plugin sides, so the parity summary is chosen by itself
    assert real_size_report.main(["--out-dir", str(tmp_path / "out"), "--previous", str(tmp_path / "prev.json"),
                                  *paths]) == 0
    assert not os.path.exists(tmp_path / "out" / "real-size-latest.json")
    s = json.load(open(tmp_path / "out" / "upstream-parity.json"))
    assert set(s) == SCHEMA_TOP and s["acc_len"] == 3.0 and s["commit"] == "abc123def456 + 0ld"
    pts = {(p["release"], p["backend"], p["config"], p["tp"], p["concurrency"]): p for p in s["points"]}
    assert list(pts) == [("0.5.11", "triton", "chain", 2, 1), ("0.5.11", "triton", "chain", 2, 32),
                         ("0.5.11", "triton", "tree-topk4", 2, 8), ("0.5.12.post1", "flashinfer", "chain", 1, 32)]
    assert pts[("0.5.11", "triton", "chain", 2, 32)]["plugin_over_upstream"] == 0.98  # kept beside the run's c = 1
    chain = pts[("0.5.11", "triton", "chain", 2, 1)]
    assert {"release", "baseline_release", "backend", "config", "concurrency", "plugin_over_upstream", "pairs"} <= set(chain)
    assert chain["baseline_release"] == "0.5.17" and chain["pairs"] == 3
    assert chain["plugin_over_upstream"] == round(statistics.median(b / a for a, b in zip(up, pl)), 3) == 0.95
    assert chain["upstream_tok_s"] == 100.0 and chain["plugin_tok_s"] == 95.0
    assert (chain["device"], chain["date"]) == ("NVIDIA H200", "2026-11-23 08:00 UTC")
    old = pts[("0.5.12.post1", "flashinfer", "chain", 1, 32)]
    assert (old["device"], old["date"]) == ("NVIDIA H100 80GB HBM3", "2026-11-20 10:00 UTC")
    assert s["device"] == "NVIDIA H200 + NVIDIA H100 80GB HBM3"
    md = open(tmp_path / "out" / "upstream-parity.md").read()
    assert "| 0.5.11 | 0.5.17 | triton | harness | 2 | chain | 1 | 3 | 100.0 | 95.0 | 0.950 | 0.950, 0.900, 1.033 | NVIDIA H200, " in md
    assert chain["invocation"] == "harness", "a run that recorded no invocation ran the tests' COMMON flags"
    assert chain["server_args"] == ["--attention-backend", "triton", "--tp-size", "2"]
    # each point names its run's commit (a previous file from one run lends its own), and the table shows it
    assert (chain["commit"], old["commit"]) == ("abc123def456", "0ld")
    assert "| NVIDIA H200, 2026-11-23 08:00 UTC, abc123def456 |" in md
    # the header joins the devices and commits of the points it keeps: a previous summary (of several runs) whose
    # header names a device and a commit that none of its kept points has any more drops them (session 32: an H100
    # and two commits stayed in the header after the runs had replaced their points)
    merged = dict(prev, device="NVIDIA H100 80GB HBM3 + NVIDIA A100", commit="0ld + gone")
    merged["points"] = [dict(p, device="NVIDIA H100 80GB HBM3", date="2026-11-20 10:00 UTC", commit="0ld")
                        for p in prev["points"]]
    merged["points"][0]["device"] = "NVIDIA H200"  # the flashinfer point (kept) ran on an H200
    json.dump(merged, open(tmp_path / "merged.json", "w"))
    assert real_size_report.main(["--out-dir", str(tmp_path / "out2"), "--previous", str(tmp_path / "merged.json"),
                                  *paths]) == 0
    s2 = json.load(open(tmp_path / "out2" / "upstream-parity.json"))
    assert (s2["device"], s2["commit"]) == ("NVIDIA H200 + NVIDIA H100 80GB HBM3", "abc123def456 + 0ld"), s2
    # a point without a commit (older files): the header falls back to the runs' and the previous file's
    del merged["points"][0]["commit"]
    json.dump(merged, open(tmp_path / "merged.json", "w"))
    assert real_size_report.main(["--out-dir", str(tmp_path / "out3"), "--previous", str(tmp_path / "merged.json"),
                                  *paths]) == 0
    assert json.load(open(tmp_path / "out3" / "upstream-parity.json"))["commit"] == "abc123def456 + 0ld + gone"
    json.dump(synthetic("0.5.11", {"tree-topk4": points(1, 3, up, pl)}), open(tmp_path / "stock.json", "w"))
    with pytest.raises(SystemExit, match="--parity reads"):
        real_size_report.main(["--parity", "--out-dir", str(tmp_path / "x"), str(tmp_path / "stock.json")])


def test_report_writes_into_build_unless_told(tmp_path, monkeypatch):
    """No ``--out-dir``: the summary goes to build/bench (ignored by git), never the tracked docs/bench; a named
    folder is used as given."""
    path = tmp_path / "r.json"
    json.dump(synthetic("0.5.11", {"tree-topk4": points(8, 3, [100.0] * 3, [110.0] * 3)}), open(path, "w"))
    asked = []

    def write(runs, out_dir, name, *rest):
        asked.append((out_dir, name))
        return {"points": []}, []

    monkeypatch.setattr(real_size_report, "write", write)
    assert real_size_report.main([str(path)]) == 0
    assert real_size_report.main(["--out-dir", str(tmp_path / "mine"), str(path)]) == 0
    assert asked == [(os.path.join(ROOT, "build", "bench"), "real-size-latest"), (str(tmp_path / "mine"), "real-size-latest")]
    assert not os.path.relpath(asked[0][0], ROOT).startswith("docs")


def test_parity_of_the_reduced_deepseek_point_names_its_shape(tmp_path):
    """A DeepSeek-V3-class run (``--real-size-model dsv3-reduced``, configuration ``mtp-chain``) beside a Llama one:
    its points carry their model, the table marks them with the shape and the header names both targets and drafts."""
    sys.path.insert(0, BENCH)
    try:
        import real_size_models
    finally:
        sys.path.remove(BENCH)
    llama = upstream_run("0.5.11", "0.5.17", {"eagle3-topk1": points(8, 3, [100.0] * 3, [99.0] * 3)}, tp=1)
    llama["meta"]["real_size"]["model"] = real_size_models.describe("8b")
    ds = upstream_run("0.5.11", "0.5.17", {"mtp-chain": points(8, 3, [100.0] * 3, [96.0, 97.0, 98.0])}, tp=1)
    ds["meta"]["real_size"]["model"] = real_size_models.describe("dsv3-reduced")
    s = parity_of(tmp_path, l=llama, d=ds)
    pts = {p["config"]: p for p in s["points"]}
    assert sorted(pts) == ["chain", "mtp-chain"] and pts["mtp-chain"]["plugin_over_upstream"] == 0.97
    assert pts["mtp-chain"]["model"]["shape"] == "dsv3-reduced"
    assert pts["chain"]["model"] == {"hidden_size": 4096, "num_hidden_layers": 32}
    md = open(tmp_path / "out" / "upstream-parity.md").read()
    assert "| triton | harness | 1 | mtp-chain dsv3-reduced | 8 |" in md and "| 1 | chain | 8 |" in md, md
    head = md.split("\n\n")[1]
    assert "DeepSeek-V3-shaped, reduced" in head and "NextN" in head and "EAGLE3" in head, head
