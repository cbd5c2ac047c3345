"""#26866 routing on real ``ServerArgs``: stock vs plugin ``_handle_speculative_decoding`` (both code lines).

The instances come from the real ``ServerArgs.__post_init__`` of the installed release (a Llama target and
an EAGLE3 draft written by sglang_specv2_fixes/testing/tiny_models/llama.py): a subclass hook records the
instance state right before the routing call, then runs the routing under test so the construction completes. Stock
and plugin routing are then called directly on identical copies of that pre-routing state, and the
complete launch (every later ``__post_init__`` handler) is checked to end in the same routing.
"""

import logging
import os

import pytest
from conftest import LINE, requires_sglang, where_patched

from sglang_specv2_fixes import core
from sglang_specv2_fixes.patchfile import MARK
from sglang_specv2_fixes.fixes import tree_drafting

pytestmark = [requires_sglang, where_patched("tree-drafting", "these tests run its routing patch")]
FIX = tree_drafting.FIX
LOGGER = "sglang.srt.server_args"
FIELDS = ("disable_overlap_schedule", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
H100_MIB = 81559.0  # what nvidia-smi reports as memory.total on an H100 80GB
STOCK_V1 = "Spec v1 is used for eagle/eagle3/standalone speculative decoding because spec v2 currently only supports topk = 1."
V2_DEFAULT = "Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding."
DEFAULTS = {}  # no step/topk/token flags: auto_choose_speculative_params picks them
EXPLICIT_TOPK4 = dict(speculative_num_steps=5, speculative_eagle_topk=4, speculative_num_draft_tokens=8)


def stock():
    from sglang.srt.server_args import ServerArgs

    fn = ServerArgs.__dict__["_handle_speculative_decoding"]
    assert not hasattr(fn, MARK), "the plugin must not be installed in the pytest process"
    return fn


def plugin():
    fn = core.build_fix(FIX.name)["sglang.srt.server_args.ServerArgs._handle_speculative_decoding"]
    assert getattr(fn, MARK) == f"{FIX.name}:sglang.srt.server_args.ServerArgs._handle_speculative_decoding"
    return fn


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from sglang_specv2_fixes.testing.tiny_models import llama as tiny

    return tiny.build_all(str(tmp_path_factory.mktemp("tiny")))


@pytest.fixture
def launch(models, monkeypatch, caplog):
    """launch(routing, **cli) -> (pre-routing state, completed ServerArgs or the exception it raised).

    Environment probes replaced (nothing else): ``get_device_memory_capacity`` as imported into
    sglang.srt.server_args. On this CPU host ``is_cuda()`` is False, so the real probe returns None
    ("unknown GPU") and the memory defaults (chunked prefill, CUDA graph batch sizes, static memory
    fraction) would be those of no GPU; H100_MIB gives those of an H100 launch. None of them is read by
    the routing. No CUDA availability / device-capability probe is reached on these paths (explicit
    attention backend and page size, dense Llama target), and the routing itself reads no hardware
    state. SGLANG_ENABLE_SPEC_V2 is removed so its default (True) applies. A real ServerArgs sets environment
    variables of its own (``__post_init__``); they are undone after the test, so later tests do not depend on the
    order pytest runs them in.
    """
    import sglang.srt.server_args as sa

    saved = dict(os.environ)

    monkeypatch.setattr(sa, "get_device_memory_capacity", lambda device=None: H100_MIB)
    monkeypatch.delenv("SGLANG_ENABLE_SPEC_V2", raising=False)
    caplog.set_level(logging.INFO, logger=LOGGER)

    def run(routing, **cli):
        seen = {}

        class Launch(sa.ServerArgs):  # ServerArgs itself stays untouched
            def _handle_speculative_decoding(self):
                seen["pre"] = dict(self.__dict__)
                routing(self)

        kw = dict(model_path=models["target"], speculative_algorithm="EAGLE3",
                  speculative_draft_model_path=models["eagle3"], device="cuda")
        kw.update(cli)
        try:
            done = Launch(**kw)
        except ValueError as e:
            done = e
        return seen["pre"], done

    yield run
    os.environ.clear()
    os.environ.update(saved)


def call(fn, pre, caplog):
    """Run one routing function on a fresh real ServerArgs holding the pre-routing state."""
    from sglang.srt.server_args import ServerArgs

    args = object.__new__(ServerArgs)
    args.__dict__.update(pre)
    caplog.clear()
    err = None
    try:
        fn(args)
    except ValueError as e:
        err = e
    msgs = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.getMessage().startswith("Spec v")]
    return {f: getattr(args, f) for f in FIELDS}, msgs, err


