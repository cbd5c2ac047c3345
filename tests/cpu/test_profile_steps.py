"""GPU profiles of the serving benchmark on CPU (``bench/serving.py --profile-steps N``): ``bench/profile_steps.py``'s
trace summary on small hand-made kineto traces (overlapping streams, CUDA-graph kernels present, absent, or marked by
``graph id``, step spans, a GPU-only trace, gzip files still being written), the option parsing, the dry run's and
the harness's budget planning, the reports (``bench/plot.py`` results.md, ``bench/real_size_report.py``
real-size-latest.{json,md}) with profiles and without, and the flag's way through ``bench/gpu_real_size.sh``. The
harness end to end against fake servers with ``/start_profile`` is ``bench/serving_selftest.py --e2e``
(test_bench_harness)."""

import copy
import gzip
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, as_other_config, serving_dry_run, write_report_inputs

BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)
import plot  # noqa: E402
import profile_steps  # noqa: E402
import real_size_report  # noqa: E402
import serving  # noqa: E402

pytestmark = pytest.mark.release_independent  # ci/run_cpu_tests.sh: on the first anchor release only

sys.path.remove(BENCH)


def X(cat, name, ts, dur, **args):
    return dict(ph="X", cat=cat, name=name, pid=0 if cat in profile_steps.GPU_CATS else 1, tid=7, ts=ts, dur=dur,
                args=args)


