#!/usr/bin/env python3
"""Serving benchmark, A/B: two *sides* on one GPU in one run, by default stock SGLang vs the plugin.

    python3 bench/serving.py --out $OUT/bench-0.5.11 [--configs nospec eagle3-topk1 tree-topk8 tree-topk16]
        [--concurrency 1 8 32] [--repeats 1,nospec@8=3,eagle3-topk1@8=3] [--budget-s 520]
        [--side stock=off --side plugin=auto]   # the default pair; bench/gpu_bench.sh prepares a GPU machine
    python3 bench/serving.py --dry-run          # the plan (server and bench_serving commands), launches nothing
    python3 bench/serving.py --real-size ...    # real-size shapes, dummy weights: bench/real_size.py

A side is ``--side NAME=SELECTION[@RELEASE][,ENV=VAL...]``, given twice, baseline ``a`` first; every ratio is b / a
(docs/bench/README.md). Per configuration both servers are started with the registered tests' launcher
(``popen_launch_server``, the tiny models and COMMON flags of ``sglang_specv2_fixes.testing``) and are up together,
measured one at a time: a greedy identity check, a warm-up burst, one calibration request (sizing ``--num-prompts``
to ``--point-seconds``), then per concurrency and repeat one a/b pair, order alternating. A point is one run of
SGLang's own ``sglang.bench_serving`` CLI in this process (``--dataset-name random-ids --request-rate inf
--max-concurrency C --flush-cache``); the accept length is reset before it and read from ``/server_info`` after.
``--profile-steps N`` (bench/profile_steps.py) and ``--host-profile-seconds S`` (bench/host_profile.py) profile each
side under one more load after a configuration's pairs. Outputs in ``--out``: results.json (rewritten after every
point), results.md, serving.png, pairs.png (bench/plot.py), server.log. ``--budget-s`` stops cleanly.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import gzip
import importlib
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import NamedTuple

import host_profile  # bench/host_profile.py: --host-profile-seconds
import plot as report  # bench/plot.py (this script's folder)
import profile_steps  # bench/profile_steps.py: --profile-steps
import real_size  # bench/real_size.py: --real-size mode

from sglang_specv2_fixes import installed
from sglang_specv2_fixes.testing import standins
from sglang_specv2_fixes.testing.config import COMMON, MODELS_DIR, prompts

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name -> (speculative steps, topk, draft tokens) or None, extra server args
CONFIGS = {
    "nospec": dict(spec=None, extra=[], about="no speculation (target only)"),
    "eagle3-topk1": dict(spec=(3, 1, 4), extra=[], about="EAGLE3 chain, 3 steps / topk 1 / 4 tokens"),
    "tree-topk8": dict(spec=(5, 8, 32), extra=["--page-size", "1"],
                       about="EAGLE3 tree, 5 steps / topk 8 / 32 tokens, page size 1 (stock: spec v1 fallback)"),
    "tree-topk16": dict(spec=(5, 16, 64), extra=["--page-size", "1"],
                        about="EAGLE3 tree, 5 steps / topk 16 / 64 tokens, page size 1 (stock: spec v1 fallback)"),
}
TINY_CONFIGS = dict(CONFIGS)  # CONFIGS is the active set: --real-size swaps in real_size.CONFIGS (use_mode)
REAL_SIZE = False  # --real-size (set by parse_args)
DEFAULT_SIDES = [report.side_label(s) for s in report.DEFAULT_SIDES]  # stock=off, plugin=auto
DEFAULT_REPEATS = "1,nospec@8=3,eagle3-topk1@8=3"
BASE_PORT = 12500  # below the ephemeral port range; clear of ci/gpu/bg.py's rows (its slot_ports)
SEED = 1  # bench_serving --seed: the same prompts on both sides
LOG_CAP_BYTES = 12 * 2 ** 20  # server.log: the GPU machine returns files up to 16 MiB
POINT_OVERHEAD_S = 2.5  # planning: a point's cost on top of its load (bench_serving's warm-up request, cache flush)
# what a point keeps from bench_serving's JSONL line (the `result` dict of sglang/bench_serving.py::benchmark)
METRIC_KEYS = (
    "completed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
    "total_throughput", "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
    "median_itl_ms", "p95_itl_ms", "p99_itl_ms", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
    "median_e2e_latency_ms", "p99_e2e_latency_ms", "concurrency", "max_concurrency", "max_output_tokens_per_s",
)
RENAMED = {"concurrency": "achieved_concurrency"}  # a point's "concurrency" is its --max-concurrency
REQUIRED_KEYS = ("completed", "output_throughput", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms")


# ------------------------------------------------------------------------------------------ output
class Log:
    """server.log, the run's one log (capped at LOG_CAP_BYTES: later server output is dropped, [bench] lines kept)."""

    def __init__(self, path):
        self.f, self.lock = open(path, "a", buffering=1, errors="replace"), threading.Lock()
        self.n, self.truncated = os.path.getsize(path), False

    def write(self, s, force=False):
        with self.lock:
            if self.n > LOG_CAP_BYTES and not force:
                if not self.truncated:
                    self.truncated = True
                    self.f.write(f"\n[bench] log cap of {LOG_CAP_BYTES} bytes reached: further server output dropped\n")
                return
            self.f.write(s)
            self.n += len(s)


LOG = None
REAL_STDOUT = sys.stdout


class Sink:
    """sys.stdout / sys.stderr for the whole run (``tag`` None: third-party prints, bench_serving's report, go to the
    log; popen_launch_server's reader threads echo each server line there too, dropped: their tagged sink, one per
    server, already logged it)."""

    encoding = "utf-8"

    def __init__(self, tag=None):
        self.tag = tag

    def write(self, s):
        if LOG is not None and s and self.tag:
            LOG.write("".join(f"[{self.tag}] {ln}\n" for ln in s.rstrip("\n").split("\n")))
        elif LOG is not None and "(_dump)" not in threading.current_thread().name:
            LOG.write(s)
        return len(s)

    def flush(self):
        pass

    def isatty(self):
        return False

    def fileno(self):
        return LOG.f.fileno()


def say(msg):
    line = f"[bench] {msg}"
    print(line, file=REAL_STDOUT, flush=True)
    if LOG is not None:
        LOG.write(line + "\n", force=True)


# ------------------------------------------------------------------------------------- parsing etc.
def parse_list(values, conv=str):
    """Space and / or comma separated values (argparse nargs="+") -> [conv(value)]."""
    return [conv(x) for v in values or [] for x in str(v).split(",") if x.strip()]


def parse_repeats(spec, configs):
    """``N[,CONFIG=N][,CONFIG@C=N][,@C=N]`` -> f(config, concurrency) -> repeats (later rules win)."""
    default, rules = 1, []
    for item in parse_list([spec]):
        if "=" not in item:
            default = int(item)
            continue
        key, n = item.strip().rsplit("=", 1)
        cfg, _, conc = key.partition("@")
        if cfg and cfg not in CONFIGS:
            raise SystemExit(f"--repeats: unknown config {cfg!r} (known: {', '.join(CONFIGS)})")
        rules.append((cfg or None, int(conc) if conc else None, int(n)))

    def repeats(cfg, c):
        r = default
        for rc, cc, n in rules:
            if rc in (None, cfg) and cc in (None, c):
                r = n
        return max(1, r)

    return repeats


