#!/usr/bin/env python3
"""CPU self-test of bench/serving.py and bench/plot.py (no GPU, no network, writes only to a temp dir).

    PYTHONPATH=.venv-cpu/releases/0.5.11 .venv-cpu/bin/python bench/serving_selftest.py [--e2e]

1. The JSONL line the *installed release's* ``bench_serving.benchmark()`` writes (keys read from its AST) through
   ``serving.parse_bench_line``; every flag the harness passes exists in that release's parser; ``--side`` parsing.
2. ``--e2e``: ``serving.main`` against fake in-process SGLang HTTP servers and the real ``sglang.bench_serving``
   in-process: the default pair, a budget cut, ``--profile-steps``, ``--host-profile-seconds`` (a fake ``py-spy``),
   two sides on two releases and a refused side.
3. ``plot.py`` on the results of 2 (or on hand-made results without ``--e2e``).
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

from sglang_specv2_fixes.testing import standins


# each run's fake servers on ports of its own (``port(100)`` .. ``port(600)``): two self-tests on one machine (a CI run
# beside a manual one) must not answer each other's requests; free_ports still skips a port something holds
PORT_BASE = 20000 + 1000 * (os.getpid() % 40)


def port(offset):
    return str(PORT_BASE + int(offset))


# every process this run starts (fake scheduler trees, fake `sglang serve`) inherits this tag, so the "all stopped"
# checks look at this run's processes only, not at another self-test's on the same machine
RUN_TAG = ("SPECV2_SELFTEST_RUN", str(os.getpid()))
os.environ[RUN_TAG[0]] = RUN_TAG[1]


def ours(proc):
    import psutil

    try:
        return proc.environ().get(RUN_TAG[0]) == RUN_TAG[1]
    except psutil.Error:
        return False


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)
    print(f"  ok: {msg}")


# ------------------------------------------------------------------------------- 1. output format
def bench_serving_source():
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("sglang is not importable: run with PYTHONPATH=.venv-cpu/releases/<release>")
    root = list(spec.submodule_search_locations)[0]
    return os.path.join(root, "bench_serving.py"), os.path.join(root, "version.py")


def result_keys(src):
    """Keys of ``result = {...}`` inside ``async def benchmark`` (what one --output-file line holds)."""
    tree = ast.parse(src)
    for fn in ast.walk(tree):
        if isinstance(fn, ast.AsyncFunctionDef) and fn.name == "benchmark":
            for node in ast.walk(fn):
                if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "result" for t in node.targets)
                        and isinstance(node.value, ast.Dict)):
                    return [k.value for k in node.value.keys]
    raise AssertionError("result = {...} not found in benchmark()")


def parser_flags(src):
    flags, datasets = set(), []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--"):
                    flags.add(a.value)
                    if a.value == "--dataset-name":
                        for kw in node.keywords:
                            if kw.arg == "choices":
                                datasets = ast.literal_eval(kw.value)
    return flags, datasets


def test_format():
    path, vpath = bench_serving_source()
    try:
        from importlib import metadata

        ver = metadata.version("sglang")
    except Exception:  # noqa: BLE001
        ver = "?"
    print(f"[selftest] output format of {path} ({ver})")
    src = open(path).read()
    keys = result_keys(src)
    check(all(k in keys for k in serving.METRIC_KEYS), f"the release writes all {len(serving.METRIC_KEYS)} kept metrics "
          f"(missing: {[k for k in serving.METRIC_KEYS if k not in keys]})")
    check("accept_length" in keys and "server_info" in keys, "the release writes accept_length and server_info")
    sample = {}
    for i, k in enumerate(keys):
        sample[k] = 1.5 + i
    sample.update(backend="sglang", dataset_name="random-ids", request_rate=float("inf"), max_concurrency=8, tag="x",
                  completed=40, accept_length=3.25, std_tpot_ms=float("nan"),
                  server_info={"internal_states": [{"avg_spec_accept_length": 3.25, "specv2_fixes": {}}], "version": ver})
    line = json.dumps(sample)  # as bench_serving writes it: json.dumps(result), NaN/Infinity allowed
    p = serving.parse_bench_line(line)
    check(p["completed"] == 40 and p["median_tpot_ms"] == sample["median_tpot_ms"], "metrics parsed")
    check(p["std_tpot_ms"] is None, "NaN becomes None")
    check(p["accept_length_bench"] == 3.25 and p["accept_length_bench_server_info"] == 3.25, "accept length parsed")
    check(p["missing"] == [], "no required key missing")
    p2 = serving.parse_bench_line(json.dumps({k: v for k, v in sample.items() if k != "p99_itl_ms"}))
    check(p2["missing"] == ["p99_itl_ms"], "a missing required key is reported")
    flags, datasets = parser_flags(src)
    a = serving.parse_args(["--out", tempfile.gettempdir()])
    argv = serving.bench_argv("http://127.0.0.1:1", "/m", 8, 16, a, "/tmp/o.jsonl", "t")
    used = [x for x in argv if x.startswith("--")]
    check(all(f in flags for f in used), f"the release's parser defines every flag used ({len(used)}; "
          f"unknown: {[f for f in used if f not in flags]})")
    check("random-ids" in datasets, "random-ids is a dataset choice (no ShareGPT download)")
    rnd = os.path.join(os.path.dirname(path), "benchmark", "datasets", "random.py")
    if os.path.exists(rnd):
        rs = open(rnd).read()
        check('random_sample=(args.dataset_name == "random")' in rs,
              "random-ids samples token ids (only `random` downloads ShareGPT)")


# ------------------------------------------------------------------------------------ 2. fake servers
class FakeSGLang:
    """Just enough of SGLang's HTTP server for bench_serving and the harness."""

    def __init__(self, url, other_args, sink, env):
        from aiohttp import web

        self.web = web
        self.port = int(url.rsplit(":", 1)[1])
        self.side = "stock" if other_args[other_args.index("--specv2-fixes") + 1] == "off" else "plugin"
        # the release the server would import: the first sglang-RELEASE folder on its PYTHONPATH that exists (one
        # that does not: the next entry, at last the harness's own release, as Python would)
        path = [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if os.path.basename(x).startswith("sglang-")]
        self.version = next((os.path.basename(x)[7:] for x in path if os.path.isdir(x)), serving.version("sglang"))
        self.pool = int(other_args[other_args.index("--max-total-tokens") + 1]) + int(env.get("FAKE_KV_EXTRA", 0))
        self.spec = "--speculative-algorithm" in other_args
        self.topk = int(other_args[other_args.index("--speculative-eagle-topk") + 1]) if self.spec else 0
        self.step_tokens = 3 if self.spec else 1
        self.step_s = 0.006 if self.side == "stock" else 0.003
        self.acc = self.fwd = 0
        self.running, self.steps, self.profile = 0, 0.0, None
        self.sink = sink
        self.loop = None
        self.runner = None
        self.stopped = False
        self.failed = None
        self.helper = self.pid = None
        if SCHEDULER_PROCS:
            self.spawn_scheduler()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)
        sink.write(f"fake server {self.side} on {self.port} (spec={self.spec}, sglang {self.version})\nsecond line\n")

    def _serve(self, ready):
        web = self.web
        app = web.Application()
        app.router.add_post("/generate", self.generate)
        app.router.add_get("/server_info", self.server_info)
        app.router.add_post("/set_internal_state", self.set_state)
        app.router.add_get("/v1/models", lambda r: web.json_response({"data": [{"id": "tiny"}]}))
        app.router.add_get("/health", lambda r: web.Response(text="ok"))
        app.router.add_post("/flush_cache", self.flush_cache)
        app.router.add_get("/health_generate", lambda r: web.Response(text="ok"))
        app.router.add_get("/v1/loads", self.loads)
        app.router.add_post("/start_profile", self.start_profile)
        app.router.add_post("/stop_profile", self.stop_profile)
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.runner = web.AppRunner(app, access_log=None)
        try:
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
        except Exception as e:  # noqa: BLE001
            self.failed = f"{type(e).__name__}: {e}"
            ready.set()
            return
        ready.set()
        self.loop.run_forever()

    async def generate(self, request):
        web = self.web
        body = await request.json()
        n = body["sampling_params"]["max_new_tokens"]
        ids = body.get("input_ids") or [7]
        out = [16 + (ids[-1] + 13 * (k + 1)) % 980 for k in range(n)]
        text = lambda m: " ".join(f"t{x}" for x in out[:m])
        if not body.get("stream"):
            await asyncio.sleep(self.step_s * math.ceil(n / self.step_tokens))
            return web.json_response({"text": text(n), "output_ids": out, "meta_info": {"completion_tokens": n}})
        resp = web.StreamResponse()
        await resp.prepare(request)
        done = 0
        self.running += 1
        try:
            while done < n:
                await asyncio.sleep(self.step_s)
                k = min(self.step_tokens, n - done)
                done += k
                self.fwd += 1
                self.acc += k
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
        """SGLang's /start_profile (num_steps, no start_step); the nospec stock fake plays a server without it."""
        if self.side == "stock" and not self.spec:
            return self.web.Response(status=404, text='{"detail":"Not Found"}')
        if self.profile:
            return self.web.Response(status=500, text="Profiling is already in progress. Call /stop_profile first.")
        body = await request.json()
        self.profile = dict(body, start=self.steps, bs=max(1, self.running), id=str(time.time()))
        return self.web.Response(text="Start profiling.\n")

    async def stop_profile(self, request):
        if not self.profile:
            return self.web.Response(status=500, text="Profiling is not in progress. Call /start_profile first.")
        self.write_trace()
        return self.web.Response(text="Stop profiling. This will take some time.\n")

    def write_trace(self):
        """The trace of the steps since the start (SGLang's file name; N - 1 steps when stopped by num_steps), gzipped
        by a thread in two goes as torch's export does, so the harness sees an incomplete file first."""
        p, self.profile = self.profile, None
        n = max(1, min(int(self.steps - p["start"]), int(p["num_steps"]) - 1))
        mode = "TARGET_VERIFY" if self.spec else "DECODE"
        data = json.dumps(synthetic_trace(n, p["bs"], mode, 1e6 * self.step_s, 2400.0)).encode()
        prefix = f"{p['profile_prefix']}-" if p.get("profile_prefix") else ""
        path = os.path.join(p["output_dir"], f"{prefix}{p['id']}-TP-0.trace.json.gz")

        def export():
            os.makedirs(p["output_dir"], exist_ok=True)
            with gzip.open(path, "wb") as f:
                f.write(data[: len(data) // 2])
                f.flush()
                time.sleep(0.3)
                f.write(data[len(data) // 2:])

        threading.Thread(target=export, daemon=True).start()

    async def server_info(self, request):
        st = {"specv2_fixes": {"selection": "auto" if self.side == "plugin" else "off",
                               "fixes": {"tree-drafting": {"state": "applied" if self.side == "plugin" else "disabled"}}}}
        if self.spec and self.fwd:
            st["avg_spec_accept_length"] = self.acc / self.fwd
        return self.web.json_response({
            "speculative_algorithm": "EAGLE3" if self.spec else None, "speculative_eagle_topk": self.topk or None,
            "disable_overlap_schedule": self.side == "stock" and self.topk > 1, "speculative_accept_threshold_single": 1.0,
            "version": self.version, "max_total_num_tokens": self.pool, "flushes": getattr(self, "flushes", 0), "internal_states": [st]})

    async def flush_cache(self, request):
        self.flushes = getattr(self, "flushes", 0) + 1
        return self.web.Response(text="Cache flushed.")

    async def set_state(self, request):
        body = await request.json()
        assert set(body["server_args"]) == {"speculative_accept_threshold_single"}, body
        self.acc = self.fwd = 0
        return self.web.json_response([True])

    def spawn_scheduler(self):
        """A process tree like `sglang serve`'s (``pid``: the server): children titled ``sglang::scheduler`` and
        ``sglang::detokenizer`` (argv[0], as setproctitle leaves /proc/PID/cmdline; ``sleep`` underneath). The nospec
        stock fake's scheduler sleeps 601 s: the fake py-spy refuses it."""
        secs = "601" if self.side == "stock" and not self.spec else "600"
        code = ("import subprocess, sys; kids = [subprocess.Popen([t, sys.argv[2]], executable=sys.argv[1]) for t in "
                "('sglang::detokenizer', 'sglang::scheduler')]; sys.stdin.read()")
        self.helper = subprocess.Popen([sys.executable, "-c", code, shutil.which("sleep"), secs], stdin=subprocess.PIPE)
        self.pid = self.helper.pid

    # Popen-like
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

        async def _down():
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(_down(), self.loop).result(10)
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


def fake_models(d):
    from sglang_specv2_fixes.testing.tiny_models import llama as tiny_models

    paths = {n: os.path.join(d, n) for n in ("target", "eagle3", "eagle")}
    for n, p in paths.items():
        os.makedirs(p, exist_ok=True)
        tiny_models.write_tokenizer(p)
        with open(os.path.join(p, "config.json"), "w") as f:
            json.dump(tiny_models.config("LlamaForCausalLM", 1), f)
    return paths


def install_fakes(d):
    paths = fake_models(os.path.join(d, "models"))
    serving.model_paths = lambda: paths
    serving.prepare_launcher = lambda: None
    serving.launch_process = lambda model, url, other_args, timeout, sink, env: FakeSGLang(url, other_args, sink, env)
    serving.stop_process = lambda proc: proc.stop()


def test_e2e(d):
    print("[selftest] harness end to end against fake servers (real sglang.bench_serving in-process)")
    install_fakes(d)
    out = os.path.join(d, "run1")
    rc = serving.main(["--out", out, "--configs", "nospec,eagle3-topk1,tree-topk16", "--concurrency", "1", "4",
                       "--repeats", "1,eagle3-topk1@4=3", "--point-seconds", "0.6", "--output-len", "32",
                       "--input-len", "16", "--budget-s", "240", "--first-launch-s", "1", "--later-launch-s", "1",
                       "--base-port", port(100), "--greedy-prompts", "4", "--greedy-tokens", "8"])
    check(rc == 0, "serving.main returned 0")
    files = sorted(os.listdir(out))
    check(set(files) <= {"results.json", "results.md", "server.log", *plot.PNG_FILES}, f"only the expected files: {files}")
    r = json.load(open(os.path.join(out, "results.json")))
    check(r["meta"]["complete"] is True and r["meta"]["stop_reason"] is None and r["meta"]["points_failed"] == 0,
          "run complete, no failed point")
    pts = r["configs"]["eagle3-topk1"]["points"]
    check(len(pts) == 2 * (1 + 3), f"eagle3-topk1: 1 pair at c=1 and 3 at c=4 ({len(pts)} points)")
    check(all(p["ok"] for c in r["configs"].values() for p in c["points"]), "every point ok")
    reps4 = [(p["rep"], p["side"], p["order"]) for p in pts if p["concurrency"] == 4]
    check([s for _, s, _ in reps4] == ["plugin", "stock", "stock", "plugin", "plugin", "stock"], f"order alternates: {reps4}")
    p = pts[0]
    check(p["accept_length"] is not None and abs(p["accept_length"] - 3.0) < 0.5, f"accept length per point {p['accept_length']}")
    check(p["accept_reset"] is True, "accept-length counters reset before the point")
    check(abs(p["accept_length_bench"] - p["accept_length"]) < 0.2, "bench_serving's accept length matches /server_info")
    check(r["configs"]["nospec"]["points"][0]["accept_length"] is None, "no accept length without speculation")
    check(r["configs"]["eagle3-topk1"]["greedy"]["identical"] is True, "greedy identity flag")
    check(r["configs"]["eagle3-topk1"]["greedy"]["equals_nospec"] == {"stock": True, "plugin": True}, "greedy vs nospec")
    sd = r["configs"]["tree-topk16"]["sides"]
    check(plot.spec_path(sd["stock"]) == "spec v1 (overlap off)" and plot.spec_path(sd["plugin"]) == "spec v2 (overlap)",
          "spec path per side from /server_info")
    n = r["configs"]["eagle3-topk1"]["num_prompts"]
    check(all(p["num_prompts"] == n[str(p["concurrency"])] for p in pts), f"same num_prompts on both sides {n}")
    rows = plot.summarize(r)
    row = next(x for x in rows if x["config"] == "eagle3-topk1" and x["concurrency"] == 4)
    # arithmetic on the run's own recorded timings, never on how fast this machine ran the fakes (CI's 2 cores are shared)
    at4 = {(p["side"], p["rep"]): p["median_tpot_ms"] for p in pts if p["concurrency"] == 4}
    want = [at4[("plugin", k)] / at4[("stock", k)] for k in range(3)]
    check(row["pairs"] == 3 and row["pair_tpot_ratios"] == want and row["tpot_ratio"] == sorted(want)[1]
          and all(0 < x < math.inf for x in want),
          f"TPOT ratio: the median of the 3 pairs' recorded plugin / stock TPOT ({row['tpot_ratio']:.3f})")
    md = open(os.path.join(out, "results.md")).read()
    check("| eagle3-topk1 | 4 | 3 |" in md and "Per-pair TPOT" in md, "results.md has the ratio table and per-pair ratios")
    log = open(os.path.join(out, "server.log")).read()
    check("[eagle3-topk1/plugin] fake server plugin" in log and "[bench] " in log and "Serving Benchmark Result" in log,
          "server.log: prefixed server lines, [bench] lines and bench_serving's report")
    # the port the run recorded: free_ports moves a pair up by 100 when something else holds one of its ports
    # (CI's ephemeral ports overlap this range), so port(111) is only the usual one
    p_port = r["configs"]["eagle3-topk1"]["sides"]["plugin"]["port"]
    check(log.count(f"fake server plugin on {p_port} ") == 1, f"server lines are not duplicated (port {p_port})")

    print("[selftest] a run cut by --budget-s")
    out2 = os.path.join(d, "run2")
    rc = serving.main(["--out", out2, "--configs", "eagle3-topk1,nospec", "--concurrency", "1", "4", "--repeats", "4",
                       "--point-seconds", "1.5", "--output-len", "32", "--input-len", "16", "--budget-s", "40",
                       "--first-launch-s", "1", "--later-launch-s", "1", "--base-port", port(200)])
    r2 = json.load(open(os.path.join(out2, "results.json")))
    # 16 points of >= 1.5 s plus nospec's pair cannot fit 40 s on any machine; how many pairs fit depends on its speed
    check(rc == 0, "serving.main returned 0 on a budget cut")
    pts2 = r2["configs"]["eagle3-topk1"]["points"]
    check(0 < len(pts2) < 16 and len(pts2) % 2 == 0 and all(p["ok"] for p in pts2),
          f"whole pairs measured before the cut: {len(pts2)} of 16 points")
    check(r2["meta"]["complete"] is False and r2["meta"]["stop_reason"], f"marked incomplete: {r2['meta']['stop_reason']}")
    check(r2["configs"]["nospec"].get("skipped"), f"the config that did not fit is listed as skipped: {r2['configs']['nospec'].get('skipped')}")
    check("INCOMPLETE" in open(os.path.join(out2, "results.md")).read(), "results.md says INCOMPLETE")
    test_profiles(d)
    test_host_profiles(d)
    test_sides(d)
    return os.path.join(out, "results.json")


def test_side_parsing():
    print("[selftest] --side NAME=SELECTION[@RELEASE][,ENV=VAL...]")
    S = serving.parse_side
    check(S("nofix=tree-drafting,radix-overshoot@0.5.11,SGLANG_X=0,Y=a=b") == serving.Side(
        "nofix", "tree-drafting,radix-overshoot", "0.5.11", {"SGLANG_X": "0", "Y": "a=b"}),
        "a selection list, a release and env: env items are the ones with '='")
    check(S("upstream=off@0.5.17") == serving.Side("upstream", "off", "0.5.17", {}) and S("p=auto").release is None,
          "no @RELEASE: the harness's own release")
    def refused(f, *args):
        try:
            f(*args)
        except SystemExit as e:
            return str(e)
    for bad in ("plugin", "=auto", "x=", "x=,A=1", "a/b=auto"):
        check("NAME=SELECTION" in (refused(S, bad) or ""), f"--side {bad!r} refused")
    for argv in (["--side", "a=off"], ["--side", "a=off", "--side", "a=auto"], ["--side", "a=off"] * 3):
        check("exactly two sides" in (refused(serving.parse_args, argv) or ""), f"{argv}: refused (two sides, two names)")
    a = serving.parse_args(["--out", tempfile.gettempdir()])
    check([s.record() for s in a.sides] == [dict(name="stock", selection="off", release=None, env={}),
                                            dict(name="plugin", selection="auto", release=None, env={})],
          "default: stock=off, then plugin=auto")
    a.release_root = "/r"
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(["/repo", "/tmp/specv2-ep-0.5.11", "/r/sglang-0.5.11", "/x"])
    try:
        env = serving.side_env(serving.Side("u", "off", "0.5.17", {"K": "1"}), a, "0.5.11")
        check(env == {"K": "1", "PYTHONPATH": os.pathsep.join(["/repo", "/tmp/specv2-ep-0.5.11", "/r/sglang-0.5.17", "/x"])},
              "@0.5.17: the running release's folder under the release root replaced in place")
        os.environ["PYTHONPATH"] = "/elsewhere/0.5.11"
        check(serving.side_env(serving.Side("u", "off", "0.5.17"), a, "0.5.11")["PYTHONPATH"]
              == os.pathsep.join(["/r/sglang-0.5.17", "/elsewhere/0.5.11"]), "no release folder there: put first")
        check(serving.side_env(serving.Side("p", "auto", "0.5.11"), a, "0.5.11") == {}, "@ the running release: no change")
    finally:
        os.environ.pop("PYTHONPATH") if old is None else os.environ.__setitem__("PYTHONPATH", old)


def test_sides(d):
    """Two custom sides, the second on another release (a folder sglang-0.5.17 under --release-root: the fake server
    reports the release its PYTHONPATH leads to), then a side whose release is not unpacked (refused)."""
    print("[selftest] custom sides: plugin on this release vs upstream on 0.5.17; a refused side")
    cur, root = serving.version("sglang"), os.path.join(d, "releases")
    os.makedirs(os.path.join(root, "sglang-0.5.17"), exist_ok=True)
    args = ["--configs", "eagle3-topk1", "--concurrency", "2", "--num-prompts", "2:4", "--output-len", "16",
            "--input-len", "8", "--budget-s", "200", "--first-launch-s", "1", "--greedy-prompts", "2",
            "--greedy-tokens", "4", "--no-plots", "--release-root", root, "--max-total-tokens", "4096"]
    out = os.path.join(d, "run-sides")
    rc = serving.main(["--out", out, "--base-port", port(700), "--repeats", "3", "--side", f"plugin=auto@{cur}",
                       "--side", "upstream=off@0.5.17", *args])
    r = json.load(open(os.path.join(out, "results.json")))
    cfg = r["configs"]["eagle3-topk1"]
    check(rc == 0 and r["meta"]["complete"] and r["meta"]["points_failed"] == 0 and len(cfg["points"]) == 6,
          "complete run, 3 pairs, no failed point")
    check(r["meta"]["sides"] == [dict(name="plugin", selection="auto", release=cur, env={}),
                                 dict(name="upstream", selection="off", release="0.5.17", env={})]
          and r["meta"]["sglang"] == cur and "bench_serving" in r["meta"]["client"], "meta: both sides, the client's release")
    up, pl = cfg["sides"]["upstream"], cfg["sides"]["plugin"]
    check(up["launch_env"] == {"PYTHONPATH": os.pathsep.join([os.path.join(root, "sglang-0.5.17")]
                                                             + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])}
          and pl["launch_env"] == {}, f"upstream launched with {root}/sglang-0.5.17 first on PYTHONPATH")
    check(up["version"] == "0.5.17" and pl["version"] == cur and not up["error"],
          f"each side's version from /server_info: plugin {pl['version']}, upstream {up['version']}")
    check(cfg["server_args"].count("--max-total-tokens") == 1 and cfg["server_args"][cfg["server_args"].index(
        "--max-total-tokens") + 1] == "4096" and up["max_total_num_tokens"] == pl["max_total_num_tokens"] == 4096
          and plot.pools_differ(cfg) is None, "--max-total-tokens 4096 for both; both pools recorded, equal")
    order = [p["side"] for p in cfg["points"]]
    check(order == ["plugin", "upstream", "upstream", "plugin", "plugin", "upstream"], f"pairs alternate: {order}")
    row = plot.summarize(r)[0]
    tput = {(p["side"], p["rep"]): p["output_throughput"] for p in cfg["points"]}
    want = sorted(tput[("upstream", k)] / tput[("plugin", k)] for k in range(3))[1]
    check(set(row["output_throughput"]) == {"plugin", "upstream"} and row["throughput_ratio"] == want,
          f"ratio = upstream / plugin (the second side over the first): {want:.3f}")
    md = open(os.path.join(out, "results.md")).read()
    check(md.startswith("# Serving benchmark: plugin vs upstream") and "| output tok/s plugin | upstream | upstream / plugin |"
          in md and f"**a** `plugin=auto@{cur}`" in md and "**b** `upstream=off@0.5.17`" in md
          and "| eagle3-topk1 | upstream | 0.5.17 | 4096 |" in md and "KV pools differ" not in md,
          "results.md: side names, ratio direction, versions and pools")
    log = open(os.path.join(out, "server.log")).read()
    check(f"launch: PYTHONPATH={os.path.join(root, 'sglang-0.5.17')}" in log, "server.log: the launch line with its env")

    out = os.path.join(d, "run-refused")
    rc = serving.main(["--out", out, "--base-port", port(800), "--side", "plugin=auto", "--side",
                       "bad=off@0.5.99,FAKE_KV_EXTRA=8", *args])
    r = json.load(open(os.path.join(out, "results.json")))
    cfg = r["configs"]["eagle3-topk1"]
    bad = cfg["sides"]["bad"]
    check(rc == 0 and bad["error"] == f"refused: asked for sglang 0.5.99, the server reports {cur}" and not cfg["points"]
          and "refused" in cfg["skipped"] and r["meta"]["complete"] is False,
          f"a side whose server reports another release is refused, no points: {bad['error']}")
    check(bad["launch_env"]["FAKE_KV_EXTRA"] == "8" and bad["launch_env"]["PYTHONPATH"].startswith(
        os.path.join(root, "sglang-0.5.99")), "the refused side's env is recorded")
    log = open(os.path.join(out, "server.log")).read()
    check("eagle3-topk1/bad: stopping the server (refused" in log and "Traceback" not in log, "stopped, no traceback")
    md = open(os.path.join(out, "results.md")).read()
    check("refused: asked for sglang 0.5.99" in md and "**KV pools differ** between the two servers of: eagle3-topk1 "
          "(4096 vs 4104 tokens)" in md, "results.md: the refusal and the differing pools")


def test_profiles(d):
    """--profile-steps against the fakes: 40 prompts at c=4 outlast 30 steps (stopped by num_steps), eagle3-topk1's 2
    prompts of 8 steps at c=1 do not (the harness's /stop_profile), the nospec stock fake has no /start_profile
    (recorded, not fatal)."""
    print("[selftest] a run with --profile-steps (fake /start_profile writing a synthetic trace)")
    out = os.path.join(d, "run-profile")
    rc = serving.main(["--out", out, "--configs", "nospec,eagle3-topk1", "--concurrency", "1", "4", "--repeats", "1",
                       "--num-prompts", "1:2,4:40", "--output-len", "24", "--input-len", "16", "--budget-s", "240",
                       "--first-launch-s", "1", "--later-launch-s", "1", "--base-port", port(400), "--greedy-prompts", "2",
                       "--greedy-tokens", "4", "--profile-steps", "30", "--keep-traces", "--no-plots"])
    r = json.load(open(os.path.join(out, "results.json")))
    check(rc == 0 and r["meta"]["complete"] and r["meta"]["points_failed"] == 0, "complete run, measured points all ok")
    check(all(len(c["points"]) == 4 for c in r["configs"].values()), "one pair per concurrency, as without profiles")
    prof = {(p["config"], p["side"], p["concurrency"]): p for p in r["profiles"]}
    check(len(r["profiles"]) == 8 and len(prof) == 8, f"one profile per config, side and concurrency ({len(r['profiles'])})")
    bad = [p for p in r["profiles"] if p["error"]]
    check([(p["config"], p["side"]) for p in bad] == [("nospec", "stock")] * 2 and "/start_profile: HTTP 404" in bad[0]["error"],
          f"a server without /start_profile: recorded, not fatal ({bad[0]['error']})")
    p4 = prof[("eagle3-topk1", "plugin", 4)]
    check(p4["steps_seen"]["target"] == 29 and p4["steps_seen"]["request_steps"] == 29 * 4 and "stopped" not in p4,
          f"c=4: stopped by its 30 steps, N - 1 = 29 target steps of 4 requests in the trace ({p4['steps_seen']})")
    check("running" in p4["started"] and p4["graph"]["visible"] and p4["graph"]["kernels"] == 2 * 29,
          f"started once steady ({p4['started']}); graph kernels correlated to cudaGraphLaunch")
    check(abs(p4["busy_fraction"] - 0.8) < 0.02 and abs(prof[("eagle3-topk1", "stock", 4)]["busy_fraction"] - 0.4) < 0.02,
          "busy fractions of the synthetic traces (plugin 80 %, stock 40 %)")
    p1 = prof[("eagle3-topk1", "plugin", 1)]
    check(p1["error"] is None and p1.get("stopped") and 0 < p1["steps_seen"]["target"] < 29,
          f"c=1: the load ended first, /stop_profile wrote the trace ({p1['steps_seen']['target']} steps)")
    check(prof[("nospec", "plugin", 4)]["steps_seen"]["target_modes"] == ["DECODE", "MIXED"], "nospec: DECODE steps")
    traces = sorted(os.listdir(os.path.join(out, "traces")))
    check(len(traces) == 6 and all(t.endswith("-TP-0.trace.json.gz") for t in traces)
          and "eagle3-topk1-plugin-c4-" in " ".join(traces), f"--keep-traces: the 6 traces in OUT/traces ({traces[0]} ...)")
    # the profile's tokens use the accept length measured over its load (test_profile_steps checks the ceiling)
    pl = next(x for x in plot.profile_rows(r) if x["config"] == "eagle3-topk1" and x["concurrency"] == 4)["sides"]["plugin"]
    check(abs(pl["accept_length"] - 3.0) < 0.5 and pl["tokens"] == round(29 * 4 * pl["accept_length"], 1),
          f"profile tokens: 29 steps x 4 requests x the load's accept length {pl['accept_length']:.2f}")
    md = open(os.path.join(out, "results.md")).read()
    check("**ceiling**" in md and "| eagle3-topk1 | 4 | plugin | 29 | 80." in md and "Profiles that failed" in md,
          "results.md: profile tables, the ceiling's definition, the failed profiles")


SCHEDULER_PROCS = False  # FakeSGLang: spawn a scheduler process tree (host profile runs)
# what the fake py-spy writes: the scheduler's main thread (TID = PID) in the plugin's patched code, in a CUDA event
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
    """--host-profile-seconds against the fakes: alone (--profile-steps 0) at c=4 for nospec and eagle3-topk1
    (the nospec stock scheduler refused by the fake py-spy: recorded, not fatal), then before a torch profile
    (--profile-steps 10 --keep-traces) at c=2."""
    global SCHEDULER_PROCS
    print("[selftest] runs with --host-profile-seconds (process trees titled like SGLang's, a fake py-spy on PATH)")
    bindir, log = os.path.join(d, "pyspy-bin"), os.path.join(d, "pyspy.log")
    os.makedirs(bindir, exist_ok=True)
    with open(os.path.join(bindir, "py-spy"), "w") as f:
        f.write(f"#!{sys.executable}\nRAW, LOG = {FAKE_RAW!r}, {log!r}\n{FAKE_PY_SPY}")
    os.chmod(os.path.join(bindir, "py-spy"), 0o755)
    path, SCHEDULER_PROCS = os.environ["PATH"], True
    os.environ["PATH"] = bindir + os.pathsep + path
    try:
        out = os.path.join(d, "run-host")
        rc = serving.main(["--out", out, "--configs", "nospec,eagle3-topk1", "--concurrency", "4", "--num-prompts", "4:8",
                           "--output-len", "24", "--input-len", "16", "--budget-s", "240", "--first-launch-s", "1",
                           "--later-launch-s", "1", "--base-port", port(500), "--greedy-prompts", "2", "--greedy-tokens",
                           "4", "--host-profile-seconds", "1", "--no-plots"])
        r = json.load(open(os.path.join(out, "results.json")))
        check(rc == 0 and r["meta"]["complete"] and r["meta"]["points_failed"] == 0 and "profiles" not in r,
              "complete run with host profiles alone (--profile-steps 0: no GPU profiles)")
        hp = {(h["config"], h["side"]): h for h in r["host_profiles"]}
        check(len(r["host_profiles"]) == 4 and len(hp) == 4, "one host profile per config and side")
        calls = [json.loads(ln) for ln in open(log)]
        check(len(calls) == 3 and all(c["title"] == "sglang::scheduler" and c["argv"][-5:] == ["--rate", "200",
              "--nonblocking", "--idle", "--threads"] for c in calls),
              f"py-spy ran on the sglang::scheduler children (not the detokenizer), default flags: {calls[0]['argv']}")
        bad = hp[("nospec", "stock")]
        check(bad["error"].startswith("py-spy exited 1: Error: Failed to attach") and "ptrace_scope" in bad["error"]
              and bad["title"] == "sglang::scheduler 601", f"a py-spy failure is recorded, not fatal: {bad['error']}")
        h = hp[("eagle3-topk1", "plugin")]
        check(h["error"] is None and h["pid"] in {c["pid"] for c in calls} and h["found"] == "title sglang::scheduler"
              and h["py_spy"] == "Samples: 1100 Errors: 0", f"pid {h['pid']} found by its title; py-spy's summary line")
        check(h["num_prompts"] > 8 and "running" in h["started"] and not h.get("note"),
              f"the load got more prompts ({h['num_prompts']}) and outlasted py-spy, which started once steady")
        check(h["main_thread"] == "MainThread" and h["main_samples"] == 550 and h["samples"] == 1100
              and h["top_self"][0]["function"].endswith("[specv2-fixes tree-drafting])")
              and h["areas"]["patched: tree-drafting"] == round(300 / 550, 4) and h["sync"] == round(200 / 550, 4)
              and h["idle"] == round(50 / 550, 4), "summary of the main thread: patched code, sync-like, idle-like")
        md = open(os.path.join(out, "results.md")).read()
        check("Host profiles (`bench/serving.py --host-profile-seconds S`" in md and "| eagle3-topk1 | 4 | plugin | "
              in md and "Host profiles that failed" in md, "results.md: host profile tables and the failed one")
        before = len(calls)
        out = os.path.join(d, "run-host-gpu")
        rc = serving.main(["--out", out, "--configs", "eagle3-topk1", "--concurrency", "2", "--num-prompts", "2:4",
                           "--output-len", "24", "--input-len", "16", "--budget-s", "240", "--first-launch-s", "1",
                           "--base-port", port(600), "--greedy-prompts", "2", "--greedy-tokens", "4",
                           "--host-profile-seconds", "1", "--profile-steps", "10", "--keep-traces", "--no-plots"])
        r = json.load(open(os.path.join(out, "results.json")))
        check(rc == 0 and len(r["profiles"]) == 2 and len(r["host_profiles"]) == 2
              and not any(x["error"] for x in r["profiles"] + r["host_profiles"]), "GPU and host profiles, both sides")
        calls = [json.loads(ln) for ln in open(log)][before:]
        traces = sorted(os.listdir(os.path.join(out, "traces")))
        starts = sorted(float(t.split("-c2-")[1].split("-TP-")[0]) for t in traces if t.endswith(".trace.json.gz"))
        check(len(starts) == 2 and all(c["end"] <= s for c, s in zip(calls, starts)),
              "py-spy sampled before each /start_profile (the torch profiler slows the host)")
        raws = [t for t in traces if t.endswith(".pyspy.txt.gz")]
        check(raws == ["eagle3-topk1-plugin-c2.pyspy.txt.gz", "eagle3-topk1-stock-c2.pyspy.txt.gz"]
              and gzip.open(os.path.join(out, "traces", raws[0]), "rt").read().startswith("thread (")
              and r["host_profiles"][0]["raw"] == raws[1], f"--keep-traces: the raw files gzipped beside the traces")
    finally:
        os.environ["PATH"], SCHEDULER_PROCS = path, False
    import psutil

    left = [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [""])[0].startswith("sglang::")
            and ours(p)]
    check(not left, f"the fake scheduler trees stopped ({len(left)} left)")


def synthetic_results():
    pts = []
    for c in (1, 8, 32):
        for rep in range(3 if c == 8 else 1):
            for side, f in (("stock", 1.0), ("plugin", 0.97)):
                pts.append(dict(side=side, concurrency=c, rep=rep, order=0, num_prompts=8, ok=True, error=None,
                                output_throughput=100 * c / f, median_tpot_ms=5 * f, p99_tpot_ms=7 * f, median_itl_ms=5 * f,
                                p99_itl_ms=9 * f, median_ttft_ms=20, accept_length=3.5))
    pts.append(dict(side="stock", concurrency=32, rep=1, order=0, num_prompts=8, ok=False, error="synthetic failure"))
    return {"meta": {"date": "synthetic", "device": "none", "sglang": "x", "torch": "y", "complete": False,
                     "stop_reason": "synthetic", "args": {"budget_s": 1}},
            "configs": {"eagle3-topk1": {"points": pts, "greedy": {"identical": True, "n_prompts": 8, "max_new_tokens": 64,
                                                                     "mismatches": []},
                                         "sides": {"stock": {"speculative": True, "overlap_schedule": True, "fixes": {}}}}}}


def test_plot(d, results_json):
    print("[selftest] plot.py")
    if results_json is None:
        results_json = os.path.join(d, "synthetic.json")
        with open(results_json, "w") as f:
            json.dump(synthetic_results(), f)
    out = os.path.join(d, "plots")
    rc = plot.main([results_json, out])
    check(rc == 0 and os.path.exists(os.path.join(out, "results.md")), "results.md regenerated")
    pngs = [os.path.exists(os.path.join(out, p)) for p in plot.PNG_FILES]
    check(all(pngs) if importlib.util.find_spec("matplotlib") else not any(pngs), f"PNGs written where matplotlib is: {pngs}")
    rows = plot.summarize(synthetic_results())
    r8 = next(r for r in rows if r["concurrency"] == 8)
    check(r8["pairs"] == 3 and abs(r8["tpot_ratio"] - 0.97) < 1e-9, "synthetic: TPOT ratio 0.97 over 3 pairs")
    check(abs(r8["throughput_ratio"] - 1 / 0.97) < 1e-9, "synthetic: throughput ratio")
    md = plot.markdown(synthetic_results())
    check("synthetic failure" in md, "failed points are listed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--e2e", action="store_true", help="also run the harness against fake servers")
    a = ap.parse_args()
    test_format()
    test_side_parsing()
    with tempfile.TemporaryDirectory(prefix="specv2-bench-selftest-") as d:
        results_json = None
        if a.e2e:
            standins.use_datasets_shim()
            results_json = test_e2e(d)
        test_plot(d, results_json)
    print("[selftest] all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
