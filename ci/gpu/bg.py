#!/usr/bin/env python3
"""Registered rows of several releases at once on one lent GPU, fed across device calls.

A device call carries at most 64 MiB, one release bundle (~40-48 MB). A process started in a session of its own
outlives the call, and /tmp stays while the machine is warm (a next call within its idle window). So each call
unpacks the one bundle it carried and queues that release's rows, and one dispatcher runs the queue with a
global cap on rows at once, while the next calls bring the next bundles::

    python3 ci/gpu/bg.py start RELEASE FILE [FILE ...] [--slots K] [--timeout T] [--plugin-env KEY=VALUE ...]
                                 [--gpus 0,1] [--tests PATTERN]
        (this call) unpack .device-bundle/RELEASE (+ RELEASE-xgrammar, RELEASE-outlines) into /tmp/sglang-RELEASE
        (ci/gpu/env.sh), queue one task per FILE (basenames, as ci/run_registered.py --files), start the
        dispatcher if it is not running; returns at once
    python3 ci/gpu/bg.py wait SECONDS
        print progress until every queued row has finished or SECONDS pass, then pack what has finished into
        $OUT: bg-results.md (one table per release) and bg-runs.tar.gz (per row results.json/.md and logs)

Each row is ``ci/run_registered.py --files FILE --jobs 1`` in RELEASE's environment (ci/gpu/prepare.sh), plugin
side in check mode, on a port base of its own slot (``port_base``: 20000 + 40 * slot, interleaved; ``slot_ports``:
MAX_SLOTS rows at once, below the ephemeral port range). The first ``start`` snapshots the repo into /tmp/specv2-bg/repo, and rows run from there, so a
later call's working tree (what the next call transfers) never changes code under running rows; SPECV2_COMMIT
records it. Rows need no network; the tiny models are built once under a file lock
(sglang_specv2_fixes.testing.tiny_models, the stamp depends on torch only, the same for 0.5.11-0.5.17).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CI = os.path.dirname(HERE)
ROOT = os.path.dirname(CI)
BG = os.environ.get("SPECV2_BG_DIR", "/tmp/specv2-bg")
QUEUE, RUNS, SNAP = os.path.join(BG, "queue"), os.path.join(BG, "runs"), os.path.join(BG, "repo")
PIDFILE, DLOG, CONF = os.path.join(BG, "dispatcher.pid"), os.path.join(BG, "dispatcher.log"), os.path.join(BG, "conf.json")


def say(msg):
    print(f"[gpu_bg {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def dispatcher_alive():
    try:
        os.kill(int(open(PIDFILE).read()), 0)
        return True
    except (OSError, ValueError):
        return False


def unpack(release):
    """Unpack the carried bundle in this call (the bundle may be gone from the next call's working tree). A release
    unpacked before skips env.sh's import check (~20 s per start beside running rows: a dozen of them can use up a
    call's limit)."""
    again = os.path.exists(f"/tmp/sglang-{release}/.ready")
    p = subprocess.run(["bash", "-c", f"source ci/gpu/prepare.sh {release}"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, **({"SPECV2_UNPACK_ONLY": "1"} if again else {})})
    if again and p.returncode == 0:
        say(f"{release}: unpacked before (rc 0)")
        return
    say(f"{release}: {p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ''} (rc {p.returncode})")
    if p.returncode != 0 or not os.path.exists(f"/tmp/sglang-{release}/.ready"):
        sys.exit(f"unpacking {release} failed:\n{p.stderr[-2000:]}")


def start(a):
    for d in (QUEUE, RUNS):
        os.makedirs(d, exist_ok=True)
    if not os.path.isdir(SNAP):  # code snapshot of the first call (bundles and build outputs left out)
        shutil.copytree(ROOT, SNAP, ignore=shutil.ignore_patterns(".device-bundle", ".git", "build", "__pycache__"))
        say(f"code snapshot {SNAP} (commit {os.environ.get('SPECV2_COMMIT', 'unrecorded')})")
    unpack(a.release)
    # a later start keeps what an earlier one set unless it says otherwise (a start without --slots must not
    # lower the cap of rows already planned for)
    conf = json.load(open(CONF)) if os.path.exists(CONF) else dict(slots=5, timeout=460, commit="unrecorded")
    if a.slots is not None:
        if not 1 <= a.slots <= MAX_SLOTS:
            sys.exit(f"--slots {a.slots}: 1 .. {MAX_SLOTS} (the port range holds {MAX_SLOTS} rows at once)")
        conf["slots"] = a.slots
    if a.timeout is not None:
        conf["timeout"] = a.timeout
    conf["commit"] = os.environ.get("SPECV2_COMMIT", conf.get("commit", "unrecorded"))
    json.dump(conf, open(CONF, "w"))
    for f in a.files:
        if not os.path.exists(os.path.join(SNAP, "tests", "registered", f)):
            sys.exit(f"no such registered file in the snapshot: {f} (--files takes basenames)")
        name = f"{time.time():.6f}-{a.release}-{f}"
        json.dump(dict(release=a.release, file=f, plugin_env=a.plugin_env + a.mode_env, modes=a.modes, gpus=a.gpus,
                       tests=a.tests), open(os.path.join(QUEUE, name), "w"))
    say(f"queued {len(a.files)} row(s) of {a.release}: {' '.join(a.files)}")
    mixed = mixed_gpus()
    if mixed:
        say(f"WARNING: rows on GPUs {' and '.join(sorted(mixed))} at once: SGLang refuses to start a multi-GPU server "
            "whose GPUs' free memory differs by more than 10% ('The memory capacity is unbalanced'), which one-GPU rows "
            "beside it cause; queue multi-GPU rows alone")
    if not dispatcher_alive():
        log = open(DLOG, "a")
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "dispatch"], cwd=SNAP, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        open(PIDFILE, "w").write(str(p.pid))
        say(f"dispatcher started (pid {p.pid}, {conf['slots']} rows at once)")
    status()


