#!/usr/bin/env python3
"""Report of ``bench/serving.py --real-size`` runs: one JSON summary, a Markdown table and a plot.

    python3 bench/real_size_report.py [--out-dir docs/bench] [--name real-size-latest] [--commit C]
        [--previous docs/bench/real-size-latest.json] RESULTS_JSON...
    python3 bench/real_size_report.py --parity [--out-dir docs/bench] [--name upstream-parity] [--previous P] RESULTS...

An input is a ``results.json`` or ``ARCHIVE.tar.gz:MEMBER``. Stock/plugin runs give OUT_DIR/NAME.{json,md,png}
(``plugin_over_stock`` per point: the median over pairs of plugin / stock output tok/s; per (release, TP, shape,
configuration) the input with most pairs wins; schema: docs/bench/README.md). ``--parity`` (issue 30) reads runs of
the sides ``upstream=off@BASELINE`` (a) and ``plugin=auto@RELEASE`` (b): NAME.json ``{"device", "date", "commit",
"model", "acc_len", "points": [{"release", "baseline_release", "backend", "config", "concurrency",
"plugin_over_upstream", "pairs", "tp", "upstream_tok_s", "plugin_tok_s", "pair_ratios", "device", "date"}]}`` and
NAME.md (a point's device and date are its run's: a file merged over leases may mix GPUs; ratios compare within a run).
``--previous`` keeps an earlier file's points (and profiles) where the runs have none of their own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
import plot  # noqa: E402  (bench/plot.py beside this script, importable as the script's directory: summarize, spec_path, _median)

CONFIG_ORDER = ("eagle3-topk1", "tree-topk4", "tree-topk8", "default", "nospec")
ACCEPT_TOLERANCE = 0.3  # |measured mean accept length - acc_len| above this is flagged
CHAIN_CONTROL = 0.99  # issue 30: where the plugin changes nothing a chain needs, plugin / stock >= this


def _release_key(v):
    out = []
    for part in str(v).replace("post", ".").split("."):
        out.append(int(part) if part.isdigit() else 0)
    return out


def _config_key(name):
    return (CONFIG_ORDER.index(name) if name in CONFIG_ORDER else len(CONFIG_ORDER), name)


def n_pairs(cfg):
    return sum(r["pairs"] for r in plot.summarize({"configs": {"x": cfg}}))


ARCHIVE_SUFFIXES = (".tar.gz:", ".tgz:", ".tar:")


def read_results(path):
    """One input: a results.json file, or ``ARCHIVE:MEMBER`` read from inside a tar archive (not unpacked)."""
    for suffix in ARCHIVE_SUFFIXES:
        at = path.find(suffix)
        if at > 0:
            archive, member = path[:at + len(suffix) - 1], path[at + len(suffix):]
            with tarfile.open(archive) as tar:
                try:
                    f = tar.extractfile(member)
                except KeyError:
                    f = None
                if f is None:
                    names = [n for n in tar.getnames() if n.endswith("results.json")]
                    raise SystemExit(f"{path}: no file {member!r} in {archive} (its results.json: {names})")
                return json.load(f)
    with open(path) as f:
        return json.load(f)


def load(paths):
    runs = []
    for path in paths:
        r = read_results(path)
        m = r.get("meta", {})
        if not m.get("real_size"):
            raise SystemExit(f"{path}: not a real-size run (no meta.real_size): run bench/serving.py --real-size")
        if plot.side_names(r) != plot.SIDES:
            raise SystemExit(f"{path}: sides {plot.side_names(r)}: this summary compares stock and plugin")
        runs.append((path, r))
    if not runs:
        raise SystemExit("no results.json given")
    return runs


SHAPES = {(4096, 32): "8b", (8192, 80): "70b"}  # bench/real_size_models.py's shapes, for runs that did not record one


def shape_of(model):
    """The model shape's name (``meta.real_size.model.shape``; older runs: from hidden size and layers)."""
    model = model or {}
    key = (model.get("hidden_size"), model.get("num_hidden_layers"))
    return model.get("shape") or SHAPES.get(key) or f"h{key[0]}x{key[1]}"


def variant(meta):
    """(tp, shape) of a run: runs without ``real_size.tp`` ran at TP 1."""
    rs = meta.get("real_size") or {}
    return int(rs.get("tp") or 1), shape_of(rs.get("model"))