def both(launch, caplog, **cli):
    """(stock, plugin) results of the direct calls; each also checked against its complete launch."""
    out = []
    for fn in (stock(), plugin()):
        pre, done = launch(fn, **cli)
        fields, msgs, err = call(fn, pre, caplog)
        if err is not None:
            assert isinstance(done, ValueError) and str(done) == str(err)
        else:
            assert {f: getattr(done, f) for f in FIELDS} == fields  # later handlers keep the routing
        out.append((fields, msgs, err))
    return out


def test_default_params_page1_triton(launch, caplog):
    (s, s_msgs, s_err), (p, p_msgs, p_err) = both(launch, caplog, attention_backend="triton", page_size=1, **DEFAULTS)
    assert s_err is None and p_err is None
    # stock: the auto-chosen topk 4 arrives after the v1 decision -> overlap stays on = spec v2 tree (crash config)
    assert s == dict(disable_overlap_schedule=False, speculative_num_steps=5, speculative_eagle_topk=4,
                     speculative_num_draft_tokens=8)
    assert s_msgs == [V2_DEFAULT]
    # plugin: the same spec v2 tree routing (now backed by the worker fixes), logged as tree drafting
    assert p == s
    assert p_msgs == [
        "Spec v2 is enabled with tree drafting (topk=4, page_size=1) for eagle/eagle3/standalone speculative decoding."
    ]


def test_explicit_topk8_page1_triton(launch, caplog):
    cli = dict(speculative_num_steps=5, speculative_eagle_topk=8, speculative_num_draft_tokens=16)
    (s, s_msgs, _), (p, p_msgs, _) = both(launch, caplog, attention_backend="triton", page_size=1, **cli)
    assert s == dict(disable_overlap_schedule=True, **cli) and s_msgs == [STOCK_V1]
    assert p == dict(disable_overlap_schedule=False, **cli)
    assert len(p_msgs) == 1 and "tree drafting (topk=8, page_size=1)" in p_msgs[0]


@pytest.mark.parametrize("params", [EXPLICIT_TOPK4, DEFAULTS], ids=["explicit-5-4-8", "default-params"])
def test_page16_flashinfer_goes_to_v1(launch, caplog, params):
    # both releases reject topk > 1 with page_size > 1 outside flashinfer / fa3
    (s, s_msgs, s_err), (p, p_msgs, p_err) = both(launch, caplog, attention_backend="flashinfer", page_size=16, **params)
    assert s_err is None and p_err is None
    chosen = dict(speculative_num_steps=5, speculative_eagle_topk=4, speculative_num_draft_tokens=8)
    assert p == dict(disable_overlap_schedule=True, **chosen)
    assert p_msgs == [
        "Spec v1 is used for eagle/eagle3/standalone speculative decoding because spec v2 tree drafting "
        "(topk > 1) requires page_size == 1, got page_size=16."
    ]
    if params:  # stock: explicit topk > 1 -> v1 (reason: topk)
        assert s == p and s_msgs == [STOCK_V1]
    else:  # stock: auto-chosen topk 4 stays on spec v2 with page_size 16 (get_alloc_len_per_decode raises later)
        assert s == dict(disable_overlap_schedule=False, **chosen) and s_msgs == [V2_DEFAULT]


