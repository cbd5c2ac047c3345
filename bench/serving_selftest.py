#!/usr/bin/env python3
"""CPU self-test of bench/serving.py and bench/plot.py (no GPU, no network, writes only to a temp dir).

    PYTHONPATH=.venv-cpu/releases/0.5.11 .venv-cpu/bin/python bench/serving_selftest.py [--e2e]

1. The installed release's ``bench_serving``: the JSONL line its ``benchmark()`` writes (keys read from its AST)
   through ``serving_server.parse_bench_line`` (the flags the harness passes: every ``--e2e`` point). ``--side`` parsing.
2. ``--e2e``: ``serving.main`` against fake in-process SGLang HTTP servers (``FakeSGLang``) and the real
   ``sglang.bench_serving`` in-process: the default pair, a budget cut, ``--profile-steps``,
   ``--host-profile-seconds`` (a fake ``py-spy``) before a GPU profile, two sides on two releases and a refused
   side; ``plot.py`` regenerates a run's results.md.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import gzip
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import plot  # bench/plot.py and bench/serving.py: this script's folder
import serving
import serving_server  # bench/serving_server.py: the launcher and process stop the fakes replace

from sglang_specv2_fixes import installed
from sglang_specv2_fixes.testing import standins

# each run's fake servers on ports of its own (``port(100)`` ..): two self-tests on one machine (a CI run beside a
# manual one) must not answer each other's requests; free_ports still skips a port something holds
PORT_BASE = 20000 + 1000 * (os.getpid() % 40)
# every process this run starts inherits this tag: the "all stopped" check looks at this run's processes only
RUN_TAG = ("SPECV2_SELFTEST_RUN", str(os.getpid()))
os.environ[RUN_TAG[0]] = RUN_TAG[1]
SCHEDULER_PROCS = False  # FakeSGLang: spawn a scheduler process tree (host profile runs)


def port(offset):
    return str(PORT_BASE + int(offset))


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)
    print(f"  ok: {msg}")


def run(out, *args):
    """``serving.main`` into ``out`` with small loads (1 s launch estimates, 16-token prompts, 2 greedy prompts of 4
    tokens) plus ``args``: (its exit code, results.json, results.md, server.log)."""
    rc = serving.main(["--out", out, "--input-len", "16", "--first-launch-s", "1", "--later-launch-s", "1",
                       "--greedy-prompts", "2", "--greedy-tokens", "4", *args])
    read = lambda f: open(os.path.join(out, f)).read()  # noqa: E731
    return rc, json.loads(read("results.json")), read("results.md"), read("server.log")


# ------------------------------------------------------------------------------- 1. output format
def test_format():
    root = installed.sglang_root()
    if root is None:
        raise SystemExit("sglang is not importable: run with PYTHONPATH=.venv-cpu/releases/<release>")
    path = os.path.join(root, "bench_serving.py")
    print(f"[selftest] output format of {path} ({installed.version()})")
    tree = ast.parse(open(path).read())
    keys = next([k.value for k in node.value.keys] for fn in ast.walk(tree)
                if isinstance(fn, ast.AsyncFunctionDef) and fn.name == "benchmark" for node in ast.walk(fn)
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "result" for t in node.targets)
                and isinstance(node.value, ast.Dict))
    check(not [k for k in serving_server.METRIC_KEYS if k not in keys] and {"accept_length", "server_info"} <= set(keys),
          f"the release writes the {len(serving_server.METRIC_KEYS)} kept metrics, accept_length and server_info")
    sample = dict({k: 1.5 + i for i, k in enumerate(keys)}, completed=40, accept_length=3.25, std_tpot_ms=float("nan"),
                  server_info={"internal_states": [{"avg_spec_accept_length": 3.25}], "version": "x"})
    p = serving_server.parse_bench_line(json.dumps(sample))  # as bench_serving writes it: json.dumps(result), NaN allowed
    check(p["completed"] == 40 and p["median_tpot_ms"] == sample["median_tpot_ms"] and p["std_tpot_ms"] is None
          and p["accept_length_bench"] == p["accept_length_bench_server_info"] == 3.25 and p["missing"] == [],
          "metrics parsed (NaN -> None), both accept lengths, no required key missing")
    p = serving_server.parse_bench_line(json.dumps({k: v for k, v in sample.items() if k != "p99_itl_ms"}))
    check(p["missing"] == ["p99_itl_ms"], "a missing required key is reported")


def test_side_parsing():
    print("[selftest] --side NAME=SELECTION[@RELEASE][,ENV=VAL...]")
    S = serving.parse_side
    check(S("nofix=tree-drafting,radix-overshoot@0.5.11,SGLANG_X=0,Y=a=b") == serving.Side(
        "nofix", "tree-drafting,radix-overshoot", "0.5.11", {"SGLANG_X": "0", "Y": "a=b"}) and S("p=auto").release is None,
        "a selection list, a release, env (the items with '='); no @RELEASE: the harness's own")

    def refused(f, *args):
        try:
            f(*args)
        except SystemExit as e:
            return str(e)
    check(all("NAME=SELECTION" in (refused(S, x) or "") for x in ("plugin", "=auto", "x=", "x=,A=1", "a/b=auto"))
          and all("exactly two sides" in (refused(serving.parse_args, ["--side", x] * k) or "")
                  for x, k in (("a=off", 1), ("a=off", 3))) and "exactly two sides" in refused(
              serving.parse_args, ["--side", "a=off", "--side", "a=auto"]), "malformed sides refused; two sides, two names")
    a = serving.parse_args([])
    check([s.record() for s in a.sides] == [dict(name="stock", selection="off", release=None, env={}),
                                            dict(name="plugin", selection="auto", release=None, env={})],
          "default: stock=off, then plugin=auto")
    a.release_root, old = "/r", os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(["/repo", "/tmp/specv2-ep-0.5.11", "/r/sglang-0.5.11", "/x"])
    try:
        env = serving.side_env(serving.Side("u", "off", "0.5.17", {"K": "1"}), a, "0.5.11")
        check(env == {"K": "1", "PYTHONPATH": os.pathsep.join(["/repo", "/tmp/specv2-ep-0.5.11", "/r/sglang-0.5.17", "/x"])}
              and serving.side_env(serving.Side("p", "auto", "0.5.11"), a, "0.5.11") == {},
              "@0.5.17: the running release's folder under the release root replaced in place; @ itself: no change")
    finally:
        os.environ.pop("PYTHONPATH") if old is None else os.environ.__setitem__("PYTHONPATH", old)


# ------------------------------------------------------------------------------------ 2. fake servers
class FakeSGLang:
    """Just enough of SGLang's HTTP server for bench_serving and the harness (Popen-like: poll, stop). The plugin's
    server (``--specv2-fixes`` not off) steps twice as fast; stock sends topk > 1 to spec v1 (overlap off); the
    version is the release its PYTHONPATH leads to; ``/start_profile`` writes a synthetic trace after ``num_steps``
    steps (the nospec stock server has no ``/start_profile``); with ``SCHEDULER_PROCS`` a process tree titled like
    SGLang's."""

    def __init__(self, url, other_args, sink, env):
        from aiohttp import web

        arg = lambda f: other_args[other_args.index(f) + 1] if f in other_args else None  # noqa: E731
        self.web, self.port = web, int(url.rsplit(":", 1)[1])
        self.plugin = arg("--specv2-fixes") != "off"
        # the first sglang-RELEASE folder on its PYTHONPATH that exists (else the harness's own release, as Python would)
        path = [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if os.path.basename(x).startswith("sglang-")]
        self.version = next((os.path.basename(x)[7:] for x in path if os.path.isdir(x)), installed.version())
        self.pool = int(arg("--max-total-tokens")) + int(env.get("FAKE_KV_EXTRA", 0))
        self.spec, self.topk = "--speculative-algorithm" in other_args, int(arg("--speculative-eagle-topk") or 0)
        self.step_tokens, self.step_s = (3 if self.spec else 1), (0.003 if self.plugin else 0.006)
        self.acc = self.fwd = self.running = 0
        self.steps, self.profile, self.stopped, self.helper, self.pid = 0.0, None, False, None, None
        if SCHEDULER_PROCS:
            self.spawn_scheduler()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)
        sink.write(f"fake server {'plugin' if self.plugin else 'stock'} on {self.port} (spec={self.spec}, sglang "
                   f"{self.version})\nsecond line\n")

    def _serve(self, ready):
        web = self.web
        app = web.Application()
        ok = lambda r: web.Response(text="ok")  # noqa: E731
        for method, route, handler in (
                ("post", "/generate", self.generate), ("get", "/server_info", self.server_info),
                ("post", "/set_internal_state", self.set_state), ("get", "/health", ok), ("get", "/health_generate", ok),
                ("get", "/v1/models", lambda r: web.json_response({"data": [{"id": "tiny"}]})),
                ("post", "/flush_cache", ok), ("get", "/v1/loads", self.loads),
                ("post", "/start_profile", self.start_profile), ("post", "/stop_profile", self.stop_profile)):
            getattr(app.router, f"add_{method}")(route, handler)
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
        ready.set()
        self.loop.run_forever()

    async def generate(self, request):
        body = await request.json()
        n = body["sampling_params"]["max_new_tokens"]
        ids = body.get("input_ids") or [7]
        out = [16 + (ids[-1] + 13 * (k + 1)) % 980 for k in range(n)]
        text = lambda m: " ".join(f"t{x}" for x in out[:m])  # noqa: E731
        if not body.get("stream"):
            await asyncio.sleep(self.step_s * math.ceil(n / self.step_tokens))
            return self.web.json_response({"text": text(n), "output_ids": out, "meta_info": {"completion_tokens": n}})
        resp = self.web.StreamResponse()
        await resp.prepare(request)
        done = 0
        self.running += 1
        try:
            while done < n:
                await asyncio.sleep(self.step_s)
                k = min(self.step_tokens, n - done)
                done, self.fwd, self.acc = done + k, self.fwd + 1, self.acc + k
                self.steps += 1.0 / self.running  # one scheduler step advances every running request
                if self.profile:
                    self.profile["bs"] = max(self.profile["bs"], self.running)  # the trace's batch size: the largest
                    if self.steps >= self.profile["start"] + self.profile["num_steps"]:
                        self.write_trace()
                chunk = {"text": text(done), "meta_info": {"completion_tokens": done}}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        finally:
            self.running -= 1
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def loads(self, request):
        return self.web.json_response({"loads": [{"dp_rank": 0, "num_running_reqs": self.running, "num_waiting_reqs": 0}]})

    async def start_profile(self, request):
        """SGLang's /start_profile (num_steps, no start_step)."""
        if not (self.plugin or self.spec):
            return self.web.Response(status=404, text='{"detail":"Not Found"}')
        if self.profile:
            return self.web.Response(status=500, text="Profiling is already in progress. Call /stop_profile first.")
        self.profile = dict(await request.json(), start=self.steps, bs=max(1, self.running), id=str(time.time()))
        return self.web.Response(text="Start profiling.\n")

    async def stop_profile(self, request):
        if not self.profile:
            return self.web.Response(status=500, text="Profiling is not in progress. Call /start_profile first.")
        self.write_trace()
        return self.web.Response(text="Stop profiling. This will take some time.\n")

    def write_trace(self):
        """The trace of the steps since the start in SGLang's file name (N - 1 steps when stopped by num_steps); its
        writing in two goes is test_profile_steps'."""
        p, self.profile = self.profile, None
        n = max(1, min(int(self.steps - p["start"]), int(p["num_steps"]) - 1))
        prefix = f"{p['profile_prefix']}-" if p.get("profile_prefix") else ""
        os.makedirs(p["output_dir"], exist_ok=True)
        with gzip.open(os.path.join(p["output_dir"], f"{prefix}{p['id']}-TP-0.trace.json.gz"), "wt") as f:
            json.dump(synthetic_trace(n, p["bs"], "TARGET_VERIFY" if self.spec else "DECODE", 1e6 * self.step_s, 2400.0), f)

    async def server_info(self, request):
        st = {"specv2_fixes": {"selection": "auto" if self.plugin else "off",
                               "fixes": {"tree-drafting": {"state": "applied" if self.plugin else "disabled"}}}}
        if self.spec and self.fwd:
            st["avg_spec_accept_length"] = self.acc / self.fwd
        return self.web.json_response({
            "speculative_algorithm": "EAGLE3" if self.spec else None, "speculative_eagle_topk": self.topk or None,
            "disable_overlap_schedule": not self.plugin and self.topk > 1, "speculative_accept_threshold_single": 1.0,
            "version": self.version, "max_total_num_tokens": self.pool, "internal_states": [st]})

    async def set_state(self, request):
        body = await request.json()
        assert set(body["server_args"]) == {"speculative_accept_threshold_single"}, body
        self.acc = self.fwd = 0
        return self.web.json_response([True])

    def spawn_scheduler(self):
        """A process tree like `sglang serve`'s (``pid``: the server): children titled ``sglang::scheduler`` and
        ``sglang::detokenizer`` (argv[0], as setproctitle leaves /proc/PID/cmdline; ``sleep`` underneath). The nospec
        stock server's scheduler sleeps 601 s: the fake py-spy refuses it."""
        secs = "600" if self.plugin or self.spec else "601"
        code = ("import subprocess, sys; kids = [subprocess.Popen([t, sys.argv[2]], executable=sys.argv[1]) for t in "
                "('sglang::detokenizer', 'sglang::scheduler')]; sys.stdin.read()")
        self.helper = subprocess.Popen([sys.executable, "-c", code, shutil.which("sleep"), secs], stdin=subprocess.PIPE)
        self.pid = self.helper.pid

    def poll(self):
        return 0 if self.stopped else None

    def stop(self):
        if self.stopped:
            return
        self.stopped = True
        if self.helper is not None:
            import psutil

            for k in psutil.Process(self.helper.pid).children(recursive=True):
                k.kill()
            self.helper.kill()
            self.helper.wait(10)
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def synthetic_trace(steps, bs, mode, step_us, gpu_us):
    """A kineto chrome trace of ``steps`` scheduler steps, ``step_us`` apart, ``gpu_us`` of GPU work each: a
    ``step[MODE bs=B]`` span (ModelRunner.forward) launching a CUDA graph whose kernels (gemm, attention) carry the
    cudaGraphLaunch's correlation id, then outside the span a top-k kernel (cudaLaunchKernel) and a device copy."""
    ev, corr, t = [], 100, 1_000_000.0
    for _ in range(steps):
        ev.append(dict(ph="X", cat="user_annotation", name=f"step[{mode} bs={bs}]", pid=1, tid=1, ts=t, dur=0.3 * step_us))
        g = t + 40.0
        for name, share, launch in (("nvjet_tst_192x8_64x4_2x1_v_bz_TNT", 0.6, "cudaGraphLaunch"), ("_fwd_kernel", 0.25, None),
                                    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>", 0.1,
                                     "cudaLaunchKernel"), ("Memcpy DtoD (Device -> Device)", 0.05, "cudaMemcpyAsync")):
            if launch:
                corr += 1
                at = t + 10.0 if launch == "cudaGraphLaunch" else t + 0.5 * step_us
                ev.append(dict(ph="X", cat="cuda_runtime", name=launch, pid=1, tid=1, ts=at, dur=8.0,
                               args={"cbid": 1, "correlation": corr}))
            cat = "gpu_memcpy" if name.startswith("Memcpy") else "kernel"
            ev.append(dict(ph="X", cat=cat, name=name, pid=0, tid=7, ts=g, dur=share * gpu_us,
                           args={"device": 0, "stream": 7, "correlation": corr}))
            g += share * gpu_us
        t += step_us
    return {"schemaVersion": 1, "traceEvents": ev}


