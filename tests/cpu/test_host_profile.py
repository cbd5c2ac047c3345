"""Host profiles of the serving benchmark on CPU (``bench/serving.py --host-profile-seconds S``): the summary of
py-spy's raw collapsed stacks (``bench/host_profile.py``: threads, idle-like and CUDA-sync-like leaves by name and by
source line, the plugin's patched code, SGLang areas, path normalization), the scheduler's pid among a server's
children (fake process objects, and a real child titled like SGLang's), ``record`` with stand-in py-spy executables,
the options, the dry run's and the harness's budget planning, the reports with host profiles and without
(``bench/plot.py`` results.md and ``--merge``, ``bench/real_size_report.py`` incl. ``--previous``) and the py-spy
wheel step of ``bench/gpu_bench.sh``. End to end against fake servers and a fake py-spy:
``bench/serving_selftest.py --e2e`` (test_bench_harness)."""

import copy
import gzip
import json
import linecache
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile

import pytest

from conftest import ROOT, as_other_config, requires_sglang, serving_dry_run, write_report_inputs
from sglang_specv2_fixes import installed

BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)
import host_profile  # noqa: E402
import plot  # noqa: E402
import real_size_report  # noqa: E402
import serving  # noqa: E402

sys.path.remove(BENCH)

PATCHED = "sglang/srt/speculative/eagle_worker_v2.py [specv2-fixes tree-drafting]"
LOOP = ("thread (100): MainThread;<module> (/opt/venv/lib/python3.12/site-packages/sglang/launch_server.py:11);"
        "run_scheduler_process (sglang/srt/managers/scheduler.py:3900);"
        "Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1100)")
RAW = "\n".join([
    # the plugin's patched tree drafting (busy), and a torch leaf under the plugin's own module
    f"{LOOP};Scheduler.run_batch (sglang/srt/managers/scheduler.py:2300);"
    f"EAGLEWorkerV2.forward_batch_generation ({PATCHED}:700) 300",
    f"{LOOP};Scheduler.run_batch (sglang/srt/managers/scheduler.py:2300);"
    f"EAGLEWorkerV2.forward_batch_generation ({PATCHED}:705);TreeDraft.build (sglang_specv2_fixes/fixes/tree.py:50);"
    "Tensor.__torch_function__ (torch/_tensor.py:1600) 40",
    # CUDA-sync-like: a Python wrapper by name; a C call (tensor.tolist()) by its source line
    f"{LOOP};Scheduler.process_batch_result (sglang/srt/managers/scheduler.py:2400);"
    "Event.synchronize (torch/cuda/streams.py:225) 200",
    f"{LOOP};Scheduler.process_batch_result (sglang/srt/managers/scheduler.py:2400);"
    "Scheduler.process_batch_result_decode (sglang/srt/managers/scheduler_output_processor_mixin.py:120) 60",
    # idle-like: zmq poll; a full path normalized after site-packages/
    f"{LOOP};Scheduler.recv_requests (sglang/srt/managers/scheduler.py:1200);Poller.poll (zmq/sugar/poll.py:106) 50",
    f"{LOOP};Scheduler.run_batch (sglang/srt/managers/scheduler.py:2300);ModelRunner.forward "
    "(/opt/venv/lib/python3.12/site-packages/sglang/srt/model_executor/model_runner.py:2000) 100",
    # other threads: a watchdog sleeping (idle by its source line), one unnamed thread (hex id), a frame without file
    "thread (101): watchdog;Thread.run (threading.py:982);Watchdog._run (sglang/srt/utils/watchdog.py:50) 800",
    "thread (0x7F00AB): Thread-2;<native> 10",
    "not a stack line",
])
SOURCE = {("sglang/srt/managers/scheduler_output_processor_mixin.py", 120): "    next_ids = next_token_ids.tolist()\n",
          ("sglang/srt/utils/watchdog.py", 50): "            time.sleep(self.interval)\n",
          (PATCHED, 700): "THIS IS NOT READ: patched code is not on disk\n"}


