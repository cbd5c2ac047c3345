"""SGLang plugin entry point (group ``sglang.srt.plugins``, name ``specv2_fixes``).

SGLang's ``load_plugins()`` calls :func:`register` in the launch_server process (before argument
parsing), in ``Engine`` and again in every scheduler subprocess (spawn start method). Per process it:

1. reads the selection (``--specv2-fixes`` on the command line, else ``SGLANG_SPECV2_FIXES``) and
   exports its canonical form to the environment so spawned schedulers see the same choice;
2. plans every fix against the installed release (fingerprints, upstream/not-applicable notes);
3. registers the READY fixes' patched functions with ``HookRegistry`` (REPLACE) plus small reporting
   hooks;
4. verifies, once the hooks are applied, that each target really runs our function, and logs one line.

A bad selection stops startup with the list of valid names (``SystemExit``: ``load_plugins`` logs and
swallows ordinary exceptions). A failure inside the plugin (damaged data such as a missing patch file, an unexpected
exception) refuses what it touches, logs one error line naming the cause and keeps the other fixes; it never reaches
``load_plugins`` as a traceback. ``SGLANG_SPECV2_FIXES_STRICT=1`` stops startup instead when any selected fix cannot
be applied (``core.strict_failures``). An unknown release gives one warning and patches nothing, unless
``SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE=fingerprint``: then a fix is patched where every target equals a known
release's ``before`` fingerprint (``survey.plan_unknown``; its first warning names the releases matched).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import threading
import types
from typing import Optional

from . import __version__, catalog, core, fingerprint, installed, probe, releases, runtime, selection
from .core import STATE
from .fixes import ALL_FIXES

logger = logging.getLogger("sglang_specv2_fixes")


class SpecV2FixesConfigError(SystemExit):
    """Configuration error that must stop startup (SystemExit is not swallowed by load_plugins)."""


def _argv_selection(argv) -> Optional[str]:
    for i, arg in enumerate(argv):
        if arg == selection.FLAG and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(selection.FLAG + "="):
            return arg.split("=", 1)[1]
    return None


def current_report() -> Optional[core.Report]:
    return STATE.report


# register() runs whole under this lock: calls from several threads at once plan and hook once (without it each one
# that found no report yet registered every target again: "Multiple REPLACE hooks"); reentrant for a call made from
# inside (an import that loads the plugins again), which finds the report and returns
_REGISTER_LOCK = threading.RLock()


def register() -> None:
    """Entry point. Idempotent: a second call in the same process does nothing, also while the first one runs in
    another thread (it waits for it)."""
    with _REGISTER_LOCK:
        if STATE.report is not None:
            return
        try:
            _register()
        except SystemExit:
            raise
        except Exception as e:  # a bug or damaged install: one line, the server starts with what was registered
            report = STATE.report
            line = f"sglang-specv2-fixes: failed inside the plugin ({installed.plugin_path()}): {type(e).__name__}: {e}"
            if report is None:
                report = STATE.report = core.Report(__version__, None, None, "off", [], errors=[line])
            else:
                report.errors.append(line)
                for st in report.fixes:
                    if st.state == catalog.READY and st.name not in STATE.built:
                        st.state, st.reason = catalog.FAILED, f"not registered: {type(e).__name__}: {e}"
            logger.error(line)
            if selection.strict():
                raise SpecV2FixesConfigError(f"{line} ({selection.ENV_STRICT}=1: stopping)") from None
        finally:
            fingerprint.flush()  # the function spans found, one cache entry per module text


def _strict(report: core.Report, sel) -> None:
    """``SGLANG_SPECV2_FIXES_STRICT=1``: stop startup when a selected fix cannot be applied."""
    why = core.strict_failures(report, sel)
    if why:
        raise SpecV2FixesConfigError(f"sglang-specv2-fixes: {selection.ENV_STRICT}=1 and a selected fix cannot be "
                                     f"applied: {'; '.join(why)} (see the reasons above; unset it to start without)")


def _register() -> None:
    value = _argv_selection(sys.argv)
    try:
        sel = selection.parse(value if value is not None else os.environ.get(selection.ENV), ALL_FIXES)
        selection.unknown_release_mode()  # a bad SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE stops startup too
    except selection.SelectionError as e:
        raise SpecV2FixesConfigError(str(e)) from None
    if value is not None:
        os.environ[selection.ENV] = sel.canonical  # inherited by the scheduler processes
    report = core.plan(sel)
    STATE.report, STATE.selection = report, sel
    if not report.supported:
        if sel.explicit:
            raise SpecV2FixesConfigError(
                f"sglang-specv2-fixes: {', '.join(sorted(sel.names))} requested, but sglang "
                f"{report.sglang_version} is not a release this plugin knows "
                f"({', '.join(releases.RELEASES)}). Nothing can be patched; remove the selection or use a "
                f"known release."
            )
        if multiprocessing.parent_process() is None:  # one warning, from the launching process
            for w in report.warnings:
                logger.warning("sglang-specv2-fixes: %s", w)
            logger.warning(report.summary())
        _strict(report, sel)
        return
    for w in report.warnings:
        logger.warning("sglang-specv2-fixes: %s", w)
    for e in report.errors:
        logger.error("sglang-specv2-fixes: %s", e)
    _strict(report, sel)
    core.register(report)
    _register_reporting()
    if selection.probe_enabled():
        STATE.ours.update(id(f) for f in probe.register(report.layout_line, strict=selection.check_enabled()))
    if STATE.ours:
        _install_fast_propagate()


def announce(role: str) -> core.Report:
    """Verify the patches now in effect and log the summary once per process and role."""
    report = STATE.report
    core.verify(report)
    if role not in STATE.announced:
        STATE.announced.add(role)
        line = f"[{role}] {report.summary()}"
        logged = " ".join(report.errors)  # damaged data: register() logged its one line already
        failed = [f for f in report.fixes if f.state in core.NOT_IN_EFFECT and f.reason not in logged]
        if logging.getLogger().handlers or logger.handlers:
            (logger.error if failed or report.errors else logger.info)(line)
            for f in failed:
                logger.error("sglang-specv2-fixes: %s %s: %s", f.name, f.state, f.reason)
        else:  # logging not configured yet (e.g. Engine used from a script)
            print(line, file=sys.stderr)
        if STATE.selection is not None:
            _strict(report, STATE.selection)  # a fix that failed to apply (verify) stops startup in strict mode
    return report


def serving_facts(server_args) -> dict:
    """The attention backend and speculative path this server took (after every routing decision)."""
    algo = getattr(server_args, "speculative_algorithm", None)
    topk = getattr(server_args, "speculative_eagle_topk", None)
    overlap = not getattr(server_args, "disable_overlap_schedule", False)
    line = releases.LINES.get(STATE.report.layout_line) if STATE.report and STATE.report.layout_line else None
    if algo is None:
        spec = "none"
    elif not overlap and not (line and line.spec_v2_only):
        spec = "v1"  # up to 0.5.13 the overlap scheduler is what selects spec v2
    else:
        spec = ("v2 tree" if (topk or 1) > 1 else "v2") + ("" if overlap else " (overlap off)")
    from .fixes.draft_extend_graph import DRAFT_EXTEND_GRAPH
    from .fixes.flashinfer_draft_extend_graph import plan_counts
    from .fixes.tree_drafting import TREE_ROUTE

    route = server_args.__dict__.get(TREE_ROUTE)  # set where the plugin's tree routing ran (topk > 1)
    return {
        "attention_backend": server_args.attention_backend,
        "speculative_algorithm": algo,
        "speculative_eagle_topk": topk,
        "overlap_schedule": overlap,
        "spec_path": spec,
        "tree_route": route,  # "spec v2 tree drafting", or why this topk > 1 setup runs spec v1
        # spec v2 trees on a backend with a draft-extend graph: "cuda graph, N tokens per request" or "eager: why"
        "draft_extend_graph": server_args.__dict__.get(DRAFT_EXTEND_GRAPH),
        # flashinfer's draft-extend graph with the sync-free plan (the default): how its replays planned in
        # this process, {"sync-free": n, "flashinfer: why": m}; None otherwise
        "draft_extend_plans": plan_counts(),
        "tp_size": getattr(server_args, "tp_size", None),
        "dp_size": getattr(server_args, "dp_size", None),
        "enable_dp_attention": getattr(server_args, "enable_dp_attention", None),
    }


def server_info_payload(server_args=None) -> dict:
    d = STATE.report.as_dict()
    if server_args is not None:
        d["serving"] = serving_facts(server_args)
    if selection.probe_enabled():
        d["probe"] = probe.snapshot()
    return d


# ------------------------------------------------------------------------ start-up cost of applying
def _install_fast_propagate() -> None:
    """Replace HookRegistry's ``sys.modules`` walk for this plugin's targets by what each one needs.

    After replacing a target, ``HookRegistry._apply_target`` calls ``_propagate_patch(original, wrapped,
    owner)``, which scans every attribute of every loaded module (~6000 modules once a scheduler has
    imported SGLang, ~19 ms per target) for module-level copies made by ``from X import name``.

    * A function defined in a class body (``owner`` is that class, ``original.__qualname__`` starts with the
      class's qualname): no such copy can exist (``from X import Cls.method`` is not Python, and these
      targets are never re-bound at module level), so the walk is skipped; that saves ~250 ms per start.
    * A module-level function (``run_eagle_verify``, ``set_mamba_track_indices_from_reqs``, which other SGLang
      modules import by name): the copies ``from X import name`` makes carry the same name, so dictionary lookups
      find them: one walk over the loaded modules notes, for every module-level target of ours at once, the modules
      holding its name (``_holders``; walked again when the number of loaded modules changes), a fraction of the
      upstream walk's time. The releases' sources import these targets only so (no ``as``);
      tests/cpu/test_plugin_load.py checks every copy.

    Any other target (other plugins', classes) still gets SGLang's own walk. Installed once per process, only
    when this plugin registered something; core.verify() still checks every target.
    """
    from sglang.srt.plugins import hook_registry

    upstream = hook_registry._propagate_patch
    if getattr(upstream, "_specv2_fast", False):
        return

    def _propagate_patch(original, wrapped, source_module):
        if not any(id(f) in STATE.ours for f in runtime.chain(wrapped)):
            return upstream(original, wrapped, source_module)
        if isinstance(source_module, type) and getattr(original, "__qualname__", "").startswith(
                source_module.__qualname__ + "."):
            return 0
        name = getattr(original, "__name__", None)
        if not isinstance(source_module, types.ModuleType) or getattr(original, "__qualname__", None) != name:
            return upstream(original, wrapped, source_module)
        copies = 0
        for mod in _holders(name):
            if mod is not source_module and mod.__dict__.get(name) is original:
                setattr(mod, name, wrapped)
                copies += 1
        return copies

    def _holders(name):
        # the loaded modules with something named ``name``, for every module-level target of ours in one walk (one
        # walk costs ~4 ms with ~6000 modules loaded, most of it reading each module's dict once: all the names are
        # looked up in it at once); walked again once a module is loaded or removed
        key = (len(sys.modules), frozenset(_module_level_names()))
        if index.get("key") != key or name not in index["names"]:
            names = key[1] | {name}
            found = {n: [] for n in names}
            for mod in list(sys.modules.values()):
                d = getattr(mod, "__dict__", None) if isinstance(mod, types.ModuleType) else None
                if d:
                    for n in names & d.keys():
                        found[n].append(mod)
            index.update(key=key, names=found)
        return index["names"][name]

    index: dict = {}
    _propagate_patch._specv2_fast = True
    _propagate_patch.__wrapped__ = upstream
    hook_registry._propagate_patch = _propagate_patch


def _module_level_names() -> set:
    """Names of the module-level functions among the targets this process built (``run_eagle_verify``, ...)."""
    return {t.rsplit(".", 1)[1] for built in STATE.built.values() for t, fn in built.items()
            if getattr(fn, "__qualname__", "") == t.rsplit(".", 1)[1]}


# ------------------------------------------------------------------ reporting / CLI-flag hooks
def _add_cli_args(result, parser, *args, **kwargs):
    if not any(selection.FLAG in a.option_strings for a in parser._actions):
        parser.add_argument(
            selection.FLAG,
            dest="specv2_fixes",
            default=None,
            metavar="auto|off|NAME[,NAME]",
            help=f"sglang-specv2-fixes: which spec-v2 fixes to apply (default: ${selection.ENV} or auto). "
            f"Fixes: {', '.join(f.name for f in ALL_FIXES)}.",
        )
    return result


def _from_cli_args(original, cls, args, *a, **kw):
    value = getattr(args, "specv2_fixes", None)
    if value is not None:
        sel = selection.parse(value, ALL_FIXES)  # SelectionError (ValueError) stops startup
        if sel != STATE.selection:
            raise selection.SelectionError(
                f"sglang-specv2-fixes: {selection.FLAG} {value!r} came from a config file; the plugin "
                f"had already started with {STATE.selection.canonical!r}. Pass {selection.FLAG} on the "
                f"command line or set {selection.ENV}."
            )
    return original(cls, args, *a, **kw)


def _server_args_post_init(self, *args, **kwargs):
    # What the user chose before SGLang fills in defaults: tree-drafting's routing re-chooses only an
    # attention backend nobody chose (fixes/tree_drafting.py, follow_default_backend_rule).
    from .fixes.tree_drafting import USER_BACKENDS

    setattr(self, USER_BACKENDS, (self.attention_backend, self.prefill_attention_backend, self.decode_attention_backend))
    announce("launcher")


def _init_info(result, self, *args, **kwargs):
    announce("scheduler")
    if isinstance(result, dict):
        result["specv2_fixes"] = server_info_payload(getattr(self, "server_args", None))
    return result


def _internal_state(result, self, *args, **kwargs):
    state = getattr(result, "internal_state", None)
    if isinstance(state, dict):
        state["specv2_fixes"] = payload = server_info_payload(getattr(self, "server_args", None))
        payload["rank"] = {"tp_rank": getattr(self, "tp_rank", None), "dp_rank": getattr(self, "dp_rank", None)}
        if selection.probe_enabled():
            payload["spec_counters"] = probe.spec_counters(self)
            payload["radix_tokens"] = probe.radix_tokens(self)
            # every TP rank runs this query (broadcast from rank 0), only rank 0's answer reaches the client
            probe.write_rank_view(selection.probe_dir(), payload)
    return result


def _register_reporting() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    sa = "sglang.srt.server_args.ServerArgs"
    sched = "sglang.srt.managers.scheduler.Scheduler"
    for target, fn, kind in (
        (f"{sa}.add_cli_args", _add_cli_args, HookType.AFTER),
        (f"{sa}.from_cli_args", _from_cli_args, HookType.AROUND),
        (f"{sa}.__post_init__", _server_args_post_init, HookType.BEFORE),
        (f"{sched}.get_init_info", _init_info, HookType.AFTER),
        (f"{sched}.get_internal_state", _internal_state, HookType.AFTER),
    ):
        STATE.ours.add(id(fn))
        HookRegistry.register(target, fn, kind)


def reset_for_tests() -> None:
    STATE.reset()
    probe.reset()