def install_fakes(d):
    """serving.py's models and serving_server.py's launcher and process stop replaced: tiny configs and tokenizers in
    ``d``, FakeSGLang."""
    from sglang_specv2_fixes.testing.tiny_models import llama as tiny_models

    paths = {n: os.path.join(d, "models", n) for n in ("target", "eagle3", "eagle")}
    for p in paths.values():
        os.makedirs(p, exist_ok=True)
        tiny_models.write_tokenizer(p)
        with open(os.path.join(p, "config.json"), "w") as f:
            json.dump(tiny_models.config("LlamaForCausalLM", 1), f)
    serving.model_paths = lambda: paths
    serving_server.prepare_launcher = lambda: None
    serving_server.launch_process = lambda model, url, other_args, timeout, sink, env: FakeSGLang(url, other_args, sink, env)
    serving_server.stop_process = lambda proc: proc.stop()


def test_e2e(d):
    print("[selftest] harness end to end against fake servers (real sglang.bench_serving in-process)")
    install_fakes(d)
    out = os.path.join(d, "run1")
    rc, r, md, log = run(out, "--configs", "nospec,eagle3-topk1,tree-topk16", "--concurrency", "1", "4", "--repeats",
                         "1,eagle3-topk1@4=3", "--point-seconds", "0.6", "--output-len", "32", "--budget-s", "240",
                         "--base-port", port(100), "--greedy-prompts", "4", "--greedy-tokens", "8")
    files = sorted(os.listdir(out))
    check(rc == 0 and set(files) <= {"results.json", "results.md", "server.log", *plot.PNG_FILES}
          and r["meta"]["complete"] is True and r["meta"]["stop_reason"] is None and r["meta"]["points_failed"] == 0,
          f"complete run, no failed point, only the expected files: {files}")
    pts = r["configs"]["eagle3-topk1"]["points"]
    at4 = [p for p in pts if p["concurrency"] == 4]
    check(len(pts) == 2 * (1 + 3) and [p["side"] for p in at4] == ["plugin", "stock", "stock", "plugin", "plugin", "stock"],
          "eagle3-topk1: 1 pair at c=1 and 3 at c=4, the order alternating")
    check(all(abs(p["accept_length"] - 3.0) < 0.5 and abs(p["accept_length_bench"] - p["accept_length"]) < 0.2
              for p in pts) and r["configs"]["nospec"]["points"][0]["accept_length"] is None,
          "accept length per point from /server_info (counters reset before it), as bench_serving read it; none "
          "without speculation")
    g = r["configs"]["eagle3-topk1"]["greedy"]
    check(g["identical"] is True and g["equals_nospec"] == {"stock": True, "plugin": True}, "greedy identity, vs nospec")
    sd = r["configs"]["tree-topk16"]["sides"]
    check(plot.spec_path(sd["stock"]) == "spec v1 (overlap off)" and plot.spec_path(sd["plugin"]) == "spec v2 (overlap)",
          "each side's speculative path from its /server_info")
    n = r["configs"]["eagle3-topk1"]["num_prompts"]
    check(all(p["num_prompts"] == n[str(p["concurrency"])] for p in pts), f"same num_prompts on both sides {n}")
    row = next(x for x in plot.summarize(r) if x["config"] == "eagle3-topk1" and x["concurrency"] == 4)
    # arithmetic on the run's own recorded timings, never on how fast this machine ran the fakes (CI's 2 cores are shared)
    tpot = {(p["side"], p["rep"]): p["median_tpot_ms"] for p in at4}
    want = [tpot[("plugin", k)] / tpot[("stock", k)] for k in range(3)]
    check(row["pairs"] == 3 and row["pair_tpot_ratios"] == want and row["tpot_ratio"] == sorted(want)[1],
          f"TPOT ratio: the median of the 3 pairs' recorded plugin / stock TPOT ({row['tpot_ratio']:.3f})")
    check("| eagle3-topk1 | 4 | 3 |" in md and "Per-pair TPOT" in md, "results.md has the ratio table and per-pair ratios")
    # the port the run recorded: free_ports moves a pair up by 100 when something holds one of its ports
    p_port = r["configs"]["eagle3-topk1"]["sides"]["plugin"]["port"]
    check("[eagle3-topk1/plugin] fake server plugin" in log and "[bench] " in log and "Serving Benchmark Result" in log
          and log.count(f"fake server plugin on {p_port} ") == 1,
          "server.log: prefixed server lines (once each), [bench] lines and bench_serving's report")
    again = os.path.join(d, "plots")
    check(plot.main([os.path.join(out, "results.json"), again]) == 0 and open(os.path.join(again, "results.md")).read() == md
          and all(os.path.exists(os.path.join(x, p)) == bool(importlib.util.find_spec("matplotlib"))
                  for x in (out, again) for p in plot.PNG_FILES), "plot.py regenerates results.md; PNGs with matplotlib")

    print("[selftest] a run cut by --budget-s")
    rc, r, md, _ = run(os.path.join(d, "run2"), "--configs", "eagle3-topk1,nospec", "--concurrency", "1", "4", "--repeats",
                       "4", "--point-seconds", "1.5", "--output-len", "32", "--budget-s", "40", "--base-port", port(200))
    # 16 points of >= 1.5 s plus nospec's pair cannot fit 40 s on any machine; how many pairs fit depends on its speed
    pts = r["configs"]["eagle3-topk1"]["points"]
    check(rc == 0 and 0 < len(pts) < 16 and len(pts) % 2 == 0 and all(p["ok"] for p in pts),
          f"whole pairs measured before the cut: {len(pts)} of 16 points")
    check(r["meta"]["complete"] is False and r["meta"]["stop_reason"] and r["configs"]["nospec"].get("skipped")
          and "INCOMPLETE" in md, f"marked incomplete ({r['meta']['stop_reason']}), the config that did not fit skipped")
    test_profiles(d)
    test_host_profiles(d)
    test_sides(d)


