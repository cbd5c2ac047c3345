#!/usr/bin/env python3
"""GPU profile of N scheduler steps of a running SGLang server, and the summary of its torch-profiler trace.

    python3 bench/profile_steps.py TRACE[.json|.json.gz] ...     # print summarize_trace() of each as JSON

``bench/serving.py --profile-steps N`` records one per configuration, concurrency and side (under load, after the
measured pairs). Pure Python (no torch): the summary also runs in CPU CI.

Recording (SGLang 0.5.11 / 0.5.12.post1): ``start`` (``POST /start_profile``) returns once the torch profiler runs
(HTTP 500 with the scheduler's message otherwise). The N-th batch after the start stops it before running, so the
trace holds N - 1 batches (with overlap scheduling also the GPU tail of the batch in flight at the start); without
batches nothing stops it but ``stop`` (``POST /stop_profile``). The file, ``DIR/PREFIX-<id>-TP-<rank>.trace.json.gz``,
is gzipped into place and exists before it is complete: ``wait_trace`` waits until it parses.

The trace (kineto's chrome trace, ``ph: "X"`` events in microseconds): GPU activity (``cat`` kernel / gpu_memcpy /
gpu_memset, ``args.correlation`` = the launching call's), the launches (``cuda_runtime`` / ``cuda_driver``:
``cudaLaunchKernel``, ``cuLaunchKernel(Ex)`` for triton, ``cudaGraphLaunch``), and with CPU activity
``ModelRunner.forward``'s ``step[MODE bs=B]`` ranges (``user_annotation``). Kernels replayed from a CUDA graph carry
the graph launch's correlation id (or ``args["graph id"]``); a trace without them says so in ``notes``.
"""

from __future__ import annotations

import bisect
import glob
import gzip
import json
import os
import re
import sys
import time
import zlib

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
GRAPH_LAUNCH = re.compile(r"^cu(da)?GraphLaunch")
STEP_SPAN = re.compile(r"^step\[([A-Z_0-9]+)(?: bs=(\d+))?")  # model_runner._build_step_span_name
# kernel name -> category: first match wins (case-insensitive); gpu_memcpy / gpu_memset events are "copy"
CATEGORIES = (
    ("nccl", r"nccl|all_?reduce|all_?gather|reduce_?scatter|cross_device_reduce"),
    ("attention", r"attn|attention|fmha|flash_fwd|prefillwith|decodewith|_fwd_kernel|_fwd_grouped_kernel|merge_state"),
    ("gemm", r"gemm|matmul|nvjet|cublas|cutlass|xmma|splitk"),
    ("sampling", r"top_?k|top_?p|sampl|softmax|argmax|sort|multinomial|verify_tree|tree_speculative|build_tree"),
    ("copy", r"memcpy|memset|copy|kv_?cache|kv_buffer|store_kv|move_kv|assign_|index|scatter|gather"),
)
CATEGORY_NAMES = tuple(name for name, _ in CATEGORIES) + ("other",)
_CATEGORY_RE = [(name, re.compile(rx, re.I)) for name, rx in CATEGORIES]
OUTSIDE = "outside step spans"  # launched outside ModelRunner.forward: graph-replayed draft steps and draft extend,
# sampling, verification, KV-cache moves, the scheduler's own tensor work
UNTRACED = "launch not in trace"  # launched before the profiler started
TARGET_MODES = ("TARGET_VERIFY",)  # one target forward per speculative step; without speculation: DECODE / MIXED
PLAIN_MODES = ("DECODE", "MIXED")
PREFILL_MODES = ("EXTEND", "MIXED")  # a prefill's span (MIXED: a prefill with decodes; a target step without speculation)
EXTRA_S = 10.0  # planning: per profile on top of its load (trace export in the scheduler, parse, summary)
TOP = 15
GAP_MIN_US = 8.0  # idle stretches shorter than this are a kernel's own launch latency, not the host's
GRAPH_REPLAY = "graph replay"  # idle_gaps' "op" of a gap a CUDA-graph launch ended