def mixed_gpus():
    """The distinct ``--gpus`` of queued and running rows when some row spans several GPUs and another does not
    span the same ones (empty: nothing mixed)."""
    seen = set()
    for name in os.listdir(QUEUE) if os.path.isdir(QUEUE) else ():
        try:
            seen.add(json.load(open(os.path.join(QUEUE, name))).get("gpus") or "0")
        except (OSError, ValueError):
            pass
    for d in glob.glob(os.path.join(RUNS, "*", "*")):
        task = os.path.join(d, "task.json")
        if os.path.isdir(d) and not os.path.exists(os.path.join(d, "rc")) and os.path.exists(task):
            seen.add(json.load(open(task)).get("gpus") or "0")
    return seen if len(seen) > 1 and any("," in g for g in seen) else set()


def row_command(release, file, slot, timeout, out, plugin_env=(), modes=None, gpus="0", tests=()):
    """The row in RELEASE's environment; OUT/rc (its exit status) marks it finished, whatever happened.
    ``plugin_env``: extra KEY=VALUE for the plugin side only (e.g. SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=1), or
    MODE:KEY=VALUE for the side MODE names (e.g. ``off:CUDA_LAUNCH_BLOCKING=1``: the stock side);
    ``modes``: run_registered's ``--modes`` (default off and auto), e.g. one fix's name alone as its own row;
    ``gpus``: run_registered's ``--gpus`` (a row registered with ``gpus=2`` needs two ids, e.g. ``0,1``: rows at once
    then share those GPUs); ``tests``: run_registered's ``--tests`` patterns (unittest's -k: one class of the file)."""
    extra = "".join(f" --mode-env {shlex.quote(kv if ':' in kv.split('=', 1)[0] else 'auto:' + kv)}"
                    for kv in plugin_env)
    extra += (" --modes " + " ".join(map(shlex.quote, modes))) if modes else ""
    extra += "".join(f" --tests {shlex.quote(t)}" for t in tests)
    return ("source ci/gpu/prepare.sh {r} > /dev/null && python3 ci/run_registered.py --out {o} --files {f} "
            "--jobs 1 --timeout {t} --gpus {g} --port-base {p} --mode-env auto:SGLANG_SPECV2_FIXES_CHECK=1{x}; "
            "echo $? > {o}/rc").format(r=release, o=out, f=file, t=timeout, g=shlex.quote(gpus), p=port_base(slot),
                                        x=extra)


# Every fixed port of a row, relative to its base (run_registered --jobs 1, its slot 0): stock on base, plugin on
# base + 1000, each side's reference server + 500, torch.distributed (--nccl-port) + 20, a DP-attention server's
# ZMQ ports + 233 .. 238 (server_args.ZMQ_TCP_PORT_DELTA). SGLang 0.5.17+ also binds a native gRPC server on
# port + 10000 (ServerArgs: SGLANG_GRPC_PORT defaults to port + 10000, at most 65535). Slots interleave 40 ports
# apart (as run_registered's own jobs do), so no row's port or gRPC image is another's, and all stay below Linux's
# ephemeral range (net.ipv4.ip_local_port_range, 32768 - 60999 by default), where an outgoing connection or a
# get_free_port() may hold any port (a row there can lose its server to "address already in use"), and no slot's
# gRPC image passes 65535. bench/gpu_real_size.sh's parts sit at 12500 + 400 * part, clear of all of these.
ROW_OFFSETS = tuple(sorted({m + r + d for m in (0, 1000) for r in (0, 500) for d in (0, 20)}
                           | {m + d for m in (0, 1000) for d in range(233, 239)}))
