#!/usr/bin/env python3
"""Summary of ``bench/serving.py --real-size`` runs: one JSON file, a Markdown table and a plot.

    python3 bench/real_size_report.py [--out-dir DIR] [--name NAME] [--commit C] [--previous NAME.json]
        [--parity] RESULTS...

``--out-dir`` defaults to build/bench (ignored by git): the tracked docs/bench summaries change only when a run names
``--out-dir docs/bench``.

An input is a ``results.json`` or ``ARCHIVE.tar.gz:MEMBER``; all inputs have the same two sides a, b (serving.py
``--side``). A point is the median over pairs of b / a output tok/s; per configuration (release, TP, model shape,
configuration) the input with most pairs wins; ``--previous`` keeps an earlier summary's points of (configuration,
concurrency) the runs do not have (a run of one concurrency replaces that point only), and its profiles of
configurations the runs do not have. Two layouts (docs/bench/README.md):

* NAME.{json,md,png} (default real-size-latest): points ``{release, config, concurrency, B_over_A, pairs,
  A_tok_s, B_tok_s, tp}``, the runs' GPU and host profiles, checks and runs;
* ``--parity`` (issue 30; chosen by itself when the sides are upstream and plugin; default NAME upstream-parity): a
  configuration is also keyed by a's release (``baseline_release``) and the attention ``backend``; points add
  ``pair_ratios`` and their run's ``device``, ``date`` and ``commit`` (a file merged over leases may mix GPUs; ratios
  compare within a run), and the header joins the devices and commits of the points it holds; eagle3-topk1 is named
  ``chain``. A parity configuration is also keyed by its ``invocation`` (``bench/real_size.py``: ``user``, the flags a
  user passes, or ``harness``, with benchmark-only switches; runs that did not record one were ``harness``), and each
  point carries every server flag both sides had (``server_args``) and each side's launch environment (``env``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
import plot  # noqa: E402  (bench/plot.py beside this script: summarize, profile tables, plot helpers)

OUT_DIR = os.path.join(ROOT, "build", "bench")  # --out-dir's default: never the tracked docs/bench unless named

ENV = "SGLANG_SIMULATE_ACC_LEN"
CONFIG_ORDER = ("eagle3-topk1", "tree-topk4", "tree-topk8", "default", "mtp-chain", "nospec")
ACCEPT_TOLERANCE = 0.3  # |measured mean accept length - acc_len| above this is flagged
CHAIN_CONTROL = 0.99  # issue 30: where the plugin changes nothing a chain needs, plugin / stock >= this
PARITY_SIDES = ("upstream", "plugin")
PARITY_TARGET = 0.97  # issue 30: every point's median plugin / upstream
PARITY_CONFIG = {"eagle3-topk1": "chain"}
HARNESS = "harness"  # the invocation of runs that recorded none: the tests' COMMON flags (bench/real_size.py)  # the issue's name of the configuration; the rest keep serving.py's
# bench/real_size_models.py's shapes, for runs that did not record one
SHAPES = {(4096, 32): "8b", (8192, 80): "70b", (7168, 8): "dsv3-reduced"}
# the speculative path each side should take (plot.spec_path), by side name, for chains and trees
EXPECTED_PATH = {"stock": ("spec v2 (overlap)", "spec v1 (overlap off)"), "plugin": ("spec v2 (overlap)",) * 2}
MODEL_WORDS = (("hidden_size", "hidden"), ("num_hidden_layers", "layers"), ("intermediate_size", "intermediate"),
               ("num_attention_heads", "heads"), ("num_key_value_heads", "KV heads"), ("vocab_size", "vocab"),
               ("target_params_b", "billion parameters"))
SIDE_NOTES = {"stock": "SGLang sends explicit topk > 1 to spec v1, overlap off",
              "plugin": "spec v2 tree drafting, page size 1"}


def _release_key(v):
    return [int(part) if part.isdigit() else 0 for part in str(v).replace("post", ".").split(".")]


def _config_key(name):
    return (CONFIG_ORDER.index(name) if name in CONFIG_ORDER else len(CONFIG_ORDER), name)


def read_results(path):
    """One input: a results.json file, or ``ARCHIVE:MEMBER`` read from inside a tar archive (not unpacked)."""
    for suffix in (".tar.gz:", ".tgz:", ".tar:"):
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
    """[(path, results)] of real-size runs that all have the same two sides."""
    runs = [(path, read_results(path)) for path in paths]
    if not runs:
        raise SystemExit("no results.json given")
    for path, r in runs:
        if not r.get("meta", {}).get("real_size"):
            raise SystemExit(f"{path}: not a real-size run (no meta.real_size): run bench/serving.py --real-size")
        if plot.side_names(r) != plot.side_names(runs[0][1]):
            raise SystemExit(f"{path}: sides {plot.side_names(r)}, {runs[0][0]}: {plot.side_names(runs[0][1])}: "
                             "one summary compares one pair of sides")
    return runs


def shape_of(model):
    """The model shape's name (``meta.real_size.model.shape``; older runs: from hidden size and layers)."""
    model = model or {}
    key = (model.get("hidden_size"), model.get("num_hidden_layers"))
    return model.get("shape") or SHAPES.get(key) or f"h{key[0]}x{key[1]}"