# ------------------------------------------------------------------------------------------------- recording
def _post(url, path, payload=None, timeout=60):
    import requests

    r = requests.post(url + path, json=payload, timeout=timeout)
    if r.status_code != 200:
        raise RuntimeError(f"{path}: HTTP {r.status_code}: {r.text.strip()[:300]}")
    return r.text.strip()


def start(url, out_dir, steps, prefix, activities=("CPU", "GPU")):
    """``POST /start_profile``: the profiler runs when this returns (raises with the server's message otherwise)."""
    return _post(url, "/start_profile", dict(output_dir=out_dir, num_steps=int(steps), activities=list(activities),
                                             with_stack=False, record_shapes=False, profile_prefix=prefix))


def stop(url):
    """``POST /stop_profile``: stop a profile that has not reached its steps (writes the same file)."""
    return _post(url, "/stop_profile", timeout=120)


def find_traces(out_dir):
    """The trace files in ``out_dir``, rank 0's first."""
    files = sorted(glob.glob(os.path.join(out_dir, "*.trace.json.gz")) + glob.glob(os.path.join(out_dir, "*.trace.json")))
    return sorted(files, key=lambda p: "-TP-0" not in os.path.basename(p))


def open_text(path):
    """``path`` opened as text, gunzipped when it ends in .gz."""
    return (gzip.open if path.endswith(".gz") else open)(path, "rt", errors="replace")


def load_trace(path):
    """The parsed trace; raises (EOFError, zlib.error, ValueError) while the file is still being written."""
    with open_text(path) as f:
        return json.load(f)


def wait_trace(out_dir, timeout, keep_waiting=None, poll=0.5):
    """(path, parsed trace, all trace files) once rank 0's trace is complete, or None after ``timeout`` seconds or
    once ``keep_waiting()`` is false (one last look then)."""
    deadline = time.monotonic() + timeout
    while True:
        last = time.monotonic() >= deadline or (keep_waiting is not None and not keep_waiting())
        files = find_traces(out_dir)
        if files:
            try:
                return files[0], load_trace(files[0]), files
            except (EOFError, OSError, zlib.error, ValueError):
                pass
        if last:
            return None
        time.sleep(poll)


# --------------------------------------------------------------------------------------------------- summary
def category(name, cat="kernel"):
    if cat != "kernel":
        return "copy"
    return next((c for c, rx in _CATEGORY_RE if rx.search(name)), "other")


def _union_us(intervals):
    busy, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    return busy


def _ms(us):
    return round(us / 1000.0, 3)


def _innermost(ops, starts, t):
    """Name of the innermost ``cpu_op`` (of ``ops``, sorted by start; ``starts`` their starts) running at time ``t``."""
    best, last = None, bisect.bisect_right(starts, t)
    for i in range(last - 1, max(-1, last - 400), -1):
        s, e, name = ops[i]
        if s <= t <= e and (best is None or e - s < best[0]):
            best = (e - s, name)
    return best[1] if best else None


