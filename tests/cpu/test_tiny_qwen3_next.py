"""The tiny Qwen3-Next shape (``testing/tiny_models/qwen3_next.py``) as each release's real ``ModelConfig`` reads it:
the target is a hybrid Gated DeltaNet model (linear-attention layers 0-2, full attention 3) that SGLang's hybrid-GDN
detection picks up, with a mamba state cache for the linear layers only; as a draft its architecture becomes the
one-layer MTP ``Qwen3NextForCausalLMMTP``. This is what spec v2 EAGLE / MTP with ``extra_buffer`` on a hybrid
linear-attention target needs (the GPU rows run only on 0.5.11 … 0.5.17)."""

import importlib
import types

import pytest
from conftest import VERSION, requires_sglang

from sglang_specv2_fixes import releases

pytestmark = [requires_sglang, pytest.mark.release_scoped,
              pytest.mark.skipif(VERSION not in releases.release_set("up-to:0.5.17"),
                                 reason=f"sglang {VERSION}: the Qwen3-Next GPU rows run on 0.5.11 … 0.5.17 only")]


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    from sglang_specv2_fixes.testing.tiny_models import qwen3_next

    return qwen3_next.build(str(tmp_path_factory.mktemp("models")))


def hybrid_gdn_config(mc):
    """The release's own hybrid-GDN detection for model config ``mc``: configs/hybrid_arch.py (0.5.16+) or the
    ``ModelRunner.hybrid_gdn_config`` property (before), which reads only ``self.model_config``."""
    try:
        hybrid_arch = importlib.import_module("sglang.srt.configs.hybrid_arch")
    except ImportError:
        from sglang.srt.model_executor.model_runner import ModelRunner

        return ModelRunner.hybrid_gdn_config.fget(types.SimpleNamespace(model_config=mc))
    assert hybrid_arch.mambaish_config(mc) is mc.hf_config
    return hybrid_arch.hybrid_gdn_config(mc)


def test_target_is_a_hybrid_gdn_qwen3_next(path):
    from sglang.srt.configs import Qwen3NextConfig
    from sglang.srt.configs.model_config import ModelConfig

    mc = ModelConfig(model_path=path)
    cfg = mc.hf_config
    assert cfg.architectures == ["Qwen3NextForCausalLM"] and isinstance(cfg, Qwen3NextConfig)
    assert hybrid_gdn_config(mc) is cfg
    assert cfg.layers_block_type == ["linear_attention"] * 3 + ["attention"]
    assert (cfg.linear_layer_ids, cfg.full_attention_layer_ids) == ([0, 1, 2], [3])
    assert mc.num_hidden_layers == 4 and mc.num_nextn_predict_layers == 1
    assert not mc.is_hybrid_swa and not mc.is_multimodal
    assert (mc.head_dim, mc.get_num_kv_heads(1)) == (256, 2)


def test_target_mamba_cache_covers_the_linear_layers(path, monkeypatch):
    import sglang.srt.configs.qwen3_next as q3n
    from sglang.srt.configs.model_config import ModelConfig

    if hasattr(q3n, "get_parallel"):  # 0.5.16+: the attention TP size comes from the runtime context
        monkeypatch.setattr(q3n, "get_parallel", lambda: types.SimpleNamespace(attn_tp_size=1))
    else:
        import sglang.srt.layers.dp_attention as dp_attention

        monkeypatch.setattr(dp_attention, "get_attention_tp_size", lambda: 1)
    params = ModelConfig(model_path=path).hf_config.mamba2_cache_params
    assert list(params.layers) == [0, 1, 2]
    assert tuple(params.shape.temporal) == (4, 128, 128)  # value heads, value head dim, key head dim
    assert params.shape.conv_dim == 2 * 2 * 128 + 4 * 128


def test_draft_is_the_qwen3_next_mtp(path):
    from sglang.srt.configs import Qwen3NextConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.models import qwen3_next_mtp

    mc = ModelConfig(model_path=path, is_draft_model=True)
    assert mc.hf_config.architectures == ["Qwen3NextForCausalLMMTP"]
    assert "Qwen3NextForCausalLMMTP" in [c.__name__ for c in qwen3_next_mtp.EntryClass]
    assert mc.num_nextn_predict_layers == 1
    # still a Qwen3NextConfig: the draft runner gets the hybrid linear-attention backend too
    assert isinstance(mc.hf_config, Qwen3NextConfig) and hybrid_gdn_config(mc) is mc.hf_config