def _hl(model):
    """What a summary keeps of a run's model: hidden size and layers; a shape other than the Llama ones (which older
    summaries hold without it) keeps its shape, name and draft too."""
    model = model or {}
    keys = ("hidden_size", "num_hidden_layers") + (
        ("shape", "name", "draft") if model.get("shape") not in (None, "8b", "70b") else ())
    return {k: model.get(k) for k in keys}


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


def _launch_env(side):
    """The variables a side's server got on top of the harness's environment that can change what it serves (SGLang's
    and the plugin's; PYTHONPATH only names the release folder, recorded as the side's version)."""
    return {k: v for k, v in (side.get("launch_env") or {}).items() if k.startswith("SGLANG")}


def _one(values, what):
    vals = sorted({json.dumps(v, sort_keys=True) for v in values if v is not None})
    if len(vals) > 1:
        raise SystemExit(f"inputs disagree on {what}: {', '.join(vals)}")
    return json.loads(vals[0]) if vals else None


def _joined(values):
    """Distinct values joined with " + " (a value already joined counts as its parts)."""
    vals = [v for v in dict.fromkeys(x for v in values if v for x in str(v).split(" + ")) if v]
    return " + ".join(str(v) for v in vals) if vals else None


# ------------------------------------------------------------------------------------------------- summary
class Summary:
    """The runs' configurations and points in one layout (``parity`` or not), sides ``a``, ``b``.

    ``configs``: {key: (path, run, name, cfg)}, key (release, [baseline, backend,] tp, shape, config), the input
    with most pairs; ``details``: a dict per (configuration, concurrency) in order ({key, release, tp, shape, config,
    concurrency, model, row (plot.summarize's), cfg, source, point (None: no pair), label}), those kept from
    ``previous`` with ``cfg`` None; ``json``: the summary written as NAME.json."""

    def __init__(self, runs, commit=None, previous=None, parity=False):
        self.parity, self.previous, self.commit = parity, previous or {}, commit
        self.a, self.b = plot.side_names(runs[0][1])
        self.ratio, self.a_tok, self.b_tok = f"{self.b}_over_{self.a}", f"{self.a}_tok_s", f"{self.b}_tok_s"
        self.configs = {}
        for path, r in runs:
            for name, cfg in r.get("configs", {}).items():
                key = self.key(r["meta"], name, cfg)
                old = self.configs.get(key)
                if key and (old is None or self.n_pairs(r, cfg) >= self.n_pairs(old[1], old[3])):
                    self.configs[key] = (path, r, name, cfg)
        self.details = [self.detail(k, *v, row) for k, v in self.configs.items()
                        for row in plot.summarize({"meta": v[1]["meta"], "configs": {v[2]: v[3]}})]
        self.details += self.carried({(d["key"], d["concurrency"]) for d in self.details})
        self.details.sort(key=lambda d: (self.order(d["key"]), d["concurrency"]))
        metas = [r["meta"] for _, r, _, _ in self.configs.values()] or [r["meta"] for _, r in runs]
        shapes = {}
        for d in self.details:
            if d["point"] is not None:
                shapes.setdefault(d["shape"], [d["model"], 0])[1] += 1
        self.mixed = len(shapes) > 1
        for d in self.details:
            d["label"] = (d["config"] + (f" TP{d['tp']}" if d["tp"] != 1 else "") + (f" {d['shape']}" if self.mixed else "")
                          + (f"\n{d['key'][2]}" + (f" ({d['key'][3]})" if d["key"][3] != "user" else "")
                             if parity else ""))  # parity: the backend (and a harness invocation)
            d["panel"] = f"sglang {d['release']}" + (f" vs {d['key'][1]}" if parity else "")
            if d["point"] is not None and self.mixed:
                d["point"]["model"] = d["model"]
        top = max(shapes.values(), key=lambda x: x[1])[0] if shapes else _hl(metas[0]["real_size"].get("model"))
        prev, points = self.previous, [d["point"] for d in self.details if d["point"] is not None]
        # parity points name their own device and commit: the header joins those of the points it keeps (a previous
        # summary's header may name a device or commit none of them has any more); else the runs' and previous file's
        self.json = {"device": self.of_points(points, "device") or _joined([m.get("device") for m in metas]
                                                                           + [prev.get("device")]),
                     "date": max([m.get("date") or "" for m in metas] + [prev.get("date") or ""]) or None,
                     "commit": self.of_points(points, "commit") or _joined(
                         [_joined(m["real_size"].get("commit") for m in metas) or commit, prev.get("commit")]),
                     "model": top, "acc_len": _one([m["real_size"].get("acc_len") for m in metas]
                                                   + [prev.get("acc_len")], "acc_len"),
                     "points": points}
        self.profiles = self.hosts = []
        if not parity:
            self.profiles = self.entries("profiles", plot.profile_rows, lambda p: dict(
                {k: p.get(k) for k in self.profile_keys() + ("tp", "shape", "model")}, names=(self.a, self.b),
                sides={s: p[s] for s in (self.a, self.b) if s in p}))
            if self.profiles:
                self.json["profiles"] = [dict({k: r[k] for k in self.profile_keys()},
                                              **{x: r["sides"][x] for x in (self.a, self.b) if x in r["sides"]},
                                              **({"model": r["model"]} if self.mixed else {})) for r in self.profiles]
            self.hosts = self.entries("host_profiles", lambda run: run["host_profiles"], lambda h: h)
            if self.hosts:
                self.json["host_profiles"] = [{k: v for k, v in h.items() if k != "shape" and (k != "model" or self.mixed)}
                                              for h in self.hosts]

    @staticmethod
    def n_pairs(run, cfg):
        return sum(r["pairs"] for r in plot.summarize({"meta": run["meta"], "configs": {"x": cfg}}))

    def key(self, meta, name, cfg):
        """(release, [baseline release, backend,] tp, shape, config) of a configuration of a run (None: a parity
        side that did not start); runs without ``real_size.tp`` ran at TP 1."""
        rs = meta.get("real_size") or {}
        tp, shape = int(rs.get("tp") or 1), shape_of(rs.get("model"))
        if not self.parity:
            return str(meta.get("sglang")), tp, shape, name
        sides = cfg.get("sides", {})
        rel, base = (sides.get(self.b) or {}).get("version"), (sides.get(self.a) or {}).get("version")
        return (rel, base, _backend(cfg), rs.get("invocation") or HARNESS, tp, shape, name) if rel and base else None

    def order(self, key):
        *head, tp, shape, config = key
        return [_release_key(head[0])] + ([_release_key(head[1]), head[2], head[3] != "user"] if self.parity else []) + [
            tp, shape, _config_key(config)]

    def of_points(self, points, field):
        """(parity) the points' ``field`` joined; None unless every point has one."""
        vals = [p.get(field) for p in points]
        return _joined(vals) if self.parity and vals and all(vals) else None

    def point(self, key, c, pairs, ratio, a_tok, b_tok, pair_ratios, device=None, date=None, env=None, commit=None,
              server_args=None, sides_env=None):
        if not self.parity:
            return {"release": key[0], "config": key[-1], "concurrency": c, self.ratio: ratio, "pairs": pairs,
                    self.a_tok: a_tok, self.b_tok: b_tok, "tp": key[-3]}
        return {"release": key[0], "baseline_release": key[1], "backend": key[2], "invocation": key[3],
                "config": PARITY_CONFIG.get(key[-1], key[-1]), "concurrency": c, self.ratio: ratio, "pairs": pairs,
                "tp": key[-3], self.a_tok: a_tok, self.b_tok: b_tok, "pair_ratios": pair_ratios, "device": device,
                "date": date, **({"commit": commit} if commit else {}),
                **({f"{self.b}_env": env} if env else {}),  # a switch the side set (verify-handoff's)
                **({"server_args": server_args} if server_args else {}), **({"env": sides_env} if sides_env else {})}

    def detail(self, key, path, run, name, cfg, row):
        a, b, meta = self.a, self.b, run["meta"]
        d = dict(key=key, release=key[0], tp=key[-3], shape=key[-2], config=name, concurrency=row["concurrency"],
                 model=_hl(meta["real_size"].get("model")), row=row, cfg=cfg, source=path, point=None)
        if row["pairs"] >= 1 and row["throughput_ratio"] is not None:
            d["point"] = self.point(key, row["concurrency"], row["pairs"], round(row["throughput_ratio"], 3),
                                    round(row["output_throughput"][a], 1), round(row["output_throughput"][b], 1),
                                    [round(x, 3) for x in row["pair_throughput_ratios"]], meta.get("device"),
                                    meta.get("date"), (cfg.get("sides", {}).get(b) or {}).get("env"),
                                    meta["real_size"].get("commit") or self.commit, cfg.get("server_args"),
                                    {s: _launch_env(sd) for s, sd in cfg.get("sides", {}).items()})
        return d

    def carried(self, have):
        """The previous summary's points whose (configuration, concurrency) is not in ``have`` (missing ``tp``: 1;
        ``model``: the summary's own; a file from one run lends its device, date and commit to points without them)."""
        prev, out, a, b = self.previous, [], self.a, self.b
        one_run = " + " not in str(prev.get("device"))
        for p in prev.get("points", []):
            model = _hl(p.get("model") or prev.get("model"))
            config = {v: n for n, v in PARITY_CONFIG.items()}.get(p["config"], p["config"]) if self.parity else p["config"]
            key = (p["release"], *([p["baseline_release"], p["backend"], p.get("invocation") or HARNESS]
                                   if self.parity else []),
                   int(p.get("tp") or 1), shape_of(model), config)
            if (key, p["concurrency"]) in have:
                continue
            facts = {k: prev.get(k) for k in ("device", "date") if one_run}
            if one_run and " + " not in str(prev.get("commit")):
                facts["commit"] = prev.get("commit")
            pt = self.point(key, p["concurrency"], p["pairs"], p[self.ratio], p.get(self.a_tok), p.get(self.b_tok),
                            p.get("pair_ratios"), p.get("device", facts.get("device")), p.get("date", facts.get("date")),
                            p.get(f"{b}_env"), p.get("commit", facts.get("commit")), p.get("server_args"), p.get("env"))
            row = dict(concurrency=p["concurrency"], pairs=p["pairs"], throughput_ratio=p[self.ratio],
                       pair_throughput_ratios=p.get("pair_ratios") or [],
                       output_throughput={a: p.get(self.a_tok), b: p.get(self.b_tok)}, accept_length={a: None, b: None},
                       median_tpot_ms={a: None, b: None})
            out.append(dict(key=key, release=p["release"], tp=key[-3], shape=key[-2], config=config,
                            concurrency=p["concurrency"], model=model, row=row, cfg=None, source="previous summary",
                            point={k: v for k, v in pt.items() if v is not None}))
        return out

    def profile_keys(self):
        return "release", "tp", "config", "concurrency", self.a_tok, "measured_ratio", "ceiling", "ratio_over_busy"

    def entries(self, what, rows, carried):
        """Every chosen configuration's ``rows(run)`` (``run``: that configuration alone, with its ``what`` entries)
        with release / tp / shape / model; then ``carried(entry)`` of the previous summary's ``what`` entries
        (given tp / shape / model) of a configuration the runs have none of."""
        out = []
        for k in sorted(self.configs, key=self.order):
            _, run, name, cfg = self.configs[k]
            one = {"meta": run["meta"], "configs": {name: cfg}, what: [x for x in run.get(what) or []
                                                                       if x.get("config") == name]}
            model = _hl(run["meta"]["real_size"].get("model"))
            out += [dict(release=k[0], tp=k[-3], shape=k[-2], model=model, **x) for x in rows(one)]
        have = {(r["release"], r["tp"], r["shape"], r["config"]) for r in out}
        for p in self.previous.get(what, []):
            model = _hl(p.get("model") or self.previous.get("model"))
            r = carried(dict(p, tp=int(p.get("tp") or 1), shape=shape_of(model), model=model))
            if (r["release"], r["tp"], r["shape"], r["config"]) not in have:
                out.append(r)
        return out


