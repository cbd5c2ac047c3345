#!/usr/bin/env python3
"""Run the registered GPU tests against the real sglang.launch_server, A/B (fixes off vs auto).

    python ci/run_registered.py [--suite specv2-gpu] [--files test_x.py ...] [--out DIR] [--timeout SECONDS]

Discovers tests/registered/test_*.py, reads each file's ``register_specv2_ci(...)`` call from its AST
(``sglang_specv2_fixes.testing.registry.registration``: a file without one, or without
``if __name__ == "__main__":``, is an error; release sets such as ``"fix:tree-drafting"`` are resolved through
``sglang_specv2_fixes.releases.release_set``), keeps those whose ``releases`` include the installed sglang,
runs each as ``python3 FILE`` twice at once (SPECV2_AB=off and auto, on their own ports and process sessions;
``--jobs N`` runs N files at once) with a per-file time limit (``--timeout``, else ``row_timeout``: the file's
``est_time`` with a margin), and writes results.json and results.md (row x
stock/plugin x release, with date, device, sglang and torch versions). Expected: stock fails on releases in ``bug_in``, plugin passes.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import math
import os
import re
import subprocess
import sys
import time

from sglang_specv2_fixes.testing.registry import registration

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a --tests run whose pattern selected nothing: unittest before 3.12 exits 0 then, a row that could not fail
NO_TEST = "no test selected"
REG_DIR = os.environ.get("SPECV2_REG_DIR", os.path.join(ROOT, "tests", "registered"))
TIMEOUT_MARGIN = 1.25  # a file's default limit: its est_time times this,
TIMEOUT_FLOOR = 400  # and at least this: a short file's server launches vary by more than a quarter of its est_time


def row_timeout(reg, timeout=None):
    """Seconds one mode of a registered file may run: ``timeout`` (``--timeout``) when given, else the file's
    ``est_time`` x TIMEOUT_MARGIN, at least TIMEOUT_FLOOR."""
    if timeout is not None:
        return timeout
    return max(TIMEOUT_FLOOR, math.ceil(reg["est_time"] * TIMEOUT_MARGIN))


def discover(suite=None, files=None):
    out = []
    for path in sorted(glob.glob(os.path.join(REG_DIR, "test_*.py"))):
        if files and os.path.basename(path) not in files:
            continue
        reg = registration(path)
        if suite and reg["suite"] != suite:
            continue
        out.append((path, reg))
    return out


def kill_group(p):
    """Kill the test's whole process session (its servers included) and wait for it."""
    import signal

    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


TINY_MODELS = {"llama": "build_all", "moe": "build", "swa": "build", "deepseek_v3": "build"}  # sglang_specv2_fixes.testing.tiny_models


def prebuild_models(paths):
    """Build the tiny models once before parallel tests start (every builder of
    ``sglang_specv2_fixes.testing.tiny_models``), when any of the files to run launches servers through the testing
    package (imports more of it than ``registry``)."""
    uses = re.compile(r"sglang_specv2_fixes\.testing\.(?!registry\b)\w+")
    if not any(uses.search(open(p).read()) for p in paths):
        return
    code = ("import os, sys, importlib; d = os.environ.get('SPECV2_MODELS', '/tmp/specv2-tiny-models')\n"
            "for m, fn in zip(sys.argv[1::2], sys.argv[2::2]):\n"
            "    mod = importlib.import_module('sglang_specv2_fixes.testing.tiny_models.' + m)\n"
            "    print('[runner] model', m, getattr(mod, fn)(d), flush=True)\n")
    t0 = time.time()
    p = subprocess.run([sys.executable, "-c", code, *(x for kv in TINY_MODELS.items() for x in kv)], cwd=REG_DIR,
                       capture_output=True, text=True)
    print(p.stdout.strip() or "", f"[runner] models ready in {time.time() - t0:.0f}s" if p.returncode == 0
          else f"[runner] model build FAILED (tests will report it):\n{p.stderr[-2000:]}", flush=True)