class Side(NamedTuple):
    name: str
    selection: str  # the server's --specv2-fixes
    release: str = None  # None: the harness's own release
    env: dict = {}

    def record(self):
        return dict(name=self.name, selection=self.selection, release=self.release, env=dict(self.env))


def parse_side(spec):
    """``NAME=SELECTION[@RELEASE][,ENV=VAL...]`` -> Side (SELECTION may be a comma list of fix names)."""
    name, eq, rest = str(spec).partition("=")
    items = rest.split(",")
    env = dict(x.split("=", 1) for x in items if "=" in x)
    sel, _, release = ",".join(x for x in items if "=" not in x).partition("@")
    if not eq or not name.strip() or not sel.strip() or "/" in name or any(not k.strip() for k in env):
        raise SystemExit(f"--side {spec!r}: NAME=SELECTION[@RELEASE][,ENV=VAL...], e.g. plugin=auto@0.5.11, "
                         "upstream=off@0.5.17, nograph=auto,SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=0")
    return Side(name.strip(), sel.strip(), release.strip() or None, env)


def side_env(side, a, running):
    """What ``side``'s server gets on top of this process's environment: the mode's variables (real size), the
    side's own, and with ``@RELEASE`` (another than ``running``) a PYTHONPATH whose release folder is
    ``--release-root``/sglang-RELEASE (the running release's folder replaced, else put first)."""
    env = dict(real_size.env(a) if REAL_SIZE else {}, **side.env)
    if side.release and side.release != running:
        root, want = os.path.abspath(a.release_root), os.path.join(os.path.abspath(a.release_root), f"sglang-{side.release}")
        path = [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]
        mine = [i for i, x in enumerate(path) if os.path.dirname(os.path.abspath(x)) == root
                and os.path.basename(x.rstrip("/")).startswith("sglang-")]
        path = [want if i in mine else x for i, x in enumerate(path)] if mine else [want] + path
        env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def parse_num_prompts(spec):
    """``C:N,C:N`` -> {C: N}."""
    return {int(c): int(n) for c, _, n in (x.partition(":") for x in parse_list([spec] if spec else []))}


def use_mode(real):
    """Tiny real-weight models (default) or ``--real-size`` (bench/real_size.py): the configuration set."""
    global REAL_SIZE
    REAL_SIZE = bool(real)
    CONFIGS.clear()
    CONFIGS.update(real_size.CONFIGS if real else TINY_CONFIGS)


def model_paths():
    """Build (or reuse) the tiny models exactly as the registered tests do."""
    if REAL_SIZE:
        return real_size.models()
    from sglang_specv2_fixes.testing.tiny_models import llama

    return llama.build_all(MODELS_DIR)


def config_args(name, paths):
    c = CONFIGS[name]
    args = []
    if c["spec"]:  # (steps, topk, draft tokens), or "default": SGLang chooses them
        args += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", paths["eagle3"]]
        if c["spec"] != "default":
            steps, topk, tokens = c["spec"]
            args += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
                     "--speculative-num-draft-tokens", str(tokens)]
    return args + list(c["extra"])


def common_args(a):
    """COMMON (real size: resized, bench/real_size.py) with ``--max-total-tokens N`` when given: both servers share one
    GPU, so both get the same KV pool."""
    base = real_size.common(COMMON, a) if REAL_SIZE else list(COMMON)
    return real_size.replace(base, "--max-total-tokens", [str(a.max_total_tokens)]) if a.max_total_tokens else base


def server_other_args(name, paths, common, a, side=None):
    for flag in CONFIGS[name].get("drop", ()):  # flags the configuration leaves to SGLang (real_size "default")
        common = real_size.replace(common, flag, None)
    own = config_args(name, paths)
    if REAL_SIZE and real_size.invocation(a) == "user":  # page size 1 is SGLang's default: a user passes no flag
        own = real_size.replace(own, "--page-size", None)
    return (common + own + shlex.split(a.server_args)
            + (["--specv2-fixes", side.selection] if side else []))


def bench_argv(url, model, c, n, a, out_file, tag, warmup=1):
    return ["--backend", "sglang", "--base-url", url, "--model", model, "--tokenizer", model,
            "--dataset-name", "random-ids", "--tokenize-prompt", "--random-input-len", str(a.input_len),
            "--random-output-len", str(a.output_len), "--random-range-ratio", "1.0", "--num-prompts", str(n),
            "--max-concurrency", str(c), "--request-rate", "inf", "--seed", str(SEED), "--warmup-requests", str(warmup),
            "--ready-check-timeout-sec", "30", "--flush-cache", "--disable-tqdm", "--output-file", out_file, "--tag", tag]


def _clean(x):
    return None if isinstance(x, float) and not math.isfinite(x) else x


def parse_bench_line(line):
    """One JSONL line written by sglang.bench_serving (``--output-file``) -> the point's metrics.

    Keeps METRIC_KEYS (NaN -> None; ``concurrency``, the achieved mean, as ``achieved_concurrency``), bench_serving's own ``accept_length`` as ``accept_length_bench`` and the
    accept length of the ``server_info`` it embeds; ``missing`` lists REQUIRED_KEYS the line lacks."""
    d = json.loads(line)
    out = {RENAMED.get(k, k): _clean(d.get(k)) for k in METRIC_KEYS}
    out["accept_length_bench"] = _clean(d.get("accept_length"))
    out["accept_length_bench_server_info"] = _clean(server_state(d.get("server_info") or {})[1].get("avg_spec_accept_length"))
    out["missing"] = [k for k in REQUIRED_KEYS if out.get(k) is None]
    return out


def server_state(info):
    """(a ``/server_info`` answer, its first scheduler's internal state); a PD pair's: its decode server's."""
    info = info["decode"][0] if info.get("decode") else info
    return info, (info.get("internal_states") or [{}])[0] or {}


def free_ports(base, n):
    """``n`` consecutive ports from ``base`` that nothing listens on or holds (bumped by 100 while one is taken)."""
    import socket

    def free(port):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
        return True

    for start in range(base, base + 2000, 100):
        if all(free(p) for p in range(start, start + n)):
            return list(range(start, start + n))
    raise RuntimeError(f"no {n} free ports from {base}")


# -------------------------------------------------------------------------------------- the server
def prepare_launcher():
    """Import the launcher (and with it sglang.bench_serving) in the main thread, before two launch threads
    would import it at once (replaced by the CPU self-test)."""
    import sglang.bench_serving  # noqa: F401
    import sglang.srt.utils  # noqa: F401
    import sglang.test.test_utils  # noqa: F401


def launch_process(model, url, other_args, timeout, sink, env):
    """The registered tests' launcher, ``env`` the server's whole environment; returns the Popen of `sglang serve`
    (replaced by the CPU self-test)."""
    from sglang.test.test_utils import popen_launch_server

    return popen_launch_server(model, url, timeout=timeout, other_args=other_args, return_stdout_stderr=(sink, sink),
                               env=env)


def stop_process(proc):
    """SGLang's kill_process_tree, then wait for the tree (replaced by the CPU self-test)."""
    import psutil
    from sglang.srt.utils import kill_process_tree

    if proc is None:
        return
    try:
        procs = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        procs = []
    kill_process_tree(proc.pid)
    psutil.wait_procs(procs, timeout=30)
    try:
        proc.wait(timeout=10)
    except Exception:  # noqa: BLE001
        pass


