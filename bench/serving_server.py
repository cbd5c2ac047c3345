"""The servers of a ``bench/serving.py`` run and its log: ``Log`` (server.log), ``Sink`` (stdout / stderr into it),
``say``; ``Server`` (one side's ``sglang serve``: launched through ``launch_process``, stopped through ``stop_process``,
its ``/server_info`` facts and accept length); ``run_bench`` / ``Load`` (one ``sglang.bench_serving`` run in this
process, in a thread with a time limit) and ``parse_bench_line`` (its JSONL line). ``prepare_launcher``,
``launch_process`` and ``stop_process`` are what the CPU self-test (bench/serving_selftest.py) replaces.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
import threading
import time

LOG_CAP_BYTES = 12 * 2 ** 20  # server.log: the GPU machine returns files up to 16 MiB
# what a point keeps from bench_serving's JSONL line (the `result` dict of sglang/bench_serving.py::benchmark)
METRIC_KEYS = (
    "completed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
    "total_throughput", "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
    "median_itl_ms", "p95_itl_ms", "p99_itl_ms", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
    "median_e2e_latency_ms", "p99_e2e_latency_ms", "concurrency", "max_concurrency", "max_output_tokens_per_s",
)
RENAMED = {"concurrency": "achieved_concurrency"}  # a point's "concurrency" is its --max-concurrency
REQUIRED_KEYS = ("completed", "output_throughput", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms")


# ------------------------------------------------------------------------------------------ output
class Log:
    """server.log, the run's one log (capped at LOG_CAP_BYTES: later server output is dropped, [bench] lines kept)."""

    def __init__(self, path):
        self.f, self.lock = open(path, "a", buffering=1, errors="replace"), threading.Lock()
        self.n, self.truncated = os.path.getsize(path), False

    def write(self, s, force=False):
        with self.lock:
            if self.n > LOG_CAP_BYTES and not force:
                if not self.truncated:
                    self.truncated = True
                    self.f.write(f"\n[bench] log cap of {LOG_CAP_BYTES} bytes reached: further server output dropped\n")
                return
            self.f.write(s)
            self.n += len(s)


LOG = None
REAL_STDOUT = sys.stdout


class Sink:
    """sys.stdout / sys.stderr for the whole run (``tag`` None: third-party prints, bench_serving's report, go to the
    log; popen_launch_server's reader threads echo each server line there too, dropped: their tagged sink, one per
    server, already logged it)."""

    encoding = "utf-8"

    def __init__(self, tag=None):
        self.tag = tag

    def write(self, s):
        if LOG is not None and s and self.tag:
            LOG.write("".join(f"[{self.tag}] {ln}\n" for ln in s.rstrip("\n").split("\n")))
        elif LOG is not None and "(_dump)" not in threading.current_thread().name:
            LOG.write(s)
        return len(s)

    def flush(self):
        pass

    def isatty(self):
        return False

    def fileno(self):
        return LOG.f.fileno()


def say(msg):
    line = f"[bench] {msg}"
    print(line, file=REAL_STDOUT, flush=True)
    if LOG is not None:
        LOG.write(line + "\n", force=True)


def _clean(x):
    return None if isinstance(x, float) and not math.isfinite(x) else x


def parse_bench_line(line):
    """One JSONL line written by sglang.bench_serving (``--output-file``) -> the point's metrics.

    Keeps METRIC_KEYS (NaN -> None; ``concurrency``, the achieved mean, as ``achieved_concurrency``), bench_serving's own ``accept_length`` as ``accept_length_bench`` and the
    accept length of the ``server_info`` it embeds; ``missing`` lists REQUIRED_KEYS the line lacks."""
    d = json.loads(line)
    out = {RENAMED.get(k, k): _clean(d.get(k)) for k in METRIC_KEYS}
    out["accept_length_bench"] = _clean(d.get("accept_length"))
    out["accept_length_bench_server_info"] = _clean(server_state(d.get("server_info") or {})[1].get("avg_spec_accept_length"))
    out["missing"] = [k for k in REQUIRED_KEYS if out.get(k) is None]
    return out


def server_state(info):
    """(a ``/server_info`` answer, its first scheduler's internal state); a PD pair's: its decode server's."""
    info = info["decode"][0] if info.get("decode") else info
    return info, (info.get("internal_states") or [{}])[0] or {}


def free_ports(base, n):
    """``n`` consecutive ports from ``base`` that nothing listens on or holds (bumped by 100 while one is taken)."""
    import socket

    def free(port):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
        return True

    for start in range(base, base + 2000, 100):
        if all(free(p) for p in range(start, start + n)):
            return list(range(start, start + n))
    raise RuntimeError(f"no {n} free ports from {base}")


# -------------------------------------------------------------------------------------- the server
def prepare_launcher():
    """Import the launcher (and with it sglang.bench_serving) in the main thread, before two launch threads
    would import it at once (replaced by the CPU self-test)."""
    import sglang.bench_serving  # noqa: F401
    import sglang.srt.utils  # noqa: F401
    import sglang.test.test_utils  # noqa: F401


def launch_process(model, url, other_args, timeout, sink, env):
    """The registered tests' launcher, ``env`` the server's whole environment; returns the Popen of `sglang serve`
    (replaced by the CPU self-test)."""
    from sglang.test.test_utils import popen_launch_server

    return popen_launch_server(model, url, timeout=timeout, other_args=other_args, return_stdout_stderr=(sink, sink),
                               env=env)