def trace_events():
    """Two target-verify steps and a draft extend (spans), a graph launch per verify step whose kernels carry its
    correlation id, a triton kernel and a sampling kernel launched outside the spans, a copy on a second stream
    overlapping a gemm, and a kernel launched before the profiler started."""
    return [
        X("user_annotation", "step[TARGET_VERIFY bs=8]", 0, 50),
        X("cuda_runtime", "cudaGraphLaunch", 10, 5, correlation=1),
        X("kernel", "nvjet_tst_128x64_64x4_1x2_h_bz_TNN", 20, 50, correlation=1),          # gemm 20-70
        X("kernel", "_fwd_kernel_stage1", 70, 20, correlation=1),                            # attention 70-90
        X("cuda_driver", "cuLaunchKernelEx", 60, 3, correlation=2),
        X("kernel", "build_tree_efficient", 94, 6, correlation=2),                          # sampling 94-100
        X("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 60, 20, correlation=3),           # overlaps: 60-80
        X("cuda_runtime", "cudaMemcpyAsync", 55, 2, correlation=3),
        X("user_annotation", "step[DRAFT_EXTEND bs=8]", 200, 50),
        X("cuda_runtime", "cudaLaunchKernel", 210, 4, correlation=4),
        X("kernel", "void flashinfer::sampling::TopKSamplingFromProbKernel<1024>", 220, 10, correlation=4),
        X("user_annotation", "step[TARGET_VERIFY bs=8]", 300, 50),
        X("cuda_runtime", "cudaGraphLaunch", 310, 5, correlation=5),
        X("kernel", "nvjet_tst_128x64_64x4_1x2_h_bz_TNN", 320, 50, correlation=5),
        X("kernel", "_fwd_kernel_stage1", 370, 20, correlation=5),
        X("kernel", "cross_device_reduce_1stage<bf16, 2>", 390, 10, correlation=99),       # launch not traced
        X("cpu_op", "aten::copy_", 5, 3),
        dict(ph="f", cat="ac2g", name="ac2g", id=1, pid=1, tid=7, ts=10),
    ]


def test_summary_busy_union_categories_phases_and_steps():
    s = profile_steps.summarize_trace({"schemaVersion": 1, "traceEvents": trace_events()})
    assert s["window_ms"] == 0.38 and s["n_kernels"] == 7 and s["n_gpu_events"] == 8       # 20 .. 400 us
    # union: 20-90 (gemm, the copy overlapping it, attention), 94-100, 220-230, 320-400
    assert s["gpu_busy_ms"] == 0.166 and s["busy_fraction"] == round(166 / 380, 4)
    assert s["categories_ms"] == {"gemm": 0.1, "attention": 0.04, "sampling": 0.016, "copy": 0.02, "nccl": 0.01,
                                  "other": 0.0}
    assert s["top_kernels"][0] == {"name": "nvjet_tst_128x64_64x4_1x2_h_bz_TNN", "category": "gemm", "count": 2,
                                   "ms": 0.1}
    assert [k["name"] for k in s["top_kernels"]][1:3] == ["_fwd_kernel_stage1", "Memcpy DtoD (Device -> Device)"]
    assert s["graph"] == {"launches": 2, "launch_cpu_ms": 0.01, "kernels": 4, "kernels_ms": 0.14, "visible": True}
    assert s["steps_seen"] == {"spans": {"TARGET_VERIFY": 2, "DRAFT_EXTEND": 1}, "target": 2,
                               "target_modes": ["TARGET_VERIFY"], "request_steps": 16}
    assert s["busy_ms_per_step"] == 0.083
    # by the span around the launch: graph launches inside the verify spans; a triton kernel and a copy launched
    # between spans; the sampling kernel inside the draft extend's; the all-reduce launched before the start
    assert s["phases_ms"] == {"TARGET_VERIFY": 0.14, "outside step spans": 0.026, "DRAFT_EXTEND": 0.01,
                              "launch not in trace": 0.01}
    assert s["notes"] == []


def test_idle_gaps_name_what_the_host_launched_to_end_them():
    # the shared trace: GPU idle 100-220 (ended by the sampling kernel cudaLaunchKernel'd at 210) and 230-320 (ended
    # by the second verify's graph launch); 90-94 is under GAP_MIN_US
    idle = profile_steps.summarize_trace(trace_events())["idle"]
    assert idle["idle_ms"] == 0.21 and idle["gaps"] == 2 and idle["min_gap_us"] == profile_steps.GAP_MIN_US
    assert idle["by_launch"] == {"eager": 0.12, "graph replay": 0.09}
    assert idle["top"] == [
        {"op": "-", "next": "void flashinfer::sampling::TopKSamplingFromProbKernel<1024>", "count": 1, "ms": 0.12},
        {"op": "graph replay", "next": "nvjet_tst_128x64_64x4_1x2_h_bz_TNN", "count": 1, "ms": 0.09}]
    # with CPU ops around the launch, the innermost one names it; a gap ended by a kernel whose launch is not in
    # the trace says so
    ev = trace_events() + [X("cpu_op", "aten::outer", 200, 40), X("cpu_op", "aten::index", 208, 4),
                           X("kernel", "late_kernel", 500, 5, correlation=98)]
    idle = profile_steps.summarize_trace(ev)["idle"]
    assert idle["gaps"] == 3 and idle["by_launch"] == {"eager": 0.12, "launch not in trace": 0.1, "graph replay": 0.09}
    assert idle["top"][0]["op"] == "aten::index"
    assert {"op": "-", "next": "late_kernel", "count": 1, "ms": 0.1} in idle["top"]


def test_summary_graph_kernels_absent_or_marked_and_gpu_only_traces():
    ev = [e for e in trace_events() if not (e["cat"] == "kernel" and e["args"].get("correlation") in (1, 5))]
    s = profile_steps.summarize_trace(ev)  # a bare event list is a trace too
    assert s["graph"]["launches"] == 2 and s["graph"]["kernels"] == 0 and s["graph"]["visible"] is False
    assert any(n.startswith("CUDA-graph kernels absent") and "lower bound" in n for n in s["notes"])
    # kineto from 2026-02 marks graph kernels with "graph id" (0 outside graphs), with or without the launch
    marked = [X("kernel", "gemm_a", 0, 10, correlation=7, **{"graph id": 3}), X("kernel", "gemm_b", 10, 10, correlation=8,
                                                                               **{"graph id": 0})]
    g = profile_steps.summarize_trace(marked)["graph"]
    assert (g["launches"], g["kernels"], g["kernels_ms"], g["visible"]) == (0, 1, 0.01, True)
    # activities GPU only: no spans, so no steps; kernels and launches still there
    gpu_only = [e for e in trace_events() if e["cat"] != "user_annotation" and e["cat"] != "cpu_op"]
    s = profile_steps.summarize_trace(gpu_only)
    assert s["steps_seen"] is None and s["busy_ms_per_step"] is None and s["gpu_busy_ms"] == 0.166
    assert s["phases_ms"]["outside step spans"] == 0.176 and any("no step[...] spans" in n for n in s["notes"])
    # nospec: DECODE steps are the target ones; an empty trace says so
    dec = [X("user_annotation", "step[DECODE bs=4]", 0, 10), X("user_annotation", "step[EXTEND bs=2 toks=400]", 20, 10)]
    s = profile_steps.summarize_trace(dec)
    assert s["steps_seen"]["target"] == 1 and s["steps_seen"]["request_steps"] == 4
    assert s["steps_seen"]["spans"] == {"DECODE": 1, "EXTEND": 1}
    assert s["busy_fraction"] is None and "no GPU events in the trace" in s["notes"]
    assert any(n.startswith("a prefill in the window (1 EXTEND span(s), 0.0 ms") for n in s["notes"]), s["notes"]
    # with speculation a prefill (EXTEND or MIXED) in the window is noted with the GPU time launched in it; the
    # shared trace's steps (verify, draft extend) are not prefills
    assert profile_steps.summarize_trace(trace_events())["notes"] == []
    ev = trace_events() + [X("user_annotation", "step[EXTEND bs=2 toks=400]", 500, 40),
                           X("cuda_runtime", "cudaLaunchKernel", 505, 2, correlation=20),
                           X("kernel", "nvjet_tst_256x128_64x4_1x2_h_bz_TNN", 510, 30, correlation=20)]
    s = profile_steps.summarize_trace(ev)
    assert s["steps_seen"]["target"] == 2 and s["phases_ms"]["EXTEND"] == 0.03
    assert [n for n in s["notes"] if n.startswith("a prefill")] == [
        "a prefill in the window (1 EXTEND span(s), 0.03 ms of GPU time launched in them): busy per step / token "
        "include it, so they do not compare with a window without one"]


@pytest.mark.parametrize("name, cat", [
    ("nvjet_tst_192x8_64x4_2x1_v_bz_TNT", "gemm"), ("sm90_xmma_gemm_bf16bf16_bf16f32", "gemm"),
    ("_fwd_kernel", "attention"), ("_fwd_grouped_kernel_stage1", "attention"),
    ("flashinfer::BatchPrefillWithPagedKVCacheKernel<...>", "attention"),
    ("void flashinfer::sampling::TopKTopPSamplingFromProbKernel<...>", "sampling"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "sampling"),
    ("verify_tree_greedy", "sampling"), ("void flashinfer::norm::RMSNormKernel<8, bf16>", "other"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<bf16>>", "other"),
    ("void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda>", "copy"),
    ("store_kvcache", "copy"), ("assign_req_to_token_pool", "copy"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "nccl"), ("cross_device_reduce_2stage<bf16, 2>", "nccl"),
])
def test_kernel_categories(name, cat):
    assert profile_steps.category(name) == cat
    assert profile_steps.category(name, "gpu_memset") == "copy"


def test_trace_files_written_in_two_goes_and_the_cli(tmp_path):
    """SGLang's export gzips into place: wait_trace returns only the complete file, rank 0's first."""
    data = json.dumps({"traceEvents": trace_events()}).encode()
    path = tmp_path / "cfg-plugin-c8-1795.5-TP-0.trace.json.gz"
    (tmp_path / "cfg-plugin-c8-1795.5-TP-1.trace.json.gz").write_bytes(gzip.compress(data))
    f = gzip.open(path, "wb")
    f.write(data[:len(data) // 2])
    f.flush()
    assert os.path.getsize(path) > 0
    with pytest.raises((EOFError, ValueError)):
        profile_steps.load_trace(str(path))

    second_half = threading.Event()  # set before the rest is written: no complete trace exists before it

    def finish():
        time.sleep(0.6)
        second_half.set()
        f.write(data[len(data) // 2:])
        f.close()

    threading.Thread(target=finish).start()
    got = profile_steps.wait_trace(str(tmp_path), 10, poll=0.1)
    assert got is not None and second_half.is_set(), "wait_trace returned before the second half was written"
    p, trace, files = got
    assert p == str(path) and [os.path.basename(x) for x in files] == [path.name, path.name.replace("TP-0", "TP-1")]
    assert profile_steps.summarize_trace(trace) == profile_steps.summarize_trace(str(path))
    assert profile_steps.wait_trace(str(tmp_path / "none"), 5, keep_waiting=lambda: False) is None
    plain = tmp_path / "x.trace.json"
    plain.write_text(json.dumps(trace_events()))
    out = subprocess.run([sys.executable, os.path.join(BENCH, "profile_steps.py"), str(plain)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and json.loads(out.stdout)["gpu_busy_ms"] == 0.166


# ------------------------------------------------------------------------------------ serving.py: options, plan
def test_options_and_dry_run_estimate():
    a = serving.parse_args(["--real-size", "--profile-steps", "30", "--configs", "tree-topk8"])
    assert a.profile_steps == 30 and a.profile_activities == ["CPU", "GPU"] and not a.keep_traces
    a = serving.parse_args(["--profile-steps", "8", "--profile-activities", "gpu", "--keep-traces"])
    assert a.profile_activities == ["GPU"] and a.keep_traces
    assert serving.parse_args([]).profile_steps == 0
    for bad in (["--profile-steps", "1"], ["--profile-steps", "-2"], ["--profile-steps", "5", "--profile-activities", "CPU"]):
        with pytest.raises(SystemExit):
            serving.parse_args(bad)
    argv = serving.bench_argv("http://x", "/m", 8, 16, a, "/tmp/o", "t", warmup=0)
    assert argv[argv.index("--warmup-requests") + 1] == "0"

    plan = serving_dry_run
    off, t_off = plan()
    on, t_on = plan("--profile-steps", "30")
    assert "GPU profiles" not in off and on.count("then GPU profiles: 30 steps (CPU,GPU) per side at C=1,8,32") == 2
    assert "num_steps: 30" in on and "--warmup-requests 0" in on
    per_config = 2 * 3 * (4 + 2.5 + profile_steps.EXTRA_S)
    assert abs(t_on - t_off - 2 * per_config) <= 1


def test_harness_keeps_later_configurations_time_and_records_budget_skips(tmp_path):
    a = serving.parse_args(["--configs", "eagle3-topk1,tree-topk8", "--concurrency", "1", "8", "--repeats", "2",
                            "--profile-steps", "20", "--out", str(tmp_path), "--later-launch-s", "30"])
    h = serving.Harness(a)
    h.launch_est = 30.0  # as after a measured launch
    try:
        t1 = 1.0
        assert h.later_configs_s("tree-topk8", t1) == 0
        n = {c: h.num_prompts(c, t1) for c in (1, 8)}
        want = 30 + 25 + sum(2 * 2 * h.est_point(c, n[c], t1) + 2 * h.est_profile(c, n[c], t1) for c in (1, 8))
        assert h.later_configs_s("eagle3-topk1", t1) == pytest.approx(want)
        # not enough budget for the profiles of the first configuration once the second one's time is kept
        h.results = {"meta": {}, "configs": {"eagle3-topk1": {"num_prompts": {"1": n[1], "8": n[8]}}}, "profiles": []}
        h.deadline = time.monotonic() + want + 5
        h.profile_point = lambda *x: pytest.fail("a profile was started without the budget for it")
        h.profile_config("eagle3-topk1", {"stock": None, "plugin": None}, 1.0, t1)
        got = [(p["side"], p["concurrency"], p["error"].split(":")[0]) for p in h.results["profiles"]]
        assert got == [("stock", 1, "budget"), ("plugin", 1, "budget"), ("stock", 8, "budget"), ("plugin", 8, "budget")]
        assert "kept for later configurations" in h.results["profiles"][0]["error"]
        assert json.load(open(tmp_path / "results.json"))["profiles"] == h.results["profiles"]
    finally:
        import shutil

        shutil.rmtree(h.tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ the reports
def run_with_profiles(release="0.5.11", tp=None):
    """A real-size results.json: tree-topk8 at c=8, 2 pairs (stock 1000, plugin 1100 tok/s), profiles of both sides
    (plugin: 160 ms busy of 200 over 20 verify steps of 8 requests at accept length 3; stock 120 of 300), and a
    profile the budget skipped at c=32."""
    pts = []
    for rep in range(2):
        for side, tput in (("stock", 1000.0), ("plugin", 1100.0)):
            pts.append(dict(side=side, concurrency=8, rep=rep, order=0, num_prompts=16, ok=True, error=None,
                            output_throughput=tput, median_tpot_ms=8.0, p99_tpot_ms=9.0, median_itl_ms=8.0,
                            p99_itl_ms=9.0, median_ttft_ms=50.0, accept_length=3.0))
    side = lambda s, busy, window: dict(  # noqa: E731
        config="tree-topk8", side=s, concurrency=8, steps=21, activities=["CPU", "GPU"], speculative=True, error=None,
        accept_length=3.0, window_ms=window, gpu_busy_ms=busy, busy_fraction=busy / window, n_kernels=100,
        categories_ms=dict(gemm=0.6 * busy, attention=0.2 * busy, sampling=0.1 * busy, copy=0.1 * busy, nccl=0.0,
                           other=0.0),
        phases_ms={"TARGET_VERIFY": 0.7 * busy, "outside step spans": 0.3 * busy},
        top_kernels=[dict(name=f"k{i}", category="gemm", count=20, ms=1.0) for i in range(15)],
        graph=dict(launches=40, kernels=90, visible=True), notes=[],
        steps_seen=dict(spans={"TARGET_VERIFY": 20}, target=20, target_modes=["TARGET_VERIFY"], request_steps=160),
        busy_ms_per_step=busy / 20,
        idle=dict(idle_ms=window - busy, gaps=40, min_gap_us=8.0,
                  by_launch={"eager": 0.6 * (window - busy), "graph replay": 0.4 * (window - busy)},
                  top=[dict(op="aten::copy_", next="Memcpy DtoD", count=20, ms=0.6 * (window - busy))]))
    r = {"schema": "specv2-bench-serving/1",
         "meta": {"date": "2026-11-24 08:00 UTC", "device": "NVIDIA H100 80GB HBM3", "sglang": release, "torch": "2.11.0",
                  "complete": True, "stop_reason": None, "cuda_visible_devices": "0",
                  "args": {"input_len": 200, "output_len": 256}, "common_server_args": ["--load-format", "dummy"],
                  "real_size": {"acc_len": 3.0, "env": {"SGLANG_SIMULATE_ACC_LEN": "3.0"}, "commit": "abc",
                                "model": {"hidden_size": 4096, "num_hidden_layers": 32}}},
         "configs": {"tree-topk8": {"about": "tree", "points": pts, "greedy": {"skipped": "dummy", "identical": None},
                                    "sides": {"stock": {"speculative": True, "overlap_schedule": False, "fixes": {}},
                                              "plugin": {"speculative": True, "overlap_schedule": True,
                                                         "fixes": {"tree-drafting": "applied"}}}}},
         "profiles": [side("stock", 120.0, 300.0), side("plugin", 160.0, 200.0),
                      dict(config="tree-topk8", side="stock", concurrency=32, steps=21, error="budget: ~30s needed")]}
    if tp:
        r["meta"]["real_size"]["tp"] = tp
    return r


def test_profile_rows_ceiling_and_results_md():
    r = run_with_profiles()
    rows = plot.profile_rows(r)
    assert [(x["config"], x["concurrency"]) for x in rows] == [("tree-topk8", 8), ("tree-topk8", 32)]
    row = rows[0]
    pl, st = row["sides"]["plugin"], row["sides"]["stock"]
    assert pl["tokens"] == 480.0 and pl["busy_ms_per_token"] == round(160 / 480, 4) and pl["steps"] == 20
    assert pl["wall_ms_per_token"] == round(200 / 480, 4) and pl["categories_ms_per_step"]["gemm"] == 4.8
    assert pl["phases_ms_per_step"] == {"TARGET_VERIFY": 5.6, "outside step spans": 2.4} and len(pl["top_kernels"]) == 5
    assert row["stock_tok_s"] == 1000.0 and row["measured_ratio"] == pytest.approx(1.1)
    # ceiling: stock's 1 ms per token (1000 tok/s) over the plugin's 1/3 ms of GPU busy time per token
    assert row["ceiling"] == round(1.0 / pl["busy_ms_per_token"], 3) == 3.0
    assert row["ratio_over_busy"] == round(1.1 / 0.8, 3) and st["busy_fraction"] == 0.4
    assert rows[1]["ceiling"] is None and rows[1]["sides"]["stock"]["error"].startswith("budget")
    md = plot.markdown(r)
    assert "**ceiling** = (1000 / stock tok/s) / plugin busy ms/token" in md
    assert "| tree-topk8 | 8 | plugin | 20 | 80.0 | 8.00 | 0.333 | 0.417 | 4.80 | 1.60 | 0.80 | 0.80 | 0.00 | 0.00 | " \
           "TARGET_VERIFY 5.60, outside step spans 2.40 | eager 1.20, graph replay 0.80 | - |" in md
    assert pl["idle_ms_per_step"] == {"eager": 1.2, "graph replay": 0.8} and pl["idle_top"][0]["op"] == "aten::copy_"
    assert "**GPU idle by launch**" in md
    assert "| tree-topk8 | 8 | 1000.0 | 1.100 | 80.0 | 0.333 | 0.250 | **3.000** | 1.375 |" in md
    assert "* tree-topk8 c=32 stock: budget: ~30s needed" in md
    # without profiles: results.md as before, no profile section
    plain = copy.deepcopy(r)
    del plain["profiles"]
    assert plot.profile_rows(plain) == [] and plot.profile_markdown([]) == []
    assert "ceiling" not in plot.markdown(plain) and plot.markdown(plain) == plot.markdown(dict(plain, profiles=[]))
    # a GPU-only profile (no steps): no per-token numbers, no ceiling
    gpu = copy.deepcopy(r)
    for p in gpu["profiles"]:
        p["steps_seen"] = None
    assert plot.profile_rows(gpu)[0]["ceiling"] is None and plot.profile_rows(gpu)[0]["ratio_over_busy"] == 1.375
    # parts merged (bench/plot.py --merge): profiles concatenated, none when no part profiled
    b = as_other_config(r, "profiles")
    assert len(plot.merge([r, b])["profiles"]) == 6 and "profiles" not in plot.merge([plain])


def test_real_size_report_profiles_present_absent_and_previous(tmp_path):
    paths = write_report_inputs(tmp_path, "profiles", run_with_profiles(), run_with_profiles("0.5.12.post1"))
    real_size_report.main(["--out-dir", str(tmp_path / "a"), paths["plain"]])
    plain = json.load(open(tmp_path / "a" / "real-size-latest.json"))
    assert "profiles" not in plain and "ceiling" not in open(tmp_path / "a" / "real-size-latest.md").read()

    real_size_report.main(["--out-dir", str(tmp_path / "b"), paths["full"], paths["plain"]])
    s = json.load(open(tmp_path / "b" / "real-size-latest.json"))
    assert set(s) == {"device", "date", "commit", "model", "acc_len", "points", "profiles"}
    assert [(p["release"], p["tp"], p["config"], p["concurrency"]) for p in s["profiles"]] == [
        ("0.5.11", 1, "tree-topk8", 8), ("0.5.11", 1, "tree-topk8", 32)]
    p = s["profiles"][0]
    assert p["ceiling"] == 3.0 and p["measured_ratio"] == pytest.approx(1.1) and p["stock_tok_s"] == 1000.0
    assert p["plugin"]["busy_ms_per_token"] == round(160 / 480, 4) and p["stock"]["busy_fraction"] == 0.4
    assert "model" not in p and s["profiles"][1]["stock"]["error"].startswith("budget") and "plugin" not in s["profiles"][1]
    md = open(tmp_path / "b" / "real-size-latest.md").read()
    assert "| release | TP | config | conc | stock tok/s |" in md
    assert "| 0.5.11 | 1 | tree-topk8 | 8 | 1000.0 | 1.100 | 80.0 | 0.333 | 0.250 | **3.000** | 1.375 |" in md
    assert "GPU profiles (`bench/serving.py --profile-steps N`" in md

    # --previous: the summary's profiles stay beside a new run of another release without profiles, and a new
    # TP 2 run with profiles of the same release and config adds its own
    real_size_report.main(["--out-dir", str(tmp_path / "c"), "--previous", str(tmp_path / "b" / "real-size-latest.json"),
                           paths["plain"]])
    c = json.load(open(tmp_path / "c" / "real-size-latest.json"))
    assert c["profiles"] == s["profiles"]
    tp2 = str(tmp_path / "tp2.json")
    json.dump(run_with_profiles(tp=2), open(tp2, "w"))
    real_size_report.main(["--out-dir", str(tmp_path / "d"), "--previous", str(tmp_path / "b" / "real-size-latest.json"),
                           tp2])
    d = json.load(open(tmp_path / "d" / "real-size-latest.json"))
    assert sorted((p["tp"], p["concurrency"]) for p in d["profiles"]) == [(1, 8), (1, 32), (2, 8), (2, 32)]


def test_gpu_real_size_forwards_the_profile_flags(tmp_path):
    """bench/gpu_real_size.sh hands its serving.py args (the profile flags among them) to every part's
    gpu_bench.sh, which hands them to serving.py."""
    import test_real_size_bench as trs  # its driver(): gpu_real_size.sh in a copy of the repo, stubs, fake nvidia-smi

    p, calls, out = trs.driver(tmp_path, 1, "--profile-steps", "30", "--keep-traces", "--configs", "tree-topk8",
                               releases="0.5.11")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    argv = [c for c in calls if c[4:5] == ["start"]][0][5].split()
    assert argv[argv.index("--profile-steps") + 1] == "30" and "--keep-traces" in argv
    assert 'python3 bench/serving.py --out "$OUTDIR" --budget-s "$BUDGET" "$@"' in open(
        os.path.join(BENCH, "gpu_bench.sh")).read()