def test_profiles(d):
    """--profile-steps: 40 prompts at c=4 outlast 30 steps (stopped by num_steps), eagle3-topk1's 2 prompts of 8 steps
    at c=1 do not (the harness's /stop_profile), the nospec stock server has no /start_profile (recorded, not fatal)."""
    print("[selftest] a run with --profile-steps (fake /start_profile writing a synthetic trace)")
    out = os.path.join(d, "run-profile")
    rc, r, md, _ = run(out, "--configs", "nospec,eagle3-topk1", "--concurrency", "1", "4", "--repeats", "1",
                       "--num-prompts", "1:2,4:40", "--output-len", "24", "--budget-s", "240", "--base-port", port(400),
                       "--profile-steps", "30", "--keep-traces", "--no-plots")
    check(rc == 0 and r["meta"]["complete"] and r["meta"]["points_failed"] == 0
          and all(len(c["points"]) == 4 for c in r["configs"].values()), "complete run, one pair per concurrency, all ok")
    prof = {(p["config"], p["side"], p["concurrency"]): p for p in r["profiles"]}
    bad = [p for p in r["profiles"] if p["error"]]
    check(len(prof) == len(r["profiles"]) == 8 and [(p["config"], p["side"]) for p in bad] == [("nospec", "stock")] * 2
          and "/start_profile: HTTP 404" in bad[0]["error"],
          f"one profile per config, side and concurrency; a server without /start_profile recorded ({bad[0]['error']})")
    p4 = prof[("eagle3-topk1", "plugin", 4)]
    check(p4["steps_seen"]["target"] == 29 and p4["steps_seen"]["request_steps"] == 29 * 4 and "stopped" not in p4
          and "running" in p4["started"] and p4["graph"]["visible"] and p4["graph"]["kernels"] == 2 * 29,
          f"c=4: started once steady, stopped by its 30 steps: 29 target steps of 4 requests ({p4['steps_seen']})")
    check(abs(p4["busy_fraction"] - 0.8) < 0.02 and abs(prof[("eagle3-topk1", "stock", 4)]["busy_fraction"] - 0.4) < 0.02,
          "busy fractions of the synthetic traces (plugin 80 %, stock 40 %)")
    p1 = prof[("eagle3-topk1", "plugin", 1)]
    check(p1["error"] is None and p1.get("stopped") and 0 < p1["steps_seen"]["target"] < 29,
          f"c=1: the load ended first, /stop_profile wrote the trace ({p1['steps_seen']['target']} steps)")
    check(prof[("nospec", "plugin", 4)]["steps_seen"]["target_modes"] == ["DECODE", "MIXED"], "nospec: DECODE steps")
    traces = sorted(os.listdir(os.path.join(out, "traces")))
    check(len(traces) == 6 and all(t.endswith("-TP-0.trace.json.gz") for t in traces)
          and "eagle3-topk1-plugin-c4-" in " ".join(traces), f"--keep-traces: the 6 traces in OUT/traces ({traces[0]} ...)")
    pl = next(x for x in plot.profile_rows(r) if x["config"] == "eagle3-topk1" and x["concurrency"] == 4)["sides"]["plugin"]
    check(abs(pl["accept_length"] - 3.0) < 0.5 and pl["tokens"] == round(29 * 4 * pl["accept_length"], 1),
          f"profile tokens: 29 steps x 4 requests x the load's accept length {pl['accept_length']:.2f}")
    check("**ceiling**" in md and "| eagle3-topk1 | 4 | plugin | 29 | 80." in md and "Profiles that failed" in md,
          "results.md: profile tables, the ceiling's definition, the failed profiles")


