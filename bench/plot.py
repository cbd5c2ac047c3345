#!/usr/bin/env python3
"""Report for ``bench/serving.py``: Markdown table and PNG plots from its ``results.json``.

    python3 bench/plot.py RESULTS_JSON OUTDIR        # writes OUTDIR/results.md, OUTDIR/serving.png, OUTDIR/pairs.png
    python3 bench/plot.py --merge OUT_JSON PART_JSON...   # one release's parts run on several GPUs -> one results.json

The PNGs need matplotlib (without it only the Markdown is written). Ratios are b / a, the run's two sides
(``meta.sides``, baseline a first; results without it: stock, plugin), each the median over the a/b pairs of a
point. GPU profiles (``profiles``) and host profiles (``host_profiles``) add tables (``PROFILE_DEFINITIONS``,
``HOST_DEFINITIONS``); docs/bench/README.md.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys

# serving.py's default pair (no --side), and the sides of results written before meta.sides
DEFAULT_SIDES = (dict(name="stock", selection="off"), dict(name="plugin", selection="auto"))
PNG_FILES = ("serving.png", "pairs.png")


def sides(results):
    """The run's two side records (``meta.sides``), baseline a first; every ratio is b / a."""
    return results.get("meta", {}).get("sides") or list(DEFAULT_SIDES)


def side_names(results):
    """(a, b): the names of ``sides``."""
    return tuple(s["name"] for s in sides(results))