def env_facts():
    code = ("import json, torch, sglang; print(json.dumps(dict(sglang=sglang.__version__, torch=torch.__version__, "
            "device=torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu', "
            "gpu_count=torch.cuda.device_count())))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-500:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="specv2-gpu")
    ap.add_argument("--files", nargs="*")
    ap.add_argument("--modes", nargs="*", default=["off", "auto"])
    ap.add_argument("--out", default=os.environ.get("OUT", os.path.join(ROOT, "build", "registered")))
    ap.add_argument("--timeout", type=int, default=None,
                    help=f"per file and mode, seconds (default: the file's est_time x {TIMEOUT_MARGIN}, at least "
                         f"{TIMEOUT_FLOOR})")
    ap.add_argument("--jobs", type=int, default=1, help="files run at once (each with all its modes)")
    ap.add_argument("--port-base", type=int, default=int(os.environ.get("SPECV2_PORT_BASE", 21000)),
                    help="first port; two runners on one machine need bases 4000 apart")
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds from now after which no new file is started (0: none)")
    ap.add_argument("--budget", type=float, default=0,
                    help="hard wall-clock budget in seconds from the first row's start (0: none): a file is not "
                         "started unless its est_time fits, and whatever still runs at the budget is killed (rc "
                         "'budget') so reports get written")
    ap.add_argument("--gpus", default=os.environ.get("SPECV2_GPUS", ""),
                    help="comma-separated GPU ids for this runner's files (slot i -> GPU i mod n, both modes of a "
                         "file on one GPU, reference servers with them); empty: leave CUDA_VISIBLE_DEVICES as it is")
    ap.add_argument("--mode-env", action="append", default=[], metavar="MODE:KEY=VALUE",
                    help="extra environment for one mode's runs, e.g. auto:SGLANG_SPECV2_FIXES_CHECK=1 "
                         "(the plugin side runs in check mode: any invariant violation stops its server)")
    ap.add_argument("--tests", action="append", default=[], metavar="PATTERN",
                    help="only the tests unittest's -k PATTERN selects (repeatable), e.g. TestFa3DraftExtendGraphTree: "
                         "one class of a file whose other class has met already")
    args = ap.parse_args()
    mode_env = {}
    for item in args.mode_env:
        mode, kv = item.split(":", 1)
        key, value = kv.split("=", 1)
        mode_env.setdefault(mode, {})[key] = value
    gpus = [g for g in args.gpus.split(",") if g.strip()]
    t_start = time.time()
    facts = env_facts()
    if gpus:
        facts["gpus"] = gpus
    facts["jobs"] = args.jobs
    rel = facts.get("sglang")
    os.makedirs(args.out, exist_ok=True)
    tests = [(p, r) for p, r in discover(args.suite, args.files) if rel in r["releases"]]
    # rows that need more GPUs than this run has (register_specv2_ci(gpus=N): --tp-size / --dp-size rows)
    have = len(gpus) if gpus else facts.get("gpu_count", 0)
    short = [(p, r) for p, r in tests if r["gpus"] > 1 and r["gpus"] > have]  # one-GPU rows run as before
    tests = [t for t in tests if t not in short]
    # longest first: with --jobs the slow rows start early
    tests.sort(key=lambda t: -t[1]["est_time"])
    facts["mode_env"] = mode_env
    if args.tests:
        facts["tests"] = args.tests  # a subset of each file ran: the report says which
    print(f"[runner] sglang {rel} torch {facts.get('torch')} on {facts.get('device')}: {len(tests)} file(s) x "
          f"{args.modes}, {args.jobs} at a time{f' over GPUs {gpus}' if gpus else ''}, extra env {mode_env or 'none'}",
          flush=True)
    prebuild_models([p for p, _ in tests])
    # --budget counts from here: the rows' time, not this process's own imports and model build (on a loaded
    # machine those alone took a 20 s budget, and a row that fits was reported 'not run')
    t_rows = time.time()
    results, running, free_slots = [], {}, list(range(args.jobs))
    for path, reg in short:
        print(f"[runner] {os.path.basename(path)}: not run (needs {reg['gpus']} GPUs, this run has {have})", flush=True)
        for mode in args.modes:
            results.append(dict(file=os.path.basename(path), mode=mode, passed=False, rc=f"needs {reg['gpus']} GPUs",
                                expected_fail=False, verdict="not run", seconds=0, log=None))
    pending = list(enumerate(tests, 1))

    def start(i, path, reg, slot):
        name = os.path.basename(path)
        limit = row_timeout(reg, args.timeout)
        print(f"[runner] ({i}/{len(tests)}) {name}: modes {args.modes} (est {reg['est_time']}s, limit {limit}s, slot "
              f"{slot}) ...", flush=True)
        procs = {}
        for k, mode in enumerate(args.modes):
            log = open(os.path.join(args.out, f"{name[:-3]}.{mode}.log"), "w")
            # ports: base + 1000*mode + 40*slot; the file's reference server is on port + 500
            env = {**os.environ, **mode_env.get(mode, {}), "SPECV2_AB": mode,
                   "SPECV2_PORT": str(args.port_base + 1000 * k + 40 * slot)}
            if gpus and reg["gpus"] > 1:  # a multi-GPU row gets that many GPUs (both modes share them)
                env["CUDA_VISIBLE_DEVICES"] = ",".join((gpus * 2)[slot % len(gpus):][:reg["gpus"]])
            elif gpus:
                env["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
            # own session: a timeout kills the test *and* the servers it started
            only = [x for t in args.tests for x in ("-k", t)]  # unittest.main's own filter
            p = subprocess.Popen([sys.executable, path, *only], stdout=log, stderr=subprocess.STDOUT, env=env,
                                 cwd=REG_DIR, start_new_session=True)
            procs[mode] = (p, log, time.time(), limit)
        return procs

    def finish(name, reg, mode, p, log, t0, limit, rc):
        kill_group(p)
        log.close()
        if rc == 0 and args.tests and not tests_ran(log.name):
            rc = NO_TEST
        passed = rc == 0
        expect_fail = mode == "off" and rel in reg["bug_in"]
        verdict = "as expected" if passed != expect_fail and rc != NO_TEST else "UNEXPECTED"
        results.append(dict(file=name, mode=mode, passed=passed, rc=rc, expected_fail=expect_fail,
                            verdict=verdict, seconds=round(time.time() - t0, 1), limit_s=limit,
                            log=os.path.basename(log.name),
                            asserted=None if passed else failed_an_assertion(log.name)))
        print(f"[runner]   {name} {mode}: {'pass' if passed else 'FAIL'} rc={rc} in {results[-1]['seconds']}s "
              f"({verdict})", flush=True)
        write_reports(args.out, facts, results, t_start)  # after every result: a cut-off matrix keeps what it did

    while pending or running:
        while pending and free_slots:
            elapsed = time.time() - t_rows
            fitting = [k for k, (_, (_, reg)) in enumerate(pending) if not args.budget
                       or elapsed + min(reg["est_time"], row_timeout(reg, args.timeout)) <= args.budget]
            if (args.deadline and elapsed > args.deadline) or not fitting:
                if running and not (args.deadline and elapsed > args.deadline):
                    break  # a shorter file may fit once nothing else is left to start; wait for the running ones
                for i, (path, reg) in pending:
                    print(f"[runner] ({i}/{len(tests)}) {os.path.basename(path)}: not started (deadline/budget)", flush=True)
                    for mode in args.modes:
                        results.append(dict(file=os.path.basename(path), mode=mode, passed=False, rc="not run",
                                            expected_fail=False, verdict="not run", seconds=0, log=None))
                pending = []
                write_reports(args.out, facts, results, t_start)
                break
            i, (path, reg) = pending.pop(fitting[0])
            slot = free_slots.pop(0)
            running[path] = (reg, slot, start(i, path, reg, slot))
        time.sleep(1)
        for path, (reg, slot, procs) in list(running.items()):
            for mode, (p, log, t0, limit) in list(procs.items()):
                rc = p.poll()
                if rc is None and time.time() - t0 > limit:
                    rc = "timeout"
                if rc is None and args.budget and time.time() - t_rows > args.budget:
                    rc = "budget"
                if rc is not None:
                    finish(os.path.basename(path), reg, mode, p, log, t0, limit, rc)
                    del procs[mode]
            if not procs:
                del running[path]
                free_slots.append(slot)
    lines = write_reports(args.out, facts, results, t_start)
    print("\n".join(lines), flush=True)
    return 0 if all(r["verdict"] == "as expected" for r in results) else 1


def tests_ran(log_path):
    """How many tests a run's log says unittest ran (``Ran N tests``; 0 where it says nothing)."""
    try:
        with open(log_path, errors="replace") as f:
            return sum(int(m.group(1)) for m in (re.match(r"Ran (\d+) tests? in ", line) for line in f) if m)
    except OSError:
        return 0


def failed_an_assertion(log_path):
    """Whether a failed run's log shows a test's assertion failing (unittest's ``FAIL:`` or an ``AssertionError``),
    rather than only errors: a server that never started or lost its port fails a row too, and its stock side then
    proves nothing about the bug (a stock side that lost its reference server's port would read as 'stock fails'). Reported, not judged: a crash the bug causes can fail a test without an assertion."""
    try:
        with open(log_path, errors="replace") as f:
            return any(line.startswith("FAIL:") or "AssertionError" in line for line in f)
    except OSError:
        return False


def _unasserted(r):
    """The report's flag on a stock failure the row expects but whose log shows no failed assertion."""
    return ", no assertion failed: read its log" if r["expected_fail"] and r.get("asserted") is False else ""


def write_reports(out, facts, results, t_start=None):
    """results.json + results.md; ``t_start``: the run's start, so reports carry its wall clock so far (the
    matrix of a release must fit one device call)."""
    rel = facts.get("sglang")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    wall = round(time.time() - t_start) if t_start else None
    summary = dict(date=stamp, **facts, wall_s=wall, results=results)
    json.dump(summary, open(os.path.join(out, "results.json"), "w"), indent=2)
    extra = "; ".join(f"{m}: {' '.join(f'{k}={v}' for k, v in e.items())}" for m, e in facts.get("mode_env", {}).items())
    lines = [f"Run {stamp} on {facts.get('device')}, sglang {rel}, torch {facts.get('torch')}"
             + (f", extra env ({extra})" if extra else "")
             + (f", only tests matching {' / '.join(facts['tests'])}" if facts.get("tests") else "")
             + (f"; {facts.get('jobs')} files at a time" + (f" over GPUs {','.join(facts['gpus'])}" if facts.get("gpus") else "")
                + f", wall clock {wall} s" if wall is not None else ""), "",
             "| test | stock (off) | plugin (auto) | expectation |", "|---|---|---|---|"]
    for name in dict.fromkeys(r["file"] for r in results):
        cells = {r["mode"]: r for r in results if r["file"] == name}
        fmt = lambda r: ("-" if r is None else "not run" if r["rc"] == "not run"
                         else "pass" if r["passed"] else f"FAIL (rc={r['rc']}{_unasserted(r)})")
        ok = all(r["verdict"] == "as expected" for r in cells.values())
        if any(r["verdict"] == "not run" for r in cells.values()):
            why = next((r["rc"] for r in cells.values() if str(r["rc"]).startswith("needs ")), "run budget")
            lines.append(f"| {name} | not run | not run | ({why}) |")
            continue
        exp = "stock fails, plugin passes" if any(r["expected_fail"] for r in cells.values()) else "both pass"
        others = "".join(f"; `--specv2-fixes {m}`: {fmt(r)}" for m, r in cells.items() if m not in ("off", "auto"))
        lines.append(f"| {name} | {fmt(cells.get('off'))} | {fmt(cells.get('auto'))} | {exp}: {'met' if ok else 'NOT MET'}"
                     f"{others} |")
    open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
    return lines


if __name__ == "__main__":
    sys.exit(main())