def idle_gaps(gpu, launch_of, ops, min_us=GAP_MIN_US, top=12):
    """Where the GPU waits for the host: each stretch of at least ``min_us`` with no GPU event running (over every
    stream), named by the launch that ended it. ``gpu``: GPU events; ``launch_of``: correlation -> (launch API name,
    its CPU start); ``ops``: (start, end, name) of the CPU ops, sorted. A gap ended by a CUDA-graph launch is
    ``graph replay`` (the host was still preparing the graph's inputs and metadata, or inside the launch call); a
    gap ended by an eager kernel or copy carries the innermost CPU op that launched it (``aten::index``,
    ``aten::copy_``, a Triton kernel's launch without an op: ``-``). Returns ``idle_ms`` (the summed gaps),
    ``gaps`` (count), ``by_launch`` (ms per graph replay / eager kernel / untraced launch) and ``top`` (the ``top``
    (op, next GPU event) pairs with the most idle time, {op, next, count, ms})."""
    starts = [o[0] for o in ops]
    evs = sorted(((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e) for e in gpu), key=lambda x: x[0])
    by_launch, pairs, total, n, end = {}, {}, 0.0, 0, None
    for s, e, ev in evs:
        if end is not None and s - end >= min_us:
            gap = s - end
            launch = launch_of.get((ev.get("args") or {}).get("correlation"))
            if launch is None:
                kind, op = "launch not in trace", "-"
            elif GRAPH_LAUNCH.match(launch[0]):
                kind, op = GRAPH_REPLAY, GRAPH_REPLAY
            else:
                kind, op = "eager", _innermost(ops, starts, launch[1]) or "-"
            by_launch[kind] = by_launch.get(kind, 0.0) + gap
            key = (op, ev.get("name", "?")[:80])
            k, us = pairs.get(key, (0, 0.0))
            pairs[key] = (k + 1, us + gap)
            total += gap
            n += 1
        end = e if end is None else max(end, e)
    best = sorted(pairs.items(), key=lambda kv: -kv[1][1])[:top]
    return dict(idle_ms=_ms(total), gaps=n, min_gap_us=min_us,
                by_launch={k: _ms(v) for k, v in sorted(by_launch.items(), key=lambda kv: -kv[1])},
                top=[dict(op=op, next=nxt, count=k, ms=_ms(us)) for (op, nxt), (k, us) in best])


