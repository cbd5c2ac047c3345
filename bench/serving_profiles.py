"""The GPU and host profiles of a ``bench/serving.py`` run (``--profile-steps``: bench/profile_steps.py,
``--host-profile-seconds``: bench/host_profile.py): ``Profiles``, a mixin of serving.py's ``Harness``. After a
configuration's pairs, one more load per concurrency and side carries the profiles, within what the budget leaves
once the later configurations' expected time is kept. The harness provides ``a`` (the arguments), ``results``,
``tmp``, ``launch_est``, ``save``, ``left``, ``limit``, ``repeats``, ``num_prompts``, ``est_point``, ``start_load`` and
``speculative(name)``.
"""

from __future__ import annotations

import gzip
import math
import os
import shutil
import time

import host_profile  # bench/host_profile.py
import plot as report  # bench/plot.py
import profile_steps  # bench/profile_steps.py
from serving_server import say


class Profiles:
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
        a, spec = self.a, self.speculative(name)
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
        if self.speculative(name):
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