def _name(d):
    return f"{d['release']}" + (f" TP{d['tp']}" if d["tp"] != 1 else "") + (f" {d['shape']}" if d["shape"] != "8b" else "")


# ---------------------------------------------------------------------------------------------- markdown
def checks(s):
    """Sanity lines: accept length vs acc_len, the speculative path of each side, failed or missing points."""
    out, acc = [], s.json["acc_len"]
    for d in s.details:
        for side in (s.a, s.b):
            al = d["row"]["accept_length"][side]
            if al is not None and acc is not None and abs(al - acc) > ACCEPT_TOLERANCE:
                out.append(f"{_name(d)} {d['config']} c={d['concurrency']} {side}: mean accept length {al:.2f}, not "
                           f"the simulated {acc} (was {ENV} set on that server?)")
    for k in sorted(s.configs, key=s.order):
        _, _, name, cfg = s.configs[k]
        where = _name(dict(release=k[0], tp=k[-3], shape=k[-2]))
        for side in (s.a, s.b):
            want = EXPECTED_PATH.get(side, (None, None))[name.startswith("tree")] if name != "nospec" else None
            got = plot.spec_path(cfg.get("sides", {}).get(side))
            if want and got != want:
                out.append(f"{where} {name} {side}: {got}, expected {want}")
        if cfg.get("skipped"):
            out.append(f"{where} {name}: skipped ({cfg['skipped']})")
        out += [f"{where} {name} {p['side']} c={p['concurrency']} rep {p['rep']}: FAILED {str(p.get('error'))[:160]}"
                for p in cfg.get("points", []) if not p.get("ok")]
    return out