def stop_process(proc):
    """SGLang's kill_process_tree, then wait for the tree (replaced by the CPU self-test)."""
    import psutil
    from sglang.srt.utils import kill_process_tree

    if proc is None:
        return
    try:
        procs = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        procs = []
    kill_process_tree(proc.pid)
    psutil.wait_procs(procs, timeout=30)
    try:
        proc.wait(timeout=10)
    except Exception:  # noqa: BLE001
        pass


class Server:
    def __init__(self, config, side, port, model, other_args, env=None):
        """``side``: its name; ``other_args`` with its ``--specv2-fixes``; ``env``: its variables (side_env)."""
        self.config, self.side, self.port, self.model, self.env = config, side, port, model, env or {}
        self.url = f"http://127.0.0.1:{port}"
        # a fixed torch.distributed port (HTTP port + 200, clear of every server port of this run): SGLang's default
        # get_free_port() can race with the other servers of a run (seen in the registered matrix)
        self.other_args = list(other_args) + ["--nccl-port", str(port + 200)]
        self.proc = self.error = self.launch_s = self.killed_reason = None
        self.lock = threading.Lock()

    @property
    def tag(self):
        return f"{self.config}/{self.side}"

    def command(self):
        return [f"{k}={v}" for k, v in self.env.items()] + ["sglang", "serve", "--model-path", self.model,
                                                            *self.other_args, "--device", "cuda", "--host", "127.0.0.1",
                                                            "--port", str(self.port)]

    def start(self, timeout):
        t0 = time.time()
        if LOG is not None:
            LOG.write(f"\n===== [{self.tag}] launch: {shlex.join(self.command())}\n", force=True)
        try:
            self.proc = launch_process(self.model, self.url, self.other_args, timeout, Sink(self.tag),
                                       dict(os.environ, **self.env))
        except BaseException as e:  # noqa: BLE001 - a failed launch is a result
            self.error = f"launch failed: {type(e).__name__}: {e}"
        self.launch_s = round(time.time() - t0, 1)
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None and self.killed_reason is None

    def kill(self, reason):
        with self.lock:
            if self.proc is not None and self.killed_reason is None:
                self.killed_reason = reason
                say(f"{self.tag}: stopping the server ({reason})")
                stop_process(self.proc)

    def stop(self):
        with self.lock:
            if self.proc is not None:
                stop_process(self.proc)
                self.proc = None

    def get(self, path, timeout=30, payload=None):
        """GET ``path`` (POST with a JSON ``payload``): the JSON answer; an HTTP error raises."""
        import requests

        r = requests.request("POST" if payload is not None else "GET", self.url + path, json=payload, timeout=timeout)
        r.raise_for_status()
        return r.json()

    def generate(self, input_ids, max_new_tokens):
        return self.get("/generate", 60, {"input_ids": input_ids, "sampling_params": {
            "temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}})

    def facts(self):
        info, st = server_state(self.get("/server_info"))
        fx = st.get("specv2_fixes") or info.get("specv2_fixes") or {}
        keys = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens", "page_size", "cuda_graph_max_bs", "attention_backend",
                "mem_fraction_static", "sleep_on_idle", "disable_overlap_schedule")
        return dict(
            version=info.get("version"), max_total_num_tokens=info.get("max_total_num_tokens"),
            speculative=bool(info.get("speculative_algorithm")),
            overlap_schedule=not info.get("disable_overlap_schedule", False),
            fixes={k: v.get("state") for k, v in (fx.get("fixes") or {}).items()},
            fixes_selection=fx.get("selection"),
            server={k: info.get(k) for k in keys},
            accept_threshold_single=info.get("speculative_accept_threshold_single"),
        )

    def reset_accept_length(self, threshold):
        """Zero the scheduler's accept-length counters (set_internal_state resets them on any accepted update;
        the value written is the server's own, so nothing changes): True, False, or "failed: why"."""
        if threshold is None:
            return False
        try:
            res = self.get("/set_internal_state", 60, {"server_args": {"speculative_accept_threshold_single": threshold}})
        except Exception as e:  # noqa: BLE001
            return f"failed: {e}"
        return bool(res) and all(bool(x) for x in (res if isinstance(res, list) else [res]))

    def accept_length(self):
        return _clean(server_state(self.get("/server_info"))[1].get("avg_spec_accept_length"))


# ------------------------------------------------------------------------------------ bench_serving
def run_bench(argv):
    """One sglang.bench_serving run through its own CLI, in this process (a point's time limit stops its server);
    raises on failure."""
    import runpy
    import warnings

    old = sys.argv
    sys.argv = ["sglang.bench_serving", *argv]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: module already imported by the launcher
            runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=False)
    except SystemExit as e:
        if e.code not in (None, 0):
            raise RuntimeError(f"bench_serving exited with {e.code}") from None
    finally:
        sys.argv = old


class Load(threading.Thread):
    """One ``run_bench(argv)`` against ``srv`` in a thread (``error`` once it ended); the server is stopped when the
    load outlasts ``limit`` seconds (``what``: the reason's subject)."""

    def __init__(self, srv, argv, limit, what):
        super().__init__(name=f"load {srv.tag}", daemon=True)
        self.argv, self.error = argv, None
        self.timer = threading.Timer(limit, lambda: srv.kill(f"{what} over its {limit:.0f}s limit"))
        self.timer.daemon = True

    def run(self):
        self.timer.start()
        try:
            run_bench(self.argv)
        except BaseException as e:  # noqa: BLE001 - a failed load is a result
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.timer.cancel()
