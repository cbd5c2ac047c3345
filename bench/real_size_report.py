#!/usr/bin/env python3
"""Report of ``bench/serving.py --real-size`` runs: one JSON summary, a Markdown table and a plot.

    python3 bench/real_size_report.py [--out-dir docs/bench] [--name real-size-latest] [--commit C] RESULTS_JSON...

Inputs: ``results.json`` files of real-size runs (``meta.real_size`` present), any releases, any subsets of the
configurations (a release's configurations may come from several GPUs or several device calls). When a
(release, configuration) appears in more than one input, the one with more stock/plugin pairs is used (on a tie the
later input): a configuration cut by the budget can be re-run alone and passed after the first run.

Writes OUT_DIR/NAME.json::

    {"device", "date", "commit", "model": {"hidden_size", "num_hidden_layers"}, "acc_len",
     "points": [{"release", "config", "concurrency", "plugin_over_stock", "pairs", "stock_tok_s", "plugin_tok_s"}]}

``plugin_over_stock`` is the median over stock/plugin pairs of plugin / stock output tok/s, ``stock_tok_s`` /
``plugin_tok_s`` the medians of each side's successful points, ``pairs`` the number of pairs with both sides
successful (points without any pair are left out; the Markdown lists them). ``device`` / ``date`` / ``commit`` come
from the runs' facts (``meta.device``, ``meta.date``, ``meta.real_size.commit``; several distinct values are joined
with " + ", the date is the latest run's); ``--commit`` replaces a missing commit. Configurations named ``tree-*``
are EAGLE3 tree drafting (topk > 1). Also OUT_DIR/NAME.md (table, per-pair ratios, sanity checks: the measured
accept length against ``acc_len`` and the speculative path each side took) and OUT_DIR/NAME.png (needs matplotlib;
skipped with a message without it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
import plot  # noqa: E402  (bench/plot.py beside this script, importable as the script's directory: summarize, spec_path, _median)

CONFIG_ORDER = ("eagle3-topk1", "tree-topk4", "tree-topk8", "nospec")
ACCEPT_TOLERANCE = 0.3  # |measured mean accept length - acc_len| above this is flagged
GOAL = 1.25  # tree drafting goal of the project (README "Performance")


def _release_key(v):
    out = []
    for part in str(v).replace("post", ".").split("."):
        out.append(int(part) if part.isdigit() else 0)
    return out


def _config_key(name):
    return (CONFIG_ORDER.index(name) if name in CONFIG_ORDER else len(CONFIG_ORDER), name)


def pair_ratios(cfg, c, key="output_throughput"):
    """plugin / stock of ``key`` for each repeat at concurrency ``c`` where both sides succeeded (plot.summarize's
    pairing)."""
    pts = [p for p in plot.ok_points(cfg) if p["concurrency"] == c]
    by = {s: {p["rep"]: p for p in pts if p["side"] == s} for s in plot.SIDES}
    return [plot._ratio(by["plugin"][r].get(key), by["stock"][r].get(key)) for r in sorted(set(by["stock"]) & set(by["plugin"]))]


def n_pairs(cfg):
    return sum(r["pairs"] for r in plot.summarize({"configs": {"x": cfg}}))


def load(paths):
    runs = []
    for path in paths:
        with open(path) as f:
            r = json.load(f)
        m = r.get("meta", {})
        if not m.get("real_size"):
            raise SystemExit(f"{path}: not a real-size run (no meta.real_size): run bench/serving.py --real-size")
        runs.append((path, r))
    if not runs:
        raise SystemExit("no results.json given")
    return runs


def combine(runs):
    """{release: {"configs": {name: cfg}, "source": {name: (path, meta)}}} choosing per (release, config) the input
    with most pairs."""
    out = {}
    for path, r in runs:
        m = r["meta"]
        rel = out.setdefault(str(m.get("sglang")), {"configs": {}, "source": {}})
        for name, cfg in r.get("configs", {}).items():
            old = rel["configs"].get(name)
            if old is None or n_pairs(cfg) >= n_pairs(old):
                rel["configs"][name] = cfg
                rel["source"][name] = (path, m)
    return out


def _one(values, what):
    vals = sorted({json.dumps(v, sort_keys=True) for v in values})
    if len(vals) > 1:
        raise SystemExit(f"inputs disagree on {what}: {', '.join(vals)}")
    return json.loads(vals[0]) if vals else None


def _joined(values):
    vals = [v for v in dict.fromkeys(values) if v]
    return " + ".join(str(v) for v in vals) if vals else None


def build(runs, commit=None):
    """The summary dict (exact schema) and the per-row details the Markdown / plot use."""
    merged = combine(runs)
    used = [meta for rel in merged.values() for _, meta in rel["source"].values()]
    if not used:
        used = [r["meta"] for _, r in runs]
    acc = _one([m["real_size"].get("acc_len") for m in used], "acc_len")
    model = _one([{k: m["real_size"].get("model", {}).get(k) for k in ("hidden_size", "num_hidden_layers")}
                  for m in used], "model shape")
    summary = {
        "device": _joined(m.get("device") for m in used),
        "date": max((m.get("date") or "" for m in used), default="") or None,
        "commit": _joined(m["real_size"].get("commit") for m in used) or commit,
        "model": model,
        "acc_len": acc,
        "points": [],
    }
    details = []
    for release in sorted(merged, key=_release_key):
        rel = merged[release]
        for name in sorted(rel["configs"], key=_config_key):
            cfg = rel["configs"][name]
            for row in plot.summarize({"configs": {name: cfg}}):
                c = row["concurrency"]
                d = dict(release=release, config=name, concurrency=c, row=row, cfg=cfg, source=rel["source"][name][0],
                         pair_ratios=pair_ratios(cfg, c))
                details.append(d)
                if row["pairs"] < 1 or row["throughput_ratio"] is None:
                    continue
                summary["points"].append({
                    "release": release, "config": name, "concurrency": c,
                    "plugin_over_stock": round(row["throughput_ratio"], 3), "pairs": row["pairs"],
                    "stock_tok_s": round(row["output_throughput"]["stock"], 1),
                    "plugin_tok_s": round(row["output_throughput"]["plugin"], 1),
                })
    return summary, details, merged


# ---------------------------------------------------------------------------------------------- markdown
def checks(details, merged, acc):
    """Sanity lines: accept length vs acc_len, the speculative path of each side, failed or missing points."""
    out = []
    for d in details:
        for side in plot.SIDES:
            al = d["row"]["accept_length"][side]
            if al is not None and acc is not None and abs(al - acc) > ACCEPT_TOLERANCE:
                out.append(f"{d['release']} {d['config']} c={d['concurrency']} {side}: mean accept length {al:.2f}, "
                           f"not the simulated {acc} (was {ENV} set on that server?)")
    for release, rel in merged.items():
        for name, cfg in rel["configs"].items():
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


def markdown(summary, details, merged, runs):
    f, r = plot._f, plot._r
    metas = [m for rel in merged.values() for _, m in rel["source"].values()]
    m0 = metas[0] if metas else runs[0][1]["meta"]
    rs = m0.get("real_size", {})
    model = rs.get("model", {})
    a = m0.get("args", {})
    lines = [
        "# Tree drafting at real size: stock SGLang vs the plugin",
        "",
        f"{summary['device']}, {summary['date']}, commit {summary['commit'] or 'unknown'}; "
        + ", ".join(f"sglang {rel}" for rel in sorted(merged, key=_release_key)) + ".",
        "",
        "Models: a Llama-3.1-8B-shaped target (" + ", ".join(f"{label} {model[k]}" for k, label in (
            ("hidden_size", "hidden"), ("num_hidden_layers", "layers"), ("intermediate_size", "intermediate"),
            ("num_attention_heads", "heads"), ("num_key_value_heads", "KV heads"), ("vocab_size", "vocab"),
            ("target_params_b", "billion parameters")) if model.get(k) is not None) + ") and a 1-layer EAGLE3 draft"
        + (f" (draft vocab {model['draft_vocab_size']})" if model.get("draft_vocab_size") else "")
        + ", config + tokenizer only (`bench/real_size_models.py`), served "
        "with `--load-format dummy --speculative-draft-load-format dummy`. Acceptance is simulated by SGLang itself: "
        f"`{ENV}={summary['acc_len']}` in both servers' environment (dummy weights accept nothing; the greedy identity "
        "check is skipped, the tiny real-weight runs keep it). Stock = `--specv2-fixes off` (SGLang sends explicit "
        "topk > 1 to spec v1, overlap off), plugin = `--specv2-fixes auto` (spec v2 tree drafting, page size 1).",
        "",
        f"Driver: `bench/serving.py --real-size` (SGLang's `sglang.bench_serving`, random ids, {a.get('input_len')} input / "
        f"{a.get('output_len')} output tokens, `--max-concurrency` per row); both servers of a configuration up "
        "together on one GPU, measured one at a time, stock/plugin pairs with alternating order. Server flags: "
        f"`{' '.join(m0.get('common_server_args', []))}`.",
        "",
        "plugin / stock = median over pairs of the per-pair output tok/s ratio (> 1: plugin faster); tok/s columns are "
        "medians over each side's points.",
        "",
        "| release | config | concurrency | pairs | stock tok/s | plugin tok/s | plugin / stock | per-pair ratios | "
        "accept len stock / plugin | TPOT median ms stock / plugin |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in details:
        row = d["row"]
        lines.append(
            f"| {d['release']} | {d['config']} | {d['concurrency']} | {row['pairs']} | "
            f"{f(row['output_throughput']['stock'])} | {f(row['output_throughput']['plugin'])} | "
            f"**{r(row['throughput_ratio'])}** | {', '.join(r(x) for x in d['pair_ratios']) or '-'} | "
            f"{f(row['accept_length']['stock'], 2)} / {f(row['accept_length']['plugin'], 2)} | "
            f"{f(row['median_tpot_ms']['stock'], 2)} / {f(row['median_tpot_ms']['plugin'], 2)} |")
    if not details:
        lines.append("| (no successful points) |||||||||| ")
    trees = [p for p in summary["points"] if p["config"].startswith("tree")]
    if trees:
        best = max(trees, key=lambda p: p["plugin_over_stock"])
        met = [p for p in trees if p["plugin_over_stock"] >= GOAL]
        lines += ["", f"Tree drafting goal (plugin >= {GOAL}x stock): met at {len(met)} of {len(trees)} tree points; "
                      f"best {best['plugin_over_stock']:.3f} ({best['release']} {best['config']} c={best['concurrency']})."]
    chk = checks(details, merged, summary["acc_len"])
    lines += ["", "Checks (accept length vs the simulated value, speculative path per side, failed points):", ""]
    lines += [f"* {x}" for x in chk] or ["* all points ran; both sides accepted the simulated length; stock took spec v1 "
                                         "and the plugin spec v2 for the tree configurations"]
    lines += ["", "Runs:", ""]
    for release in sorted(merged, key=_release_key):
        for name in sorted(merged[release]["source"], key=_config_key):
            path, m = merged[release]["source"][name]
            # a release merged from parts on several GPUs (bench/plot.py --merge): the part that ran this config
            m = next((p for p in m.get("parts") or [] if name in (p.get("args") or {}).get("configs", [])), m)
            cfg = merged[release]["configs"][name]
            launch = ", ".join(f"{s} {f(v.get('launch_s'), 0)} s" for s, v in cfg.get("sides", {}).items())
            lines.append(f"* {release} {name}: {m.get('date')}, {m.get('device')}, GPU {m.get('cuda_visible_devices')}, "
                         f"launch {launch or '-'}, run {'complete' if m.get('complete') else 'INCOMPLETE: ' + str(m.get('stop_reason'))} "
                         f"(`{os.path.relpath(path, ROOT) if os.path.abspath(path).startswith(ROOT + os.sep) else path}`)")
    lines.append("")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------------- plot
def plot_png(summary, details, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("[real_size_report] matplotlib is not installed: plot skipped (JSON and Markdown written)", flush=True)
        return None
    releases = sorted({d["release"] for d in details}, key=_release_key)
    if not releases:
        return None
    fig, ax = plt.subplots(2, len(releases), figsize=(6.5 * len(releases), 9), squeeze=False)
    concs = sorted({d["concurrency"] for d in details})
    cmap = plt.get_cmap("tab10")
    for k, rel in enumerate(releases):
        ds = [d for d in details if d["release"] == rel]
        names = sorted({d["config"] for d in ds}, key=_config_key)
        width = 0.8 / max(1, len(concs))
        a = ax[0][k]
        for j, c in enumerate(concs):
            xs, ys = [], []
            for i, n in enumerate(names):
                d = next((d for d in ds if d["config"] == n and d["concurrency"] == c), None)
                if not d or d["row"]["throughput_ratio"] is None:
                    continue
                x = i + (j - (len(concs) - 1) / 2) * width
                xs.append(x)
                ys.append(d["row"]["throughput_ratio"])
                pr = [v for v in d["pair_ratios"] if v is not None]
                a.scatter([x] * len(pr), pr, color="k", s=10, zorder=3)
            a.bar(xs, ys, width, color=cmap(j), label=f"concurrency {c}")
        a.axhline(1.0, color="k", lw=0.8)
        a.axhline(GOAL, color="tab:red", lw=0.8, ls="--", label=f"goal {GOAL}x (tree)")
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
                       if d["config"] == n and d["row"]["output_throughput"][s] is not None]
                if pts:
                    a.plot([p[0] for p in pts], [p[1] for p in pts], ls=ls, marker=mk, color=cmap(i), label=f"{n} {s}")
        a.set_xscale("log", base=2)
        a.set_xticks(concs)
        a.set_xticklabels([str(c) for c in concs])
        a.set_xlabel("max concurrency")
        a.set_ylabel("output tok/s (median)")
        a.grid(alpha=0.3)
        a.legend(fontsize=7, ncol=2)
    mdl = summary.get("model") or {}
    fig.suptitle(f"8B-shaped target (hidden {mdl.get('hidden_size')}, {mdl.get('num_hidden_layers')} layers) + EAGLE3, "
                 f"dummy weights, {ENV}={summary['acc_len']}; {summary['device']}, {summary['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(runs, out_dir, name, commit=None):
    summary, details, merged = build(runs, commit)
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, name)
    with open(base + ".json", "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    with open(base + ".md", "w") as f:
        f.write(markdown(summary, details, merged, runs))
    written = [base + ".json", base + ".md"]
    png = plot_png(summary, details, base + ".png")
    if png:
        written.append(png)
    return summary, written


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="results.json of bench/serving.py --real-size runs")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "docs", "bench"))
    ap.add_argument("--name", default="real-size-latest")
    ap.add_argument("--commit", default=None, help="commit to record when the runs did not record one")
    a = ap.parse_args(argv)
    summary, written = write(load(a.results), a.out_dir, a.name, a.commit)
    for p in written:
        print(f"[real_size_report] wrote {p}")
    for p in summary["points"]:
        print(f"[real_size_report] {p['release']} {p['config']} c={p['concurrency']}: plugin/stock "
              f"{p['plugin_over_stock']:.3f} over {p['pairs']} pairs ({p['stock_tok_s']} -> {p['plugin_tok_s']} tok/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
