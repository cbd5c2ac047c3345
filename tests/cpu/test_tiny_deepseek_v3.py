"""The tiny DeepSeek-V3 target (``testing/tiny_models/deepseek_v3.py``) on CPU: the pure-torch reference gives greedy
output with a wide margin that is the walk, routing that is the designed table, and an MTP layer that drafts the next
tokens (real acceptance) and stops drafting right when its hidden state is one position off; and each release's own
objects take the checkpoint as the GPU rows serve it: ``ModelConfig`` (MLA, the NextN draft architecture), ServerArgs
(draft path and 3 / 1 / 4 filled in for ``--speculative-algorithm EAGLE``), and the release's real
``DeepseekV3ForCausalLM`` / ``DeepseekV3ForCausalLMNextN`` built on CPU and loaded through their own ``load_weights``
(every parameter written, each with the checkpoint tensor it should hold; the draft's embedding and head left to the
EAGLE worker)."""

import os

import pytest
from conftest import VERSION, requires_sglang

from sglang_specv2_fixes import releases

in_rows = pytest.mark.skipif(VERSION not in releases.release_set("gpu"),
                             reason=f"sglang {VERSION}: the DeepSeek-V3 MTP rows run on the GPU releases only")


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    from sglang_specv2_fixes.testing.tiny_models import deepseek_v3

    return deepseek_v3.build(str(tmp_path_factory.mktemp("models")))


@pytest.fixture(scope="module")
def weights(path):
    from safetensors.torch import load_file

    return load_file(os.path.join(path, "model.safetensors"))


def test_reference_greedy_is_the_walk_with_a_wide_margin_and_the_mtp_layer_drafts_it(path):
    import torch

    from sglang_specv2_fixes.testing.tiny_models import deepseek_v3_ref as ref
    from sglang_specv2_fixes.testing.tiny_models import llama_ref

    W = llama_ref.load(path, torch.bfloat16)
    prompts = ref.prompts_for_check()
    for pi in (1, 3):
        _, r = ref.stats(W, prompts[pi], 16)
        print(pi, r)
        assert r["is_walk"] and not r["eos_emitted"] and r["routing_is_table"], r
        assert r["min_margin"] >= 2.0 and r["p_top_mean"] > 0.3, r
        assert r["mtp_s3k1n4"] >= 3.5 and r["mtp_s5k1n6"] >= 5.0, r       # of at most 4 and 6
        assert r["mtp_s3k1n4_hidden_shifted"] < 2.0, r                      # the negative control


def test_reference_equals_transformers_deepseek_v3(path):
    import torch
    import transformers

    from sglang_specv2_fixes.testing.tiny_models import deepseek_v3 as ds
    from sglang_specv2_fixes.testing.tiny_models import deepseek_v3_ref as ref
    from sglang_specv2_fixes.testing.tiny_models import llama_ref

    hf, info = transformers.DeepseekV3ForCausalLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info.get("mismatched_keys")
    assert all(k.startswith(f"model.layers.{ds.L}.") for k in info["unexpected_keys"])   # the MTP layer only
    W = llama_ref.load(path)
    seq = llama_ref.greedy(ref.target_fwd, W, ref.prompts_for_check()[1], 12)
    with torch.no_grad():
        logits = hf.eval()(torch.tensor([seq])).logits[0].float()
    assert float((logits - ref.target_fwd(W, torch.tensor(seq))[0]).abs().max()) < 2e-3


@requires_sglang
@in_rows
def test_model_config_is_mla_with_a_nextn_draft(path):
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig

    from sglang_specv2_fixes.testing.tiny_models import deepseek_v3 as ds

    mc = ModelConfig(model_path=path)
    assert mc.hf_config.architectures == ["DeepseekV3ForCausalLM"]
    assert mc.attention_arch == AttentionArch.MLA
    assert (mc.kv_lora_rank, mc.qk_rope_head_dim, mc.qk_nope_head_dim, mc.v_head_dim) == (
        ds.KV_LORA, ds.ROPE, ds.NOPE, ds.VHD)
    assert mc.num_hidden_layers == ds.L and mc.num_nextn_predict_layers == 1
    draft = ModelConfig(model_path=path, is_draft_model=True)
    assert draft.hf_config.architectures == ["DeepseekV3ForCausalLMNextN"]
    assert draft.attention_arch == AttentionArch.MLA


@requires_sglang
@in_rows
def test_hidden_size_is_one_the_release_fused_eh_norm_takes(path):
    """0.5.16 / 0.5.17's NextN ``forward`` runs ``fused_eh_norm`` on CUDA, which refuses other hidden sizes; the
    release's own predicate is asked (releases without the kernel: nothing to ask)."""
    import importlib
    import json

    hidden = json.load(open(os.path.join(path, "config.json")))["hidden_size"]
    for mod in ("sglang.kernels.ops.layernorm.fused_eh_norm", "sglang.jit_kernel.fused_eh_norm"):
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        assert m.is_supported_fused_eh_norm_hidden_size(hidden), (mod, hidden)
        assert not m.is_supported_fused_eh_norm_hidden_size(256), mod    # the walk's own width is refused there
        return
    nextn = open(importlib.import_module("sglang.srt.models.deepseek_nextn").__file__).read()
    assert "fused_eh_norm" not in nextn, "the NextN layer calls fused_eh_norm but no kernel module was found"


