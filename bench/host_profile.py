#!/usr/bin/env python3
"""Where the SGLang scheduler process spends its host time: py-spy samples of it under load, and their summary.

    python3 bench/host_profile.py RAW[.gz] ...      # print summarize() of each py-spy raw file as JSON

``bench/serving.py --host-profile-seconds S`` records one per configuration, concurrency and side, in the unmeasured
steady load of ``--profile-steps`` (before its torch profile, whose CPU activity slows the host; with
``--profile-steps 0`` under a load of its own). Pure Python: the summary also runs in CPU CI.

``record``: ``py-spy record --pid PID --duration S --format raw --output FILE`` plus ``DEFAULT_ARGS`` (serving.py
``--host-profile-args``). ``--nonblocking``: the scheduler is not paused (its host time is what is measured; a
sample may rarely be torn). ``--idle``: every thread is sampled at every tick, so samples are wall-clock time and a
wait shows where it waits; the raw format has no idle mark, so ``summarize`` flags idle-like leaves itself
(``IDLE``; a spinning CUDA synchronization is busy to py-spy either way). No ``--gil``: it would hide the waits.
``--threads``: stacks start with ``thread (TID): NAME``, the scheduler's loop is ``MainThread``. Without
``--native`` (which needs the process paused) a C call such as ``tensor.tolist()`` is self time of the Python line
calling it, hence ``summarize`` reads source lines (``source``: needs the GPU machine's files) besides names.

``find_scheduler``: the server's child process titled ``sglang::scheduler`` (setproctitle: ``/proc/PID/cmdline``;
psutil's name is cut to ``sglang::schedul``), the first by title (rank 0), else the child with most CPU time.
py-spy needs ptrace rights over it (root with CAP_SYS_PTRACE, or ``kernel.yama.ptrace_scope`` 0: py-spy is the
server's sibling): a failure is the entry's ``error`` with py-spy's message and the ptrace scope.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from profile_steps import open_text, summary_cli  # bench/profile_steps.py (this script's folder)

DEFAULT_ARGS = "--rate 200 --nonblocking --idle --threads"
EXTRA_S = 5.0  # planning: per host profile on top of its seconds (py-spy start and exit, the summary)
TITLE = "sglang::scheduler"  # sglang/srt/managers/scheduler.py run_scheduler_process's setproctitle
TOP = 25
FRAME = re.compile(r"^(.*) \(([^()]*?)(?::(\d+))?\)$")  # py-spy: "name (file:line)", "name (file)" without a line
THREAD = re.compile(r"^thread \((0x[0-9A-Fa-f]+|\d+)\)(?:: (.*))?$")  # --threads: "thread (TID): NAME"
PATCHED = re.compile(r" \[specv2-fixes ([^\]]+)\]")  # the file name patchfile.compile_target gives patched code
# idle-like leaf frames: py-spy's own heuristic (threading wait, selectors select, zmq poll) and blocking stdlib waits
IDLE = re.compile(r"(^|/)(threading\.py:(\w+\.)?(wait|_wait_for_tstate_lock|join)|selectors\.py:(\w+\.)?select|"
                  r"queue\.py:(\w+\.)?get|multiprocessing/connection\.py:(\w+\.)?(_recv\w*|recv\w*|poll|wait)|"
                  r"zmq/.*:(\w+\.)?poll|asyncio/.*:(\w+\.)?select)$")
# CUDA-sync-like: the leaf's name (Python wrappers; native frames with --native) or its source line (without
# --native a C method like tensor.item() is self time of the Python line that calls it)
SYNC = re.compile(r"(^|\.)(synchronize|item|tolist|cpu|numpy|_local_scalar_dense)$|^(cu|cuda)\w*(Synchronize|Memcpy(?!\w*Async))")
IDLE_LINE = re.compile(r"\bsleep\(")  # a leaf's source line (time.sleep is C: the line calling it is the leaf)
SYNC_LINE = re.compile(r"\.(item|tolist|cpu|numpy)\(\s*\)|synchronize\(|\.to\(\s*['\"]cpu|non_blocking\s*=\s*False")
AREAS = (  # file prefix -> area (sglang/srt/...: where in SGLang), first match wins
    ("sglang_specv2_fixes/", "plugin"), ("sglang/srt/managers/", "managers (scheduler)"),
    ("sglang/srt/speculative/", "speculative"), ("sglang/srt/model_executor/", "model_executor"),
    ("sglang/srt/layers/", "layers"), ("sglang/srt/mem_cache/", "mem_cache"), ("sglang/", "sglang other"),
    ("torch/", "torch"),
)
OWN = ("plugin", "managers (scheduler)", "speculative", "model_executor", "layers", "mem_cache", "sglang other")
IDLE_AREA = "idle-like wait"


# ------------------------------------------------------------------------------------------------- recording
def pick_scheduler(procs):
    """(pid, title, how) of the scheduler among ``procs`` (psutil.Process-like: pid, cmdline(), name(),
    cpu_times()); raises RuntimeError when there is none."""
    seen = []
    for p in procs:
        try:
            title = " ".join(x for x in p.cmdline() if x) or p.name()
            name, t = p.name(), p.cpu_times()
            seen.append((title, name, t[0] + t[1], p.pid))
        except Exception:  # noqa: BLE001 - gone, or no access
            continue
    named = [s for s in seen if TITLE in s[0] or s[1] == TITLE[:15]]
    if named:
        title, _, _, pid = min(named, key=lambda s: s[0])
        return pid, title, f"title {TITLE}" + (f" (first of {len(named)})" if len(named) > 1 else "")
    if not seen:
        raise RuntimeError("no child process of the server")
    title, _, cpu, pid = max(seen, key=lambda s: s[2])
    return pid, title, f"most CPU time ({cpu:.0f}s) of {len(seen)} children: none titled {TITLE}"


def find_scheduler(pid):
    """``pick_scheduler`` over the children (recursive) of the server process ``pid``."""
    import psutil

    return pick_scheduler(psutil.Process(pid).children(recursive=True))


def ptrace_scope():
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return f.read().strip()
    except OSError:
        return None


def record(py_spy, pid, seconds, out_file, args=DEFAULT_ARGS):
    """``py-spy record`` of ``pid`` for ``seconds`` into ``out_file`` (raw); returns (argv, the summary line py-spy
    prints, e.g. "Samples: 1600 Errors: 0"); raises RuntimeError with py-spy's message (and the ptrace scope) when
    it fails or writes nothing."""
    argv = [py_spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--format", "raw", "--output",
            out_file, *shlex.split(args)]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{type(e).__name__}: {e}") from None
    said = [ln.strip() for ln in (p.stdout + "\n" + p.stderr).splitlines() if ln.strip()]
    if p.returncode or not os.path.exists(out_file) or not os.path.getsize(out_file):
        tail = " / ".join(said[-4:])[-600:]
        raise RuntimeError(f"py-spy exited {p.returncode}: {tail or 'no output'} (ptrace_scope {ptrace_scope()})")
    return argv, next((ln[ln.index("Samples:"):] for ln in reversed(said) if "Samples:" in ln), said[-1] if said else "")


# --------------------------------------------------------------------------------------------------- summary
def norm_file(f):
    """A frame's file as the package path: after the last ``site-packages/`` (``dist-packages/``), else from
    ``sglang/`` (or the plugin's package, or ``torch/``); py-spy's own short names are already that."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in f:
            return f.rsplit(marker, 1)[1]
    for pkg in ("sglang_specv2_fixes/", "sglang/", "torch/"):
        if f.startswith("/") and "/" + pkg in f:
            return pkg + f.split("/" + pkg, 1)[1]
    return f


def parse_frame(s):
    """(name, file, line or None) of one py-spy frame (a frame py-spy printed without file: (s, "", None))."""
    m = FRAME.match(s)
    if not m:
        return s, "", None
    return m.group(1), norm_file(m.group(2)), int(m.group(3)) if m.group(3) else None


def parse(raw):
    """py-spy raw (collapsed stacks: ``frame;frame;...;leaf COUNT`` a line, root first) -> [(thread, frames, count)]
    with frames [(name, file, line)]; thread "all" without ``--threads``; ``process N:...`` roots (``-s``) dropped."""
    out = []
    for ln in raw.splitlines():
        stack, _, n = ln.rstrip().rpartition(" ")
        if not stack or not n.isdigit():
            continue
        parts = stack.split(";")
        while parts and parts[0].startswith("process ") and not FRAME.match(parts[0]):
            parts.pop(0)
        thread = "all"
        if parts and THREAD.match(parts[0]):
            m = THREAD.match(parts.pop(0))
            thread = m.group(2) or m.group(1)
        out.append((thread, [parse_frame(x) for x in parts], int(n)))
    return out


def load(path):
    with open_text(path) as f:
        return f.read()


def area(file):
    m = PATCHED.search(file)
    if m:
        return f"patched: {m.group(1)}"
    return next((a for prefix, a in AREAS if file.startswith(prefix)), "other")


def fn_key(frame):
    return f"{frame[0]} ({frame[1]})" if frame[1] else frame[0]


def is_idle(frame, text=None):
    return bool(frame[1]) and bool(IDLE.search(f"{frame[1]}:{frame[0]}")) or bool(text and IDLE_LINE.search(text))


def is_sync(frame, text):
    return bool(SYNC.search(frame[0])) or bool(text and SYNC_LINE.search(text))


def _desc(d, key=lambda v: v):
    return sorted(d.items(), key=lambda kv: -key(kv[1]))


def _share(n, d):
    return round(n / d, 4) if d else None


def summarize(raw, source=None, top=TOP):
    """Summary of one py-spy raw file (a path, .gz or not, or its text); ``source(file, line)`` -> the source line's
    text or None (serving.py: the installed files), for hot lines and the sync-like test. ``threads``: per thread its
    samples, idle and sync shares and top self function; every other number is of ``main_thread`` (``MainThread``,
    else the thread with most non-idle samples): ``idle`` / ``sync`` (shares of samples whose leaf is idle-like,
    ``IDLE``, or CUDA-sync-like, ``SYNC`` / ``SYNC_LINE``), ``sync_sites``, ``top_self`` (functions by leaf samples,
    line numbers dropped: share, ``busy_share`` of the non-idle samples, ``kind`` idle / sync when most samples
    are, the 3 hottest lines), ``top_inclusive`` (by stacks containing them), ``areas`` (by the innermost SGLang or
    plugin frame of each stack, ``AREAS``; ``patched: <fix>`` for the plugin's compiled patched code; idle leaves
    as ``idle-like wait``; else the leaf's area) and ``leaf_areas`` (by the leaf frame itself)."""
    if isinstance(raw, str) and "\n" not in raw and os.path.exists(raw):
        raw = load(raw)
    texts = {}

    def text(frame):
        if source is None or frame[2] is None:
            return None
        key = frame[1:]
        if key not in texts:
            try:
                t = source(*key)
            except Exception:  # noqa: BLE001
                t = None
            texts[key] = " ".join(t.split())[:120] if t and t.strip() else None
        return texts[key]

    stacks, threads = [], {}
    for thread, frames, n in parse(raw):  # each stack's leaf classified once: (thread, frames, n, idle, sync)
        t = threads.setdefault(thread, dict(thread=thread, samples=0, idle=0, sync=0, self={}))
        t["samples"] += n
        idle = sync = False
        if frames:
            leaf = frames[-1]
            idle = is_idle(leaf, text(leaf))
            sync = not idle and is_sync(leaf, text(leaf))
            t["idle"] += n * idle
            t["sync"] += n * sync
            t["self"][fn_key(leaf)] = t["self"].get(fn_key(leaf), 0) + n
        stacks.append((thread, frames, n, idle, sync))
    main = "MainThread" if "MainThread" in threads else max(
        threads, key=lambda k: threads[k]["samples"] - threads[k]["idle"], default=None)
    m = threads.get(main) or dict(samples=0, idle=0, sync=0)
    ms, busy = m["samples"], m["samples"] - m["idle"]
    fns, incl, areas, leaf_areas, sites = {}, {}, {}, {}, {}
    for thread, frames, n, idle, sync in stacks:
        if thread != main or not frames:
            continue
        leaf = frames[-1]
        f = fns.setdefault(fn_key(leaf), dict(samples=0, sync=0, idle=0, lines={}, frame=leaf))
        f["samples"] += n
        f["sync"] += n * sync
        f["idle"] += n * idle
        f["lines"][leaf[2]] = f["lines"].get(leaf[2], 0) + n
        for k in dict.fromkeys(fn_key(x) for x in frames):  # once per stack, root first (ties: callers first)
            incl[k] = incl.get(k, 0) + n
        own = next((a for a in (area(x[1]) for x in reversed(frames)) if a in OWN or a.startswith("patched")), None)
        a = IDLE_AREA if idle else own or area(leaf[1])
        areas[a] = areas.get(a, 0) + n
        leaf_areas[area(leaf[1])] = leaf_areas.get(area(leaf[1]), 0) + n
        if sync:
            at = f"{fn_key(leaf)}:{leaf[2]}" if leaf[2] else fn_key(leaf)
            sites[at] = (sites.get(at, (0, None))[0] + n, text(leaf))
    return dict(
        samples=sum(t["samples"] for t in threads.values()),
        threads=[dict(thread=t["thread"], samples=t["samples"], idle=_share(t["idle"], t["samples"]),
                      sync=_share(t["sync"], t["samples"]), top=max(t["self"], key=t["self"].get, default=None))
                 for t in sorted(threads.values(), key=lambda t: -t["samples"])],
        main_thread=main, main_samples=ms, idle=_share(m["idle"], ms), sync=_share(m["sync"], ms),
        sync_sites=[dict(at=at, samples=n, share=_share(n, ms), text=tx) for at, (n, tx) in _desc(sites, lambda v: v[0])[:10]],
        top_self=[dict(function=k, samples=f["samples"], share=_share(f["samples"], ms),
                       busy_share=_share(f["samples"] - f["idle"], busy) if f["idle"] < f["samples"] else None,
                       kind="idle" if 2 * f["idle"] >= f["samples"] else "sync" if 2 * f["sync"] >= f["samples"] else None,
                       lines=[[ln, c, text(f["frame"][:2] + (ln,))] for ln, c in _desc(f["lines"])[:3]])
                  for k, f in _desc(fns, lambda f: f["samples"])[:top]],
        top_inclusive=[dict(function=k, samples=n, share=_share(n, ms)) for k, n in _desc(incl)[:top]],
        areas={k: _share(n, ms) for k, n in _desc(areas)}, leaf_areas={k: _share(n, ms) for k, n in _desc(leaf_areas)},
    )


def source_line(file, line):
    """The text of ``file`` (a py-spy package path like ``sglang/srt/managers/scheduler.py``, or absolute) at
    ``line`` in this environment; None for the plugin's patched code (not on disk) or what is not found."""
    import importlib.util
    import linecache

    if PATCHED.search(file):
        return None
    path = file
    if not os.path.isabs(file):  # a package path (sglang/srt/...) or a top-level module (threading.py)
        top = file.split("/", 1)[0]
        try:
            spec = importlib.util.find_spec(top[:-3] if top.endswith(".py") else top)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return None
        if top.endswith(".py"):
            path = spec.origin
        elif spec.submodule_search_locations:
            path = os.path.join(os.path.dirname(list(spec.submodule_search_locations)[0]), file)
        else:
            return None
    return linecache.getline(path, line) or None


def main(argv=None):
    return summary_cli(argv, __doc__, "raw", lambda path: summarize(path, source=source_line))


if __name__ == "__main__":
    sys.exit(main())
