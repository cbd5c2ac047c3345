"""The tiny MiMo-V2-Flash shape of the multi-layer grammar row (``testing/tiny_models/mimo_v2.py``) as each release's
real ``ModelConfig`` reads it: the target is a hybrid sliding-window MiMo-V2 with sinks, and as a multi-layer draft
its architecture becomes ``MiMoV2MTP`` with one sliding-window layer per runner. This is what SGLang's multi-layer
EAGLE needs (tests/registered/test_grammar_multi_layer.py serves it on the GPU)."""

import inspect

import pytest
from conftest import VERSION, requires_sglang

from sglang_specv2_fixes import releases

pytestmark = [requires_sglang, pytest.mark.release_scoped,
              pytest.mark.skipif(VERSION not in releases.release_set("fix:multi-layer-grammar-mask"),
                                 reason=f"sglang {VERSION}: the row's fix is upstream here")]


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    from sglang_specv2_fixes.testing.tiny_models import mimo_v2

    return mimo_v2.build(str(tmp_path_factory.mktemp("models")))


def test_target_is_a_hybrid_swa_mimo_v2(path):
    from sglang.srt.configs.model_config import ModelConfig

    mc = ModelConfig(model_path=path)
    assert mc.hf_config.architectures == ["MiMoV2FlashForCausalLM"]
    assert mc.is_hybrid_swa
    assert (list(mc.swa_attention_layer_ids), list(mc.full_attention_layer_ids)) == ([1, 2], [0, 3])
    assert mc.sliding_window_size == 16 and mc.num_nextn_predict_layers == 3
    assert not mc.is_multimodal


def test_draft_is_a_multi_layer_mimo_v2_mtp(path):
    from sglang.srt.configs.model_config import ModelConfig

    kwargs = {"is_draft_model": True}
    if "is_multi_layer_eagle" in inspect.signature(ModelConfig.__init__).parameters:
        kwargs["is_multi_layer_eagle"] = True
    mc = ModelConfig(model_path=path, **kwargs)
    assert mc.hf_config.architectures == ["MiMoV2MTP"]
    assert (list(mc.swa_attention_layer_ids), list(mc.full_attention_layer_ids)) == ([0], [])