# ----------------------------------------------------------------------------------------- summary
def _num(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _median(xs):
    xs = [x for x in (_num(v) for v in xs) if x is not None]
    return statistics.median(xs) if xs else None


def _ratio(a, b):
    a, b = _num(a), _num(b)
    return a / b if a is not None and b not in (None, 0) else None


def summarize(results):
    """One row per (config, concurrency) that has at least one successful point."""
    rows = []
    a, b = names = side_names(results)
    for name, cfg in results.get("configs", {}).items():
        pts = [p for p in cfg.get("points", []) if p.get("ok")]
        for c in sorted({p["concurrency"] for p in pts}):
            at = [p for p in pts if p["concurrency"] == c]
            side = {s: [p for p in at if p["side"] == s] for s in names}
            row = dict(config=name, concurrency=c, n={s: len(side[s]) for s in names})
            for key in ("output_throughput", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms",
                        "median_ttft_ms", "accept_length"):
                row[key] = {s: _median(p.get(key) for p in side[s]) for s in names}
            by_rep = {s: {p["rep"]: p for p in side[s]} for s in names}
            reps = sorted(set(by_rep[a]) & set(by_rep[b]))
            pair = lambda key: [_ratio(by_rep[b][r].get(key), by_rep[a][r].get(key)) for r in reps]  # noqa: E731
            row["pairs"] = len(reps)
            row["pair_tpot_ratios"] = [x for x in pair("median_tpot_ms") if x is not None]
            row["tpot_ratio"] = _median(row["pair_tpot_ratios"])
            row["pair_throughput_ratios"] = [x for x in pair("output_throughput") if x is not None]
            row["throughput_ratio"] = _median(row["pair_throughput_ratios"])
            row["p99_tpot_ratio"] = _median(pair("p99_tpot_ms"))
            row["median_itl_ratio"] = _median(pair("median_itl_ms"))
            row["p99_itl_ratio"] = _median(pair("p99_itl_ms"))
            row["greedy_identical"] = (cfg.get("greedy") or {}).get("identical")
            rows.append(row)
    return rows


# ------------------------------------------------------------------------------------ GPU profiles
PROFILE_CATEGORIES = ("gemm", "attention", "sampling", "copy", "nccl", "other")  # bench/profile_steps.CATEGORY_NAMES
PROFILE_DEFINITIONS = (
    "GPU profiles (`bench/serving.py --profile-steps N`, `bench/profile_steps.py`): after a configuration's pairs, "
    "each side gets the same bench_serving load once more (not measured) and, once it runs `conc` requests with none "
    "waiting, SGLang's `POST /start_profile` records N scheduler steps with the torch profiler. "
    "**busy %**: the union of the GPU's kernel / memcpy / memset intervals over the trace window (first GPU event to "
    "last); with CPU activity the profiler's own CPU overhead widens the gaps (kernel times are unaffected). "
    "**steps**: the target forwards in the window (`step[TARGET_VERIFY]` spans of `ModelRunner.forward`; `DECODE` "
    "without speculation); **busy ms/step** = busy / steps. **tokens** = the batch sizes of those steps summed, times "
    "the accept length measured over the profile's load (1 without speculation); **busy ms/token** = busy / tokens, "
    "**wall ms/token** = window / tokens. Kernel time per category (ms per step): summed kernel durations by kernel "
    "name (gemm, attention, sampling incl. top-k / softmax / tree verify, copy incl. memcpy / KV-cache moves, nccl, "
    "other). **GPU idle by launch**: the GPU's idle stretches of >= 8 us per step, by what the host launched to end "
    "them (`profile_steps.idle_gaps`: a CUDA-graph replay, an eager kernel or copy, or a launch before the trace). "
    "**ceiling** = (1000 / {a} tok/s) / {b} busy ms/token, with {a} tok/s the median of {a}'s measured points at that "
    "concurrency: the {b} / {a} output-throughput ratio {b} would reach if its profiled GPU work per token ran back to "
    "back (all its CPU time hidden, no idle GPU) while {a} stayed as measured, i.e. the largest ratio reachable without "
    "shrinking {b}'s GPU work. **ratio / busy** = the measured {b} / {a} ratio divided by {b}'s busy fraction: the "
    "same bound from the busy fraction alone. The window is steady "
    "decode, while measured tok/s also include prefills and each wave's ramp: the ceiling reads a little high; its "
    "edges hold the GPU tail of the step in flight at the start and lose the last step's unfinished kernels (about "
    "1/N either way).")


def profile_side(p):
    """One profile entry of ``results.json`` -> the numbers the tables show (None where not derivable)."""
    seen = p.get("steps_seen") or {}
    steps = seen.get("target") or None
    acc = _num(p.get("accept_length")) if p.get("speculative", True) else 1.0
    tokens = seen.get("request_steps") * acc if seen.get("request_steps") and acc else None
    busy, window = _num(p.get("gpu_busy_ms")), _num(p.get("window_ms"))
    idle = p.get("idle") or {}
    per = lambda d: {k: round(v / steps, 3) for k, v in (d or {}).items()} if steps else None  # noqa: E731
    return dict(
        error=p.get("error"), steps=steps, requested_steps=p.get("steps"), busy_fraction=_num(p.get("busy_fraction")),
        gpu_busy_ms=busy, window_ms=window, busy_ms_per_step=_num(p.get("busy_ms_per_step")), accept_length=acc,
        tokens=round(tokens, 1) if tokens else None,
        busy_ms_per_token=round(busy / tokens, 4) if tokens and busy else None,
        wall_ms_per_token=round(window / tokens, 4) if tokens and window else None,
        categories_ms_per_step=per(p.get("categories_ms")), phases_ms_per_step=per(p.get("phases_ms")),
        graph_kernels_visible=(p.get("graph") or {}).get("visible"), top_kernels=(p.get("top_kernels") or [])[:5],
        # profile_steps.idle_gaps (traces summarized before idle_gaps existed have none)
        idle_ms_per_step=per(idle["by_launch"]) if idle else None, idle_top=(idle.get("top") or [])[:5],
        notes=p.get("notes") or [])


def profile_rows(results):
    """Per (config, concurrency) with profiles, in recorded order: ``names`` (a, b), ``sides`` ({name:
    ``profile_side``}), ``A_tok_s`` (A: side a's name, e.g. ``stock_tok_s``) / ``measured_ratio`` (``summarize``'s
    medians), ``ceiling`` and ``ratio_over_busy`` (``PROFILE_DEFINITIONS``)."""
    measured = {(r["config"], r["concurrency"]): r for r in summarize(results)}
    a, b = side_names(results)
    out = {}
    for p in results.get("profiles") or []:
        row = out.setdefault((p["config"], p["concurrency"]), dict(config=p["config"], concurrency=p["concurrency"],
                                                                   names=(a, b), sides={}))
        row["sides"][p["side"]] = profile_side(p)
    for key, row in out.items():
        m = measured.get(key)
        tok_s = row[f"{a}_tok_s"] = m["output_throughput"][a] if m else None
        row["measured_ratio"] = m["throughput_ratio"] if m else None
        bpt = (row["sides"].get(b) or {}).get("busy_ms_per_token")
        row["ceiling"] = round(1000.0 / tok_s / bpt, 3) if tok_s and bpt else None
        bf = (row["sides"].get(b) or {}).get("busy_fraction")
        row["ratio_over_busy"] = round(row["measured_ratio"] / bf, 3) if row["measured_ratio"] and bf else None
    return list(out.values())


def profile_markdown(rows, lead=(("config", lambda r: r["config"]),)):
    """The profile tables (definitions, per-side numbers, ceilings, failures); ``lead``: (header, cell(row)) columns
    before concurrency."""
    if not rows:
        return []
    heads = " | ".join(h for h, _ in lead)
    cells = lambda r: " | ".join(str(f(r)) for _, f in lead)  # noqa: E731
    a, b = rows[0]["names"]
    lines = ["", PROFILE_DEFINITIONS.format(a=a, b=b), "",
             f"| {heads} | conc | side | steps | busy % | busy ms/step | busy ms/token | wall ms/token | "
             + " | ".join(PROFILE_CATEGORIES) + " | by phase (ms/step) | GPU idle by launch (ms/step) | notes |",
             "|" + "---|" * (len(lead) + 10 + len(PROFILE_CATEGORIES))]
    failed = []
    for r in rows:
        for s in r["names"]:
            d = r["sides"].get(s)
            if d is None:
                continue
            if d["error"]:
                failed.append(f"* {cells(r)} c={r['concurrency']} {s}: {str(d['error'])[:200]}")
                continue
            cat = d["categories_ms_per_step"] or {}
            notes = (["CUDA-graph kernels not in the trace: busy is a lower bound"] if d["graph_kernels_visible"] is False
                     else []) + [x for x in d["notes"] if not x.startswith("CUDA-graph")]
            lines.append(
                f"| {cells(r)} | {r['concurrency']} | {s} | {d['steps'] or '-'} | {_pct(d['busy_fraction'])} | "
                f"{_f(d['busy_ms_per_step'], 2)} | {_f(d['busy_ms_per_token'], 3)} | {_f(d['wall_ms_per_token'], 3)} | "
                + " | ".join(_f(cat.get(k), 2) for k in PROFILE_CATEGORIES) + " | "
                + (", ".join(f"{k} {v:.2f}" for k, v in (d["phases_ms_per_step"] or {}).items()) or "-") + " | "
                + (", ".join(f"{k} {v:.2f}" for k, v in (d.get("idle_ms_per_step") or {}).items()) or "-")
                + f" | {'; '.join(notes).replace('|', '/') or '-'} |")
    lines += ["", f"| {heads} | conc | {a} tok/s | {b} / {a} measured | {b} busy % | {b} busy ms/token | "
                  f"{a} busy ms/token | **ceiling** | ratio / busy |",
              "|" + "---|" * (len(lead) + 8)]
    for r in rows:
        pl, st = r["sides"].get(b) or {}, r["sides"].get(a) or {}
        lines.append(f"| {cells(r)} | {r['concurrency']} | {_f(r.get(f'{a}_tok_s'))} | {_r(r['measured_ratio'])} | "
                     f"{_pct(pl.get('busy_fraction'))} | {_f(pl.get('busy_ms_per_token'), 3)} | "
                     f"{_f(st.get('busy_ms_per_token'), 3)} | **{_r(r['ceiling'])}** | {_r(r['ratio_over_busy'])} |")
    if failed:
        lines += ["", "Profiles that failed:", ""] + failed
    return lines


# ------------------------------------------------------------------------------------ host profiles
HOST_DEFINITIONS = (
    "Host profiles (`bench/serving.py --host-profile-seconds S`, `bench/host_profile.py`): in the profiles' unmeasured "
    "load, once steady and before the torch profile, `py-spy record --nonblocking --idle --threads` samples the "
    "server's scheduler process (`sglang::scheduler`) for S seconds; numbers are shares of the samples of its main "
    "thread (the scheduler loop; `--idle`: every tick counts, so shares are of wall-clock time). **idle-like**: the "
    "leaf is a wait (threading / selectors / zmq poll, sleep); **sync-like**: the leaf is a CUDA-synchronizing call "
    "(`synchronize`, or a source line calling `.item()` / `.tolist()` / `.cpu()` / `.to('cpu')`: without `--native` "
    "a C call is self time of the Python line calling it). **areas**: the innermost SGLang or plugin frame of each "
    "stack (`patched: <fix>` = the plugin's compiled patched functions), else the leaf's package. **self** = samples "
    "with the function as the leaf (its hottest line after `:`), **incl** = samples with it anywhere on the stack.")


def host_profile_markdown(entries, lead=(("config", lambda e: e["config"]),), top=10):
    """The host profile tables: one row per entry (main thread, idle / sync-like shares, areas, top 3 self), then per
    entry the ``top`` functions by self and by inclusive samples; failures listed. ``lead``: (header, cell(entry))."""
    if not entries:
        return []
    heads = " | ".join(h for h, _ in lead)
    cells = lambda e: " | ".join(str(f(e)) for _, f in lead)  # noqa: E731
    pct = lambda d, n=4: ", ".join(f"{k} {_pct(v)}" for k, v in list((d or {}).items())[:n]) or "-"  # noqa: E731
    lines = ["", HOST_DEFINITIONS, "", f"| {heads} | conc | side | scheduler pid | main-thread samples (all threads) | "
             "idle-like % | sync-like % | areas % | top self % |", "|" + "---|" * (len(lead) + 8)]
    failed, details = [], []
    for e in entries:
        if e.get("error"):
            failed.append(f"* {cells(e)} c={e['concurrency']} {e['side']}: {str(e['error'])[:300]}")
            continue
        where = lambda x: x["function"] + (f":{x['lines'][0][0]}" if x.get("lines") and x["lines"][0][0] else "")  # noqa: E731
        top3 = "; ".join(f"{where(x)} {_pct(x['share'])}" for x in (e.get("top_self") or [])[:3])
        lines.append(f"| {cells(e)} | {e['concurrency']} | {e['side']} | {e.get('pid')} `{e.get('title')}` | "
                     f"{e.get('main_samples')} ({e.get('samples')}) | {_pct(e.get('idle'))} | {_pct(e.get('sync'))} | "
                     f"{pct(e.get('areas'))} | {top3.replace('|', '/') or '-'} |")
        details.append(f"* {cells(e)} c={e['concurrency']} {e['side']}: threads "
                       + ", ".join(f"{t['thread']} {t['samples']} (idle-like {_pct(t['idle'])}%)" for t in e.get("threads") or [])
                       + (f"; {e['note']}" if e.get("note") else ""))
        details += [f"  * self {_pct(x['share'])}%" + (f" ({x['kind']})" if x.get("kind") else "") + f": `{where(x)}`"
                    + (f" `{x['lines'][0][2]}`" if x.get("lines") and x["lines"][0][2] else "") for x in (e.get("top_self") or [])[:top]]
        details += [f"  * incl {_pct(x['share'])}%: `{x['function']}`" for x in (e.get("top_inclusive") or [])[:top]]
        details += [f"  * sync-like {_pct(x['share'])}%: `{x['at']}`" + (f" `{x['text']}`" if x.get("text") else "")
                    for x in (e.get("sync_sites") or [])[:5]]
    if details:
        lines += ["", f"Top {top} functions per host profile (self: the leaf, with its hottest line and its source; incl: "
                      "anywhere on the stack), the top sync-like lines:", ""] + details
    if failed:
        lines += ["", "Host profiles that failed:", ""] + failed
    return lines


# ---------------------------------------------------------------------------------------- markdown
def _f(x, nd=1, scale=1):
    x = _num(x)
    return "-" if x is None else f"{scale * x:.{nd}f}"


def _r(x):
    return _f(x, 3)


def _pct(x):
    return _f(x, 1, 100)


def _yn(x):
    return {True: "yes", False: "**NO**"}.get(x, "-")


def spec_path(side):
    if not side or side.get("error"):
        return "-"
    if not side.get("speculative"):
        return "no spec" + ("" if side.get("overlap_schedule") else " (overlap off)")
    return "spec v2 (overlap)" if side.get("overlap_schedule") else "spec v1 (overlap off)"


def side_label(s):
    """A side of ``meta.sides`` as given: NAME=SELECTION[@RELEASE][,ENV=VAL...]."""
    return (f"{s['name']}={s['selection']}" + (f"@{s['release']}" if s.get("release") else "")
            + "".join(f",{k}={v}" for k, v in (s.get("env") or {}).items()))


def pools_differ(cfg):
    """The KV pools (``max_total_num_tokens``) both servers of a configuration reported, when they differ."""
    pools = [sd.get("max_total_num_tokens") for sd in cfg.get("sides", {}).values()]
    return pools if len(pools) == 2 and None not in pools and pools[0] != pools[1] else None


def target_words(model, inner=""):
    """``NAME target (hidden H, L layers[INNER]) + draft DRAFT`` for a real-size model summary (runs that recorded no
    name or draft: a Llama shape and its EAGLE3 draft); the real-size sentence here and the parity header use it."""
    return (f"{model.get('name') or 'Llama-shaped'} target (hidden {model.get('hidden_size')}, "
            f"{model.get('num_hidden_layers')} layers{inner}) + draft {model.get('draft') or 'EAGLE3, 1 layer'}")


def markdown(results):
    m = results.get("meta", {})
    a = m.get("args", {})
    sa, sb = side_names(results)
    pair = lambda r, key, nd=1: f"{_f(r[key][sa], nd)} | {_f(r[key][sb], nd)}"  # noqa: E731
    lines = [
        f"# Serving benchmark: {sa} vs {sb}",
        "",
        f"Run {m.get('date', '?')} on {m.get('device', '?')}, sglang {m.get('sglang', '?')} (the harness and its "
        f"bench_serving client), torch {m.get('torch', '?')}, plugin {m.get('plugin_version', '?')}; "
        f"{'complete' if m.get('complete') else 'INCOMPLETE: ' + str(m.get('stop_reason') or 'configurations skipped')} "
        f"({_f(m.get('elapsed_s'), 0)} s of a {_f(a.get('budget_s'), 0)} s budget)"
        + (f"; **{m['points_failed']} of {m.get('points')} points failed** (listed at the end)." if m.get("points_failed")
           else "."),
        "",
        "Sides (`--side NAME=SELECTION[@RELEASE][,ENV=VAL...]`, SELECTION the server's `--specv2-fixes`): "
        + "; ".join(f"**{k}** `{side_label(s)}`" for k, s in zip("ab", sides(results)))
        + f". Ratios are {sb} / {sa} (median over pairs, order alternating between repeats): throughput > 1 and "
        f"TPOT/ITL < 1 mean {sb} is faster.",
        "",
        f"Driver: SGLang's own `sglang.bench_serving` ({m.get('bench_mode', '?')}), `--backend sglang --dataset-name random-ids "
        f"--tokenize-prompt --random-input-len {a.get('input_len')} --random-output-len {a.get('output_len')} "
        f"--random-range-ratio 1.0 --request-rate inf --flush-cache --seed {a.get('seed', 1)}`, `--max-concurrency` per column; same prompts "
        "for both sides. Models: the tiny real-weight models of `sglang_specv2_fixes.testing.tiny_models` (their speed says "
        "nothing about large models: it shows scheduling/host overhead and speculative acceptance, where the plugin's "
        "code runs). Both servers of a configuration are up together on one GPU, benchmarked one at a time"
        + (" (`--sleep-on-idle` on both, so the idle one does not spin)."
           if a.get("sleep_on_idle", "--sleep-on-idle" in m.get("common_server_args", [])) else ".")
        + f" Server flags: `{' '.join(m.get('common_server_args', []))}`"
        + (f" plus `{a['server_args']}`" if a.get("server_args") else "")
        + " (the registered tests' COMMON; their test-only `SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY` is not set).",
        "",
    ]
    if m.get("real_size"):  # bench/serving.py --real-size (bench/real_size.py): the models sentence above does not apply
        rs, md_ = m["real_size"], m["real_size"].get("model", {})
        lines += [f"**Real-size mode**: instead of the tiny models, a {md_.get('target_params_b', '?')} B-parameter "
                  f"{target_words(md_)} "
                  "(`bench/real_size_models.py`), dummy weights (`--load-format dummy`, `--speculative-draft-load-format dummy`), "
                  f"acceptance simulated by SGLang: `{' '.join(f'{k}={v}' for k, v in (rs.get('env') or {}).items())}` on both "
                  "servers; greedy check skipped (dummy weights). Report: `bench/real_size_report.py`.", ""]
    if m.get("parts"):
        lines += [
            "Run as " + str(len(m["parts"])) + " parts side by side, each on GPUs of its own (one, or N for a TP N part; "
            "a configuration's pairs always on the same GPUs): " + "; ".join(
                f"GPU{'s' if ',' in str(p.get('cuda_visible_devices', '')) else ''} {p.get('cuda_visible_devices', '?')}: "
                f"{', '.join(p.get('args', {}).get('configs', []))} "
                f"({_f(p.get('elapsed_s'), 0)} s{'' if p.get('complete') else ', INCOMPLETE: ' + str(p.get('stop_reason'))})"
                for p in m["parts"]) + ".",
            "",
        ]
    lines += [f"| config | conc | pairs | output tok/s {sa} | {sb} | {sb} / {sa} | TPOT median ms {sa} | {sb} | {sb} / {sa} | "
              f"accept len {sa} | {sb} | greedy identical |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = summarize(results)
    for r in rows:
        lines.append(f"| {r['config']} | {r['concurrency']} | {r['pairs']} | {pair(r, 'output_throughput')} | "
                     f"{_r(r['throughput_ratio'])} | {pair(r, 'median_tpot_ms', 2)} | {_r(r['tpot_ratio'])} | "
                     f"{pair(r, 'accept_length', 2)} | {_yn(r['greedy_identical'])} |")
    if not rows:
        lines.append("| (no successful points) |||||||||||| ")
    lines += ["", f"Tail latency (ms, median over repeats; {sb} / {sa} median over pairs):", "",
              f"| config | conc | TPOT p99 {sa} | {sb} | ratio | ITL median {sa} | {sb} | ratio | ITL p99 {sa} | {sb} | ratio | "
              f"TTFT median {sa} | {sb} |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['concurrency']} | {pair(r, 'p99_tpot_ms', 2)} | {_r(r['p99_tpot_ratio'])} | "
                     f"{pair(r, 'median_itl_ms', 2)} | {_r(r['median_itl_ratio'])} | {pair(r, 'p99_itl_ms', 2)} | "
                     f"{_r(r['p99_itl_ratio'])} | {pair(r, 'median_ttft_ms')} |")
    multi = [r for r in rows if r["pairs"] > 1]
    if multi:
        lines += ["", f"Per-pair TPOT median ratios ({sb} / {sa}):", ""]
        lines += [f"* {r['config']} @ {r['concurrency']}: " + ", ".join(_r(x) for x in r["pair_tpot_ratios"])
                  + f" -> median {_r(r['tpot_ratio'])}" for r in multi]
    lines += ["", "Servers (sglang: the version the server reports; KV pool: its `max_total_num_tokens`):", "",
              "| config | side | sglang | KV pool | path | fixes applied | launch s | error |", "|---|---|---|---|---|---|---|---|"]
    for name, cfg in results.get("configs", {}).items():
        for s, sd in cfg.get("sides", {}).items():
            applied = ", ".join(k for k, v in (sd.get("fixes") or {}).items() if v == "applied") or "none"
            err = (sd.get("error") or "").replace("|", "/").replace("\n", " ")[:160]
            lines.append(f"| {name} | {s} | {sd.get('version') or (sd.get('server') or {}).get('version') or '-'} | "
                         f"{sd.get('max_total_num_tokens') or '-'} | {spec_path(sd)} | {applied} | "
                         f"{_f(sd.get('launch_s'), 0)} | {err or '-'} |")
    differ = [f"{n} ({' vs '.join(map(str, pools_differ(c)))} tokens)" for n, c in results.get("configs", {}).items()
              if pools_differ(c)]
    if differ:
        lines += ["", "**KV pools differ** between the two servers of: " + ", ".join(differ)
                  + " (pass `--max-total-tokens N`: both sides then get the same pool)."]
    lines += ["", "Greedy identity (temperature 0, `/generate`, same prompts on both sides):", ""]
    for name, cfg in results.get("configs", {}).items():
        g = cfg.get("greedy")
        if cfg.get("skipped"):
            lines.append(f"* {name}: skipped ({cfg['skipped']})")
        elif g and g.get("skipped"):
            lines.append(f"* {name}: greedy check skipped ({g['skipped']})")
        elif g:
            eq = g.get("equals_nospec") or {}
            extra = "".join(f"; {s} = nospec: {_yn(v)}" for s, v in eq.items())
            if g.get("error"):
                extra += f"; error: {g['error'][:200]}"
            lines.append(f"* {name}: {g.get('n_prompts')} prompts x {g.get('max_new_tokens')} tokens, {sa} = {sb}: "
                         f"{_yn(g.get('identical'))} (mismatching prompts: {g.get('mismatches')}){extra}")
    failed = [(n, p) for n, cfg in results.get("configs", {}).items() for p in cfg.get("points", []) if not p.get("ok")]
    if failed:
        lines += ["", "Failed or incomplete points:", ""]
        for n, p in failed:
            lines.append(f"* {n} {p['side']} c={p['concurrency']} rep {p['rep']}: {str(p.get('error'))[:200]}")
    lines += profile_markdown(profile_rows(results))
    lines += host_profile_markdown(results.get("host_profiles") or [])
    lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- plots
def pyplot(who, skipped):
    """matplotlib's pyplot on the Agg backend, or None (``[who] ... skipped``) where matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"[{who}] matplotlib is not installed: {skipped}", flush=True)
        return None
    return plt


def side_lines(ax, names, sides, colors, concs, points, ylabel):
    """Per name one line per side (a dashed, b solid) of ``points(name, side)`` -> [(concurrency, y)] over a
    log2 concurrency axis."""
    for n in names:
        for s, ls, mk in zip(sides, ("--", "-"), ("o", "s")):
            pts = [(c, y) for c, y in points(n, s) if y is not None]
            if pts:
                ax.plot([c for c, _ in pts], [y for _, y in pts], ls=ls, marker=mk, color=colors[n], label=f"{n} {s}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(concs)
    ax.set_xticklabels([str(c) for c in concs])
    ax.set_xlabel("max concurrency")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def ratio_bars(plt, ax, names, concs, get, ylabel, line=None):
    """Bars of a b / a ratio per name and concurrency (``get(name, c)`` -> (median, pair ratios), or None), the
    pairs as dots; 1.0 and ``line`` ((value, label), dashed red) drawn across; y from 0.6 or below to 1.2 or above."""
    width, every = 0.8 / max(1, len(concs)), [1.0]
    for j, c in enumerate(concs):
        xs, ys = [], []
        for i, n in enumerate(names):
            median, pairs = get(n, c) or (None, [])
            if median is None:
                continue
            xs.append(i + (j - (len(concs) - 1) / 2) * width)
            ys.append(median)
            every += [median, *pairs]
            ax.scatter([xs[-1]] * len(pairs), pairs, color="k", s=8, zorder=3)
        ax.bar(xs, ys, width, color=plt.get_cmap("tab10")(j), label=f"concurrency {c}")
    ax.set_ylim(min(0.6, min(every) - 0.05), max(1.2, max(every) + 0.05))
    ax.axhline(1.0, color="k", lw=0.8)
    if line:
        ax.axhline(line[0], color="tab:red", lw=0.8, ls="--", label=line[1])
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)


def plots(results, outdir):
    """Write serving.png and pairs.png; returns the paths written, or None without matplotlib."""
    plt = pyplot("plot", "PNG plots skipped (results.md still written); regenerate anywhere with matplotlib: "
                         "python3 bench/plot.py RESULTS_JSON OUTDIR")
    rows = summarize(results) if plt else None
    if not rows:
        return None if plt is None else []
    names = list(dict.fromkeys(r["config"] for r in rows))
    colors = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
    concs = sorted({r["concurrency"] for r in rows})
    row = {(r["config"], r["concurrency"]): r for r in rows}
    m = results.get("meta", {})
    sa, sb = side_names(results)
    head = f"sglang {m.get('sglang', '?')} on {m.get('device', '?')}"

    fig, ax = plt.subplots(2, 2, figsize=(13, 9))
    for a, key, label in ((ax[0][0], "output_throughput", "output tok/s"), (ax[0][1], "median_tpot_ms", "TPOT median (ms)"),
                          (ax[1][1], "accept_length", "mean accept length")):
        side_lines(a, names, (sa, sb), colors, concs,
                   lambda n, s, key=key: [(r["concurrency"], r[key][s]) for r in rows if r["config"] == n], label)
    ax[0][0].legend(fontsize=7, ncol=2)
    ratio_bars(plt, ax[1][0], names, concs, lambda n, c: (row[n, c]["throughput_ratio"], row[n, c]["pair_throughput_ratios"])
               if (n, c) in row else None, f"output tok/s ratio ({sb} / {sa})")
    fig.suptitle(f"{head}: {sa} (dashed) vs {sb} (solid)")
    written = [_save(plt, fig, os.path.join(outdir, PNG_FILES[0]))]

    fig, ax = plt.subplots(1, 2, figsize=(13, 4.8))
    labels = [f"{r['config']} @{r['concurrency']}" for r in rows]
    for x, r in enumerate(rows):
        ax[0].scatter([x] * len(r["pair_tpot_ratios"]), r["pair_tpot_ratios"], color=colors[r["config"]], s=18, alpha=0.7)
        if r["tpot_ratio"] is not None:
            ax[0].plot([x - 0.3, x + 0.3], [r["tpot_ratio"]] * 2, color="k", lw=1.5)
    ax[0].axhline(1.0, color="grey", lw=0.8, ls=":")
    ax[0].set_ylabel(f"TPOT median ratio per pair ({sb} / {sa}); bar = median")
    for k, (key, lab) in enumerate((("p99_tpot_ratio", "TPOT p99"), ("p99_itl_ratio", "ITL p99"))):
        ys = [r[key] if r[key] is not None else float("nan") for r in rows]
        ax[1].bar([x + (k - 0.5) * 0.4 for x in range(len(rows))], ys, 0.4, label=lab)
    ax[1].axhline(1.0, color="k", lw=0.8)
    ax[1].set_ylabel(f"tail latency ratio ({sb} / {sa}), lower = {sb} faster")
    ax[1].legend(fontsize=8)
    for a in ax:
        a.set_xticks(range(len(rows)))
        a.set_xticklabels(labels, fontsize=7, rotation=45, ha="right")
        a.grid(alpha=0.3, axis="y")
    fig.suptitle(f"{head}: {sb} / {sa} per pair (< 1 = {sb} faster)")
    written.append(_save(plt, fig, os.path.join(outdir, PNG_FILES[1])))
    return written


def _save(plt, fig, path, dpi=110):
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def write_markdown(results, outdir):
    path = os.path.join(outdir, "results.md")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(markdown(results))
    os.replace(tmp, path)
    return path


def merge(parts):
    """One release's results from parts run side by side on GPUs of one machine (bench/gpu_real_size.sh
    --split): configurations are disjoint; ``meta`` is the first part's, with every part's own meta kept in
    ``meta.parts`` (its GPU, configurations, budget, elapsed time, completeness); ``profiles`` and
    ``host_profiles`` concatenated."""
    if not parts:
        raise ValueError("nothing to merge")
    releases = {p.get("meta", {}).get("sglang") for p in parts}
    if len(releases) != 1:
        raise ValueError(f"parts of different releases: {sorted(map(str, releases))}")
    out = {"schema": parts[0].get("schema"), "meta": dict(parts[0].get("meta", {})), "configs": {}}
    for p in parts:
        clash = set(out["configs"]) & set(p.get("configs", {}))
        if clash:
            raise ValueError(f"configuration(s) in more than one part: {sorted(clash)}")
        out["configs"].update(p.get("configs", {}))
    for key in ("profiles", "host_profiles"):
        if any(key in p for p in parts):
            out[key] = [x for p in parts for x in p.get(key) or []]
    out["meta"]["parts"] = [p.get("meta", {}) for p in parts]
    out["meta"]["complete"] = all(p.get("meta", {}).get("complete") for p in parts)
    for key in ("points", "points_failed"):
        out["meta"][key] = sum(p.get("meta", {}).get(key) or 0 for p in parts)
    out["meta"]["elapsed_s"] = max((p.get("meta", {}).get("elapsed_s") or 0) for p in parts)
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    read = lambda path: json.load(open(path))  # noqa: E731
    if argv[:1] == ["--merge"] and len(argv) > 2:
        merged = merge([read(path) for path in argv[2:]])
        with open(argv[1], "w") as f:
            json.dump(merged, f, indent=1)
        print(f"[plot] merged {len(argv) - 2} part(s), configs {list(merged['configs'])} -> {argv[1]}")
        return 0
    if len(argv) != 2 or argv[0] in ("-h", "--help", "--merge"):
        print(__doc__.strip())
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    os.makedirs(argv[1], exist_ok=True)
    for path in [write_markdown(read(argv[0]), argv[1])] + (plots(read(argv[0]), argv[1]) or []):
        print("[plot] wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