def source(file, line):
    return SOURCE.get((file, line)) if "[specv2-fixes" not in file else None


# -------------------------------------------------------------------------------------------------- summary
def test_summary_threads_idle_sync_patched_code_and_areas():
    s = host_profile.summarize(RAW, source=source)
    assert s["samples"] == 1560 and s["main_thread"] == "MainThread" and s["main_samples"] == 750
    assert s["threads"] == [
        dict(thread="watchdog", samples=800, idle=1.0, sync=0.0, top="Watchdog._run (sglang/srt/utils/watchdog.py)"),
        dict(thread="MainThread", samples=750, idle=round(50 / 750, 4), sync=round(260 / 750, 4),
             top=f"EAGLEWorkerV2.forward_batch_generation ({PATCHED})"),
        dict(thread="Thread-2", samples=10, idle=0.0, sync=0.0, top="<native>")]
    assert (s["idle"], s["sync"]) == (round(50 / 750, 4), round(260 / 750, 4))
    top = {x["function"]: x for x in s["top_self"]}
    assert [x["function"] for x in s["top_self"]][:2] == [f"EAGLEWorkerV2.forward_batch_generation ({PATCHED})",
                                                          "Event.synchronize (torch/cuda/streams.py)"]
    p = top[f"EAGLEWorkerV2.forward_batch_generation ({PATCHED})"]
    assert p == dict(function=p["function"], samples=300, share=0.4, busy_share=round(300 / 700, 4), kind=None,
                     lines=[[700, 300, None]])  # patched code: no source line
    assert top["Event.synchronize (torch/cuda/streams.py)"]["kind"] == "sync"
    tl = top["Scheduler.process_batch_result_decode (sglang/srt/managers/scheduler_output_processor_mixin.py)"]
    assert tl["kind"] == "sync" and tl["lines"] == [[120, 60, "next_ids = next_token_ids.tolist()"]]
    assert top["Poller.poll (zmq/sugar/poll.py)"]["kind"] == "idle" and top["Poller.poll (zmq/sugar/poll.py)"]["busy_share"] is None
    assert "ModelRunner.forward (sglang/srt/model_executor/model_runner.py)" in top  # site-packages/ cut off
    incl = {x["function"]: x["samples"] for x in s["top_inclusive"]}
    assert s["top_inclusive"][0]["share"] == 1.0 and incl[f"EAGLEWorkerV2.forward_batch_generation ({PATCHED})"] == 340
    assert incl["<module> (sglang/launch_server.py)"] == 750 and incl["Scheduler.run_batch (sglang/srt/managers/scheduler.py)"] == 440
    # by the innermost SGLang / plugin frame: the torch leaf under the plugin's module counts to the plugin
    assert s["areas"] == {"patched: tree-drafting": 0.4, "managers (scheduler)": round(260 / 750, 4),
                          "model_executor": round(100 / 750, 4), "idle-like wait": round(50 / 750, 4),
                          "plugin": round(40 / 750, 4)}
    assert s["leaf_areas"] == {"patched: tree-drafting": 0.4, "torch": 0.32, "model_executor": round(100 / 750, 4),
                               "managers (scheduler)": 0.08, "other": round(50 / 750, 4)}
    assert s["sync_sites"] == [
        dict(at="Event.synchronize (torch/cuda/streams.py):225", samples=200, share=round(200 / 750, 4), text=None),
        dict(at="Scheduler.process_batch_result_decode (sglang/srt/managers/scheduler_output_processor_mixin.py):120",
             samples=60, share=0.08, text="next_ids = next_token_ids.tolist()")]
    # without source lines: only names (the tolist line is busy, the watchdog's sleep not idle)
    bare = host_profile.summarize(RAW)
    assert bare["sync"] == round(200 / 750, 4) and bare["threads"][0]["idle"] == 0.0