class Server:
    def __init__(self, config, side, port, model, other_args, env=None):
        """``side``: its name; ``other_args`` with its ``--specv2-fixes``; ``env``: its variables (side_env)."""
        self.config, self.side, self.port, self.model, self.env = config, side, port, model, env or {}
        self.url = f"http://127.0.0.1:{port}"
        # a fixed torch.distributed port (HTTP port + 200, clear of every server port of this run): SGLang's default
        # get_free_port() can race with the other servers of a run (seen in the registered matrix)
        self.other_args = list(other_args) + ["--nccl-port", str(port + 200)]
        self.proc = self.error = self.launch_s = self.killed_reason = None
        self.lock = threading.Lock()

    @property
    def tag(self):
        return f"{self.config}/{self.side}"

    def command(self):
        return [f"{k}={v}" for k, v in self.env.items()] + ["sglang", "serve", "--model-path", self.model,
                                                            *self.other_args, "--device", "cuda", "--host", "127.0.0.1",
                                                            "--port", str(self.port)]

    def start(self, timeout):
        t0 = time.time()
        if LOG is not None:
            LOG.write(f"\n===== [{self.tag}] launch: {shlex.join(self.command())}\n", force=True)
        try:
            self.proc = launch_process(self.model, self.url, self.other_args, timeout, Sink(self.tag),
                                       dict(os.environ, **self.env))
        except BaseException as e:  # noqa: BLE001 - a failed launch is a result
            self.error = f"launch failed: {type(e).__name__}: {e}"
        self.launch_s = round(time.time() - t0, 1)
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None and self.killed_reason is None

    def kill(self, reason):
        with self.lock:
            if self.proc is not None and self.killed_reason is None:
                self.killed_reason = reason
                say(f"{self.tag}: stopping the server ({reason})")
                stop_process(self.proc)

    def stop(self):
        with self.lock:
            if self.proc is not None:
                stop_process(self.proc)
                self.proc = None

    def get(self, path, timeout=30, payload=None):
        """GET ``path`` (POST with a JSON ``payload``): the JSON answer; an HTTP error raises."""
        import requests

        r = requests.request("POST" if payload is not None else "GET", self.url + path, json=payload, timeout=timeout)
        r.raise_for_status()
        return r.json()

    def generate(self, input_ids, max_new_tokens):
        return self.get("/generate", 60, {"input_ids": input_ids, "sampling_params": {
            "temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}})

    def facts(self):
        info, st = server_state(self.get("/server_info"))
        fx = st.get("specv2_fixes") or info.get("specv2_fixes") or {}
        keys = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens", "page_size", "cuda_graph_max_bs", "attention_backend",
                "mem_fraction_static", "sleep_on_idle", "disable_overlap_schedule")
        return dict(
            version=info.get("version"), max_total_num_tokens=info.get("max_total_num_tokens"),
            speculative=bool(info.get("speculative_algorithm")),
            overlap_schedule=not info.get("disable_overlap_schedule", False),
            fixes={k: v.get("state") for k, v in (fx.get("fixes") or {}).items()},
            fixes_selection=fx.get("selection"),
            server={k: info.get(k) for k in keys},
            accept_threshold_single=info.get("speculative_accept_threshold_single"),
        )

    def reset_accept_length(self, threshold):
        """Zero the scheduler's accept-length counters (set_internal_state resets them on any accepted update;
        the value written is the server's own, so nothing changes): True, False, or "failed: why"."""
        if threshold is None:
            return False
        try:
            res = self.get("/set_internal_state", 60, {"server_args": {"speculative_accept_threshold_single": threshold}})
        except Exception as e:  # noqa: BLE001
            return f"failed: {e}"
        return bool(res) and all(bool(x) for x in (res if isinstance(res, list) else [res]))

    def accept_length(self):
        return _clean(server_state(self.get("/server_info"))[1].get("avg_spec_accept_length"))


# ------------------------------------------------------------------------------------ bench_serving
def run_bench(argv):
    """One sglang.bench_serving run through its own CLI, in this process (a point's time limit stops its server);
    raises on failure."""
    import runpy
    import warnings

    old = sys.argv
    sys.argv = ["sglang.bench_serving", *argv]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: module already imported by the launcher
            runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=False)
    except SystemExit as e:
        if e.code not in (None, 0):
            raise RuntimeError(f"bench_serving exited with {e.code}") from None
    finally:
        sys.argv = old


class Load(threading.Thread):
    """One ``run_bench(argv)`` against ``srv`` in a thread (``error`` once it ended); the server is stopped when the
    load outlasts ``limit`` seconds (``what``: the reason's subject)."""

    def __init__(self, srv, argv, limit, what):
        super().__init__(name=f"load {srv.tag}", daemon=True)
        self.argv, self.error = argv, None
        self.timer = threading.Timer(limit, lambda: srv.kill(f"{what} over its {limit:.0f}s limit"))
        self.timer.daemon = True

    def run(self):
        self.timer.start()
        try:
            run_bench(self.argv)
        except BaseException as e:  # noqa: BLE001 - a failed load is a result
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.timer.cancel()


class Harness:
    def __init__(self, a):
        self.a, self.t0, self.launch_est = a, time.monotonic(), a.first_launch_s
        self.deadline = self.t0 + a.budget_s
        self.live, self.stop_reason, self.greedy_ref, self.later_launches, self.results = set(), None, {}, [], None
        self.tmp = tempfile.mkdtemp(prefix="specv2-bench-")
        self.repeats, self.fixed_n = parse_repeats(a.repeats, a.configs), parse_num_prompts(a.num_prompts)

    def left(self):
        return self.deadline - time.monotonic()

    def limit(self, est):
        """A load's time limit: 5 x its estimate ``est``, at least 60 s, within the budget."""
        return max(5.0, min(max(60.0, 5 * est), self.left() - 5))

    # -------------------------------------------------------------------- bookkeeping
    def save(self):
        r = self.results
        r["meta"]["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        r["meta"]["stop_reason"] = self.stop_reason
        path = os.path.join(self.a.out, "results.json")
        with open(path + ".tmp", "w") as f:
            json.dump(r, f, indent=1)
        os.replace(path + ".tmp", path)
        try:
            report.write_markdown(r, self.a.out)
        except Exception:  # noqa: BLE001 - never lose a run to the report
            say("results.md failed: " + traceback.format_exc().splitlines()[-1])

    def watchdog(self):
        while self.left() > 0:
            time.sleep(min(self.left(), 1.0))
        self.stop_reason = self.stop_reason or "budget"
        for srv in list(self.live):
            srv.kill("wall-clock budget reached")

    # -------------------------------------------------------------------- per config
    def launch_pair(self, name, paths, common, port):
        ports = free_ports(port, 2)
        servers = {s.name: Server(name, s.name, ports[k], paths["target"], server_other_args(name, paths, common, self.a, s),
                                  side_env(s, self.a, self.results["meta"]["sglang"])) for k, s in enumerate(self.a.sides)}
        timeout = max(30, min(self.a.launch_timeout, self.left() - 20))
        say(f"{name}: launching the {' and '.join(servers)} servers together (timeout {timeout:.0f}s; ~{self.launch_est:.0f}s expected)")
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            list(ex.map(lambda s: s.start(timeout), servers.values()))
        for s in servers.values():
            if s.proc is not None:
                self.live.add(s)
        wall = time.time() - t0
        say(f"{name}: launched in {wall:.0f}s: " + ", ".join(
            f"{s.side} {'up' if s.error is None else s.error[:200]} ({s.launch_s}s)" for s in servers.values()))
        return servers, wall

    def greedy_check(self, name, servers):
        ps = prompts(self.a.greedy_prompts, seed=7)
        outs = {}
        g = dict(n_prompts=len(ps), max_new_tokens=self.a.greedy_tokens, identical=None, mismatches=None, error=None)
        for side, srv in servers.items():
            if not srv.alive():
                continue
            try:
                with concurrent.futures.ThreadPoolExecutor(len(ps)) as ex:
                    outs[side] = list(ex.map(lambda p: srv.generate(p, self.a.greedy_tokens)["output_ids"], ps))
            except Exception as e:  # noqa: BLE001
                g["error"] = f"{side}: {type(e).__name__}: {e}"
        if len(outs) == 2:
            xs, ys = outs.values()
            g["mismatches"] = [i for i, (x, y) in enumerate(zip(xs, ys)) if x != y]
            g["identical"] = not g["mismatches"]
            for i in g["mismatches"][:1]:
                g["first_diff"] = dict(prompt=i, token=next((k for k, (u, v) in enumerate(zip(xs[i], ys[i])) if u != v),
                                                            min(len(xs[i]), len(ys[i]))))
        base = self.a.sides[0].name
        if name == "nospec":
            self.greedy_ref = dict(outs)
        elif self.greedy_ref.get(base) is not None:
            g["equals_nospec"] = {s: outs[s] == self.greedy_ref[base] for s in outs}
        say(f"{name}: greedy {' = '.join(servers)}: {g['identical']} ({len(ps)} prompts x {self.a.greedy_tokens} tokens)"
            + (f"; vs nospec: {g['equals_nospec']}" if "equals_nospec" in g else "") + (f"; {g['error']}" if g["error"] else ""))
        return g

    def warm_and_calibrate(self, servers, concs):
        n = max(concs)
        ids = [[16 + (i * 31 + j) % 980 for j in range(self.a.input_len)] for i in range(n)]
        lens = [8 + (i * 7) % 57 for i in range(n)]  # staggered ends: batch sizes n..1 all run once
        times = {}
        for side, srv in servers.items():
            if not srv.alive():
                continue
            try:
                with concurrent.futures.ThreadPoolExecutor(n) as ex:
                    list(ex.map(lambda k: srv.generate(ids[k], lens[k]), range(n)))
                # the faster of two timed requests: a first one can still meet a lazy JIT (0.5.17 on flashinfer
                # can take seconds), and a slow calibration shrinks every point to one wave
                runs = []
                for _ in range(2):
                    t0 = time.perf_counter()
                    srv.generate(ids[0], self.a.output_len)
                    runs.append(time.perf_counter() - t0)
                times[side] = min(runs)
            except Exception as e:  # noqa: BLE001
                say(f"{srv.tag}: warm-up failed: {type(e).__name__}: {e}")
        return times

    def num_prompts(self, c, t1):
        if c in self.fixed_n:
            return self.fixed_n[c]
        rounds = max(1, min(64, round(self.a.point_seconds / self.wave_s(c, t1))))
        return max(3 if c == 1 else c, c * rounds)

    def wave_s(self, c, t1):
        return max(t1, 0.05) * (1 + c / 12)  # larger batches step slower; conservative

    def est_point(self, c, n, t1):
        return math.ceil(n / c) * self.wave_s(c, t1) + POINT_OVERHEAD_S

    def start_load(self, name, srv, c, n, label, out_file, limit, warmup=1):
        """``Load`` of ``n`` prompts at concurrency ``c`` on ``srv``, logged, started."""
        argv = bench_argv(srv.url, srv.model, c, n, self.a, out_file, f"{name}/{srv.side}/c{c}/{label}", warmup)
        LOG.write(f"\n===== [{srv.tag}] c={c} {label}: python3 -m sglang.bench_serving {shlex.join(argv)}\n", force=True)
        load = Load(srv, argv, limit, "point" if warmup else "profile")
        load.start()
        return load

    def run_point(self, name, srv, c, rep, order, n, limit, threshold):
        p = dict(side=srv.side, concurrency=c, rep=rep, order=order, num_prompts=n, ok=False, error=None)
        if not srv.alive():
            p["error"] = srv.error or srv.killed_reason or "server not running"
            return p
        spec = CONFIGS[name]["spec"] is not None
        p["accept_reset"] = srv.reset_accept_length(threshold) if spec else None
        out_file = os.path.join(self.tmp, f"{name}-{srv.side}-c{c}-r{rep}.jsonl")
        t0 = time.time()
        load = self.start_load(name, srv, c, n, f"r{rep}", out_file, limit)
        load.join()
        p["error"], p["wall_s"] = load.error, round(time.time() - t0, 2)
        try:
            with open(out_file) as f:
                p.update(parse_bench_line([ln for ln in f if ln.strip()][-1]))
        except Exception as e:  # noqa: BLE001
            p["error"] = p["error"] or f"no bench_serving result: {type(e).__name__}: {e}"
        p["accept_length"] = None
        if spec and srv.alive():
            try:
                p["accept_length"] = srv.accept_length()
            except Exception as e:  # noqa: BLE001
                p["error"] = p["error"] or f"server_info: {e}"
        if p["error"] is None and (p.get("completed") != n or p.get("missing")):
            p["error"] = f"completed {p.get('completed')} of {n}; missing {p.get('missing')}"
        p["error"] = p["error"] or srv.killed_reason
        p["ok"] = p["error"] is None
        return p

    # ------------------------------------------------ GPU / host profiles (--profile-steps, --host-profile-seconds)
    def host_load(self, c, t1):
        """(prompts, seconds) added to a profile's load so that it outlasts the host profile: waves of ``c`` requests
        for S + 4 s at an optimistic wave time, ``t1`` * (1 + c / 32) (real size, 8B on an H100: stock's c=32 waves
        take 2.2 x its c=1 ones), the plugin's faster waves covered by the load's own prompts; seconds: that plus one
        wave (the rounding)."""
        s = self.a.host_profile_seconds
        if not s:
            return 0, 0.0
        wave = max(t1, 0.05) * (1 + c / 32)
        waves = math.ceil((s + 4) / wave)
        return c * waves, (waves + 1) * wave

    def est_profile(self, c, n, t1):
        a = self.a
        return (self.est_point(c, n, t1) + (profile_steps.EXTRA_S if a.profile_steps else 0)
                + (self.host_load(c, t1)[1] + host_profile.EXTRA_S if a.host_profile_seconds else 0))

    def later_configs_s(self, name, t1):
        """Expected time of the configurations after ``name`` (launch, warm-up, pairs, profiles): what this
        configuration's profiles leave free (their calibration is not known yet: ``t1`` is this one's)."""
        a, total = self.a, 0.0
        for other in a.configs[a.configs.index(name) + 1:]:
            total += self.launch_est + 25
            for c in a.concurrency:
                n = self.num_prompts(c, t1)
                total += 2 * self.repeats(other, c) * self.est_point(c, n, t1)
                total += 2 * self.est_profile(c, n, t1) if a.profile_steps or a.host_profile_seconds else 0
        return total

    def wait_steady(self, srv, c, load, timeout):
        """Until the load has ``c`` requests running and none waiting (``GET /v1/loads``: the scheduler's running
        batch and waiting queue), at most ``timeout`` s; returns what was seen, for the record."""
        t0, seen = time.monotonic(), None
        while load.is_alive() and time.monotonic() - t0 < timeout:
            try:
                loads = srv.get("/v1/loads?include=core", timeout=10)["loads"]
            except Exception as e:  # noqa: BLE001
                time.sleep(2.0)
                return f"no /v1/loads ({type(e).__name__}): started 2 s into the load"
            seen = (sum(x["num_running_reqs"] for x in loads), sum(x["num_waiting_reqs"] for x in loads))
            if seen[0] >= c and seen[1] == 0:
                return f"{seen[0]} running, 0 waiting, {time.monotonic() - t0:.1f}s into the load"
            time.sleep(0.05)
        return f"not steady after {time.monotonic() - t0:.1f}s (running, waiting last seen: {seen})"

    def profile_entries(self, name, side, c, n, extra=0, error=None):
        """The GPU and host profile entries asked for (None where not) of a configuration, side and concurrency."""
        a, spec = self.a, CONFIGS[name]["spec"] is not None
        return (dict(config=name, side=side, concurrency=c, steps=a.profile_steps, activities=a.profile_activities,
                     num_prompts=n, speculative=spec, error=error) if a.profile_steps else None,
                dict(config=name, side=side, concurrency=c, seconds=a.host_profile_seconds, num_prompts=n + extra,
                     pid=None, title=None, error=error) if a.host_profile_seconds else None)

    def profile_point(self, name, srv, c, n, est, threshold, extra=0):
        """One GPU and / or host profile under one load: bench_serving's load (``n`` + ``extra`` prompts) in a thread;
        once it is steady the host profile (``host_point``), then the GPU profile (bench/profile_steps.py):
        ``/start_profile`` of ``--profile-steps`` steps, the trace awaited (``/stop_profile`` if the load ends first),
        summarized and deleted (or moved to OUT/traces). Returns (GPU entry, host entry), None where not asked for.
        Never raises: failures are the entries' ``error``."""
        a = self.a
        p, h = self.profile_entries(name, srv.side, c, n, extra)
        entries = [x for x in (p, h) if x is not None]
        if not srv.alive():
            for x in entries:
                x["error"] = srv.error or srv.killed_reason or "server not running"
            return p, h
        out_dir = os.path.join(self.tmp, "profiles", f"{name}-{srv.side}-c{c}")
        os.makedirs(out_dir, exist_ok=True)
        if CONFIGS[name]["spec"] is not None:
            srv.reset_accept_length(threshold)  # failed: the accept length is then the server's running mean
        limit, t0, got = self.limit(est), time.time(), None
        what = ", ".join(([f"{a.host_profile_seconds}s of py-spy"] if h else []) + ([f"{a.profile_steps} steps"] if p else []))
        load = self.start_load(name, srv, c, n + extra, f"profile ({what})", os.path.join(out_dir, "load.jsonl"),
                               limit, warmup=0)
        try:
            started = self.wait_steady(srv, c, load, min(30.0, limit / 2))
            for x in entries:
                x["started"] = started
            if h is not None:
                self.host_point(srv, h, out_dir, load)
            if p is not None:
                profile_steps.start(srv.url, out_dir, a.profile_steps, f"{name}-{srv.side}-c{c}", a.profile_activities)
                p["start_s"] = round(time.time() - t0, 2)
                got = profile_steps.wait_trace(out_dir, limit, keep_waiting=load.is_alive)
                if got is None:
                    p["stopped"] = "the load ended before the last step: /stop_profile"
                    try:
                        profile_steps.stop(srv.url)
                    except RuntimeError as e:  # it reached its steps as the load ended: its trace is on the way
                        if "not in progress" not in str(e):
                            raise
                        p["stopped"] = "the load ended as the profile reached its last step"
                    got = profile_steps.wait_trace(out_dir, 60)
        except Exception as e:  # noqa: BLE001
            for x in entries:
                x["error"] = x["error"] or f"{type(e).__name__}: {e}"
        finally:
            load.join(max(1.0, limit - (time.time() - t0)))
        for x in entries:
            x["load_error"] = load.error
        if p is not None:
            self.gpu_profile_result(srv, p, got, t0)
        shutil.rmtree(out_dir, ignore_errors=True)
        for x in entries:
            x["error"] = x["error"] or srv.killed_reason
        return p, h

    def gpu_profile_result(self, srv, p, got, t0):
        """Into GPU profile entry ``p``: its wall time, the accept length over its load, the summary of the trace
        ``got`` (``profile_steps.wait_trace``'s result, None: no trace), which moves to OUT/traces with
        ``--keep-traces``."""
        a = self.a
        p["wall_s"] = round(time.time() - t0, 2)
        if p["speculative"] and srv.alive():
            try:
                p["accept_length"] = srv.accept_length()
            except Exception:  # noqa: BLE001
                p["accept_length"] = None
        if got is not None:
            path, trace, files = got
            try:
                p.update(profile_steps.summarize_trace(trace))
            except Exception as e:  # noqa: BLE001
                p["error"] = p["error"] or f"summary: {type(e).__name__}: {e}"
            p["trace"], p["trace_files"] = os.path.basename(path), len(files)
            if a.keep_traces:
                os.makedirs(os.path.join(a.out, "traces"), exist_ok=True)
                for f in files:
                    os.replace(f, os.path.join(a.out, "traces", os.path.basename(f)))
        elif p["error"] is None:
            p["error"] = "no trace written"

    def host_point(self, srv, h, out_dir, load):
        """``--host-profile-seconds``: py-spy (``--py-spy``) samples ``srv``'s scheduler process while ``load`` runs
        (bench/host_profile.py: ``find_scheduler``, ``record``, ``summarize`` with the installed source lines) into
        ``h``; the raw file deleted, or gzipped into OUT/traces (``--keep-traces``). Never raises."""
        a = self.a
        raw = os.path.join(out_dir, f"{srv.config}-{srv.side}-c{h['concurrency']}.pyspy.txt")
        t0 = time.time()
        try:
            h["pid"], h["title"], h["found"] = host_profile.find_scheduler(srv.proc.pid)
            exe = shutil.which(a.py_spy)
            if exe is None:
                raise RuntimeError(f"py-spy not found ({a.py_spy!r}; --py-spy PATH, or carry .whl/py_spy-*.whl for "
                                   "bench/gpu_bench.sh)")
            h["py_spy_args"] = a.host_profile_args
            h["py_spy"] = host_profile.record(exe, h["pid"], a.host_profile_seconds, raw, a.host_profile_args)[1]
            if not load.is_alive():
                h["note"] = "the load ended before py-spy did: the last samples are of a server running down"
            h.update(host_profile.summarize(host_profile.load(raw), source=host_profile.source_line))
            if a.keep_traces:
                os.makedirs(os.path.join(a.out, "traces"), exist_ok=True)
                h["raw"] = os.path.basename(raw) + ".gz"
                with open(raw, "rb") as f, gzip.open(os.path.join(a.out, "traces", h["raw"]), "wb") as g:
                    shutil.copyfileobj(f, g)
        except Exception as e:  # noqa: BLE001
            h["error"] = str(e) if isinstance(e, RuntimeError) else f"{type(e).__name__}: {e}"
        h["wall_s"] = round(time.time() - t0, 2)
        if os.path.exists(raw):
            os.remove(raw)

    def profile_config(self, name, servers, threshold, t1):
        """``--profile-steps`` / ``--host-profile-seconds``: after the configuration's pairs, one load per concurrency
        and side with its profiles, while the budget keeps the later configurations' expected time
        free (side a first); appended to ``results["profiles"]`` / ``results["host_profiles"]``."""
        a = self.a
        reserve = self.later_configs_s(name, t1)
        for c in a.concurrency:
            n = self.results["configs"][name]["num_prompts"].get(str(c)) or self.num_prompts(c, t1)
            for side, srv in servers.items():
                est = self.est_profile(c, n, t1)
                if self.left() < est + reserve + 10:
                    p, h = self.profile_entries(name, side, c, n, error=f"budget: ~{est:.0f}s needed, {self.left():.0f}s "
                                                f"left, {reserve:.0f}s kept for later configurations")
                else:
                    p, h = self.profile_point(name, srv, c, n, est, threshold, self.host_load(c, t1)[0])
                if h is not None:
                    self.results["host_profiles"].append(h)
                    say(f"{name}/{side} c={c} host profile: " + (
                        f"{h.get('main_samples')} samples of {h.get('main_thread')} (pid {h['pid']} {h['title']}), "
                        f"idle-like {report._pct(h.get('idle'))}%, CUDA-sync-like {report._pct(h.get('sync'))}%; top self: "
                        + ", ".join(f"{x['function']} {report._pct(x['share'])}%" for x in (h.get("top_self") or [])[:3])
                        if h["error"] is None else f"FAILED: {h['error']}"))
                if p is not None:
                    self.results["profiles"].append(p)
                    say(f"{name}/{side} c={c} profile: " + (
                        f"{(p.get('steps_seen') or {}).get('target', '?')} steps seen, GPU busy {report._pct(p.get('busy_fraction'))}% "
                        f"of {p.get('window_ms')} ms, {p.get('busy_ms_per_step')} ms per step"
                        + "".join(f"; {x}" for x in p.get("notes") or []) if p["error"] is None else f"FAILED: {p['error']}"))
                self.save()

    def run_config(self, name, paths, common, port):
        a = self.a
        cfg = self.results["configs"][name] = dict(
            about=CONFIGS[name]["about"], server_args=server_other_args(name, paths, common, a), sides={}, greedy=None,
            repeats={str(c): self.repeats(name, c) for c in a.concurrency}, num_prompts={}, calibration_s={},
            skipped=None, points=[])
        first_pair = 2 * self.est_point(a.concurrency[0], max(3, a.concurrency[0]), a.point_seconds / 4)
        need = self.launch_est + 15 + first_pair
        if self.left() < need:
            cfg["skipped"] = f"budget: {self.left():.0f}s left, ~{need:.0f}s needed to launch and measure one pair"
            self.stop_reason = self.stop_reason or f"budget: {name} and later configs not started"
            say(f"{name}: skipped ({cfg['skipped']})")
            self.save()
            return
        servers, wall = self.launch_pair(name, paths, common, port)
        if self.results["meta"]["first_launch_s"] is None:
            self.results["meta"]["first_launch_s"] = round(wall, 1)
        elif all(s.error is None for s in servers.values()):  # a timed-out launch says nothing about the next one
            self.later_launches.append(wall)
        self.launch_est = 1.25 * max(self.later_launches) if self.later_launches else a.later_launch_s
        try:
            threshold = None
            for side, srv in zip(a.sides, servers.values()):
                sd = cfg["sides"][side.name] = dict(side.record(), port=srv.port, launch_s=srv.launch_s, error=srv.error,
                                                    launch_env=srv.env)
                if srv.alive():
                    try:
                        f = srv.facts()
                        threshold = f.pop("accept_threshold_single")
                        sd.update(f)
                    except Exception as e:  # noqa: BLE001
                        sd["error"] = f"server_info: {type(e).__name__}: {e}"
                if side.release and sd.get("version") not in (None, side.release) and srv.alive():
                    sd["error"] = f"refused: asked for sglang {side.release}, the server reports {sd['version']}"
                    srv.kill(sd["error"])
                say(f"{name}/{side.name}: sglang {sd.get('version')}, KV pool {sd.get('max_total_num_tokens')} tokens, "
                    f"{report.spec_path(sd)}, fixes {sd.get('fixes')}" + (f"; {sd['error']}" if sd["error"] else ""))
            self.save()
            if not all(s.alive() for s in servers.values()):  # a pair needs both sides
                cfg["skipped"] = "not both servers up: " + "; ".join(
                    f"{k}: {cfg['sides'][k]['error']}" for k in servers if cfg["sides"][k]["error"])
                return
            if REAL_SIZE:
                cfg["greedy"] = dict(real_size.GREEDY_SKIPPED)
                say(f"{name}: greedy identity check skipped ({cfg['greedy']['skipped']})")
            else:
                cfg["greedy"] = self.greedy_check(name, servers)
            t = self.warm_and_calibrate(servers, a.concurrency)
            cfg["calibration_s"] = {k: round(v, 3) for k, v in t.items()}
            t1 = max(t.values()) if t else a.point_seconds / 4
            say(f"{name}: one {a.output_len}-token request takes " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))
            self.save()
            for ci, c in enumerate(a.concurrency):
                n = self.num_prompts(c, t1)
                cfg["num_prompts"][str(c)] = n
                est = self.est_point(c, n, t1)
                for rep in range(self.repeats(name, c)):
                    if self.left() < 2 * est + 10:
                        self.stop_reason = self.stop_reason or (
                            f"budget: stopped before {name} c={c} rep {rep} (~{2 * est:.0f}s needed, {self.left():.0f}s left)")
                        say(self.stop_reason)
                        return
                    order = list(servers)[:: 1 if (rep + ci) % 2 == 0 else -1]
                    for k, side in enumerate(order):
                        p = self.run_point(name, servers[side], c, rep, k, n, self.limit(est), threshold)
                        cfg["points"].append(p)
                        say(f"{name}/{side} c={c} rep {rep}: " + (
                            f"{p['output_throughput']:.1f} tok/s, TPOT med {p['median_tpot_ms']:.2f} ms p99 "
                            f"{p['p99_tpot_ms']:.2f}, ITL p99 {p['p99_itl_ms']:.2f} ms, accept {report._f(p.get('accept_length'), 2)}, "
                            f"{n} prompts in {p['wall_s']}s" if p["ok"] else f"FAILED: {p['error']}"))
                        self.save()
                        if self.left() <= 0:
                            return
            if a.profile_steps or a.host_profile_seconds:
                self.profile_config(name, servers, threshold, t1)
        finally:
            for srv in servers.values():
                self.live.discard(srv)
                srv.stop()
            say(f"{name}: servers stopped ({self.left():.0f}s of budget left)")

    # -------------------------------------------------------------------- the run
    def run(self):
        a, common = self.a, common_args(self.a)
        m = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), **env_facts(),
                 args={k: v for k, v in vars(a).items() if k != "sides"}, common_server_args=common,
                 sides=[s.record() for s in a.sides], release_root=a.release_root,
                 client="sglang.bench_serving of the harness's own release (meta.sglang), for both sides",
                 bench_mode="sglang.bench_serving CLI run in-process (runpy)",
                 env={k: v for k, v in os.environ.items() if k.startswith("SGLANG_SPECV2")},
                 cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"), complete=False, first_launch_s=None,
                 **({"real_size": real_size.meta(a)} if REAL_SIZE else {}))
        self.results = dict(schema="specv2-bench-serving/1", meta=m, configs={},
                            **({"profiles": []} if a.profile_steps else {}),
                            **({"host_profiles": []} if a.host_profile_seconds else {}))
        for k in ("SGLANG_SPECV2_FIXES_CHECK", "SGLANG_SPECV2_FIXES_PROBE"):
            if os.environ.get(k):
                say(f"warning: {k} is set: it adds per-step checks to the plugin's timings")
        say(f"sglang {m['sglang']} torch {m['torch']} on {m['device']}; sides "
            f"{', '.join(report.side_label(s.record()) for s in a.sides)} (ratios {a.sides[1].name} / {a.sides[0].name}); "
            f"configs {a.configs}, concurrency {a.concurrency}, budget {a.budget_s:.0f}s")
        paths = model_paths()
        prepare_launcher()
        self.save()
        threading.Thread(target=self.watchdog, daemon=True).start()
        try:
            for i, name in enumerate(a.configs):
                if self.left() <= 0:
                    break
                self.run_config(name, paths, common, a.base_port + 10 * i)
                if self.stop_reason and self.left() <= 0:
                    break
            for name in a.configs:
                if name not in self.results["configs"]:
                    self.results["configs"][name] = dict(about=CONFIGS[name]["about"], skipped="budget", points=[])
            m["complete"] = self.stop_reason is None and all(not c.get("skipped") for c in self.results["configs"].values())
            pts = [p for c in self.results["configs"].values() for p in c.get("points", [])]
            m["points"], m["points_failed"] = len(pts), sum(not p["ok"] for p in pts)
        except KeyboardInterrupt:
            self.stop_reason = "interrupted"
        finally:
            for srv in list(self.live):
                srv.stop()
            self.save()
            shutil.rmtree(self.tmp, ignore_errors=True)  # the per-point JSONL files (parsed into results.json)
        if not a.no_plots:
            try:
                for p in report.plots(self.results, a.out) or []:
                    say(f"wrote {p}")
            except Exception:  # noqa: BLE001
                say("plots failed: " + traceback.format_exc().splitlines()[-1])
        say(f"done in {time.monotonic() - self.t0:.0f}s ({'complete' if m['complete'] else 'INCOMPLETE: ' + str(self.stop_reason or 'configurations skipped')}); "
            f"results in {a.out}/results.json, results.md")
        print(report.markdown(self.results), file=REAL_STDOUT, flush=True)
        return 0