@requires_sglang
@in_rows
def test_server_args_take_the_draft_from_the_checkpoint(path, monkeypatch):
    """What the rows pass (``--speculative-algorithm EAGLE`` and nothing else about the draft) resolves to the NextN
    draft at the model path with DeepSeek's 3 / 1 / 4, on spec v2 (overlap on)."""
    from sglang.srt import server_args as sa_mod
    from sglang.srt.server_args import ServerArgs

    # ServerArgs probes the GPU (device name, capability, memory); the CPU stands in for an H200's answers
    for name, value in (("is_sm90_supported", True), ("is_sm100_supported", False), ("is_blackwell_supported", False),
                        ("get_device_name", "NVIDIA H200")):
        if hasattr(sa_mod, name):
            monkeypatch.setattr(sa_mod, name, lambda *a, _v=value, **k: _v)
    if hasattr(sa_mod, "get_device_memory_capacity"):
        monkeypatch.setattr(sa_mod, "get_device_memory_capacity", lambda *a, **k: 143771)
    try:
        args = ServerArgs(model_path=path, speculative_algorithm="EAGLE", attention_backend="triton", device="cuda",
                          page_size=64)
    except Exception as e:  # noqa: BLE001 - a GPU probe not stood in: report, never pass silently
        pytest.fail(f"ServerArgs did not resolve on CPU: {type(e).__name__}: {e}")
    assert os.path.realpath(args.speculative_draft_model_path) == os.path.realpath(path)
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (3, 1, 4)
    assert args.speculative_algorithm == "EAGLE" and not args.disable_overlap_schedule
    assert args.page_size == 64


def build_release_models(path):
    """The release's own DeepseekV3ForCausalLM and DeepseekV3ForCausalLMNextN on CPU (bf16, every parameter NaN
    before loading), in a fresh process's single-rank gloo group."""
    import torch
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    sa = ServerArgs(model_path=path, device="cpu", speculative_draft_model_path=path)
    set_global_server_args_for_scheduler(sa)
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"tcp://127.0.0.1:{29500 + os.getpid() % 1000}")
    initialize_model_parallel(1, 1)
    from sglang.srt.layers import dp_attention

    try:
        dp_attention.initialize_dp_attention(sa, ModelConfig(model_path=path))
    except Exception as e:  # noqa: BLE001 - signature differs by release; the models need only the attn TP size 1
        print("initialize_dp_attention:", type(e).__name__, e)
    import sglang.srt.models.deepseek_v2 as dv2
    from sglang.srt.models.deepseek_nextn import DeepseekV3ForCausalLMNextN

    dv2.get_rope_wrapper = lambda *a, **k: torch.nn.Identity()  # RoPE holds no parameters (its CPU form needs scaling)
    torch.set_default_dtype(torch.bfloat16)
    target = dv2.DeepseekV3ForCausalLM(ModelConfig(model_path=path).hf_config)
    draft = DeepseekV3ForCausalLMNextN(ModelConfig(model_path=path, is_draft_model=True).hf_config)
    for m in (target, draft):
        for p in m.parameters():
            p.data.fill_(float("nan"))
    return target, draft


