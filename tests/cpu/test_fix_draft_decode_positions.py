"""#25015 draft-decode-positions: the real ``draft_forward`` of spec v2 (``EagleDraftWorker``) and spec v1
(``EAGLEWorker``), stock vs compiled from the patch file, with a stand-in draft runner that records the positions
each draft decode forward runs at.

Batch of 2 requests with ``seq_lens`` 69 and 100, EAGLE3 3 steps / topk 1: two draft decode forwards. Draft step
``i`` writes the KV slot of position ``seq_lens + i`` (``assign_draft_cache_locs``: the slots start at
``seq_lens``), so it must run at that position: ``[[69, 100], [70, 101]]``. Stock 0.5.11 advances the positions
before each forward: ``[[70, 101], [71, 102]]``. 0.5.12 itself runs at the right positions (upstream; later
releases: the release table's fingerprint of the checked function). The draft decode CUDA graph's ``run_once`` (patched for the ``steps - 1`` advances) is checked on the
patched text: it cannot run without a GPU.
"""

import json
import os
import subprocess
import sys
import types

import pytest
from conftest import LINE, ROOT, child_env, requires_sglang

FIX_NAME = "draft-decode-positions"
V2 = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker.draft_forward"
V1 = "sglang.srt.speculative.eagle_worker.EAGLEWorker.draft_forward"
SEQ_LENS, STEPS = [69, 100], 3
RIGHT = [[69, 100], [70, 101]]  # step i at seq_lens + i
ONE_PAST = [[70, 101], [71, 102]]

pytestmark = [requires_sglang, pytest.mark.release_scoped]


def patched_here():
    from sglang_specv2_fixes import catalog, releases

    return isinstance(releases.entry(FIX_NAME, LINE), catalog.Patched)


def _probe(fn, v1):
    """Positions per draft decode forward of ``fn(worker, forward_batch)``."""
    import torch

    seen, bs, vocab, hidden = [], len(SEQ_LENS), 32, 8

    class Runner:  # the draft ModelRunner: records the positions it is run at
        def forward(self, forward_batch, skip_attn_backend_init=False):
            seen.append(forward_batch.positions.tolist())
            return types.SimpleNamespace(logits_output=types.SimpleNamespace(
                next_token_logits=torch.randn(bs, vocab), hidden_states=torch.randn(bs, hidden)))

    worker = types.SimpleNamespace(hot_token_id=None, topk=1, speculative_num_steps=STEPS,
                                   speculative_num_draft_tokens=STEPS + 1,
                                   draft_attn_backend=types.SimpleNamespace(attn_backends=[None] * STEPS))
    worker.server_args = types.SimpleNamespace(speculative_algorithm="EAGLE3", speculative_use_rejection_sampling=False)
    if v1:
        worker.draft_model_runner = Runner()
    else:
        worker.draft_runner = Runner()
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    spec_info = EagleDraftInput.__new__(EagleDraftInput)  # v1 asserts the type; only these fields are read
    spec_info.topk_p, spec_info.topk_index = torch.ones(bs, 1), torch.randint(0, vocab, (bs, 1))
    spec_info.hidden_states = torch.randn(bs, hidden)
    fb = types.SimpleNamespace(
        spec_info=spec_info,
        out_cache_loc=torch.arange(bs * STEPS), batch_size=bs, positions=torch.tensor(SEQ_LENS), input_ids=None,
        attn_backend=None)
    fn(worker, fb)
    return seen


def _scenario(which):
    import importlib

    from sglang_specv2_fixes import installed, patchfile

    out, fns = {}, {}
    if which == "patched":
        pf = patchfile.load(FIX_NAME, "0.5.11")
        root = os.path.dirname(installed.sglang_root())
        fns = patchfile.build(pf, root)
    for name, v1 in ((V2, False), (V1, True)):
        mod, cls, meth = name.rsplit(".", 2)
        try:
            m = importlib.import_module(mod)
        except ImportError:  # spec v1 is gone from 0.5.13
            continue
        fn = fns.get(name) or getattr(getattr(m, cls), meth)
        assert (which == "patched") == hasattr(fn, patchfile.MARK)
        out["v1" if v1 else "v2"] = _probe(fn, v1)
    return out


def run(which):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), which], capture_output=True, text=True,
                       timeout=600, cwd=ROOT, env=child_env())
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def stock():
    return run("stock")


@pytest.mark.skipif(LINE not in ("0.5.11", "0.5.12"), reason="later draft_forward bodies read more worker state than "
                    "this stand-in has; their upstream state is the release table's fingerprint check")
def test_stock_positions(stock):
    assert "v2" in stock and len(stock["v2"]) == STEPS - 1  # the probe saw every draft decode forward
    expected = ONE_PAST if patched_here() else RIGHT
    for path, seen in stock.items():
        assert seen == expected, (path, seen)


@pytest.mark.skipif(LINE != "0.5.11", reason="the fix patches 0.5.11 only (upstream from 0.5.12)")
def test_patched_draft_steps_run_at_their_slot_position():
    assert patched_here()
    patched = run("patched")
    assert set(patched) == {"v1", "v2"}
    assert patched["v2"] == RIGHT and patched["v1"] == RIGHT


@pytest.mark.skipif(LINE != "0.5.11", reason="the fix patches 0.5.11 only (upstream from 0.5.12)")
def test_patched_draft_graph_restores_the_positions_buffer():
    from sglang_specv2_fixes import installed, patchfile

    pf = patchfile.load(FIX_NAME, "0.5.11")
    texts = patchfile.patched_texts(pf, os.path.dirname(installed.sglang_root()))
    rel = next(r for r in texts if r.endswith("eagle_draft_cuda_graph_runner.py"))
    patched = texts[rel][2]  # (file, installed text, patched text)
    body = patched[patched.index("def capture_one_batch_size"):]
    body = body[: body.index("\n    def ", 1)]
    call = body.index("ret = self.eagle_worker.draft_forward(forward_batch)")
    restore = body.index("forward_batch.positions.sub_(self.eagle_worker.speculative_num_steps - 1)")
    assert call < restore < body.index("return ret", call)


if __name__ == "__main__":
    print(json.dumps(_scenario(sys.argv[1])))