def env_facts():
    from importlib import metadata

    import sglang_specv2_fixes

    d = dict(python=sys.version.split()[0], sglang=installed.version(), plugin_version=sglang_specv2_fixes.__version__)
    try:
        d["torch"] = metadata.version("torch")
    except metadata.PackageNotFoundError:
        d["torch"] = None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
        first = (out[0] if out else "unknown").split(",")
        d["device"], d["driver"] = first[0].strip(), first[1].strip() if len(first) > 1 else None
    except Exception:  # noqa: BLE001
        d["device"] = "unknown (no nvidia-smi)"
    return d


# ------------------------------------------------------------------------------------------ dry run
def dry_run(a):
    common = common_args(a)
    md = MODELS_DIR
    paths = {n: os.path.join(md, n) for n in ("target", "eagle3", "eagle")}
    if REAL_SIZE:
        md, paths = real_size.models_dir(), real_size.paths()
        print(f"[dry-run] real-size mode: {a.real_size_model.upper()}-shaped target + EAGLE3 draft (config + tokenizer, "
              f"dummy weights) in {md} (bench/real_size_models.py), TP {a.real_size_tp}; both servers get "
              f"{' '.join(f'{k}={v}' for k, v in real_size.env(a).items())}; greedy identity check skipped (dummy weights)")
    repeats = parse_repeats(a.repeats, a.configs)
    fixed = parse_num_prompts(a.num_prompts)
    running = installed.version()
    print(f"[dry-run] sides: a = {report.side_label(a.sides[0].record())}, b = {report.side_label(a.sides[1].record())} (ratios {a.sides[1].name} / "
          f"{a.sides[0].name}); bench_serving client: sglang {running} (this process, both sides)")
    for s in a.sides:
        where = os.path.join(a.release_root, f"sglang-{s.release}")
        if s.release and s.release != running and not os.path.isdir(where):
            print(f"[dry-run] {s.name}: {where} is not unpacked here (source ci/gpu/env.sh {s.release} first)")
    print(f"[dry-run] out: {a.out}/{{results.json,results.md,serving.png,pairs.png,server.log}}")
    print(f"[dry-run] budget {a.budget_s:.0f}s" + ("" if REAL_SIZE else
                                                  f"; tiny models in {md} (built by sglang_specv2_fixes.testing.tiny_models)"))
    total = 0.0
    for i, name in enumerate(a.configs):
        port = a.base_port + 10 * i
        print(f"\n[dry-run] {name}: {CONFIGS[name]['about']}")
        for k, side in enumerate(a.sides):
            srv = Server(name, side.name, port + k, paths["target"], server_other_args(name, paths, common, a, side),
                         side_env(side, a, running))
            print(f"  {side.name:6s} server: {shlex.join(srv.command())}")
        launch = a.first_launch_s if i == 0 else a.later_launch_s
        total += launch + 15
        argv = bench_argv(f"http://127.0.0.1:<port>", paths["target"], "<C>", "<N>", a, f"<tmp>/{name}-<side>-c<C>-r<rep>.jsonl",
                          f"{name}/<side>/c<C>/r<rep>")
        print(f"  each point: python3 -m sglang.bench_serving {shlex.join(argv)}")
        plan = []
        for c in a.concurrency:
            r = repeats(name, c)
            plan.append(f"C={c}: {r} pair(s), N={fixed.get(c, 'auto')}")
            total += 2 * r * (a.point_seconds + POINT_OVERHEAD_S)
        print("  points: " + "; ".join(plan))
        if a.profile_steps:
            prof = 2 * len(a.concurrency) * (a.point_seconds + POINT_OVERHEAD_S + profile_steps.EXTRA_S)
            total += prof
            print(f"  then GPU profiles: {a.profile_steps} steps ({','.join(a.profile_activities)}) per side at C="
                  f"{','.join(map(str, a.concurrency))}, each under one more bench_serving load (--warmup-requests 0), "
                  f"~{prof:.0f}s; POST /start_profile {{output_dir, num_steps: {a.profile_steps}, activities, "
                  "with_stack: false, record_shapes: false, profile_prefix}")
        if a.host_profile_seconds:
            host = 2 * len(a.concurrency) * (a.host_profile_seconds + 5 + host_profile.EXTRA_S  # S + 4 s of load, 1 wave
                                             + (0 if a.profile_steps else a.point_seconds + POINT_OVERHEAD_S))
            total += host
            print(f"  then host profiles: py-spy record --pid <the sglang::scheduler child> --duration "
                  f"{a.host_profile_seconds} --format raw --output <tmp> {a.host_profile_args} per side at C="
                  f"{','.join(map(str, a.concurrency))}, " + ("before each GPU profile, under its load (more prompts)"
                                                                 if a.profile_steps else "each under one more "
                                                                 "bench_serving load (--warmup-requests 0)")
                  + f", ~{host:.0f}s; {a.py_spy} -> {shutil.which(a.py_spy) or 'not found here'}")
    print(f"\n[dry-run] rough time: {total:.0f}s with {a.first_launch_s:.0f}s for the first launch, "
          f"{a.later_launch_s:.0f}s for later ones and {a.point_seconds:.0f}s points (budget {a.budget_s:.0f}s)")
    for line in real_size.fit_lines(a, total) if REAL_SIZE else []:
        print(line)
    return 0


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    add = ap.add_argument
    add("--out", default=os.path.join(ROOT, "build", "bench"), help="output folder (default build/bench)")
    add("--configs", nargs="+", default=list(CONFIGS), help=f"any of {', '.join(CONFIGS)} (space or comma separated)")
    add("--concurrency", nargs="+", default=["1", "8", "32"], help="--max-concurrency values (default 1 8 32)")
    add("--side", action="append", metavar="NAME=SELECTION[@RELEASE][,ENV=VAL...]",
        help=f"a side; give it twice, baseline first (default: {' '.join('--side ' + s for s in DEFAULT_SIDES)})")
    add("--release-root", default=os.environ.get("SPECV2_UNPACK_ROOT", "/tmp"),
        help="where ci/gpu/env.sh unpacks each release (sglang-RELEASE), for @RELEASE sides (default "
             "$SPECV2_UNPACK_ROOT or /tmp)")
    add("--max-total-tokens", default=None, help="both servers' --max-total-tokens (default: COMMON's; real size: 32768)")
    add("--repeats", default=DEFAULT_REPEATS, help="a/b pairs per point: N, or rules N,CONFIG=N,CONFIG@C=N,@C=N (later "
                                                   f"rules win); default {DEFAULT_REPEATS}")
    add("--budget-s", type=float, default=520, help="wall-clock budget in seconds (default 520)")
    add("--point-seconds", type=float, default=4.0, help="target duration of one point (default 4)")
    add("--num-prompts", default=None, help="fixed --num-prompts per concurrency, e.g. 1:5,8:24,32:64 (default: sized "
                                            "from a calibration request)")
    add("--input-len", type=int, default=128)
    add("--output-len", type=int, default=256)
    add("--greedy-prompts", type=int, default=8)
    add("--greedy-tokens", type=int, default=64)
    add("--server-args", default="", help="extra server flags after COMMON (the = form: --server-args='--cuda-graph-max-bs 32')")
    add("--launch-timeout", type=float, default=300)
    add("--first-launch-s", type=float, default=120, help="expected first launch (JIT, graphs), for planning")
    add("--later-launch-s", type=float, default=35, help="expected later launches, for planning")
    add("--base-port", type=int, default=BASE_PORT)
    add("--no-plots", action="store_true")
    add("--dry-run", action="store_true", help="print the plan; launch nothing")
    add = ap.add_argument_group("GPU profiles (bench/profile_steps.py)").add_argument
    add("--profile-steps", type=int, default=0, metavar="N",
        help="after each configuration's pairs, a torch-profiler trace of N scheduler steps per concurrency and side "
             "under an unmeasured load, summarized into results.json 'profiles' (default 0: off)")
    add("--profile-activities", default="CPU,GPU",
        help="GPU or CPU,GPU (default: the CPU side's step[...] spans count the steps; its overhead lowers the GPU busy "
             "fraction, not the kernel times)")
    add("--keep-traces", action="store_true", help="move the traces (and the py-spy raw files, gzipped) to OUT/traces "
                                                   "instead of deleting them (a few MB each; the device returns at most "
                                                   "8 files of 16 MiB)")
    add = ap.add_argument_group("host profiles (bench/host_profile.py)").add_argument
    add("--host-profile-seconds", type=int, default=0, metavar="S",
        help="py-spy samples of each server's scheduler process for S seconds per concurrency and side under the "
             "--profile-steps load (before its torch profile; a load of its own with --profile-steps 0), summarized "
             "into results.json 'host_profiles' (default 0: off)")
    add("--py-spy", default="py-spy", metavar="PATH", help="the py-spy executable (default: py-spy on PATH)")
    add("--host-profile-args", default=host_profile.DEFAULT_ARGS,
        help=f"py-spy record's sampling flags (default {host_profile.DEFAULT_ARGS!r}; the harness adds --pid --duration "
             "--format raw --output)")
    real_size.add_args(ap)
    return ap