PORT_FIRST, SLOT_STEP, GRPC_OFFSET, EPHEMERAL_FLOOR = 20000, 40, 10000, 32768


def slot_ports(slot):
    """The ports a row in ``slot`` may bind, its gRPC images included."""
    ports = {PORT_FIRST + SLOT_STEP * slot + off for off in ROW_OFFSETS}
    return ports | {p + GRPC_OFFSET for p in ports}


def _max_slots():
    taken, n = set(), 0
    while True:
        ports = slot_ports(n)
        if ports & taken or max(ports) >= EPHEMERAL_FLOOR:
            return n
        taken |= ports
        n += 1


MAX_SLOTS = _max_slots()


def port_base(slot):
    if not 0 <= slot < MAX_SLOTS:
        raise ValueError(f"slot {slot}: at most {MAX_SLOTS} rows at once fit the port layout")
    return PORT_FIRST + SLOT_STEP * slot


EARLIER_RUN = re.compile(r"\.run\d+$")


def fresh_run_dir(release, file, modes=None):
    """The row's run directory, empty (``FILE@MODE+MODE`` for a row run with its own ``--modes``, which may run beside
    the same file's default row). A row queued again (e.g. a timeout re-run) moves its earlier run aside to
    NAME.runK: wait() and pack() read the new run, not the earlier one's rc and results."""
    out = os.path.join(RUNS, release, file[:-3] + ("@" + "+".join(modes) if modes else ""))
    if os.path.exists(out):
        k = 1
        while os.path.exists(f"{out}.run{k}"):
            k += 1
        os.rename(out, f"{out}.run{k}")
    os.makedirs(out)
    return out


def dispatch():
    """Run queued rows, at most ``slots`` at once, until the queue has been empty for 10 minutes."""
    running, idle_since = {}, time.time()
    while True:
        conf = json.load(open(CONF))
        free = [s for s in range(conf["slots"]) if s not in {v[1] for v in running.values()}]
        for name in sorted(os.listdir(QUEUE)):
            if not free:
                break
            task = json.load(open(os.path.join(QUEUE, name)))
            os.remove(os.path.join(QUEUE, name))
            out = fresh_run_dir(task["release"], task["file"], task.get("modes"))
            json.dump(task, open(os.path.join(out, "task.json"), "w"))
            slot = free.pop(0)
            log = open(os.path.join(out, "runner.log"), "w")
            p = subprocess.Popen(["bash", "-c", row_command(task["release"], task["file"], slot, conf["timeout"], out,
                                                          task.get("plugin_env") or (), task.get("modes"),
                                                          task.get("gpus") or "0", task.get("tests") or ())],
                                 cwd=SNAP, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                 env={**os.environ, "SPECV2_MODELS": "/tmp/specv2-tiny-models"})
            running[p.pid] = (p, slot, task, time.time())
            print(f"{time.strftime('%H:%M:%S')} start {task['release']} {task['file']} slot {slot}", flush=True)
        time.sleep(2)
        for pid, (p, slot, task, t0) in list(running.items()):
            if p.poll() is not None:
                print(f"{time.strftime('%H:%M:%S')} done {task['release']} {task['file']} rc {p.returncode} "
                      f"in {time.time() - t0:.0f}s", flush=True)
                del running[pid]
        if running or os.listdir(QUEUE):
            idle_since = time.time()
        elif time.time() - idle_since > 600:
            return


def rows():
    """(release, file, results.json or None) of every row started so far."""
    out = []
    for d in sorted(glob.glob(os.path.join(RUNS, "*", "*"))):
        if not os.path.isdir(d) or EARLIER_RUN.search(d):  # fresh_run_dir's NAME.runK: earlier runs of a requeued row
            continue
        rj = os.path.join(d, "results.json")
        done = os.path.exists(os.path.join(d, "rc"))
        out.append((os.path.basename(os.path.dirname(d)), os.path.basename(d) + ".py",
                    rj if done and os.path.exists(rj) else "no results" if done else None))
    return out