LOAD_CODE = r"""
import json, os, sys, torch
sys.path.insert(0, os.environ["TESTS_CPU"])
from sglang_specv2_fixes.testing import standins
standins.use_sgl_kernel_stand_in()
import importlib.util  # 0.5.15.x's deepseek_v2 imports cutlass through the DSA indexer: the GPU rows' bundle shim
shim = os.path.join(os.environ["TESTS_CPU"], os.pardir, os.pardir, "ci", "gpu", "bundle_shims", "sitecustomize.py")
spec = importlib.util.spec_from_file_location("specv2_bundle_shim", shim)
spec.loader.exec_module(importlib.util.module_from_spec(spec))
from test_tiny_deepseek_v3 import build_release_models
from safetensors.torch import load_file
path = sys.argv[1]
ckpt = load_file(os.path.join(path, "model.safetensors"))
target, draft = build_release_models(path)
target.load_weights(iter(ckpt.items()))
draft.load_weights(iter(ckpt.items()))
out = {}
for name, m in (("target", target), ("draft", draft)):
    out[name] = {k: dict(shape=list(p.shape), nan=int(torch.isnan(p.float()).sum()), numel=p.numel(),
                         sum=float(torch.nan_to_num(p.float()).double().sum()))
                 for k, p in m.named_parameters()}
    extra = {}
    for k in ("w_kc", "w_vc"):
        layer = (m.model.layers[1] if name == "target" else m.model.decoder).self_attn
        t = getattr(layer, k, None)
        extra[k] = None if t is None else list(t.shape)
    out[name + "_mla"] = extra
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def loaded(path):
    """{target, draft: {param: shape / NaN count / sum}} after the release's own load_weights, in a child process
    (its process group and global server args stay out of this one)."""
    import json
    import subprocess
    import sys

    from conftest import child_env

    env = child_env()
    env["TESTS_CPU"] = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.run([sys.executable, "-c", LOAD_CODE, path], capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")]
    assert p.returncode == 0 and lines, p.stdout[-3000:] + p.stderr[-6000:]
    return json.loads(lines[-1][len("RESULT"):])


def ckpt_sum(weights, *names):
    return sum(float(weights[n].float().double().sum()) for n in names)


@requires_sglang
@in_rows
def test_release_loader_writes_every_target_parameter(loaded, weights):
    from sglang_specv2_fixes.testing.tiny_models import deepseek_v3 as ds

    t = loaded["target"]
    unwritten = {k: v["nan"] for k, v in t.items() if v["nan"]}
    assert not unwritten, f"target parameters the release's load_weights left unwritten: {unwritten}"
    assert not [k for k in t if k.startswith(f"model.layers.{ds.L}.")], "the target built the MTP layer"
    a = "model.layers.1.self_attn."
    assert t[a + "fused_qkv_a_proj_with_mqa.weight"]["shape"] == [ds.Q_LORA + ds.KV_LORA + ds.ROPE, ds.HIDDEN]
    assert t[a + "fused_qkv_a_proj_with_mqa.weight"]["sum"] == pytest.approx(
        ckpt_sum(weights, "model." + a[6:] + "q_a_proj.weight", "model." + a[6:] + "kv_a_proj_with_mqa.weight"), rel=1e-3)
    m = "model.layers.1.mlp."
    assert t[m + "experts.w13_weight"]["shape"] == [ds.E, 2 * ds.IM, ds.HIDDEN]
    assert t[m + "experts.w2_weight"]["shape"] == [ds.E, ds.HIDDEN, ds.IM]
    assert t[m + "experts.w2_weight"]["sum"] == pytest.approx(
        ckpt_sum(weights, *[f"{m}experts.{e}.down_proj.weight" for e in range(ds.E)]), rel=1e-3, abs=1e-3)
    assert t[m + "shared_experts.gate_up_proj.weight"]["shape"] == [2 * ds.IM, ds.HIDDEN]  # unfused: 8 experts, not 256
    assert "model.layers.0.mlp.gate_up_proj.weight" in t                              # first_k_dense_replace
    assert t["lm_head.weight"]["sum"] == pytest.approx(ckpt_sum(weights, "lm_head.weight"), rel=1e-3)
    assert loaded["target_mla"]["w_kc"] == [ds.NH, ds.NOPE, ds.KV_LORA]  # post_load_weights split kv_b_proj
    assert loaded["target_mla"]["w_vc"] == [ds.NH, ds.KV_LORA, ds.VHD]


@requires_sglang
@in_rows
def test_release_loader_takes_the_mtp_layer_for_the_nextn_draft(loaded, weights):
    """The draft gets model.layers.{L}.* (NextN names -> model.*, the decoder layer -> model.decoder.*); its embedding
    and lm_head stay unwritten: the EAGLE worker gives the draft the target's (set_embed_and_head)."""
    from sglang_specv2_fixes.testing.tiny_models import deepseek_v3 as ds

    d, L = loaded["draft"], f"model.layers.{ds.L}."
    unwritten = {k for k, v in d.items() if v["nan"]}
    assert unwritten == {"model.embed_tokens.weight", "lm_head.weight"}, unwritten
    for mine, ckpt in (("model.eh_proj.weight", "eh_proj.weight"), ("model.enorm.weight", "enorm.weight"),
                       ("model.hnorm.weight", "hnorm.weight"), ("model.shared_head.norm.weight", "shared_head.norm.weight"),
                       ("model.decoder.mlp.gate.weight", "mlp.gate.weight"),
                       ("model.decoder.self_attn.o_proj.weight", "self_attn.o_proj.weight")):
        assert d[mine]["shape"] == list(weights[L + ckpt].shape), mine
        assert d[mine]["sum"] == pytest.approx(ckpt_sum(weights, L + ckpt), rel=1e-3, abs=1e-3), mine
    assert d["model.decoder.mlp.experts.w13_weight"]["shape"] == [ds.E, 2 * ds.IM, ds.HIDDEN]
    assert loaded["draft_mla"]["w_kc"] == [ds.NH, ds.NOPE, ds.KV_LORA]