def parse_args(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    use_mode(real_size.pre_parse(argv).real_size)
    ap = build_parser()
    if REAL_SIZE:
        real_size.set_defaults(ap, argv)  # launch estimates by model and TP size
    a = ap.parse_args(argv)
    a.configs = parse_list(a.configs)
    a.concurrency = parse_list(a.concurrency, int)
    unknown = [c for c in a.configs if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown config(s) {unknown}; known: {', '.join(CONFIGS)}")
    parse_repeats(a.repeats, a.configs)
    a.sides = [parse_side(x) for x in a.side or DEFAULT_SIDES]
    if len(a.sides) != 2 or a.sides[0].name == a.sides[1].name:
        raise SystemExit(f"--side: exactly two sides with different names, not {[s.name for s in a.sides]}")
    a.profile_activities = [x.upper() for x in parse_list([a.profile_activities])]
    if "GPU" not in a.profile_activities or not set(a.profile_activities) <= {"CPU", "GPU"}:
        raise SystemExit(f"--profile-activities: GPU or CPU,GPU, not {a.profile_activities}")
    if a.profile_steps < 0 or a.profile_steps == 1:
        raise SystemExit("--profile-steps: 0 (off) or at least 2 (SGLang stops the profiler before the N-th batch runs)")
    if a.host_profile_seconds < 0:
        raise SystemExit("--host-profile-seconds: 0 (off) or the seconds py-spy samples")
    a.out = os.path.abspath(a.out)
    return a


def main(argv=None):
    global LOG
    a = parse_args(argv)
    if a.dry_run:
        return dry_run(a)
    os.makedirs(a.out, exist_ok=True)
    LOG = Log(os.path.join(a.out, "server.log"))
    old = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = Sink()
    standins.use_datasets_shim()  # the registered tests' import shim: the GPU bundle lacks `datasets` (bench_serving)
    # bench_serving's own imports (transformers, aiohttp, ...) now, not inside the first point's time limit: on a
    # loaded 2-core machine they took the self-test's first point past its 60 s
    importlib.import_module("sglang.bench_serving")
    try:
        return Harness(a).run()
    except BaseException:
        say("harness error:\n" + traceback.format_exc())
        raise
    finally:
        sys.stdout, sys.stderr = old


if __name__ == "__main__":
    sys.exit(main())
