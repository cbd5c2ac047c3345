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
side under one more load after a configuration's pairs (bench/serving_profiles.py). Outputs in ``--out``:
results.json (rewritten after every point), results.md, serving.png, pairs.png (bench/plot.py), server.log
(bench/serving_server.py: the servers, the log, the bench_serving runs). ``--budget-s`` stops cleanly.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
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
import serving_server  # bench/serving_server.py: the servers, server.log, bench_serving runs
from serving_profiles import Profiles  # bench/serving_profiles.py: --profile-steps, --host-profile-seconds
from serving_server import REAL_STDOUT, Load, Server, free_ports, parse_bench_line, say

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
POINT_OVERHEAD_S = 2.5  # planning: a point's cost on top of its load (bench_serving's warm-up request, cache flush)


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
        alg = c.get("algorithm", "EAGLE3")  # EAGLE (MTP): SGLang takes the target's path for the NextN draft
        args += ["--speculative-algorithm", alg] + (
            ["--speculative-draft-model-path", paths["eagle3"]] if alg == "EAGLE3" else [])
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





class Harness(Profiles):
    def __init__(self, a):
        self.a, self.t0, self.launch_est = a, time.monotonic(), a.first_launch_s
        self.deadline = self.t0 + a.budget_s
        self.live, self.stop_reason, self.greedy_ref, self.later_launches, self.results = set(), None, {}, [], None
        self.tmp = tempfile.mkdtemp(prefix="specv2-bench-")
        self.repeats, self.fixed_n = parse_repeats(a.repeats, a.configs), parse_num_prompts(a.num_prompts)

    def left(self):
        return self.deadline - time.monotonic()

    def speculative(self, name):
        return CONFIGS[name]["spec"] is not None

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
        serving_server.LOG.write(f"\n===== [{srv.tag}] c={c} {label}: python3 -m sglang.bench_serving {shlex.join(argv)}\n", force=True)
        load = Load(srv, argv, limit, "point" if warmup else "profile")
        load.start()
        return load

    def run_point(self, name, srv, c, rep, order, n, limit, threshold):
        p = dict(side=srv.side, concurrency=c, rep=rep, order=order, num_prompts=n, ok=False, error=None)
        if not srv.alive():
            p["error"] = srv.error or srv.killed_reason or "server not running"
            return p
        spec = self.speculative(name)
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
        serving_server.prepare_launcher()
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
        d = real_size.real_size_models.describe(a.real_size_model)
        print(f"[dry-run] real-size mode: {d['name']} target + draft {d['draft']} (config + tokenizer, "
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
    wrong = real_size.wrong_family(a.configs, a.real_size_model) if REAL_SIZE else []
    if wrong:
        fits = [c for c in CONFIGS if c not in real_size.wrong_family(list(CONFIGS), a.real_size_model)]
        raise SystemExit(f"--real-size-model {a.real_size_model} cannot serve config(s) {wrong}; it serves "
                         f"{', '.join(fits)}")
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
    a = parse_args(argv)
    if a.dry_run:
        return dry_run(a)
    os.makedirs(a.out, exist_ok=True)
    serving_server.LOG = serving_server.Log(os.path.join(a.out, "server.log"))
    old = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = serving_server.Sink()
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