# the fake py-spy's samples: the scheduler's main thread (TID = PID) in the plugin's patched code, in a CUDA event
# synchronize and polling zmq; a watchdog thread waiting
FAKE_RAW = """\
thread (PID): MainThread;run_scheduler_process (sglang/srt/managers/scheduler.py:3900);Scheduler.event_loop_overlap \
(sglang/srt/managers/scheduler.py:1100);Scheduler.run_batch (sglang/srt/managers/scheduler.py:2300);\
EAGLEWorkerV2.forward_batch_generation (sglang/srt/speculative/eagle_worker_v2.py [specv2-fixes tree-drafting]:700) 300
thread (PID): MainThread;run_scheduler_process (sglang/srt/managers/scheduler.py:3900);Scheduler.event_loop_overlap \
(sglang/srt/managers/scheduler.py:1100);Scheduler.process_batch_result (sglang/srt/managers/scheduler.py:2400);\
Event.synchronize (torch/cuda/streams.py:225) 200
thread (PID): MainThread;run_scheduler_process (sglang/srt/managers/scheduler.py:3900);Scheduler.event_loop_overlap \
(sglang/srt/managers/scheduler.py:1090);Scheduler.recv_requests (sglang/srt/managers/scheduler.py:1200);\
Poller.poll (zmq/sugar/poll.py:106) 50
thread (4242): watchdog;Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982);Condition.wait \
(threading.py:331) 550
"""
FAKE_PY_SPY = """\
import json, os, sys, time
a = sys.argv[1:]
pid, out, dur = a[a.index("--pid") + 1], a[a.index("--output") + 1], float(a[a.index("--duration") + 1])
title = open(f"/proc/{pid}/cmdline").read().split("\\0")
t0 = time.time()
if a[0] != "record" or "601" in title:
    print("Error: Failed to attach to process: Permission Denied (os error 13)", file=sys.stderr)
    sys.exit(1)
time.sleep(dur)
open(out, "w").write(RAW.replace("PID", pid))
print(f"py-spy> Wrote raw flamegraph data to '{out}'. Samples: 1100 Errors: 0")
with open(LOG, "a") as f:
    f.write(json.dumps(dict(pid=int(pid), title=title[0], start=t0, end=time.time(), argv=a)) + "\\n")
"""