def summarize_trace(trace):
    """Summary of one chrome trace (a path, .json or .json.gz, or the parsed trace) over its GPU events:
    ``window_ms`` (first GPU event to last end), ``gpu_busy_ms`` (the union of their intervals: overlapping streams
    count once), ``busy_fraction``; ``categories_ms`` (summed durations by ``CATEGORIES``: concurrent streams can add
    up past the busy time) and ``top_kernels``; ``graph`` (graph launches, the kernels replayed from them,
    ``visible`` False when none of those is in the trace); from the ``step[MODE bs=B]`` spans (CPU activity only)
    ``steps_seen`` (``target``: TARGET_VERIFY spans, else DECODE + MIXED; ``request_steps``: their batch sizes
    summed), ``phases_ms`` (GPU time by the span its launch ran in) and ``busy_ms_per_step``; ``idle``
    (``idle_gaps``); ``notes``: what limits the numbers."""
    if isinstance(trace, str):
        trace = load_trace(trace)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    gpu, spans, ops, launch_of = [], [], [], {}
    graph_corr, graph_calls, graph_cpu_us = set(), 0, 0.0
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, args = e.get("cat"), e.get("args") or {}
        if cat in GPU_CATS:
            gpu.append(e)
        elif cat in LAUNCH_CATS:
            corr = args.get("correlation")
            if corr is not None:
                launch_of[corr] = (e.get("name", ""), float(e["ts"]))
            if GRAPH_LAUNCH.match(e.get("name", "")):
                graph_calls += 1
                graph_cpu_us += float(e.get("dur", 0))
                if corr is not None:
                    graph_corr.add(corr)
        elif cat == "cpu_op":
            ops.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e.get("name", "?")))
        elif cat == "user_annotation":
            m = STEP_SPAN.match(e.get("name", ""))
            if m:
                spans.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), m.group(1), int(m.group(2) or 0)))
    spans.sort()
    starts = [s[0] for s in spans]
    cats = dict.fromkeys(CATEGORY_NAMES, 0.0)
    phases, names, intervals = {}, {}, []
    n_kernels = graph_kernels = 0
    graph_kernels_us = 0.0
    for e in gpu:
        ts, dur, args = float(e["ts"]), float(e.get("dur", 0)), e.get("args") or {}
        intervals.append((ts, ts + dur))
        c = category(e.get("name", ""), e["cat"])
        cats[c] += dur
        n_kernels += e["cat"] == "kernel"
        key = (e.get("name", "?"), c)
        k, us = names.get(key, (0, 0.0))
        names[key] = (k + 1, us + dur)
        corr = args.get("correlation")
        if corr in graph_corr or args.get("graph id"):
            graph_kernels += 1
            graph_kernels_us += dur
        launched = launch_of[corr][1] if corr in launch_of else None
        if launched is None:
            phase = UNTRACED
        else:
            i = bisect.bisect_right(starts, launched) - 1
            phase = spans[i][2] if i >= 0 and spans[i][0] <= launched <= spans[i][1] else OUTSIDE
        phases[phase] = phases.get(phase, 0.0) + dur
    window = (max(e for _, e in intervals) - min(s for s, _ in intervals)) if intervals else 0.0
    busy = _union_us(intervals)
    notes = []
    seen = None
    if spans:
        per_mode = {}
        for _, _, mode, _ in spans:
            per_mode[mode] = per_mode.get(mode, 0) + 1
        modes = TARGET_MODES if any(m in per_mode for m in TARGET_MODES) else PLAIN_MODES
        target = [s for s in spans if s[2] in modes]
        seen = dict(spans=per_mode, target=len(target), target_modes=list(modes), request_steps=sum(s[3] for s in target))
        prefill = {m: n for m, n in per_mode.items() if m in PREFILL_MODES and m not in modes}
        if prefill:  # one side's window can hold a prefill and the other's not, which inflates that side's per-step time
            notes.append(f"a prefill in the window ({', '.join(f'{n} {m}' for m, n in prefill.items())} span(s), "
                         f"{_ms(sum(phases.get(m, 0.0) for m in prefill))} ms of GPU time launched in them): busy per "
                         "step / token include it, so they do not compare with a window without one")
    else:
        notes.append("no step[...] spans (no CPU activity in the profile): steps and phases unknown")
    if graph_calls and not graph_kernels:
        notes.append(f"CUDA-graph kernels absent from the trace: {graph_calls} graph launches, no kernel correlated to "
                     "them; gpu_busy_ms counts the kernels launched outside graphs only (a lower bound)")
    if not gpu:
        notes.append("no GPU events in the trace")
    top = sorted(names.items(), key=lambda kv: -kv[1][1])[:TOP]
    return dict(
        window_ms=_ms(window), gpu_busy_ms=_ms(busy), busy_fraction=round(busy / window, 4) if window else None,
        n_kernels=n_kernels, n_gpu_events=len(gpu),
        categories_ms={k: _ms(v) for k, v in cats.items()},
        top_kernels=[dict(name=n[:160], category=c, count=k, ms=_ms(us)) for (n, c), (k, us) in top],
        graph=dict(launches=graph_calls, launch_cpu_ms=_ms(graph_cpu_us), kernels=graph_kernels,
                   kernels_ms=_ms(graph_kernels_us), visible=not (graph_calls and not graph_kernels)),
        steps_seen=seen, phases_ms={k: _ms(v) for k, v in sorted(phases.items(), key=lambda kv: -kv[1])},
        busy_ms_per_step=_ms(busy / seen["target"]) if seen and seen["target"] else None,
        idle=idle_gaps(gpu, launch_of, sorted(ops)),
        notes=notes,
    )


def summary_cli(argv, doc, key, summarize):
    """``python3 bench/<module>.py FILE...``: print ``{key: FILE, **summarize(FILE)}`` per file as JSON (the command
    line of this module and of bench/host_profile.py)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(doc.strip())
        return 0 if argv else 2
    for path in argv:
        print(json.dumps({key: path, **summarize(path)}, indent=1))
    return 0


def main(argv=None):
    return summary_cli(argv, __doc__, "trace", summarize_trace)


if __name__ == "__main__":
    sys.exit(main())