def test_page16_triton_rejected_by_both(launch, caplog):
    (s, s_msgs, s_err), (p, p_msgs, p_err) = both(launch, caplog, attention_backend="triton", page_size=16, **EXPLICIT_TOPK4)
    for err in (s_err, p_err):
        assert err is not None and "page_size > 1" in str(err)
    assert s_msgs == [STOCK_V1]
    assert len(p_msgs) == 1 and "requires page_size == 1, got page_size=16" in p_msgs[0]


@pytest.mark.parametrize("params", [EXPLICIT_TOPK4, DEFAULTS], ids=["explicit-5-4-8", "default-params"])
def test_user_disable_overlap_schedule_is_kept(launch, caplog, params):
    cli = dict(attention_backend="triton", page_size=1, disable_overlap_schedule=True, **params)
    (s, s_msgs, _), (p, p_msgs, _) = both(launch, caplog, **cli)
    expected = dict(disable_overlap_schedule=True, speculative_num_steps=5, speculative_eagle_topk=4,
                    speculative_num_draft_tokens=8)
    assert s == p == expected
    msg = "Spec v1 is used for eagle/eagle3/standalone speculative decoding because overlap schedule is disabled."
    assert s_msgs == p_msgs == [msg]


def test_topk1_unchanged(launch, caplog):
    cli = dict(attention_backend="triton", page_size=1, speculative_num_steps=3, speculative_eagle_topk=1,
               speculative_num_draft_tokens=4)
    (s, s_msgs, s_err), (p, p_msgs, p_err) = both(launch, caplog, **cli)
    assert s_err is None and p_err is None
    assert s == p == dict(disable_overlap_schedule=False, speculative_num_steps=3, speculative_eagle_topk=1,
                          speculative_num_draft_tokens=4)
    assert s_msgs == p_msgs == [V2_DEFAULT]


PARALLEL = {  # parallel setups on real ServerArgs: (flags, spec-v2 tree kept by the plugin, reason if not)
    "tp2": (dict(tp_size=2), True, None),
    "dp2": (dict(dp_size=2), True, None),
    "dp2-dp-attention": (dict(tp_size=2, dp_size=2, enable_dp_attention=True), False,
                         "spec v2 tree drafting (topk > 1) is not supported with MLP-sync token padding "
                         "(DP attention / moe_dense_tp_size=1 / MoE A2A) in this release"),
}


@pytest.mark.parametrize("name", list(PARALLEL))
def test_parallel_setups_route_on_real_server_args(launch, caplog, name):
    """Tensor / data parallel launches (issue: the fixes under TP and DP): plain TP 2 and DP 2 keep spec-v2 tree
    drafting (every rank runs the same patched worker, decisions come from rank 0's broadcast tensors); DP attention
    pads tokens for MLP sync, which this release's tree path lacks: spec v1, with the reason logged once and
    reported in /server_info (plugin.serving_facts) of the completed launch."""
    flags, tree, reason = PARALLEL[name]
    cli = dict(attention_backend="triton", page_size=1, **EXPLICIT_TOPK4, **flags)
    pre, done = launch(plugin(), **cli)
    assert not isinstance(done, Exception), done
    for k, v in flags.items():
        assert getattr(done, k) == v, k  # the launch kept the parallel setup it was given
    fields, msgs, err = call(plugin(), pre, caplog)
    assert err is None and len(msgs) == 1, msgs
    facts = plugin_mod().serving_facts(done)
    if tree:
        assert fields["disable_overlap_schedule"] is False and "tree drafting (topk=4, page_size=1)" in msgs[0]
        assert facts["spec_path"] == "v2 tree" and facts["tree_route"] == "spec v2 tree drafting"
    else:
        assert fields["disable_overlap_schedule"] is True
        assert msgs == [f"Spec v1 is used for eagle/eagle3/standalone speculative decoding because {reason}."]
        assert facts["spec_path"] == "v1" and facts["tree_route"] == reason
    assert (facts["tp_size"], facts["dp_size"]) == (done.tp_size, done.dp_size)