def _model_text(s):
    """One phrase per target shape measured: its name and the sizes the runs recorded."""
    full = {}
    for k, (_, r, _, _) in s.configs.items():
        full.setdefault(k[-2], r["meta"]["real_size"].get("model") or {})
    out = []
    for shape in dict.fromkeys(d["shape"] for d in s.details) or full:
        model = full.get(shape) or next(d["model"] for d in s.details if d["shape"] == shape)
        name = model.get("name") or {"8b": "Llama-3.1-8B-shaped", "70b": "Llama-3.1-70B-shaped"}.get(shape, shape)
        out.append(f"a {name} target (" + ", ".join(f"{label} {model[k]}" for k, label in MODEL_WORDS
                                                   if model.get(k) is not None) + ")")
    return " / ".join(out) or "a real-size target"


def markdown(s, runs):
    f, r, a, b = plot._f, plot._r, s.a, s.b
    m0 = next(iter(s.configs.values()))[1]["meta"] if s.configs else runs[0][1]["meta"]
    model, args, common = m0["real_size"].get("model", {}), m0.get("args", {}), m0.get("common_server_args", [])
    tps = sorted({d["tp"] for d in s.details}) or [1]
    sides = {x["name"]: x for x in plot.sides({"meta": m0})}
    lines = [
        f"# Real size: {a} vs {b}",
        "",
        f"{s.json['device']}, {s.json['date']}, commit {s.json['commit'] or 'unknown'}; "
        + ", ".join(f"sglang {rel}" for rel in sorted({d["release"] for d in s.details} | {k[0] for k in s.configs},
                                                      key=_release_key)) + ".",
        "",
        "Models: " + _model_text(s) + " and a 1-layer EAGLE3 draft"
        + (f" (draft vocab {model['draft_vocab_size']})" if model.get("draft_vocab_size") else "")
        + ", config + tokenizer only (`bench/real_size_models.py`), served "
        "with `--load-format dummy --speculative-draft-load-format dummy`. Acceptance is simulated by SGLang itself: "
        f"`{ENV}={s.json['acc_len']}` in both servers' environment (dummy weights accept nothing; the greedy identity "
        "check is skipped, the tiny real-weight runs keep it). Sides: "
        + "; ".join(f"**{k}** `{plot.side_label(sides[n])}`" + (f" ({SIDE_NOTES[n]})" if n in SIDE_NOTES else "")
                    for k, n in zip("ab", (a, b))) + ".",
        "",
        f"Driver: `bench/serving.py --real-size` (SGLang's `sglang.bench_serving`, random ids, {args.get('input_len')} "
        f"input / {args.get('output_len')} output tokens, `--max-concurrency` per row); both servers of a configuration up "
        "together on the same GPU(s) (TP column: `--tp-size` of both servers, each run on that many GPUs of its own), "
        f"measured one at a time, {a}/{b} pairs with alternating order. Server flags: `{' '.join(x for x in common if x)}`"
        + (" (plus `--tp-size N` at TP N > 1)" if tps != [1] and "--tp-size" not in common else "") + ".",
        "",
        f"{b} / {a} = median over pairs of the per-pair output tok/s ratio (> 1: {b} faster); tok/s columns are "
        "medians over each side's points.",
        "",
        "| release | " + ("model | " if s.mixed else "") + f"TP | config | concurrency | pairs | {a} tok/s | {b} tok/s | "
        f"{b} / {a} | per-pair ratios | accept len {a} / {b} | TPOT median ms {a} / {b} |",
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if s.mixed else ""),
    ]
    for d in s.details:
        row = d["row"]
        lines.append(
            f"| {d['release']} | " + (f"{d['shape']} | " if s.mixed else "") + f"{d['tp']} | {d['config']} | "
            f"{d['concurrency']} | {row['pairs']} | {f(row['output_throughput'][a])} | {f(row['output_throughput'][b])} | "
            f"**{r(row['throughput_ratio'])}** | {', '.join(r(x) for x in row['pair_throughput_ratios']) or '-'} | "
            f"{f(row['accept_length'][a], 2)} / {f(row['accept_length'][b], 2)} | "
            f"{f(row['median_tpot_ms'][a], 2)} / {f(row['median_tpot_ms'][b], 2)} |")
    if not s.details:
        lines.append("| (no successful points) ||||||||||| ")
    chains = [p for p in s.json["points"] if p["config"] == "eagle3-topk1"]
    if chains:
        low = min(chains, key=lambda p: p[s.ratio])
        met = [p for p in chains if p[s.ratio] >= CHAIN_CONTROL]
        lines += ["", f"Chain control ({b} / {a} >= {CHAIN_CONTROL}, median over pairs): met at {len(met)} of "
                      f"{len(chains)} chain points; lowest {low[s.ratio]:.3f} ({low['release']} "
                      f"{'TP ' + str(low['tp']) + ' ' if low.get('tp', 1) != 1 else ''}c={low['concurrency']})."]
    lines += ["", "Checks (accept length vs the simulated value, speculative path per side, failed points):", ""]
    lines += [f"* {x}" for x in checks(s)] or ["* all points ran; both sides accepted the simulated length and took "
                                               "the expected speculative path"]
    lines += ["", "Runs:", ""]
    for k in sorted(s.configs, key=s.order):
        path, run, name, cfg = s.configs[k]
        # a release merged from parts on several GPUs (bench/plot.py --merge): the part that ran this config
        m = next((p for p in run["meta"].get("parts") or [] if name in (p.get("args") or {}).get("configs", [])),
                 run["meta"])
        launch = ", ".join(f"{x} {f(v.get('launch_s'), 0)} s" for x, v in cfg.get("sides", {}).items())
        lines.append(f"* {_name(dict(release=k[0], tp=k[-3], shape=k[-2]))} {name}: {m.get('date')}, {m.get('device')}, "
                     f"GPU {m.get('cuda_visible_devices')}, launch {launch or '-'}, run "
                     f"{'complete' if m.get('complete') else 'INCOMPLETE: ' + str(m.get('stop_reason'))} "
                     f"(`{os.path.relpath(path, ROOT) if os.path.abspath(path).startswith(ROOT + os.sep) else path}`)")
    carried = list(dict.fromkeys((d["release"], d["tp"], d["config"]) for d in s.details if d["cfg"] is None))
    if carried:
        lines.append("* kept from the previous summary (`--previous`; its device / date / commit are joined above): "
                     + ", ".join(f"{rel} TP{tp} {name}" for rel, tp, name in carried))

    def lead(shape, rows):  # the tables' first columns; the model column only when shapes are mixed
        return ((("release", lambda x: x["release"]),) + ((("model", shape),) if len({shape(x) for x in rows}) > 1
                                                          else ()) + (("TP", lambda x: x["tp"]), ("config", lambda x: x["config"])))

    lines += plot.profile_markdown(s.profiles, lead=lead(lambda x: x["shape"], s.profiles))
    lines += plot.host_profile_markdown(s.hosts, lead=lead(lambda x: shape_of(x.get("model") or s.json["model"]), s.hosts))
    return "\n".join(lines + [""])


