"""The finish-line differential on a DeepSeek-V3-class target with MTP (issue 58): what a client receives from the tiny
``DeepseekV3ForCausalLM`` (tiny_models/deepseek_v3.py) served with ``--speculative-algorithm EAGLE`` and its NextN
draft from the same checkpoint equals what the same target answers without speculation (the oracle), case by case:
text, output ids, finish reason (with ``matched``), usage (prompt and completion tokens) and, for every other
non-streamed case, the logprobs of the output tokens within ``LOGPROB_TOL`` (the same tokens: ids are compared first).

The cases are test_finish_line.py's (``finish_line.cases``: the model's greedy output is the same walk as the tiny
Llama's, so stop strings at every offset 1..40 of accepted runs, stop strings over two tokens, regex stops, stop
tokens at / before / after ``max_new_tokens``, untrimmed stops, streamed and not). Two servers: the default
invocation (no step / topk / token flags: ServerArgs picks 3 / 1 / 4 for DeepSeek MTP) at page size 1 and an
explicit chain 5 / 1 / 6 at page size 64, each against an oracle at the same backend and page size. Backend:
``SPECV2_DSV3_BACKEND`` (default triton; flashinfer or fa3 on a GPU that has them).

The stop-token-inside-a-run-that-crosses-max_new_tokens cases fail on stock 0.5.11 - 0.5.17 in test_finish_line.py
(``multi-token-finish``; the scheduler's finish check, not the model's), so ``bug_in`` is that fix's releases as
there; the ``stop token then stop string`` group (stock 0.5.14+ lets the later string win) is its own test as there.
"""

import os
import unittest

from sglang_specv2_fixes.testing import finish_line
from sglang_specv2_fixes.testing.client import server_info
from sglang_specv2_fixes.testing.config import common_without, prompts
from sglang_specv2_fixes.testing.dsv3_rows import model
from sglang_specv2_fixes.testing.reference import prefetch_responses, reference_responses
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import FinishLineCases
from sglang_specv2_fixes.testing.server import launch, stop
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=300, suite="specv2-gpu", releases="gpu&fix:multi-token-finish",
                   bug_in="gpu&fix:multi-token-finish")

BACKEND = os.environ.get("SPECV2_DSV3_BACKEND", "triton")
LOGPROB_TOL = 0.1  # nats: the verify (extend) and the oracle's decode kernels differ in bf16 (SpecChecks' tolerance)
PROMPTS = prompts(10, seed=31)


def with_logprobs(cases):
    """Every other non-streamed case also asks for the output tokens' logprobs."""
    out = []
    for n, (label, body) in enumerate(cases):
        if not body["stream"] and n % 2 == 0:
            body = dict(body, return_logprob=True)
            label += " (logprobs)"
        out.append((label, body))
    return out


CASES = with_logprobs(finish_line.cases(PROMPTS, seed=5))
BODIES = [body for _, body in CASES]


def received(response):
    """``finish_line.received`` plus usage and, when asked for, the output tokens' logprobs."""
    last = response[-1] if isinstance(response, list) else response
    meta = last["meta_info"]
    lps = meta.get("output_token_logprobs")
    return dict(finish_line.received(response), prompt_tokens=meta.get("prompt_tokens"),
                logprobs=None if isinstance(response, list) or lps is None else [lp[0] for lp in lps])


def differences(got, want):
    g = received(got)
    out = [f"{f}: {g[f]!r} != oracle {want[f]!r}" for f in finish_line.FIELDS + ("prompt_tokens",) if g[f] != want[f]]
    out += finish_line.stream_problems(got)
    if want["logprobs"] is not None and g["output_ids"] == want["output_ids"]:
        if g["logprobs"] is None or len(g["logprobs"]) != len(want["logprobs"]):
            out.append(f"logprobs: {g['logprobs']!r} for oracle's {len(want['logprobs'])}")
        else:
            diff = max((abs(a - b) for a, b in zip(g["logprobs"], want["logprobs"])), default=0.0)
            if diff > LOGPROB_TOL:
                out.append(f"logprobs differ by {diff:.3f} > {LOGPROB_TOL}")
    return out


class _Dsv3FinishLine(FinishLineCases):
    SPEC = None  # (steps, topk, draft tokens); None: the default invocation
    PAGE_SIZE = 1
    CASES, N_PROMPTS = CASES, len(PROMPTS)
    compare = staticmethod(differences)

    @classmethod
    def backend_args(cls):
        return ("--attention-backend", BACKEND, "--page-size", str(cls.PAGE_SIZE))

    @classmethod
    def setUpClass(cls):
        prefetch_responses(BODIES, target=model(), extra_args=cls.backend_args(), keep=received)
        spec = ["--speculative-algorithm", "EAGLE"]
        if cls.SPEC:
            spec += ["--speculative-num-steps", str(cls.SPEC[0]), "--speculative-eagle-topk", str(cls.SPEC[1]),
                     "--speculative-num-draft-tokens", str(cls.SPEC[2])]
        cls.process = launch(spec + ["--page-size", str(cls.PAGE_SIZE)], target=model(),
                             common=common_without("--attention-backend") + ["--attention-backend", BACKEND])

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def oracle(self):
        return reference_responses(BODIES, target=model(), extra_args=self.backend_args(), keep=received)

    def test_0_config(self):
        info = server_info()
        want = self.SPEC or (3, 1, 4)
        self.assertEqual((info["speculative_num_steps"], info["speculative_eagle_topk"],
                          info["speculative_num_draft_tokens"]), tuple(want))
        self.assertEqual((info["attention_backend"], info["page_size"]), (BACKEND, self.PAGE_SIZE))
        self.assertFalse(info["disable_overlap_schedule"], "spec v2 (overlap) expected")

    def tag(self):
        return f"{BACKEND} page {self.PAGE_SIZE} spec {self.SPEC or 'default'}"

    def test_1_the_cases_reach_their_finish(self):
        """The premise: the oracle's greedy output is the predicted walk, the stops are reached, and a third of the
        cases carry the oracle's logprobs."""
        want = self.oracle()
        self.check_premise(want)
        self.assertGreater(sum(w["logprobs"] is not None for w in want), len(CASES) // 3)


class TestDsv3FinishLineDefaultPage1(_Dsv3FinishLine, CustomTestCase):
    SPEC, PAGE_SIZE = None, 1


class TestDsv3FinishLineChain5Page64(_Dsv3FinishLine, CustomTestCase):
    SPEC, PAGE_SIZE = (5, 1, 6), 64


if __name__ == "__main__":
    unittest.main()