def plugin_mod():
    from sglang_specv2_fixes import plugin as mod

    return mod


@pytest.fixture(params=[None, "1", "0"], ids=["fa3-trees-default", "fa3-trees-on", "fa3-trees-off"])
def fa3_trees(request, monkeypatch):
    """SGLANG_SPECV2_FIXES_FA3_TREES unset (fa3 trees on, the default), set to 1, then to 0; the test gets whether fa3
    trees are on."""
    from sglang_specv2_fixes.selection import ENV_FA3_TREES

    if request.param is None:
        monkeypatch.delenv(ENV_FA3_TREES, raising=False)
    else:
        monkeypatch.setenv(ENV_FA3_TREES, request.param)
    return request.param != "0"


def test_explicit_fa3_tree_follows_its_switch(launch, caplog, fa3_trees):
    """fa3 trees are on since their rows met on a GPU (opt-in before): an explicit fa3 tree runs spec v2 tree drafting;
    with SGLANG_SPECV2_FIXES_FA3_TREES=0 it runs spec v1 and the reason names the switch. Stock: spec v1."""
    from sglang_specv2_fixes.selection import ENV_FA3_TREES

    (s, s_msgs, s_err), (p, p_msgs, p_err) = both(launch, caplog, attention_backend="fa3", page_size=1, **EXPLICIT_TOPK4)
    assert s_err is None and p_err is None
    assert s == dict(disable_overlap_schedule=True, **EXPLICIT_TOPK4) and s_msgs == [STOCK_V1]
    assert len(p_msgs) == 1, p_msgs
    if not fa3_trees:
        assert p == s
        assert p_msgs[0] == (
            "Spec v1 is used for eagle/eagle3/standalone speculative decoding because spec v2 tree drafting (topk > 1) "
            f"is only enabled for the flashinfer and triton attention backends (the ones it was run on; fa3 is off: "
            f"{ENV_FA3_TREES}=0), got fa3.")
    else:
        assert p == dict(disable_overlap_schedule=False, **EXPLICIT_TOPK4)
        assert "tree drafting (topk=4, page_size=1)" in p_msgs[0]


def test_default_rule_keeps_fa3_with_fa3_trees(monkeypatch, fa3_trees):
    """The default invocation on Hopper: 0.5.11 / 0.5.12.x choose fa3 before the auto-chosen topk 4. Without fa3 trees
    the plugin re-runs upstream's rule on the final topk (flashinfer on Hopper); with them it keeps fa3, as upstream
    0.5.13 - 0.5.17 do. The rule's own answer is what this release's _get_default_attn_backend says on a Hopper GPU
    for topk 4 (its hardware probes replaced); a backend the user chose is never changed."""
    from types import SimpleNamespace

    import sglang.srt.server_args as sa

    for name in ("is_hopper_with_cuda_12_3", "is_flashinfer_available"):
        monkeypatch.setattr(sa, name, lambda: True)
    monkeypatch.setattr(sa, "is_sm100_supported", lambda *a: False)

    def args(user):
        a = object.__new__(sa.ServerArgs)
        a.__dict__.update(attention_backend="fa3", speculative_eagle_topk=4, page_size=1, speculative_algorithm="EAGLE3",
                          prefill_attention_backend=None, decode_attention_backend=None)
        a.__dict__[tree_drafting.USER_BACKENDS] = user
        a.use_mla_backend = lambda: False
        a.get_model_config = lambda: SimpleNamespace(
            hf_config=SimpleNamespace(architectures=["LlamaForCausalLM"]), has_attention_sinks=False)
        return a

    nobody = args((None, None, None))
    changed = tree_drafting.follow_default_backend_rule(nobody)
    if not fa3_trees:
        assert changed == ("fa3", "flashinfer") and nobody.attention_backend == "flashinfer"
    else:
        assert changed is None and nobody.attention_backend == "fa3"
    chosen = args(("fa3", None, None))
    assert tree_drafting.follow_default_backend_rule(chosen) is None and chosen.attention_backend == "fa3"