def combine(runs):
    """{(release, tp, shape): {"configs": {name: cfg}, "source": {name: (path, meta)}, "profiles": {name: [...]},
    "host_profiles": {name: [...]}}} choosing per (release, tp, shape, config) the input with most pairs (a TP 2 run
    never replaces a TP 1 one); a configuration's profiles come from the same input."""
    out = {}
    for path, r in runs:
        m = r["meta"]
        rel = out.setdefault((str(m.get("sglang")), *variant(m)), {"configs": {}, "source": {}, "profiles": {},
                                                                   "host_profiles": {}})
        for name, cfg in r.get("configs", {}).items():
            old = rel["configs"].get(name)
            if old is None or n_pairs(cfg) >= n_pairs(old):
                rel["configs"][name] = cfg
                rel["source"][name] = (path, m)
                rel["profiles"][name] = [p for p in r.get("profiles") or [] if p.get("config") == name]
                rel["host_profiles"][name] = [p for p in r.get("host_profiles") or [] if p.get("config") == name]
    return out


def _key(k):
    return (_release_key(k[0]), k[1], k[2])


def _one(values, what):
    vals = sorted({json.dumps(v, sort_keys=True) for v in values})
    if len(vals) > 1:
        raise SystemExit(f"inputs disagree on {what}: {', '.join(vals)}")
    return json.loads(vals[0]) if vals else None


def _joined(values):
    """Distinct values joined with " + " (a value already joined counts as its parts)."""
    vals = [v for v in dict.fromkeys(x for v in values if v for x in str(v).split(" + ")) if v]
    return " + ".join(str(v) for v in vals) if vals else None


def _facts(metas, previous, commit):
    """device / date / commit of the runs (several distinct values joined with " + ", the latest date), then the
    previous summary's; ``commit`` where the runs recorded none."""
    prev = previous or {}
    return {"device": _joined([m.get("device") for m in metas] + [prev.get("device")]),
            "date": max([m.get("date") or "" for m in metas] + [prev.get("date") or ""]) or None,
            "commit": _joined([_joined(m["real_size"].get("commit") for m in metas) or commit, prev.get("commit")])}


