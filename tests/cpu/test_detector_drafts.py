"""The detector drafts of the registered rows test_draft_extend_kv_range.py (#26651) and
test_chunked_prefill_draft_chain.py (#26800), checked on the pure-torch reference of the tiny models
(``sglang_specv2_fixes.testing.tiny_models.llama_ref``, itself checked against Hugging Face and SGLang).

``run`` emulates SGLang's spec-v2 EAGLE3 chain (topk 1, 3 steps, 4 draft tokens): draft prefill over the
prompt (rotated ids, target aux hidden states; chunked: non-final chunk ends get the target's prediction when
``bug_chunk``, as stock 0.5.11 / 0.5.12.x do), draft token 1 from the extend output and two draft decode
steps, target verify, then the draft extend over all 4 rows of the verify (inputs: the target's prediction
after each row, hidden states: the target's) whose select row (last accepted) gives the next draft. With
``bug_kv`` each draft-extend row attends to the prefix, *all* 4 rows and again its causal rows, which is what
stock's triton draft-extend CUDA graph does (kv range = seq_lens already bumped by the draft tokens).

Claims checked: the standard tiny draft cannot show either bug (accept 4.0 with and without it); each
detector draft is unaffected on correct metadata and loses acceptance with its bug.
"""

import importlib.util
import math
import os

import pytest
import torch
from conftest import ROOT

from sglang_specv2_fixes.testing.tiny_models import detectors
from sglang_specv2_fixes.testing.tiny_models import llama as tm
from sglang_specv2_fixes.testing.tiny_models import llama_ref as ref

pytestmark = pytest.mark.release_independent  # ci/run_cpu_tests.sh: on the first anchor release only

HD, NH, NKV = tm.HD, tm.NH, tm.NKV