def parity_markdown(s):
    j = s.json
    top = j["model"] or {}
    others = {shape_of(p["model"]): p["model"] for p in j["points"]  # a mixed run's points carry their model
              if p.get("model") and shape_of(p["model"]) != shape_of(top)}
    md = ["# Upstream parity: the plugin on a pinned release vs upstream's own spec v2", "",
          f"{j['device']}, {j['date']}, commit {j['commit']}; {plot.target_words(top, ', dummy weights')}, "
          f"`{ENV}={j['acc_len']}` on both sides, the same KV pool (`--max-total-tokens`)"
          + "".join(f"; {shape} points (config `... {shape}`): {plot.target_words(m)}" for shape, m in others.items())
          + ". Ratio: median over alternating pairs of plugin / upstream output tok/s (> 1: the "
          "plugin is faster). Generated by `bench/real_size_report.py --parity`.", "",
          "Invocation `user`: the flags a user passes (model, speculative settings, backend, dummy weights, KV pool) and "
          "nothing else; `harness`: with the registered tests' benchmark-only flags (`--disable-piecewise-cuda-graph` "
          "and others). Each point's JSON lists both sides' server flags and launch environment.", "",
          "| release | upstream | backend | invocation | TP | config | conc | pairs | upstream tok/s | plugin tok/s | "
          f"plugin / upstream | per pair | device, date, commit ({s.b} side's env) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in j["points"]:
        md.append(f"| {p['release']} | {p['baseline_release']} | {p['backend']} | {p.get('invocation') or HARNESS} | "
                  f"{p.get('tp', 1)} | {p['config']}"
                  + (f" {shape_of(p['model'])}" if p.get("model") and shape_of(p["model"]) in others else "")
                  + " | "
                  f"{p['concurrency']} | {p['pairs']} | {p.get(s.a_tok, '')} | {p.get(s.b_tok, '')} | "
                  f"{p[s.ratio]:.3f} | {', '.join(f'{x:.3f}' for x in p.get('pair_ratios') or [])} | "
                  f"{p.get('device') or '?'}, {p.get('date') or '?'}" + (f", {p['commit']}" if p.get("commit") else "")
                  + "".join(f", {k}={v}" for k, v in (p.get(f"{s.b}_env") or {}).items()) + " |")
    return "\n".join(md) + "\n"


# -------------------------------------------------------------------------------------------------- plots
def plot_png(s, path):
    """Per release (parity: and baseline): b / a per configuration and concurrency (bars: median over pairs; dots: the
    pairs) with the chain control (parity: the 0.97 target), then each side's tok/s."""
    plt = plot.pyplot("real_size_report", "plot skipped (JSON and Markdown written)")
    panels = list(dict.fromkeys(d["panel"] for d in s.details))
    if plt is None or not panels:
        return None
    fig, ax = plt.subplots(2, len(panels), figsize=(6.5 * len(panels), 9), squeeze=False)
    concs = sorted({d["concurrency"] for d in s.details})
    at = {(d["panel"], d["label"], d["concurrency"]): d["row"] for d in s.details}
    line = (PARITY_TARGET, f"target {PARITY_TARGET}") if s.parity else (CHAIN_CONTROL, f"chain control {CHAIN_CONTROL}")
    for k, panel in enumerate(panels):
        names = list(dict.fromkeys(d["label"] for d in s.details if d["panel"] == panel))
        get = lambda n, c: ((at[panel, n, c]["throughput_ratio"], at[panel, n, c]["pair_throughput_ratios"])  # noqa: E731
                            if (panel, n, c) in at else None)
        plot.ratio_bars(plt, ax[0][k], names, concs, get, f"output tok/s, {s.b} / {s.a} (median over pairs; dots: pairs)",
                        line)
        ax[0][k].set_title(panel)
        colors = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
        plot.side_lines(ax[1][k], names, (s.a, s.b), colors, concs, lambda n, side: [
            (c, at[panel, n, c]["output_throughput"][side]) for c in concs if (panel, n, c) in at], "output tok/s (median)")
        ax[1][k].legend(fontsize=7, ncol=2)
    shapes = ", ".join(f"{d['shape'].upper()}-shaped (hidden {d['model'].get('hidden_size')}, "
                       f"{d['model'].get('num_hidden_layers')} layers)" for d in {d["shape"]: d for d in s.details}.values())
    tps = sorted({d["tp"] for d in s.details})
    fig.suptitle(f"{shapes} target + EAGLE3, TP {'/'.join(map(str, tps))}, dummy weights, {ENV}={s.json['acc_len']}\n"
                 f"{s.json['device']}, {s.json['date']}")
    return plot._save(plt, fig, path)


def write(runs, out_dir, name, commit=None, previous=None, parity=False):
    """NAME.json, NAME.md and NAME.png in ``out_dir``; returns (NAME.json's summary, the paths written)."""
    s = Summary(runs, commit, previous, parity)
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, name)
    with open(base + ".json", "w") as f:
        json.dump(s.json, f, indent=1)
        f.write("\n")
    with open(base + ".md", "w") as f:
        f.write(parity_markdown(s) if parity else markdown(s, runs))
    png = plot_png(s, base + ".png")
    return s.json, [base + ".json", base + ".md"] + ([png] if png else [])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="results.json of bench/serving.py --real-size runs")
    ap.add_argument("--out-dir", default=OUT_DIR, help="where NAME.{json,md,png} go (default build/bench; the tracked "
                                                       "summaries: docs/bench)")
    ap.add_argument("--name", default=None, help="default real-size-latest; upstream-parity with --parity")
    ap.add_argument("--commit", default=None, help="commit to record when the runs did not record one")
    ap.add_argument("--previous", default=None, metavar="SUMMARY_JSON",
                    help="an earlier NAME.json whose points are kept where the runs have no (release, tp, shape, "
                         "config) of their own (e.g. an earlier real-size-latest.json: TP 1 beside new TP 2 points)")
    ap.add_argument("--parity", action="store_true", help="the upstream-parity summary of upstream/plugin runs "
                    "(chosen by itself when every input has those sides)")
    a = ap.parse_args(argv)
    previous = None
    if a.previous:
        with open(a.previous) as f:
            previous = json.load(f)
    runs = load(a.results)
    sides = plot.side_names(runs[0][1])
    parity = a.parity or sides == PARITY_SIDES
    if parity and sides != PARITY_SIDES:
        raise SystemExit(f"{runs[0][0]}: sides {sides}: --parity reads real-size runs of the sides "
                         "upstream=off@BASELINE and plugin=auto@RELEASE")
    summary, written = write(runs, a.out_dir, a.name or ("upstream-parity" if parity else "real-size-latest"),
                             a.commit, previous, parity)
    sa, sb = sides
    for p in summary["points"]:
        print(f"[real_size_report] {p['release']}" + (f" vs {p['baseline_release']} {p['backend']}" if parity else "")
              + f" TP{p.get('tp', 1)} {p['config']} c={p['concurrency']}: {sb}/{sa} {p[f'{sb}_over_{sa}']:.3f} over "
              f"{p['pairs']} pairs ({p.get(f'{sa}_tok_s')} -> {p.get(f'{sb}_tok_s')} tok/s)")
    print(f"[real_size_report] wrote {', '.join(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