def test_host_profiles(d):
    """--host-profile-seconds before a torch profile (--profile-steps 10) at c=2 for nospec and eagle3-topk1: py-spy on
    the scheduler child, before /start_profile, under a longer load; the nospec stock scheduler is refused by the fake
    py-spy (recorded, not fatal)."""
    global SCHEDULER_PROCS
    print("[selftest] a run with --host-profile-seconds (process trees titled like SGLang's, a fake py-spy on PATH)")
    bindir, log, out = os.path.join(d, "pyspy-bin"), os.path.join(d, "pyspy.log"), os.path.join(d, "run-host")
    os.makedirs(bindir, exist_ok=True)
    with open(os.path.join(bindir, "py-spy"), "w") as f:
        f.write(f"#!{sys.executable}\nRAW, LOG = {FAKE_RAW!r}, {log!r}\n{FAKE_PY_SPY}")
    os.chmod(os.path.join(bindir, "py-spy"), 0o755)
    path, SCHEDULER_PROCS = os.environ["PATH"], True
    os.environ["PATH"] = bindir + os.pathsep + path
    try:
        rc, r, md, _ = run(out, "--configs", "nospec,eagle3-topk1", "--concurrency", "2", "--num-prompts", "2:4",
                           "--output-len", "24", "--budget-s", "240", "--base-port", port(500), "--host-profile-seconds",
                           "1", "--profile-steps", "10", "--keep-traces", "--no-plots")
    finally:
        os.environ["PATH"], SCHEDULER_PROCS = path, False
    hp = {(h["config"], h["side"]): h for h in r["host_profiles"]}
    check(rc == 0 and r["meta"]["complete"] and r["meta"]["points_failed"] == 0 and len(hp) == len(r["host_profiles"]) == 4
          and [(p["config"], p["side"]) for p in r["profiles"] if p["error"]] == [("nospec", "stock")],
          "complete run, a host profile per config and side, GPU profiles (but nospec stock's)")
    calls = {os.path.basename(c["argv"][c["argv"].index("--output") + 1]).split("-c2")[0]: c
             for c in map(json.loads, open(log))}
    check(len(calls) == 3 and all(c["title"] == "sglang::scheduler" and c["argv"][-5:] == [
        "--rate", "200", "--nonblocking", "--idle", "--threads"] for c in calls.values()),
        "py-spy ran on the sglang::scheduler children (not the detokenizer), default flags")
    bad = hp[("nospec", "stock")]
    check(bad["error"].startswith("py-spy exited 1: Error: Failed to attach") and "ptrace_scope" in bad["error"]
          and bad["title"] == "sglang::scheduler 601", f"a py-spy failure is recorded, not fatal: {bad['error']}")
    h = hp[("eagle3-topk1", "plugin")]
    check(h["error"] is None and h["pid"] == calls["eagle3-topk1-plugin"]["pid"] and h["found"] == "title sglang::scheduler"
          and h["py_spy"] == "Samples: 1100 Errors: 0" and h["num_prompts"] > 4 and "running" in h["started"]
          and not h.get("note"), f"pid {h['pid']} found by its title, py-spy's summary line; once steady, under a load "
          f"of more prompts ({h['num_prompts']}) that outlasted py-spy")
    check(h["main_thread"] == "MainThread" and h["main_samples"] == 550 and h["samples"] == 1100
          and h["top_self"][0]["function"].endswith("[specv2-fixes tree-drafting])")
          and h["areas"]["patched: tree-drafting"] == round(300 / 550, 4) and h["sync"] == round(200 / 550, 4)
          and h["idle"] == round(50 / 550, 4), "summary of the main thread: patched code, sync-like, idle-like")
    check("Host profiles (`bench/serving.py --host-profile-seconds S`" in md and "| eagle3-topk1 | 2 | plugin | "
          in md and "Host profiles that failed" in md, "results.md: host profile tables and the failed one")
    traces = sorted(os.listdir(os.path.join(out, "traces")))
    starts = {t.split("-c2-")[0]: float(t.split("-c2-")[1].split("-TP-")[0]) for t in traces if t.endswith(".trace.json.gz")}
    check(len(starts) == 3 and all(calls[k]["end"] <= s for k, s in starts.items()),
          "py-spy sampled before each /start_profile (the torch profiler slows the host)")
    raws = [t for t in traces if t.endswith(".pyspy.txt.gz")]
    check(raws == [f"{k}-c2.pyspy.txt.gz" for k in sorted(calls)] and h["raw"] == "eagle3-topk1-plugin-c2.pyspy.txt.gz"
          and gzip.open(os.path.join(out, "traces", raws[0]), "rt").read().startswith("thread ("),
          "--keep-traces: the raw files gzipped beside the traces")
    import psutil

    def ours(p):
        try:
            return p.environ().get(RUN_TAG[0]) == RUN_TAG[1]
        except psutil.Error:
            return False
    left = [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [""])[0].startswith("sglang::") and ours(p)]
    check(not left, f"the fake scheduler trees stopped ({len(left)} left)")