def row_module(name):
    path = os.path.join(ROOT, "tests", "registered", name)
    spec = importlib.util.spec_from_file_location(name[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def draft_rows(W, T, toks, hid, pos, keys):
    """The EAGLE3 midlayer (as llama_ref.eagle3_step) on rows; row i attends to ``keys(i, k, v)``."""
    h = hid @ W["fc.weight"].T if hid.shape[-1] != tm.H else hid
    x = torch.cat([ref.rms(T["model.embed_tokens.weight"][toks], W["midlayer.input_layernorm.weight"]),
                   ref.rms(h, W["midlayer.hidden_norm.weight"])], -1)
    p, n = "midlayer.self_attn.", x.shape[0]
    q = ref.rope((x @ W[p + "q_proj.weight"].T).view(n, NH, HD), pos)
    k = ref.rope((x @ W[p + "k_proj.weight"].T).view(n, NKV, HD), pos)
    v = (x @ W[p + "v_proj.weight"].T).view(n, NKV, HD)
    outs = []
    for i in range(n):
        K, V = keys(i, k, v)
        s = torch.einsum("hd,khd->hk", q[i].float(), K.float().repeat_interleave(NH // NKV, 1)) / math.sqrt(HD)
        a = torch.softmax(s, -1)
        outs.append(torch.einsum("hk,khd->hd", a, V.float().repeat_interleave(NH // NKV, 1)).to(x.dtype).reshape(-1))
    r = h + torch.stack(outs) @ W[p + "o_proj.weight"].T
    out = r + ref.mlp(W, "midlayer.mlp.", ref.rms(r, W["midlayer.post_attention_layernorm.weight"]))
    return (ref.rms(out, W["norm.weight"]) @ W["lm_head.weight"].T).float(), out, k, v


def run(W, T, prompt, n_new, chunk=None, bug_chunk=False, bug_kv=False, bug_pos=False, steps=3):
    """Accept lengths (accepted drafts + 1) of every verify step of one request. ``bug_pos``: draft decode step
    ``s`` runs at RoPE position ``L + s`` instead of ``L + s - 1``, the position of the slot it writes (stock
    0.5.11, #25015)."""
    nd = steps + 1
    full = ref.greedy(ref.target_fwd, T, prompt, n_new + nd + 1)
    L = len(prompt)
    lg_t, aux, _ = ref.target_fwd(T, torch.tensor(full))
    u = list(full[1:L + 1])  # draft prefill input: the prompt shifted by one, then the target's sample
    if chunk and bug_chunk:
        for end in range(chunk, L, chunk):
            u[end - 1] = int(lg_t[end - 1].argmax())  # stock: the target's prediction at a non-final chunk end
    lg, out, Kc, Vc = draft_rows(W, T, torch.tensor(u), aux[:L], torch.arange(L), lambda i, k, v: (k[:i + 1], v[:i + 1]))
    d_logit, d_hid, accepts = lg[L - 1], out[L - 1], []
    while L < len(prompt) + n_new:
        drafts, hid_in, K2, V2 = [int(d_logit.argmax())], d_hid, Kc[:L], Vc[:L]
        for s in range(1, steps):
            lg, oh, k, v = draft_rows(W, T, torch.tensor([drafts[-1]]), hid_in[None], torch.tensor([L + s - 1 + bug_pos]),
                                      lambda i, k, v: (torch.cat([K2, k]), torch.cat([V2, v])))
            K2, V2, hid_in = torch.cat([K2, k]), torch.cat([V2, v]), oh[0]
            drafts.append(int(lg[0].argmax()))
        a = 0
        while a < steps and drafts[a] == full[L + 1 + a]:
            a += 1
        accepts.append(a + 1)
        lg_v, aux_v, _ = ref.target_fwd(T, torch.tensor(full[:L + 1] + drafts))
        predict, pre_K, pre_V = lg_v[L:L + nd].argmax(-1), Kc[:L], Vc[:L]

        def ext(i, k, v):
            if bug_kv:
                return torch.cat([pre_K, k, k[:i + 1]]), torch.cat([pre_V, v, v[:i + 1]])
            return torch.cat([pre_K, k[:i + 1]]), torch.cat([pre_V, v[:i + 1]])

        lg, oh, k, v = draft_rows(W, T, predict, aux_v[L:L + nd], torch.arange(L, L + nd), ext)
        d_logit, d_hid = lg[a], oh[a]
        Kc, Vc = torch.cat([pre_K, k])[:L + a + 1], torch.cat([pre_V, v])[:L + a + 1]
        L += a + 1
    return accepts


@pytest.fixture(scope="module")
def weights():
    t, e3, _ = tm.build_weights()
    return t, e3


def prompt(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(16, 1000, (n,), generator=g).tolist()


def mean(xs):
    return sum(xs) / len(xs)


def test_standard_draft_shows_neither_bug(weights):
    t, e3 = weights
    p = prompt(33, 1)
    for kw in ({}, {"bug_kv": True}, {"chunk": 16, "bug_chunk": True}):
        assert mean(run(e3, t, p, 16, **kw)) == 4.0, kw


def test_lookahead_draft_detects_the_kv_range_bug(weights):
    t, e3 = weights
    w = detectors.lookahead_weights(e3)
    ok = [mean(run(w, t, prompt(n, s), 24)) for n, s in ((20, 2), (40, 3))]
    bad = [mean(run(w, t, prompt(n, s), 24, bug_kv=True)) for n, s in ((20, 2), (40, 3))]
    print("lookahead accept: causal", ok, "stock range", bad)
    assert min(ok) > 2.4 and max(bad) < 1.3


def test_prevtoken_draft_detects_the_chunk_chain_bug(weights):
    t, e3 = weights
    w = detectors.prevtoken_weights(e3)
    chunk = 16
    for n, expect_stock in ((chunk + 1, [1, 4, 4]), (2 * chunk + 1, [1, 4, 4]), (chunk + 5, [4, 4])):
        p = prompt(n, n)
        assert run(w, t, p, 8, chunk=chunk) == [4, 4], n
        assert run(w, t, p, 8, chunk=chunk, bug_chunk=True) == expect_stock, n


def test_prevtoken_draft_detects_the_decode_position_bug(weights):
    """The row test_draft_decode_positions.py: its prompts and 16 tokens take exactly 4 verify steps each with
    correct positions, and more for most of them with stock 0.5.11's (one past the slot)."""
    t, e3 = weights
    row = row_module("test_draft_decode_positions.py")
    w = detectors.prevtoken_weights(e3)
    ps = row.row_prompts()
    ok = [len(run(w, t, p, row.TOKENS)) for p in ps]
    bad = [len(run(w, t, p, row.TOKENS, bug_pos=True)) for p in ps]
    print("verify steps: right positions", ok, "stock 0.5.11", bad)
    assert len(ok) == 12 and ok == [row.TOKENS // 4] * 12
    assert sum(b > row.TOKENS // 4 for b in bad) >= 6
    assert [len(run(e3, t, p, row.TOKENS, bug_pos=True)) for p in ps[:4]] == [row.TOKENS // 4] * 4  # standard: blind