def _write(base, summary, md):
    with open(base + ".json", "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    with open(base + ".md", "w") as f:
        f.write(md)
    return [base + ".json", base + ".md"]


def _hl(model):
    return {k: (model or {}).get(k) for k in ("hidden_size", "num_hidden_layers")}


def previous_points(prev):
    """A previous summary's points as (key, point, model): missing ``tp`` reads as 1, missing ``model`` as the
    summary's own."""
    out = []
    for p in prev.get("points", []):
        model = _hl(p.get("model") or prev.get("model"))
        out.append(((p["release"], int(p.get("tp") or 1), shape_of(model), p["config"]), p, model))
    return out


def build(runs, commit=None, previous=None):
    """The summary dict (exact schema; each point also has ``tp``, and ``model`` when shapes are mixed), the
    per-row details the Markdown / plot use, ``combine``'s result and the profile rows (``profiles``; in the summary
    only when there are some). ``previous``: an earlier summary whose points (and profiles) are kept where the runs
    have no (release, tp, shape, config) of their own."""
    merged = combine(runs)
    used = [meta for rel in merged.values() for _, meta in rel["source"].values()]
    if not used:
        used = [r["meta"] for _, r in runs]
    rows = []  # (key, point, model, detail or None)
    for k in sorted(merged, key=_key):
        release, tp, shape = k
        rel = merged[k]
        for name in sorted(rel["configs"], key=_config_key):
            cfg = rel["configs"][name]
            model = _hl(rel["source"][name][1]["real_size"].get("model"))
            for row in plot.summarize({"configs": {name: cfg}}):
                c = row["concurrency"]
                d = dict(release=release, tp=tp, shape=shape, config=name, concurrency=c, row=row, cfg=cfg,
                         source=rel["source"][name][0], pair_ratios=row["pair_throughput_ratios"], model=model)
                pt = None
                if row["pairs"] >= 1 and row["throughput_ratio"] is not None:
                    pt = {"release": release, "config": name, "concurrency": c,
                          "plugin_over_stock": round(row["throughput_ratio"], 3), "pairs": row["pairs"],
                          "stock_tok_s": round(row["output_throughput"]["stock"], 1),
                          "plugin_tok_s": round(row["output_throughput"]["plugin"], 1), "tp": tp}
                rows.append(((release, tp, shape, name), pt, model, d))
    accs = [m["real_size"].get("acc_len") for m in used]
    if previous:
        have = {r[0] for r in rows}
        accs.append(previous.get("acc_len"))
        for key, p, model in previous_points(previous):
            if key in have:
                continue
            pt = {k: p[k] for k in SCHEMA_POINT}
            pt["tp"] = key[1]
            row = dict(concurrency=p["concurrency"], pairs=p["pairs"], throughput_ratio=p["plugin_over_stock"],
                       output_throughput={"stock": p["stock_tok_s"], "plugin": p["plugin_tok_s"]},
                       accept_length={"stock": None, "plugin": None}, median_tpot_ms={"stock": None, "plugin": None})
            d = dict(release=p["release"], tp=key[1], shape=key[2], config=p["config"], concurrency=p["concurrency"],
                     row=row, cfg=None, source="previous summary", pair_ratios=[], model=model)
            rows.append((key, pt, model, d))
    rows.sort(key=lambda r: (_key(r[0][:3]), _config_key(r[0][3]), r[3]["concurrency"]))
    shapes = {}
    for key, pt, model, _ in rows:
        if pt is not None:
            shapes.setdefault(key[2], [model, 0])[1] += 1
    mixed = len(shapes) > 1
    # one shape: the top-level "model" as before; several: the most measured one's, and every point its own
    top = max(shapes.values(), key=lambda x: x[1])[0] if shapes else _hl(used[0]["real_size"].get("model"))
    summary = dict(_facts(used, previous, commit), model=top, acc_len=_one([x for x in accs if x is not None], "acc_len"),
                   points=[])
    details = []
    for key, pt, model, d in rows:
        d["label"] = d["config"] + (f" TP{d['tp']}" if d["tp"] != 1 else "") + (f" {d['shape']}" if mixed else "")
        details.append(d)
        if pt is not None:
            if mixed:
                pt["model"] = model
            summary["points"].append(pt)
    prof = profiles(merged, previous)
    if prof:
        summary["profiles"] = [dict({k: r[k] for k in PROFILE_KEYS}, **{s: r["sides"][s] for s in plot.SIDES
                                                                         if s in r["sides"]},
                                    **({"model": r["model"]} if mixed else {})) for r in prof]
    hosts = host_profiles(merged, previous)
    if hosts:
        summary["host_profiles"] = [{k: v for k, v in h.items() if k != "shape" and (k != "model" or mixed)}
                                    for h in hosts]
    return summary, details, merged, prof


PROFILE_KEYS = ("release", "tp", "config", "concurrency", "stock_tok_s", "measured_ratio", "ceiling", "ratio_over_busy")


def _profile_entries(merged, previous, key, rows, carried):
    """Every chosen configuration's ``rows(run)`` (``run``: that configuration alone, with its entries of ``key``)
    with release / tp / shape / model; then ``carried(entry)`` of each of the previous summary's ``key`` entries
    (given tp / shape / model) of a (release, tp, shape, config) the runs have none of."""
    out = []
    for k in sorted(merged, key=_key):
        for name in sorted(merged[k]["configs"], key=_config_key):
            model = _hl(merged[k]["source"][name][1]["real_size"].get("model"))
            run = {"configs": {name: merged[k]["configs"][name]}, key: merged[k][key].get(name) or []}
            out += [dict(release=k[0], tp=k[1], shape=k[2], model=model, **r) for r in rows(run)]
    have = {(r["release"], r["tp"], r["shape"], r["config"]) for r in out}
    for p in (previous or {}).get(key, []):
        model = _hl(p.get("model") or previous.get("model"))
        r = carried(dict(p, tp=int(p.get("tp") or 1), shape=shape_of(model), model=model))
        if (r["release"], r["tp"], r["shape"], r["config"]) not in have:
            out.append(r)
    return out


def profiles(merged, previous=None):
    """``plot.profile_rows`` of every chosen configuration, with release / tp / shape / model; then the previous
    summary's profiles of (release, tp, shape, config) the runs have none of."""
    return _profile_entries(merged, previous, "profiles", plot.profile_rows, lambda p: dict(
        {k: p.get(k) for k in PROFILE_KEYS + ("tp", "shape", "model")}, sides={s: p[s] for s in plot.SIDES if s in p}))


def host_profiles(merged, previous=None):
    """The chosen configurations' host profile entries with release / tp / shape / model first, then the previous
    summary's of (release, tp, shape, config) the runs have none of."""
    return _profile_entries(merged, previous, "host_profiles", lambda run: run["host_profiles"], lambda h: h)


SCHEMA_POINT = ("release", "config", "concurrency", "plugin_over_stock", "pairs", "stock_tok_s", "plugin_tok_s")


# ---------------------------------------------------------------------------------------------- markdown
def _name(k):
    return f"{k[0]}" + (f" TP{k[1]}" if k[1] != 1 else "") + (f" {k[2]}" if k[2] != "8b" else "")


def checks(details, merged, acc):
    """Sanity lines: accept length vs acc_len, the speculative path of each side, failed or missing points."""
    out = []
    for d in details:
        for side in plot.SIDES:
            al = d["row"]["accept_length"][side]
            if al is not None and acc is not None and abs(al - acc) > ACCEPT_TOLERANCE:
                out.append(f"{_name((d['release'], d['tp'], d['shape']))} {d['config']} c={d['concurrency']} {side}: "
                           f"mean accept length {al:.2f}, not the simulated {acc} (was {ENV} set on that server?)")
    for k in sorted(merged, key=_key):
        release = _name(k)
        for name, cfg in merged[k]["configs"].items():
            sides = cfg.get("sides", {})
            want = {"stock": "spec v1 (overlap off)", "plugin": "spec v2 (overlap)"} if name.startswith("tree") else \
                {"stock": "spec v2 (overlap)", "plugin": "spec v2 (overlap)"} if name != "nospec" else {}
            for side, path in want.items():
                got = plot.spec_path(sides.get(side))
                if got != path:
                    out.append(f"{release} {name} {side}: {got}, expected {path}")
            if cfg.get("skipped"):
                out.append(f"{release} {name}: skipped ({cfg['skipped']})")
            for p in cfg.get("points", []):
                if not p.get("ok"):
                    out.append(f"{release} {name} {p['side']} c={p['concurrency']} rep {p['rep']}: FAILED "
                               f"{str(p.get('error'))[:160]}")
    return out


ENV = "SGLANG_SIMULATE_ACC_LEN"
MODEL_WORDS = (("hidden_size", "hidden"), ("num_hidden_layers", "layers"), ("intermediate_size", "intermediate"),
               ("num_attention_heads", "heads"), ("num_key_value_heads", "KV heads"), ("vocab_size", "vocab"),
               ("target_params_b", "billion parameters"))


def _model_text(details, merged):
    """One phrase per target shape measured: its name and the sizes the runs recorded."""
    full = {}
    for k, rel in merged.items():
        for _, m in rel["source"].values():
            full.setdefault(k[2], m["real_size"].get("model") or {})
    out = []
    for shape in dict.fromkeys(d["shape"] for d in details) or full:
        model = full.get(shape) or next(d["model"] for d in details if d["shape"] == shape)
        name = model.get("name") or {"8b": "Llama-3.1-8B-shaped", "70b": "Llama-3.1-70B-shaped"}.get(shape, shape)
        out.append(f"a {name} target (" + ", ".join(f"{label} {model[k]}" for k, label in MODEL_WORDS
                                                   if model.get(k) is not None) + ")")
    return " / ".join(out) or "a real-size target"


def markdown(summary, details, merged, runs, prof=()):
    f, r = plot._f, plot._r
    metas = [m for rel in merged.values() for _, m in rel["source"].values()]
    m0 = metas[0] if metas else runs[0][1]["meta"]
    model = m0.get("real_size", {}).get("model", {})
    a = m0.get("args", {})
    mixed = len({d["shape"] for d in details}) > 1
    tps = sorted({d["tp"] for d in details}) or [1]
    lines = [
        "# Tree drafting at real size: stock SGLang vs the plugin",
        "",
        f"{summary['device']}, {summary['date']}, commit {summary['commit'] or 'unknown'}; "
        + ", ".join(f"sglang {rel}" for rel in sorted({d["release"] for d in details} | {k[0] for k in merged},
                                                      key=_release_key)) + ".",
        "",
        "Models: " + _model_text(details, merged) + " and a 1-layer EAGLE3 draft"
        + (f" (draft vocab {model['draft_vocab_size']})" if model.get("draft_vocab_size") else "")
        + ", config + tokenizer only (`bench/real_size_models.py`), served "
        "with `--load-format dummy --speculative-draft-load-format dummy`. Acceptance is simulated by SGLang itself: "
        f"`{ENV}={summary['acc_len']}` in both servers' environment (dummy weights accept nothing; the greedy identity "
        "check is skipped, the tiny real-weight runs keep it). Stock = `--specv2-fixes off` (SGLang sends explicit "
        "topk > 1 to spec v1, overlap off), plugin = `--specv2-fixes auto` (spec v2 tree drafting, page size 1).",
        "",
        f"Driver: `bench/serving.py --real-size` (SGLang's `sglang.bench_serving`, random ids, {a.get('input_len')} input / "
        f"{a.get('output_len')} output tokens, `--max-concurrency` per row); both servers of a configuration up "
        "together on the same GPU(s) (TP column: `--tp-size` of both servers, each run on that many GPUs of its own), "
        "measured one at a time, stock/plugin pairs with alternating order. Server flags: "
        f"`{' '.join(x for x in m0.get('common_server_args', []) if x)}`"
        + (f" (plus `--tp-size N` at TP N > 1)" if tps != [1] and "--tp-size" not in m0.get("common_server_args", [])
           else "") + ".",
        "",
        "plugin / stock = median over pairs of the per-pair output tok/s ratio (> 1: plugin faster); tok/s columns are "
        "medians over each side's points.",
        "",
        "| release | " + ("model | " if mixed else "") + "TP | config | concurrency | pairs | stock tok/s | plugin tok/s | "
        "plugin / stock | per-pair ratios | accept len stock / plugin | TPOT median ms stock / plugin |",
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if mixed else ""),
    ]
    for d in details:
        row = d["row"]
        lines.append(
            f"| {d['release']} | " + (f"{d['shape']} | " if mixed else "") + f"{d['tp']} | {d['config']} | "
            f"{d['concurrency']} | {row['pairs']} | "
            f"{f(row['output_throughput']['stock'])} | {f(row['output_throughput']['plugin'])} | "
            f"**{r(row['throughput_ratio'])}** | {', '.join(r(x) for x in d['pair_ratios']) or '-'} | "
            f"{f(row['accept_length']['stock'], 2)} / {f(row['accept_length']['plugin'], 2)} | "
            f"{f(row['median_tpot_ms']['stock'], 2)} / {f(row['median_tpot_ms']['plugin'], 2)} |")
    if not details:
        lines.append("| (no successful points) ||||||||||| ")
    chains = [p for p in summary["points"] if p["config"] == "eagle3-topk1"]
    if chains:
        low = min(chains, key=lambda p: p["plugin_over_stock"])
        met = [p for p in chains if p["plugin_over_stock"] >= CHAIN_CONTROL]
        lines += ["", f"Chain control (plugin / stock >= {CHAIN_CONTROL}, median over pairs): met at {len(met)} of "
                      f"{len(chains)} chain points; lowest {low['plugin_over_stock']:.3f} ({low['release']} "
                      f"{'TP ' + str(low['tp']) + ' ' if low.get('tp', 1) != 1 else ''}c={low['concurrency']})."]
    chk = checks(details, merged, summary["acc_len"])
    lines += ["", "Checks (accept length vs the simulated value, speculative path per side, failed points):", ""]
    lines += [f"* {x}" for x in chk] or ["* all points ran; both sides accepted the simulated length; stock took spec v1 "
                                         "and the plugin spec v2 for the tree configurations"]
    lines += ["", "Runs:", ""]
    for k in sorted(merged, key=_key):
        for name in sorted(merged[k]["source"], key=_config_key):
            path, m = merged[k]["source"][name]
            # a release merged from parts on several GPUs (bench/plot.py --merge): the part that ran this config
            m = next((p for p in m.get("parts") or [] if name in (p.get("args") or {}).get("configs", [])), m)
            cfg = merged[k]["configs"][name]
            launch = ", ".join(f"{s} {f(v.get('launch_s'), 0)} s" for s, v in cfg.get("sides", {}).items())
            lines.append(f"* {_name(k)} {name}: {m.get('date')}, {m.get('device')}, GPU {m.get('cuda_visible_devices')}, "
                         f"launch {launch or '-'}, run {'complete' if m.get('complete') else 'INCOMPLETE: ' + str(m.get('stop_reason'))} "
                         f"(`{os.path.relpath(path, ROOT) if os.path.abspath(path).startswith(ROOT + os.sep) else path}`)")
    carried = sorted({(d["release"], d["tp"], d["config"]) for d in details if d["cfg"] is None},
                     key=lambda x: (_release_key(x[0]), x[1], _config_key(x[2])))
    if carried:
        lines.append("* kept from the previous summary (`--previous`; its device / date / commit are joined above): "
                     + ", ".join(f"{rel} TP{tp} {name}" for rel, tp, name in carried))
    def lead(shape, rows):  # the tables' first columns; the model column only when shapes are mixed
        return ((("release", lambda x: x["release"]),) + ((("model", shape),) if len({shape(x) for x in rows}) > 1
                                                          else ()) + (("TP", lambda x: x["tp"]), ("config", lambda x: x["config"])))

    lines += plot.profile_markdown(prof, lead=lead(lambda x: x["shape"], prof))
    hosts = summary.get("host_profiles") or []
    lines += plot.host_profile_markdown(hosts, lead=lead(lambda x: shape_of(x.get("model") or summary.get("model")),
                                                         hosts))
    lines.append("")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------------- plot
