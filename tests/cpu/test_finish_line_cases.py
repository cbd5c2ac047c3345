"""The finish-line differential row's cases (tests/registered/test_finish_line.py, testing/finish_line.py): the
premise that the tiny target's greedy output is the predicted walk, checked on the pure-torch reference of the
model (``tiny_models.llama_ref``, itself checked against Hugging Face and SGLang), and the case mix the row
relies on, with the comparison that reports a difference."""

import pytest

from sglang_specv2_fixes.testing import finish_line
from sglang_specv2_fixes.testing.config import prompts
from sglang_specv2_fixes.testing.tiny_models import llama as tm
from sglang_specv2_fixes.testing.tiny_models import llama_ref as ref

pytestmark = pytest.mark.release_independent  # ci/run_cpu_tests.sh: on the first anchor release only

ROW_PROMPTS = prompts(10, seed=31)  # as the row


@pytest.fixture(scope="module")
def target():
    return tm.build_weights()[0]


def test_the_greedy_output_is_the_predicted_walk(target):
    for p in ROW_PROMPTS[:4]:
        assert ref.greedy(ref.target_fwd, target, p, 24)[len(p):] == finish_line.walk(p)[:24], p


def test_the_cases_cover_every_finish_kind_at_many_offsets():
    cases = finish_line.cases(ROW_PROMPTS, seed=5)
    labels = [label for label, _ in cases]
    assert len(cases) >= 200
    kinds = {label.split(" ", 2)[2] for label in labels}
    assert {"stop string", "stop string over two tokens", "stop token, cap after it", "stop token, cap at it",
            "stop token, cap before it", "stop string, cap after it", "max_new_tokens", "regex stop",
            "regex before a stop string", "stop token untrimmed", "stop string untrimmed", "stop string then stop token",
            "stop token then stop string", "stop string, streamed", "stop token near the cap, streamed"} <= kinds
    offsets = {int(label.split()[1][1:]) for label in labels}
    assert len({k % 4 for k in offsets}) == 4 and len(offsets) >= 20  # every position of a 4-token run
    for label, body in cases:
        sp = body["sampling_params"]
        assert sp["temperature"] == 0 and sp["ignore_eos"] is False and sp["max_new_tokens"] <= finish_line.OUTPUT_LEN
        _, k, kind = label.split(" ", 2)
        k, w = int(k[1:]), finish_line.walk(body["input_ids"])
        if kind == "stop string":
            assert sp["stop"] == [tm.tok_name(w[k])]
        if kind.startswith("stop token, cap"):
            assert sp["stop_token_ids"] == [w[k]] and sp["max_new_tokens"] - k in (0, 1, 3)


def test_differences_name_each_field_and_text_taken_back():
    want = dict(text="t1 t2", output_ids=[1, 2], finish_reason={"type": "stop", "matched": "t3"}, completion_tokens=2)
    same = {"text": "t1 t2", "output_ids": [1, 2], "meta_info": {"finish_reason": {"type": "stop", "matched": "t3"},
                                                                "completion_tokens": 2}}
    assert finish_line.differences(same, want) == []
    longer = {"text": "t1 t2 t3 t4", "output_ids": [1, 2, 3, 4],
              "meta_info": {"finish_reason": {"type": "length", "length": 4}, "completion_tokens": 4}}
    assert [d.split(":")[0] for d in finish_line.differences(longer, want)] == list(finish_line.FIELDS)
    stream = [{"text": "t1 t2 t3", "meta_info": {}}, dict(same)]  # a chunk streamed the stop string, then trimmed
    assert finish_line.differences(stream, want) == [
        "chunk 0 text 't1 t2 t3' is not a prefix of the final text 't1 t2'"]


MIN_TOKENS_PROMPTS = prompts(10, seed=47)  # as tests/registered/test_min_tokens_per_position.py


def test_the_min_tokens_cases_put_each_stop_token_where_the_row_expects_it():
    """The min_tokens row's premise on the CPU: each stop token first appears at the case's offset k in the walk (no
    token twice in it), and enough cases of both kinds (min_tokens <= k: the oracle stops at k; above: it cannot)."""
    cases = finish_line.min_tokens_cases(MIN_TOKENS_PROMPTS, seed=11)
    assert len(cases) >= 200
    stops = 0
    for label, body, k in cases:
        w = finish_line.walk(body["input_ids"])
        assert len(set(w)) == len(w), label
        assert w.index(body["sampling_params"]["stop_token_ids"][0]) == k, label
        stops += body["sampling_params"].get("min_new_tokens", 0) <= k
    assert len(cases) // 2 < stops < len(cases)
    assert any(body.get("stream") for _, body, _ in cases)


def test_differing_sends_each_case_and_names_what_differs(monkeypatch):
    from sglang_specv2_fixes.testing import client

    want = dict(text="t1", output_ids=[1], finish_reason={"type": "stop"}, completion_tokens=1)
    answers = {1: {"text": "t1", "output_ids": [1], "meta_info": {"finish_reason": {"type": "stop"},
                                                                   "completion_tokens": 1}},
               2: {"text": "t1 t2", "output_ids": [1, 2], "meta_info": {"finish_reason": {"type": "stop"},
                                                                         "completion_tokens": 2}}}
    monkeypatch.setattr(client, "send", lambda body: answers[body["id"]])
    n, bad = finish_line.differing([("same", {"id": 1}), ("longer", {"id": 2})], [want, want])
    assert n == 2 and len(bad) == 1 and bad[0].startswith("longer: text: 't1 t2' != oracle 't1'")