def test_sides(d):
    """Two custom sides, the second on another release (a folder sglang-0.5.17 under --release-root: the fake server
    reports the release its PYTHONPATH leads to), then a side whose release is not unpacked (refused)."""
    print("[selftest] custom sides: plugin on this release vs upstream on 0.5.17; a refused side")
    cur, root = installed.version(), os.path.join(d, "releases")
    os.makedirs(os.path.join(root, "sglang-0.5.17"), exist_ok=True)
    args = ["--configs", "eagle3-topk1", "--concurrency", "2", "--num-prompts", "2:4", "--output-len", "16",
            "--budget-s", "200", "--no-plots", "--release-root", root, "--max-total-tokens", "4096"]
    rc, r, md, log = run(os.path.join(d, "run-sides"), "--base-port", port(700), "--repeats", "3", "--side",
                         f"plugin=auto@{cur}", "--side", "upstream=off@0.5.17", *args)
    cfg = r["configs"]["eagle3-topk1"]
    check(rc == 0 and r["meta"]["complete"] and r["meta"]["points_failed"] == 0 and len(cfg["points"]) == 6
          and [p["side"] for p in cfg["points"]] == ["plugin", "upstream", "upstream", "plugin", "plugin", "upstream"],
          "complete run, 3 pairs alternating, no failed point")
    check(r["meta"]["sides"] == [dict(name="plugin", selection="auto", release=cur, env={}),
                                 dict(name="upstream", selection="off", release="0.5.17", env={})]
          and r["meta"]["sglang"] == cur and "bench_serving" in r["meta"]["client"], "meta: both sides, the client's release")
    up, pl = cfg["sides"]["upstream"], cfg["sides"]["plugin"]
    check(up["launch_env"] == {"PYTHONPATH": os.pathsep.join([os.path.join(root, "sglang-0.5.17")] + [
        x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])} and pl["launch_env"] == {}
          and f"launch: PYTHONPATH={os.path.join(root, 'sglang-0.5.17')}" in log,
          f"upstream launched (and logged) with {root}/sglang-0.5.17 first on PYTHONPATH")
    check(up["version"] == "0.5.17" and pl["version"] == cur and not up["error"],
          f"each side's version from /server_info: plugin {pl['version']}, upstream {up['version']}")
    check(cfg["server_args"].count("--max-total-tokens") == 1 and cfg["server_args"][cfg["server_args"].index(
        "--max-total-tokens") + 1] == "4096" and up["max_total_num_tokens"] == pl["max_total_num_tokens"] == 4096
          and plot.pools_differ(cfg) is None, "--max-total-tokens 4096 for both; both pools recorded, equal")
    row = plot.summarize(r)[0]
    tput = {(p["side"], p["rep"]): p["output_throughput"] for p in cfg["points"]}
    want = sorted(tput[("upstream", k)] / tput[("plugin", k)] for k in range(3))[1]
    check(set(row["output_throughput"]) == {"plugin", "upstream"} and row["throughput_ratio"] == want,
          f"ratio = upstream / plugin (the second side over the first): {want:.3f}")
    check(md.startswith("# Serving benchmark: plugin vs upstream") and "| output tok/s plugin | upstream | upstream / plugin |"
          in md and f"**a** `plugin=auto@{cur}`" in md and "**b** `upstream=off@0.5.17`" in md
          and "| eagle3-topk1 | upstream | 0.5.17 | 4096 |" in md and "KV pools differ" not in md,
          "results.md: side names, ratio direction, versions and pools")

    rc, r, md, log = run(os.path.join(d, "run-refused"), "--base-port", port(800), "--side", "plugin=auto", "--side",
                         "bad=off@0.5.99,FAKE_KV_EXTRA=8", *args)
    cfg = r["configs"]["eagle3-topk1"]
    bad = cfg["sides"]["bad"]
    check(rc == 0 and bad["error"] == f"refused: asked for sglang 0.5.99, the server reports {cur}" and not cfg["points"]
          and "refused" in cfg["skipped"] and r["meta"]["complete"] is False,
          f"a side whose server reports another release is refused, no points: {bad['error']}")
    check(bad["launch_env"]["FAKE_KV_EXTRA"] == "8" and bad["launch_env"]["PYTHONPATH"].startswith(
        os.path.join(root, "sglang-0.5.99")), "the refused side's env is recorded")
    check("eagle3-topk1/bad: stopping the server (refused" in log and "Traceback" not in log, "stopped, no traceback")
    check("refused: asked for sglang 0.5.99" in md and "**KV pools differ** between the two servers of: eagle3-topk1 "
          "(4096 vs 4104 tokens)" in md, "results.md: the refusal and the differing pools")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--e2e", action="store_true", help="also run the harness against fake servers")
    a = ap.parse_args()
    test_format()
    test_side_parsing()
    if a.e2e:
        standins.use_datasets_shim()
        with tempfile.TemporaryDirectory(prefix="specv2-bench-selftest-") as d:
            test_e2e(d)
    print("[selftest] all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