def status():
    queued = len(os.listdir(QUEUE)) if os.path.isdir(QUEUE) else 0
    rs = rows()
    done = [r for r in rs if r[2]]
    say(f"{len(done)} row(s) done, {len(rs) - len(done)} running, {queued} queued; dispatcher "
        f"{'alive' if dispatcher_alive() else 'not running'}")
    return queued, len(rs) - len(done)


def wait(a):
    t0, seen, last = time.time(), 0, 0.0
    while True:
        lines = open(DLOG).read().splitlines() if os.path.exists(DLOG) else []
        for line in lines[seen:]:
            print("  " + line, flush=True)
        seen = len(lines)
        if time.time() - last >= 60:
            last = time.time()
            status()
        queued, running = len(os.listdir(QUEUE)), sum(1 for r in rows() if not r[2])
        if not queued and not running:
            say("every queued row has finished")
            break
        if time.time() - t0 > a.seconds:
            say(f"{a.seconds:.0f}s passed: packing what has finished")
            break
        time.sleep(15)
    pack()


def pack():
    out = os.environ.get("OUT")
    if not out:
        return
    sys.path[:0] = [CI, ROOT]  # ci/run_registered.py, which imports sglang_specv2_fixes
    md = [f"Background rows (ci/gpu/bg.py), commit {json.load(open(CONF)).get('commit')}", ""]
    by_rel = {}
    for rel, f, rj in rows():
        by_rel.setdefault(rel, []).append((f, rj))
    for rel, items in by_rel.items():
        facts, results = None, []
        for f, rj in items:
            if rj == "no results":
                results += [dict(file=f, mode=m, passed=False, rc="runner failed (runner.log)", expected_fail=False,
                                 verdict="UNEXPECTED", seconds=0, log=None) for m in ("off", "auto")]
            elif rj:
                s = json.load(open(rj))
                facts = facts or {k: v for k, v in s.items() if k not in ("results", "date", "wall_s")}
                results += s["results"]
            else:
                results += [dict(file=f, mode=m, passed=False, rc="still running", expected_fail=False,
                                 verdict="not run", seconds=0, log=None) for m in ("off", "auto")]
        md.append(f"## {rel}")
        if facts:
            facts["jobs"] = "background"
            d = os.path.join(RUNS, rel)
            from run_registered import write_reports  # noqa: E402 (ci/ on the path)

            md += write_reports(d, facts, results)
        md.append("")
    open(os.path.join(out, "bg-results.md"), "w").write("\n".join(md) + "\n")
    with tarfile.open(os.path.join(out, "bg-runs.tar.gz"), "w:gz") as t:
        t.add(RUNS, arcname="runs")
        if os.path.exists(DLOG):
            t.add(DLOG, arcname="dispatcher.log")
    print("\n".join(md), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("release")
    s.add_argument("files", nargs="+")
    s.add_argument("--slots", type=int, help="rows at once on the machine (first start's default 5; a later start "
                   "without it keeps the cap)")
    s.add_argument("--timeout", type=int, help="per row and mode, seconds (default 460; kept like --slots)")
    s.add_argument("--plugin-env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment of these rows' plugin side (repeatable), e.g. "
                        "SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=1")
    s.add_argument("--mode-env", action="append", default=[], metavar="MODE:KEY=VALUE",
                   help="extra environment of one side (repeatable), as run_registered's --mode-env, e.g. "
                        "off:CUDA_LAUNCH_BLOCKING=1 for the stock side")
    s.add_argument("--modes", nargs="+", help="run_registered's --modes for these rows (default off auto), e.g. a "
                   "fix's name: that fix alone (a row of its own: a run of one mode holds one slot's ports)")
    s.add_argument("--gpus", default="0", help="run_registered's --gpus for these rows (default 0); 0,1 for a row "
                   "registered with gpus=2 (e.g. test_dp2_multi_layer_idle.py on nvidia-h100-x2)")
    s.add_argument("--tests", action="append", default=[], metavar="PATTERN",
                   help="run_registered's --tests (repeatable): only what unittest's -k PATTERN selects, e.g. "
                        "TestFa3DraftExtendGraphTree")
    w = sub.add_parser("wait")
    w.add_argument("seconds", type=float)
    sub.add_parser("dispatch")
    sub.add_parser("status")
    a = ap.parse_args()
    if a.cmd == "start":
        start(a)
    elif a.cmd == "wait":
        wait(a)
    elif a.cmd == "dispatch":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        dispatch()
    else:
        status()


if __name__ == "__main__":
    main()