def _pyplot():
    """matplotlib's pyplot on the Agg backend, or None (said once per plot) where matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("[real_size_report] matplotlib is not installed: plot skipped (JSON and Markdown written)", flush=True)
        return None
    return plt


def plot_png(summary, details, path):
    plt = _pyplot()
    if plt is None:
        return None
    releases = sorted({d["release"] for d in details}, key=_release_key)
    if not releases:
        return None
    fig, ax = plt.subplots(2, len(releases), figsize=(6.5 * len(releases), 9), squeeze=False)
    concs = sorted({d["concurrency"] for d in details})
    cmap = plt.get_cmap("tab10")
    for k, rel in enumerate(releases):
        ds = [d for d in details if d["release"] == rel]
        names = sorted({d["label"] for d in ds}, key=lambda n: (_config_key(n.split()[0]), n))
        width = 0.8 / max(1, len(concs))
        a = ax[0][k]
        for j, c in enumerate(concs):
            xs, ys = [], []
            for i, n in enumerate(names):
                d = next((d for d in ds if d["label"] == n and d["concurrency"] == c), None)
                if not d or d["row"]["throughput_ratio"] is None:
                    continue
                x = i + (j - (len(concs) - 1) / 2) * width
                xs.append(x)
                ys.append(d["row"]["throughput_ratio"])
                pr = [v for v in d["pair_ratios"] if v is not None]
                a.scatter([x] * len(pr), pr, color="k", s=10, zorder=3)
            a.bar(xs, ys, width, color=cmap(j), label=f"concurrency {c}")
        a.axhline(1.0, color="k", lw=0.8)
        a.axhline(CHAIN_CONTROL, color="tab:red", lw=0.8, ls="--", label=f"chain control {CHAIN_CONTROL}")
        a.set_xticks(range(len(names)))
        a.set_xticklabels(names)
        a.set_ylabel("output tok/s, plugin / stock (median over pairs; dots: pairs)")
        a.set_title(f"sglang {rel}")
        a.grid(alpha=0.3, axis="y")
        a.legend(fontsize=8)
        a = ax[1][k]
        for i, n in enumerate(names):
            for s, ls, mk in (("stock", "--", "o"), ("plugin", "-", "s")):
                pts = [(d["concurrency"], d["row"]["output_throughput"][s]) for d in ds
                       if d["label"] == n and d["row"]["output_throughput"][s] is not None]
                if pts:
                    a.plot([p[0] for p in pts], [p[1] for p in pts], ls=ls, marker=mk, color=cmap(i), label=f"{n} {s}")
        a.set_xscale("log", base=2)
        a.set_xticks(concs)
        a.set_xticklabels([str(c) for c in concs])
        a.set_xlabel("max concurrency")
        a.set_ylabel("output tok/s (median)")
        a.grid(alpha=0.3)
        a.legend(fontsize=7, ncol=2)
    shapes = ", ".join(f"{d['shape'].upper()}-shaped (hidden {d['model'].get('hidden_size')}, "
                       f"{d['model'].get('num_hidden_layers')} layers)"
                       for d in {d["shape"]: d for d in details}.values())
    tps = sorted({d["tp"] for d in details})
    fig.suptitle(f"{shapes} target + EAGLE3, TP {'/'.join(map(str, tps))}, dummy weights, {ENV}={summary['acc_len']}\n"
                 f"{summary['device']}, {summary['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(runs, out_dir, name, commit=None, previous=None):
    summary, details, merged, prof = build(runs, commit, previous)
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, name)
    written = _write(base, summary, markdown(summary, details, merged, runs, prof))
    png = plot_png(summary, details, base + ".png")
    if png:
        written.append(png)
    return summary, written


PARITY_SIDES = ("upstream", "plugin")
PARITY_TARGET = 0.97  # issue 30: every point's median plugin / upstream
PARITY_CONFIG = {"eagle3-topk1": "chain"}  # the name of the configuration; the rest keep serving.py's


def _backend(cfg):
    """The attention backend both servers reported, else the last one their flags name (``--attention-backend X``
    or ``--attention-backend=X``: a ``--server-args`` backend follows COMMON's), else "default"."""
    reported = {(sd.get("server") or {}).get("attention_backend") for sd in cfg.get("sides", {}).values()}
    if len(reported) == 1 and None not in reported:
        return reported.pop()
    named = "default"
    args = [str(x) for x in cfg.get("server_args", [])]
    for i, x in enumerate(args):
        if x == "--attention-backend" and i + 1 < len(args):
            named = args[i + 1]
        elif x.startswith("--attention-backend="):
            named = x.split("=", 1)[1]
    return "/".join(sorted(r for r in reported if r)) or named


def parity(paths, commit=None, previous=None):
    """The upstream-parity summary of upstream/plugin runs (module docstring) and its Markdown."""
    points, metas = {}, []
    for path in paths:
        r = read_results(path)
        m = r.get("meta", {})
        if not m.get("real_size") or plot.side_names(r) != PARITY_SIDES:
            raise SystemExit(f"{path}: sides {plot.side_names(r)}: --parity reads real-size runs of the sides "
                             "upstream=off@BASELINE and plugin=auto@RELEASE")
        metas.append(m)
        tp = variant(m)[0]
        for name, cfg in r.get("configs", {}).items():
            sides = cfg.get("sides", {})
            rel, base = sides["plugin"].get("version"), sides["upstream"].get("version")
            if not rel or not base:  # a side that did not start: no point
                continue
            backend = _backend(cfg)
            for row in plot.summarize({"meta": m, "configs": {name: cfg}}):
                if row["pairs"] < 1 or row["throughput_ratio"] is None:
                    continue
                pt = {"release": rel, "baseline_release": base, "backend": backend,
                      "config": PARITY_CONFIG.get(name, name), "concurrency": row["concurrency"],
                      "plugin_over_upstream": round(row["throughput_ratio"], 3), "pairs": row["pairs"], "tp": tp,
                      "upstream_tok_s": round(row["output_throughput"]["upstream"], 1),
                      "plugin_tok_s": round(row["output_throughput"]["plugin"], 1),
                      "pair_ratios": [round(x, 3) for x in row["pair_throughput_ratios"]],
                      "device": m.get("device"), "date": m.get("date")}
                if sides["plugin"].get("env"):  # a switch the plugin side set (verify-handoff's, before its default)
                    pt["plugin_env"] = sides["plugin"]["env"]
                key = (rel, base, backend, pt["config"], tp, pt["concurrency"])
                if key not in points or pt["pairs"] >= points[key]["pairs"]:
                    points[key] = pt
    prev = previous or {}
    one_run = " + " not in str(prev.get("device"))  # an older file without per-point facts came from one run
    for p in prev.get("points", []):
        key = (p["release"], p["baseline_release"], p["backend"], p["config"], int(p.get("tp") or 1), p["concurrency"])
        facts = {k: prev.get(k) for k in ("device", "date") if k not in p and one_run}
        points.setdefault(key, {**p, **facts})
    order = lambda k: (_release_key(k[0]), _release_key(k[1]), k[2], k[4], _config_key(  # noqa: E731
        {v: n for n, v in PARITY_CONFIG.items()}.get(k[3], k[3])), k[5])
    summary = {
        **_facts(metas, prev, commit),
        "model": _one([_hl(m["real_size"].get("model")) for m in metas] + ([prev["model"]] if prev.get("model") else []),
                      "model"),
        "acc_len": _one([m["real_size"].get("acc_len") for m in metas] + ([prev["acc_len"]] if "acc_len" in prev else []),
                        "acc_len"),
        "points": [points[k] for k in sorted(points, key=order)],
    }
    md = [f"# Upstream parity: the plugin on a pinned release vs upstream's own spec v2", "",
          f"{summary['device']}, {summary['date']}, commit {summary['commit']}; Llama-shaped target (hidden "
          f"{(summary['model'] or {}).get('hidden_size')}, {(summary['model'] or {}).get('num_hidden_layers')} layers, "
          "dummy weights) + 1-layer EAGLE3 draft, "
          f"`SGLANG_SIMULATE_ACC_LEN={summary['acc_len']}` on both sides, the same KV pool (`--max-total-tokens`). "
          "Ratio: median over alternating pairs of plugin / upstream output tok/s (> 1: the plugin is faster). "
          "Generated by `bench/real_size_report.py --parity`.", "",
          "| release | upstream | backend | TP | config | conc | pairs | upstream tok/s | plugin tok/s | plugin / upstream "
          "| per pair | device, date (plugin side's env) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in summary["points"]:
        md.append(f"| {p['release']} | {p['baseline_release']} | {p['backend']} | {p.get('tp', 1)} | {p['config']} | "
                  f"{p['concurrency']} | {p['pairs']} | {p.get('upstream_tok_s', '')} | {p.get('plugin_tok_s', '')} | "
                  f"{p['plugin_over_upstream']:.3f} | {', '.join(f'{x:.3f}' for x in p.get('pair_ratios') or [])} | "
                  f"{p.get('device') or '?'}, {p.get('date') or '?'}"
                  + "".join(f", {k}={v}" for k, v in (p.get("plugin_env") or {}).items()) + " |")
    return summary, "\n".join(md) + "\n"


def parity_png(summary, path):
    """One panel per (release, TP): plugin / upstream per configuration and concurrency (bars: median over pairs;
    dots: the pairs), the issue's 0.97 and parity lines."""
    plt = _pyplot()
    if plt is None:
        return None
    pts = summary["points"]
    panels = list(dict.fromkeys((p["release"], p["baseline_release"], p.get("tp", 1)) for p in pts))
    if not panels:
        return None
    fig, ax = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.8), squeeze=False)
    concs = sorted({p["concurrency"] for p in pts})
    width, cmap = 0.8 / len(concs), plt.get_cmap("tab10")
    for a, (rel, base, tp) in zip(ax[0], panels):
        ps = [p for p in pts if (p["release"], p["baseline_release"], p.get("tp", 1)) == (rel, base, tp)]
        names = list(dict.fromkeys(f"{p['config']}\n{p['backend']}" for p in ps))
        for j, c in enumerate(concs):
            xs, ys = [], []
            for i, n in enumerate(names):
                p = next((p for p in ps if f"{p['config']}\n{p['backend']}" == n and p["concurrency"] == c), None)
                if p:
                    x = i + (j - (len(concs) - 1) / 2) * width
                    xs.append(x)
                    ys.append(p["plugin_over_upstream"])
                    a.scatter([x] * len(p.get("pair_ratios") or []), p.get("pair_ratios") or [], color="k", s=8, zorder=3)
            a.bar(xs, ys, width, color=cmap(j), label=f"concurrency {c}")
        a.axhline(1.0, color="k", lw=0.8)
        a.axhline(PARITY_TARGET, color="tab:red", lw=0.8, ls="--", label=f"target {PARITY_TARGET}")
        a.set_xticks(range(len(names)))
        a.set_xticklabels(names, fontsize=8)
        every = [x for p in ps for x in [p["plugin_over_upstream"], *(p.get("pair_ratios") or [])]]
        a.set_ylim(min(0.6, min(every) - 0.05), max(1.2, max(every) + 0.05))
        a.set_ylabel("output tok/s, plugin / upstream")
        devices = ", ".join(sorted({str(p.get("device")) for p in ps}))
        a.set_title(f"{rel} + plugin vs {base}, TP {tp}\n{devices}", fontsize=9)
        a.grid(alpha=0.3, axis="y")
        a.legend(fontsize=7)
    fig.suptitle(f"Upstream parity, {ENV}={summary['acc_len']}, {summary['date']} (median over pairs; dots: pairs)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="results.json of bench/serving.py --real-size runs")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "docs", "bench"))
    ap.add_argument("--name", default="real-size-latest")
    ap.add_argument("--commit", default=None, help="commit to record when the runs did not record one")
    ap.add_argument("--previous", default=None, metavar="SUMMARY_JSON",
                    help="an earlier NAME.json whose points are kept where the runs have no (release, tp, shape, "
                         "config) of their own (e.g. docs/bench/real-size-latest.json: TP 1 beside new TP 2 points)")
    ap.add_argument("--parity", action="store_true", help="the upstream-parity summary of upstream/plugin runs "
                    "(default --name upstream-parity; chosen by itself when every input has those sides)")
    a = ap.parse_args(argv)
    previous = None
    if a.previous:
        with open(a.previous) as f:
            previous = json.load(f)
    if a.parity or all(plot.side_names(read_results(p)) == PARITY_SIDES for p in a.results):
        summary, md = parity(a.results, a.commit, previous)
        base = os.path.join(a.out_dir, a.name if a.name != "real-size-latest" else "upstream-parity")
        os.makedirs(a.out_dir, exist_ok=True)
        _write(base, summary, md)
        png = parity_png(summary, base + ".png")
        for p in summary["points"]:
            print(f"[real_size_report] {p['release']} vs {p['baseline_release']} {p['backend']} TP{p['tp']} "
                  f"{p['config']} c={p['concurrency']}: plugin/upstream {p['plugin_over_upstream']:.3f} "
                  f"over {p['pairs']} pairs")
        print(f"[real_size_report] wrote {base}.json, {base}.md" + (f", {png}" if png else ""))
        return 0
    summary, written = write(load(a.results), a.out_dir, a.name, a.commit, previous)
    for p in written:
        print(f"[real_size_report] wrote {p}")
    for p in summary["points"]:
        print(f"[real_size_report] {p['release']} TP{p.get('tp', 1)} {p['config']} c={p['concurrency']}: plugin/stock "
              f"{p['plugin_over_stock']:.3f} over {p['pairs']} pairs ({p['stock_tok_s']} -> {p['plugin_tok_s']} tok/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