def test_summary_edge_cases_files_and_cli(tmp_path):
    # no --threads: one thread "all", the busiest is the main one; process frames (-s) dropped; top limits
    raw = "\n".join(x.split(";", 1)[1] for x in RAW.splitlines()[:6])
    raw = raw.replace("<module>", 'process 9:"python3 -m sglang.launch_server";<module>', 1)
    s = host_profile.summarize(raw, top=2)
    assert s["main_thread"] == "all" and s["main_samples"] == 750 and len(s["top_self"]) == 2 == len(s["top_inclusive"])
    assert [x["function"] for x in s["top_inclusive"]] == ["<module> (sglang/launch_server.py)",
                                                           "run_scheduler_process (sglang/srt/managers/scheduler.py)"]
    assert host_profile.summarize("")["samples"] == 0 and host_profile.summarize("")["main_thread"] is None
    assert host_profile.parse_frame("f (x.py)") == ("f", "x.py", None) and host_profile.parse_frame("<native>") == ("<native>", "", None)
    assert host_profile.norm_file("/root/repo/sglang_specv2_fixes/x.py") == "sglang_specv2_fixes/x.py"
    assert host_profile.area(PATCHED) == "patched: tree-drafting" and host_profile.area("numpy/x.py") == "other"
    for name, idle in (("Condition.wait", True), ("Event.wait", True), ("BaseSelector.select", False)):
        assert host_profile.is_idle((name, "threading.py", 1)) is idle
    assert host_profile.is_idle(("EpollSelector.select", "selectors.py", 1))
    assert host_profile.is_sync(("cuStreamSynchronize", "libcuda.so.1", None), None)  # --native frames
    assert not host_profile.is_sync(("cudaMemcpyAsync", "libcudart.so", None), None)
    assert host_profile.is_sync(("f", "a.py", 3), "x = t.to('cpu')") and not host_profile.is_sync(("f", "a.py", 3), "x.cpu_count")
    gz = tmp_path / "a.pyspy.txt.gz"
    gz.write_bytes(gzip.compress(RAW.encode()))
    assert host_profile.summarize(str(gz)) == host_profile.summarize(RAW)
    out = subprocess.run([sys.executable, os.path.join(BENCH, "host_profile.py"), str(gz)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and json.loads(out.stdout)["main_samples"] == 750


@requires_sglang
def test_source_lines_of_the_installed_files():
    import threading as th

    n = 10
    assert host_profile.source_line("threading.py", n) == linecache.getline(th.__file__, n)
    path = os.path.join(installed.sglang_root(), "srt", "managers", "scheduler.py")
    lines = open(path).read().splitlines()
    k = next(i for i, x in enumerate(lines, 1) if 'setproctitle.setproctitle(f"sglang::scheduler' in x)
    assert host_profile.TITLE in host_profile.source_line("sglang/srt/managers/scheduler.py", k)
    assert host_profile.source_line(PATCHED, k) is None and host_profile.source_line("nowhere/x.py", 1) is None


# ------------------------------------------------------------------------------------------ pid, record
class FakeProc:
    def __init__(self, pid, cmdline, name=None, cpu=0.0, gone=False):
        self.pid, self._cmd, self._name, self._cpu, self.gone = pid, cmdline, name, cpu, gone

    def cmdline(self):
        if self.gone:
            raise ProcessLookupError(self.pid)
        return self._cmd

    def name(self):
        return self._name or (self._cmd[0] if self._cmd else "?")[:15]

    def cpu_times(self):
        return (self._cpu, 1.0, 0.0, 0.0)


def test_pick_scheduler_by_title_rank_zero_comm_and_most_cpu():
    pick = host_profile.pick_scheduler
    kids = [FakeProc(1, ["sglang::detokenizer", "", ""], cpu=500), FakeProc(2, ["sglang::scheduler_TP1", ""], cpu=90),
            FakeProc(3, ["sglang::scheduler_TP0", ""], cpu=80), FakeProc(4, [], gone=True)]
    assert pick(kids) == (3, "sglang::scheduler_TP0", "title sglang::scheduler (first of 2)")
    assert pick([FakeProc(5, [], name="sglang::schedul")]) == (5, "sglang::schedul", "title sglang::scheduler")
    pid, title, how = pick([FakeProc(6, ["python3", "-c", "x"], cpu=3), FakeProc(7, ["python3", "-m", "y"], cpu=40)])
    assert (pid, title) == (7, "python3 -m y") and how.startswith("most CPU time (41s) of 2 children")
    with pytest.raises(RuntimeError, match="no child process"):
        pick([FakeProc(8, [], gone=True)])


def titled_child(title="sglang::scheduler", secs="30"):
    """A child of this process titled like SGLang's scheduler (argv[0], as setproctitle leaves /proc/PID/cmdline)."""
    return subprocess.Popen([title, secs], executable=shutil.which("sleep"))


def test_find_scheduler_among_real_children():
    kid = titled_child()
    try:
        pid, title, how = host_profile.find_scheduler(os.getpid())
        assert (pid, title, how) == (kid.pid, "sglang::scheduler 30", "title sglang::scheduler")
    finally:
        kid.kill()
        kid.wait()


def fake_py_spy(tmp_path, body):
    exe = tmp_path / "py-spy"
    exe.write_text(f"#!{sys.executable}\nimport sys\na = sys.argv[1:]\nout = a[a.index('--output') + 1]\n{body}\n")
    exe.chmod(0o755)
    return str(exe)


def test_record_argv_summary_line_and_failures(tmp_path):
    ok = fake_py_spy(tmp_path, "open(out, 'w').write(' '.join(a) + ' 1\\n')\n"
                               "print(\"py-spy> Wrote raw flamegraph data to 'x'. Samples: 1600 Errors: 0\")")
    out = str(tmp_path / "raw.txt")
    argv, said = host_profile.record(ok, 123, 8, out)
    assert argv[1:] == ["record", "--pid", "123", "--duration", "8", "--format", "raw", "--output", out, "--rate", "200",
                        "--nonblocking", "--idle", "--threads"]
    assert said == "Samples: 1600 Errors: 0" and open(out).read().startswith("record --pid 123")
    bad = fake_py_spy(tmp_path, "print('Error: Permission Denied', file=sys.stderr); sys.exit(1)")
    with pytest.raises(RuntimeError, match=r"py-spy exited 1: Error: Permission Denied \(ptrace_scope "):
        host_profile.record(bad, 1, 1, str(tmp_path / "b.txt"))
    empty = fake_py_spy(tmp_path, "pass")
    with pytest.raises(RuntimeError, match="py-spy exited 0: no output"):
        host_profile.record(empty, 1, 1, str(tmp_path / "c.txt"))
    with pytest.raises(RuntimeError, match="FileNotFoundError"):
        host_profile.record(str(tmp_path / "none"), 1, 1, str(tmp_path / "d.txt"))


# ------------------------------------------------------------------------------------- serving.py: options, plan
def test_options_and_dry_run_estimate():
    a = serving.parse_args(["--real-size", "--host-profile-seconds", "8", "--configs", "tree-topk8"])
    assert (a.host_profile_seconds, a.py_spy, a.host_profile_args, a.profile_steps) == (
        8, "py-spy", "--rate 200 --nonblocking --idle --threads", 0)
    a = serving.parse_args(["--host-profile-seconds", "3", "--py-spy", "/x/py-spy", "--host-profile-args", "--rate 50"])
    assert (a.py_spy, a.host_profile_args) == ("/x/py-spy", "--rate 50")
    assert serving.parse_args([]).host_profile_seconds == 0
    with pytest.raises(SystemExit):
        serving.parse_args(["--host-profile-seconds", "-1"])

    plan = serving_dry_run
    off, t_off = plan()
    alone, t_alone = plan("--host-profile-seconds", "8")
    both, t_both = plan("--host-profile-seconds", "8", "--profile-steps", "12")
    _, t_gpu = plan("--profile-steps", "12")
    assert "host profiles" not in off and alone.count("then host profiles: py-spy record --pid <the sglang::scheduler "
                                                       "child> --duration 8") == 2
    assert "each under one more bench_serving load" in alone and "before each GPU profile, under its load" in both
    # per side and concurrency: S + 5 s of load + EXTRA_S, plus the load itself when there is no GPU profile
    host = 2 * 3 * (8 + 5 + serving.host_profile.EXTRA_S)
    assert abs(t_alone - t_off - 2 * (host + 2 * 3 * (4 + 2.5))) <= 1 and abs(t_both - t_gpu - 2 * host) <= 1


def test_harness_budget_with_host_profiles(tmp_path):
    a = serving.parse_args(["--configs", "eagle3-topk1,tree-topk8", "--concurrency", "1", "8", "--repeats", "1",
                            "--host-profile-seconds", "8", "--out", str(tmp_path)])
    h = serving.Harness(a)
    h.launch_est = 30.0
    try:
        t1 = 1.0
        assert h.host_load(1, t1) == (12, 13 * (1 + 1 / 32))  # 12 waves of 1 request cover S + 4 s
        prompts, secs = h.host_load(8, t1)
        assert prompts == 8 * 10 and secs == pytest.approx(11 * 1.25)
        n = h.num_prompts(8, t1)
        assert h.est_profile(8, n, t1) == pytest.approx(h.est_point(8, n, t1) + secs + serving.host_profile.EXTRA_S)
        assert h.later_configs_s("eagle3-topk1", t1) == pytest.approx(
            30 + 25 + sum(2 * h.est_point(c, h.num_prompts(c, t1), t1) + 2 * h.est_profile(c, h.num_prompts(c, t1), t1)
                          for c in (1, 8)))
        # no budget left: budget entries in host_profiles only (no GPU profiles asked for)
        h.results = {"meta": {}, "configs": {"eagle3-topk1": {"num_prompts": {}}}, "host_profiles": []}
        h.deadline = time.monotonic() + 5
        h.profile_point = lambda *x: pytest.fail("a profile was started without the budget for it")
        h.profile_config("eagle3-topk1", {"stock": None, "plugin": None}, 1.0, t1)
        assert [(x["side"], x["concurrency"], x["seconds"], x["error"].split(":")[0]) for x in h.results["host_profiles"]] \
            == [("stock", 1, 8, "budget"), ("plugin", 1, 8, "budget"), ("stock", 8, 8, "budget"), ("plugin", 8, 8, "budget")]
        assert "profiles" not in h.results
    finally:
        shutil.rmtree(h.tmp, ignore_errors=True)


def test_host_point_records_its_failures(tmp_path):
    """No py-spy: the entry says so after the scheduler was found; py-spy failing: its message; never raises."""
    a = serving.parse_args(["--host-profile-seconds", "1", "--py-spy", str(tmp_path / "none"), "--out", str(tmp_path)])
    h = serving.Harness(a)
    kid = titled_child()
    try:
        srv = serving.Server("tree-topk8", "plugin", 1, "/m", [])
        srv.proc = type("P", (), {"pid": os.getpid()})()
        load = threading.Thread(target=time.sleep, args=(0.1,))  # never started: "ended" before py-spy
        e = dict(concurrency=8)
        h.host_point(srv, e, str(tmp_path), load)
        assert e["pid"] == kid.pid and e["error"].startswith("py-spy not found") and e["wall_s"] >= 0
        a.py_spy = fake_py_spy(tmp_path, "print('Error: Failed to attach', file=sys.stderr); sys.exit(1)")
        e = dict(concurrency=8)
        h.host_point(srv, e, str(tmp_path), load)
        assert e["error"].startswith("py-spy exited 1: Error: Failed to attach") and e["py_spy_args"] == a.host_profile_args
        a.py_spy = fake_py_spy(tmp_path, f"open(out, 'w').write({RAW!r}); print('Samples: 1560 Errors: 0')")
        a.keep_traces = True
        e = dict(concurrency=8, error=None)
        h.host_point(srv, e, str(tmp_path), load)
        assert e["error"] is None and e["py_spy"] == "Samples: 1560 Errors: 0" and e["found"] == "title sglang::scheduler"
        assert e["note"].startswith("the load ended before py-spy did") and e["main_samples"] == 750
        assert e["raw"] == "tree-topk8-plugin-c8.pyspy.txt.gz" and not os.path.exists(tmp_path / "tree-topk8-plugin-c8.pyspy.txt")
        assert gzip.open(tmp_path / "traces" / e["raw"], "rt").read() == RAW
    finally:
        kid.kill()
        kid.wait()
        shutil.rmtree(h.tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ the reports
def entry(side, config="tree-topk8", c=8, error=None):
    e = dict(config=config, side=side, concurrency=c, seconds=8, num_prompts=96, pid=4242, title="sglang::scheduler",
             found="title sglang::scheduler", error=error)
    return e if error else dict(e, **host_profile.summarize(RAW, source=source))


def with_hosts(release="0.5.11", tp=None):
    import test_profile_steps as tps  # its real-size results.json with GPU profiles

    r = tps.run_with_profiles(release, tp)
    r["host_profiles"] = [entry("stock"), entry("plugin"), entry("stock", c=32, error="py-spy exited 1: Permission Denied")]
    return r


def test_results_md_with_and_without_host_profiles():
    r = with_hosts()
    md = plot.markdown(r)
    assert "Host profiles (`bench/serving.py --host-profile-seconds S`" in md
    assert ("| tree-topk8 | 8 | plugin | 4242 `sglang::scheduler` | 750 (1560) | 6.7 | 34.7 | patched: tree-drafting 40.0, "
            "managers (scheduler) 34.7, model_executor 13.3, idle-like wait 6.7 | EAGLEWorkerV2.forward_batch_generation "
            f"({PATCHED}):700 40.0; Event.synchronize (torch/cuda/streams.py):225 26.7; ") in md
    assert "* tree-topk8 c=8 plugin: threads watchdog 800 (idle-like 100.0%), MainThread 750 (idle-like 6.7%)" in md
    assert "  * self 8.0% (sync): `Scheduler.process_batch_result_decode (sglang/srt/managers/" \
           "scheduler_output_processor_mixin.py):120` `next_ids = next_token_ids.tolist()`" in md
    assert "  * incl 100.0%: `<module> (sglang/launch_server.py)`" in md
    assert "Host profiles that failed:\n\n* tree-topk8 c=32 stock: py-spy exited 1: Permission Denied" in md
    plain = copy.deepcopy(r)
    del plain["host_profiles"]
    assert "Host profiles" not in plot.markdown(plain) and plot.markdown(plain) == plot.markdown(dict(plain, host_profiles=[]))
    b = as_other_config(r, "host_profiles")
    b["profiles"] = []
    assert len(plot.merge([r, b])["host_profiles"]) == 6 and "host_profiles" not in plot.merge([plain])


def test_real_size_report_host_profiles_present_absent_and_previous(tmp_path):
    paths = write_report_inputs(tmp_path, "host_profiles", with_hosts(), with_hosts("0.5.12.post1"))
    real_size_report.main(["--out-dir", str(tmp_path / "a"), paths["plain"]])
    assert "host_profiles" not in json.load(open(tmp_path / "a" / "real-size-latest.json"))
    assert "Host profiles" not in open(tmp_path / "a" / "real-size-latest.md").read()

    real_size_report.main(["--out-dir", str(tmp_path / "b"), paths["full"], paths["plain"]])
    s = json.load(open(tmp_path / "b" / "real-size-latest.json"))
    assert [(h["release"], h["tp"], h["config"], h["side"], h["concurrency"]) for h in s["host_profiles"]] == [
        ("0.5.11", 1, "tree-topk8", "stock", 8), ("0.5.11", 1, "tree-topk8", "plugin", 8),
        ("0.5.11", 1, "tree-topk8", "stock", 32)]
    h = s["host_profiles"][1]
    assert {"config", "side", "concurrency", "seconds", "pid", "title", "samples", "threads", "top_self", "top_inclusive",
            "areas", "error"} <= set(h) and "model" not in h and "shape" not in h and h["main_samples"] == 750
    md = open(tmp_path / "b" / "real-size-latest.md").read()
    assert "| release | TP | config | conc | side | scheduler pid |" in md
    assert "| 0.5.11 | 1 | tree-topk8 | 8 | plugin | 4242 `sglang::scheduler` | 750 (1560) |" in md
    # --previous keeps them beside a run without host profiles; a TP 2 run adds its own
    real_size_report.main(["--out-dir", str(tmp_path / "c"), "--previous", str(tmp_path / "b" / "real-size-latest.json"),
                           paths["plain"]])
    assert json.load(open(tmp_path / "c" / "real-size-latest.json"))["host_profiles"] == s["host_profiles"]
    tp2 = str(tmp_path / "tp2.json")
    json.dump(with_hosts(tp=2), open(tp2, "w"))
    real_size_report.main(["--out-dir", str(tmp_path / "d"), "--previous", str(tmp_path / "b" / "real-size-latest.json"),
                           tp2])
    d = json.load(open(tmp_path / "d" / "real-size-latest.json"))
    assert sorted((h["tp"], h["side"], h["concurrency"]) for h in d["host_profiles"]) == [
        (1, "plugin", 8), (1, "stock", 8), (1, "stock", 32), (2, "plugin", 8), (2, "stock", 8), (2, "stock", 32)]


# ---------------------------------------------------------------------------------------- the device scripts
def test_gpu_bench_unpacks_the_carried_py_spy_wheel(tmp_path):
    """bench/gpu_bench.sh: a .whl/py_spy-*.whl in the repo root puts its py-spy on PATH for serving.py (once; the
    parts of bench/gpu_real_size.sh run it side by side); without the wheel nothing changes."""
    repo = tmp_path / "repo"
    for d in ("bench", "ci", ".whl", "sglang_specv2_fixes"):
        (repo / d).mkdir(parents=True)
    shutil.copy(os.path.join(BENCH, "gpu_bench.sh"), repo / "bench")
    (repo / "ci" / "gpu").mkdir()
    (repo / "ci" / "gpu" / "prepare.sh").write_text(":\n")
    (repo / "sglang_specv2_fixes" / "__main__.py").write_text("")
    (repo / "bench" / "serving.py").write_text("import shutil, sys\nprint('serving.py py-spy:', shutil.which('py-spy'))\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (bindir / "python3").chmod(0o755)
    env = dict(PATH=f"{bindir}:/usr/bin:/bin", PYSPY_DIR=str(tmp_path / "pyspy"), OUT=str(tmp_path / "out"))
    run = lambda: subprocess.run(["bash", "bench/gpu_bench.sh", "0.5.11"], cwd=repo, env=env, capture_output=True,  # noqa: E731
                                 text=True, timeout=60)
    p = run()
    assert p.returncode == 0 and "serving.py py-spy: None" in p.stdout and not (tmp_path / "pyspy").exists()
    with zipfile.ZipFile(repo / ".whl" / "py_spy-0.4.3-py2.py3-none-manylinux1_x86_64.whl", "w") as z:
        z.writestr("py_spy-0.4.3.data/scripts/py-spy", "#!/bin/sh\necho py-spy 0.4.3\n")
        z.writestr("py_spy-0.4.3.dist-info/METADATA", "Name: py-spy\n")
    for _ in range(2):  # unpacked once, then reused
        p = run()
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"serving.py py-spy: {tmp_path}/pyspy/bin/py-spy" in p.stdout and "(py-spy 0.4.3)" in p.stdout
    assert sorted(os.listdir(tmp_path / "pyspy")) == ["bin"] and [x.name for x in tmp_path.iterdir()
                                                                  if x.name.startswith("pyspy.")] == []
