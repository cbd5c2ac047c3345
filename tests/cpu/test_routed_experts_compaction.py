"""Routed experts / indexer top-k under tree drafting: the real ``EAGLEWorkerV2.verify`` (stock and the
plugin body: tree-drafting's on 0.5.11 / 0.5.12.x, routed-experts-draft-guard's on 0.5.13 - 0.5.15, where upstream
already moves the KV with its own ``_finalize_accept_tree_path`` and only the capture rows stay behind) run on CPU
tensors, followed by the real capture plumbing of the release; 0.5.16+: the same through
``eagle_worker_common.run_eagle_verify`` (on a CPU its non-fused commit path runs; 0.5.22+ fuse the bonus-token /
seq-len commit on CUDA, which does not touch the capture rows).

How the releases return routed experts (0.5.11 ``layers/moe/routed_experts_capturer.py``, 0.5.12.x
``state_capturer/base.py``): the target forward captures one row per input token into a device buffer;
with the overlap scheduler (always on for spec v2) ``on_forward_end`` hands back an output object holding
``out_cache_loc`` and those rows (``routed_experts`` / ``topk``), verify returns it, and the scheduler's
``finalize()`` scatters row ``r`` into a host buffer *indexed by KV slot* ``out_cache_loc[r]``. When the
request finishes, ``get_routed_experts`` / ``get_topk`` read the host buffer through
``req_to_token[req_pool_idx][:seqlen - 1]``. So a row is right only if it sits in the slot whose KV it
describes. Tree verify writes node ``k`` of request ``i`` to the slot of position ``seq_lens + k``; the
plugin moves the accepted nodes' KV to ``seq_lens + depth``. The capture rows must move the same way.

Only what has no CPU implementation is replaced: the target forward (returns the tensors a forward would
produce), the draft-side ``prepare_for_v2_verify`` / ``sample`` (return a tree's predict / accept_lens /
accept_index), the Triton bonus-token kernel (a loop with the same indexing, clamped where the stock
stride over-reads) and the KV move (``move_accepted_tokens_to_target_kvcache`` on a token-id "KV" tape,
with each release's count semantics; its own body is covered on the GPU).
"""

import argparse
import contextlib
import types

import pytest
import torch
from conftest import LINE, VERSION, patched_here, requires_sglang

from sglang_specv2_fixes import core
from sglang_specv2_fixes.patchfile import MARK
from sglang_specv2_fixes.testing.scenarios import Unset
from sglang_specv2_fixes.fixes import tree_drafting

pytestmark = [requires_sglang, pytest.mark.release_scoped]  # every release: its verify layout or the reason why not
FIX = tree_drafting.FIX
WORKER = "sglang.srt.speculative.eagle_worker_v2"
V, LAYERS, K, E = 96, 3, 2, 8  # token ids, MoE layers, experts per token, experts
SLOTS = 512
COMMON = "sglang.srt.speculative.eagle_worker_common"
VERIFIES = (f"{WORKER}.EAGLEWorkerV2.verify", f"{COMMON}.run_eagle_verify")  # up to 0.5.15 / from 0.5.16


def _verify_fix():
    """(fix, target) whose patch replaces the tree verify on this release: tree-drafting's
    ``EAGLEWorkerV2.verify`` (0.5.11 / 0.5.12.x: tree verify with KV move and capture-row compaction),
    routed-experts-draft-guard's (0.5.13 - 0.5.15: upstream moves the KV, the patch adds the capture-row compaction;
    0.5.16+: the same in ``eagle_worker_common.run_eagle_verify``); (None, None) where no fix patches it."""
    from sglang_specv2_fixes import patchfile, releases

    for name in ("tree-drafting", "routed-experts-draft-guard"):
        if patched_here(name):
            targets = {t.dotted for t in patchfile.load(name, releases.entry(name, LINE).name).targets}
            for target in VERIFIES:
                if target in targets:
                    return name, target
    return None, None


VERIFY_FIX, VERIFY = _verify_fix() if LINE else (None, None)
# the scenario runs the release's stock tree verify and the plugin's patched one
TREE_BODIES = pytest.mark.skipif(VERIFY_FIX is None, reason=f"sglang {LINE}: no fix patches the tree verify")


class _SeqLens(torch.Tensor):
    """CPU tensors have no streams; verify calls ``batch.seq_lens.record_stream(...)`` first."""

    def record_stream(self, stream):
        return None


class _BonusKernel:
    """Stand-in for the Triton ``fill_new_verified_id`` / ``fill_bonus_tokens``: ``kernel[(bs,)](tokens,
    accept_lens, out, stride)`` stores ``tokens.flat[stride * pid + accept_lens[pid] - 1]``. The stock
    stride (num_draft_tokens) reads past ``tokens`` for tree drafting; clamped here (on a GPU it is an
    out-of-bounds read)."""

    def __getitem__(self, grid):
        return self._launch

    @staticmethod
    def _launch(tokens, accept_lens, out, stride):
        flat = tokens.reshape(-1)
        for pid in range(out.numel()):
            out[pid] = flat[min(int(stride) * pid + int(accept_lens[pid]) - 1, flat.numel() - 1)]


def _as_method(fn):
    """``verify(worker, batch)`` for the scenario: the worker method itself, or (0.5.16+) the shared
    ``run_eagle_verify(batch, **worker facts)`` called with the keywords its release takes, from the worker."""
    if VERIFY.endswith(".verify"):
        return fn
    import inspect

    def verify(worker, batch):
        given = dict(target_worker=worker.target_worker, req_to_token_pool=worker.req_to_token_pool,
                     token_to_kv_pool_allocator=worker.token_to_kv_pool_allocator, plan_stream=worker.plan_stream,
                     plan_stream_ctx=worker.plan_stream_ctx, topk=worker.topk, num_steps=worker.speculative_num_steps,
                     num_draft_tokens=worker.speculative_num_draft_tokens, device=worker.device,
                     metadata_ready_pre_pad=False, finalize_tree_path=True)  # the single-layer EAGLE worker's call
        params = inspect.signature(inspect.unwrap(fn)).parameters
        return fn(batch, **{k: v for k, v in given.items() if k in params})

    return verify


def stock_verify():
    import importlib

    module, _, qual = VERIFY.rpartition(".") if VERIFY.endswith("run_eagle_verify") else (WORKER, "", "verify")
    mod = importlib.import_module(module)
    fn = mod.EAGLEWorkerV2.__dict__["verify"] if qual == "verify" else getattr(mod, qual)
    assert not hasattr(fn, MARK), "the plugin must not be installed in the pytest process"
    return _as_method(fn)


def plugin_verify():
    return _as_method(core.build_fix(VERIFY_FIX)[VERIFY])


@pytest.fixture(autouse=True)
def _cpu_kernels(monkeypatch):
    import importlib

    if VERIFY_FIX is None:  # no verify scenario on this release (see TREE_BODIES)
        return
    mod = importlib.import_module(VERIFY.rsplit(".", 2)[0] if VERIFY.endswith(".verify") else COMMON)
    if hasattr(mod, "fill_bonus_tokens_func"):  # 0.5.16+: a Python launcher of the same kernel (…, stride, bs)
        monkeypatch.setattr(mod, "fill_bonus_tokens_func", lambda t, lens, out, stride, bs: _BonusKernel._launch(t, lens, out, stride))
    else:
        name = "fill_new_verified_id" if LINE == "0.5.11" else "fill_bonus_tokens"
        assert hasattr(mod, name)
        monkeypatch.setattr(mod, name, _BonusKernel())
    for name in ("record_stream_for_v2_verify", "record_stream_each",  # 0.5.13+: CUDA stream bookkeeping
                 "commit_mamba_states_after_verify"):  # 0.5.14+: no Mamba state in this (dense attention) scenario
        if hasattr(mod, name):
            monkeypatch.setattr(mod, name, lambda *a, **k: None)
    # 0.5.14+: the verify input's prepare / sample are module functions; they call the scenario's stand-ins
    if hasattr(mod, "eagle_prepare_for_verify"):
        monkeypatch.setattr(mod, "eagle_prepare_for_verify",
                            lambda verify_input, *a: verify_input.prepare_for_v2_verify(*a))
    if hasattr(mod, "eagle_sample"):
        monkeypatch.setattr(mod, "eagle_sample", lambda verify_input, *a, **kw: verify_input.sample(*a, **kw))
    if hasattr(mod, "move_accept_tokens_to_target_kvcache"):  # 0.5.14+: a module function (Triton kernels)
        monkeypatch.setattr(mod, "move_accept_tokens_to_target_kvcache",
                            lambda batch, accept_index, count, *a: batch.scenario_kv_move(batch, accept_index, count))
    monkeypatch.delenv("SGLANG_SPEC_NAN_DETECTION", raising=False)


def capture_api():
    """(output class, field of its rows, host readback) of the installed release."""
    if LINE == "0.5.11":
        from sglang.srt.layers.moe.routed_experts_capturer import RoutedExpertsOutput, _RoutedExpertsCapturerReal

        def make(out_cache_loc, rows, host):
            return RoutedExpertsOutput(out_cache_loc=out_cache_loc, routed_experts=rows,
                                       host_cache=types.SimpleNamespace(buffer=host))

        def read(host, pool, req_pool_idx, seqlen):
            capturer = types.SimpleNamespace(get_host_cache=lambda: types.SimpleNamespace(buffer=host))
            return _RoutedExpertsCapturerReal.get_routed_experts(capturer, req_pool_idx, seqlen, pool)

        return make, "routed_experts", read
    from sglang.srt.state_capturer.base import BaseTopkCapturer, TopkCaptureOutput

    def make(out_cache_loc, rows, host):
        return TopkCaptureOutput(out_cache_loc=out_cache_loc, topk=rows, host_cache=types.SimpleNamespace(buffer=host))

    def read(host, pool, req_pool_idx, seqlen):
        capturer = types.SimpleNamespace(host_cache=types.SimpleNamespace(buffer=host))
        return BaseTopkCapturer.get_topk(capturer, req_pool_idx, seqlen, pool)

    return make, "topk", read


class Scenario:
    """One decode step of ``bs`` requests: committed prefixes, a draft tree per request, the accepted
    paths, and a per-token 'routing' table (what the target's routers pick for a token)."""

    def __init__(self, seq_lens, accept_paths, steps, topk, nd, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.bs, self.steps, self.topk, self.nd = len(seq_lens), steps, topk, nd
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int64)
        self.route = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(V * LAYERS)]).view(V, LAYERS, K)
        self.route = self.route.to(torch.int32)
        self.route_idx = torch.stack(  # a second tape (0.5.12 indexer top-k): other values, same layout
            [torch.randperm(64, generator=g)[:4] for _ in range(V * 2)]).view(V, 2, 4).to(torch.int32)
        slots = torch.randperm(SLOTS - 1, generator=g)[: self.bs * 64].view(self.bs, 64) + 1  # slot 0 unused
        self.req_to_token = torch.zeros((self.bs + 1, 64), dtype=torch.int64)
        self.req_pool_idx = torch.arange(1, self.bs + 1)  # pool row 0 belongs to nobody here
        self.req_to_token[self.req_pool_idx] = slots
        self.committed = [torch.randint(0, V, (n,), generator=g) for n in seq_lens]
        self.node_tokens = torch.randperm(V, generator=g)[: self.bs * nd]  # distinct tokens over the tree
        self.predict = torch.randint(0, V, (self.bs * nd,), generator=g)
        s1 = steps + 1
        self.accept_index = torch.full((self.bs, s1), -1, dtype=torch.int32)
        for i, path in enumerate(accept_paths):
            assert path[0] == 0 and list(path) == sorted(path) and len(path) <= s1
            self.accept_index[i, : len(path)] = torch.tensor(path, dtype=torch.int32) + i * nd
        self.accept_lens = torch.tensor([len(p) for p in accept_paths], dtype=torch.int32)
        # out_cache_loc of the verify: node k of request i at position seq_lens[i] + k
        self.out_cache_loc = torch.cat([self.req_to_token[self.req_pool_idx[i], n: n + nd]
                                        for i, n in enumerate(seq_lens)])

    def expected_tokens(self, i):
        """Token at each committed position after this step (the prefix, then the accepted nodes)."""
        acc = self.accept_index[i, : int(self.accept_lens[i])].long()
        return torch.cat([self.committed[i], self.node_tokens[acc]])

    def run(self, verify):
        """Run ``verify`` on this step, then the scheduler's side: copy_to_cpu + finalize of every
        capture output, and each request's readback at finish (seqlen = committed + bonus)."""
        make, field, read = capture_api()
        n = self.bs * self.nd
        host = torch.zeros((SLOTS, LAYERS, K), dtype=torch.int32)
        host_idx = torch.zeros((SLOTS, 2, 4), dtype=torch.int32)
        kv = torch.full((SLOTS,), -1, dtype=torch.int64)  # token whose KV sits in each slot
        for i, toks in enumerate(self.committed):  # earlier steps: prefix KV and its capture rows
            loc = self.req_to_token[self.req_pool_idx[i], : len(toks)]
            kv[loc], host[loc], host_idx[loc] = toks, self.route[toks], self.route_idx[toks]
        kv[self.out_cache_loc] = self.node_tokens  # the verify forward writes every tree node's KV
        # device buffers as the capturers hold them: rows [0, n) of a larger buffer, sliced to the top-k
        # columns (extra columns = fused shared experts), i.e. a strided view as in the release
        dev = torch.full((4 * n, LAYERS, K + 1), -7, dtype=torch.int32)
        dev[:n, :, :K] = self.route[self.node_tokens]
        dev_idx = torch.full((4 * n, 2, 5), -7, dtype=torch.int32)
        dev_idx[:n, :, :4] = self.route_idx[self.node_tokens]
        routed = make(self.out_cache_loc, dev[:n, :, :K], host)
        indexer = make(self.out_cache_loc, dev_idx[:n, :, :4], host_idx) if LINE != "0.5.11" else None

        moves = []

        def move(batch, accept_index, count):
            # reference semantics of the KV move (per release count), applied to the token tape
            extra = 0 if LINE == "0.5.11" else 1  # 0.5.11: count incl. the bonus slot; 0.5.12: + 1
            moves.append(count.clone())
            src, tgt = [], []
            for i in range(self.bs):
                for j in range(int(count[i]) + extra):
                    src.append(self.out_cache_loc[int(accept_index[i, j])])
                    tgt.append(self.req_to_token[self.req_pool_idx[i], int(self.seq_lens[i]) + j])
            if src:
                kv[torch.stack(tgt)] = kv[torch.stack(src)].clone()

        logits = types.SimpleNamespace(next_token_logits=torch.zeros(n, V),
                                       hidden_states=torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 4))
        fwd_out = types.SimpleNamespace(logits_output=logits, routed_experts_output=routed,
                                        indexer_topk_output=indexer)
        verify_input = types.SimpleNamespace(
            num_tokens_per_req=-1,
            prepare_for_v2_verify=lambda pool, batch, target: (types.SimpleNamespace(out_cache_loc=self.out_cache_loc), False),
            sample=lambda batch, lo, mask, **kw: (self.predict.clone(), self.accept_lens.clone(), self.accept_index.clone()),
        )
        batch = Unset(  # features not in this scenario (hisparse, mamba tracking, watermark, ...) read as unset
            seq_lens=self.seq_lens.clone().as_subclass(_SeqLens), spec_info=verify_input, has_grammar=False,
            forward_mode=types.SimpleNamespace(is_idle=lambda: False), return_logprob=False,
            out_cache_loc=self.out_cache_loc, req_pool_indices=self.req_pool_idx, input_ids=None,
            scenario_kv_move=move,  # what the module-level KV move of 0.5.14+ calls here (see _cpu_kernels)
        )
        pool = types.SimpleNamespace(req_to_token=self.req_to_token)
        worker = types.SimpleNamespace(
            device="cpu", plan_stream_ctx=contextlib.nullcontext(), plan_stream=None, req_to_token_pool=pool,
            target_worker=types.SimpleNamespace(
                forward_batch_generation=lambda **kw: fwd_out,
                model_runner=Unset(attn_backend=Unset(verify_mask=None))),  # dense attention, no Mamba / watermark
            speculative_num_steps=self.steps, speculative_num_draft_tokens=self.nd, topk=self.topk,
            token_to_kv_pool_allocator=types.SimpleNamespace(get_kvcache=lambda: None),  # 0.5.15: no c128 states
            move_accepted_tokens_to_target_kvcache=move,  # 0.5.11 / 0.5.12.x name
            move_accept_tokens_to_target_kvcache=move,  # 0.5.13+
        )
        from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

        for name in ("_finalize_accept_tree_path", "_compact_accept_to_front"):  # 0.5.13+: upstream's own tree helpers
            if hasattr(EAGLEWorkerV2, name):
                setattr(worker, name, types.MethodType(getattr(EAGLEWorkerV2, name), worker))
        result = verify(worker, batch)

        outs = [(result.routed_experts_output, host)]
        if LINE != "0.5.11":
            outs.append((result.indexer_topk_output, host_idx))
        for out, _ in outs:  # the scheduler: copy to host in the forward stream, finalize after the copy
            if hasattr(out, "copy_to_cpu"):
                out.copy_to_cpu()
            else:  # 0.5.15+: GenerationBatchResult.copy_to_cpu maps its D2H copy over the output's device tensors
                out.map_device_tensors(lambda t: t.to("cpu", copy=True))
            out.finalize()
        reads = []
        for i in range(self.bs):
            seqlen = int(self.seq_lens[i] + self.accept_lens[i]) + 1  # + the bonus token (no KV yet)
            reads.append([read(h, pool, int(self.req_pool_idx[i]), seqlen) for _, h in outs])
        return dict(result=result, reads=reads, moves=moves, kv=kv, field=field)

    def check(self, obs):
        """Every committed position: the returned rows are those of the token the request really has
        there, and of the token whose KV sits in that slot."""
        bad = []
        for i in range(self.bs):
            toks = self.expected_tokens(i)
            loc = self.req_to_token[self.req_pool_idx[i], : len(toks)]
            tables = [self.route, self.route_idx][: len(obs["reads"][i])]
            for got, table in zip(obs["reads"][i], tables):
                assert got.shape == (len(toks),) + tuple(table.shape[1:])
                for p in range(len(toks)):
                    if not torch.equal(got[p], table[toks[p]]):
                        bad.append((i, p, "rows != routing of the committed token"))
                    elif not torch.equal(got[p], table[obs["kv"][loc[p]]]):
                        bad.append((i, p, "rows != routing of the token whose KV is in the slot"))
        return bad


# steps 3 / topk 4 / 8 draft tokens; accepted paths as sglang's tree orders them (depth-1 candidates
# first, then depth 2, ...): a top-1 chain is typically [0, 1, 5, 7], not the front chain [0, 1, 2, 3]
TREE = dict(seq_lens=[5, 9, 3, 12], accept_paths=[[0, 1, 5, 7], [0, 2, 6], [0, 3], [0]], steps=3, topk=4, nd=8)


@TREE_BODIES
def test_plugin_tree_verify_moves_capture_rows_with_the_accepted_kv():
    sc = Scenario(**TREE)
    obs = sc.run(plugin_verify())
    assert len(obs["moves"]) == 1  # the KV move ran once, with the release's count semantics
    expect = sc.accept_lens if LINE == "0.5.11" else sc.accept_lens - 1
    assert torch.equal(obs["moves"][0], expect)
    assert sc.check(obs) == []
    # the returned tape is a fresh contiguous tensor, not a view of the capturer's device buffer that
    # the next forward overwrites
    rows = getattr(obs["result"].routed_experts_output, obs["field"])
    assert rows.is_contiguous() and rows.shape == (sc.bs * sc.nd, LAYERS, K)


@TREE_BODIES
def test_stock_tree_verify_returns_the_front_chain_rows():
    """Stock keeps the tree order: position seq_lens + j gets node j's routing, not the accepted node's."""
    sc = Scenario(**TREE)
    obs = sc.run(stock_verify())
    bad = sc.check(obs)
    wrong = {(i, p) for i, p, why in bad if why == "rows != routing of the committed token"}
    # request 0 ([0, 1, 5, 7]): positions of depth 2 and 3; request 1 ([0, 2, 6]): depth 1 and 2;
    # request 2 ([0, 3]): depth 1; request 3 (root only) is right
    expect = {(0, 5 + 2), (0, 5 + 3), (1, 9 + 1), (1, 9 + 2), (2, 3 + 1)}
    assert expect <= wrong and not any(i == 3 for i, _ in wrong)


@TREE_BODIES
def test_chain_verify_is_unchanged():
    """topk == 1: the accepted path is the front chain; stock and plugin agree and nothing moves."""
    chain = dict(seq_lens=[4, 7, 2], accept_paths=[[0, 1, 2, 3], [0, 1], [0]], steps=3, topk=1, nd=4)
    for verify in (stock_verify(), plugin_verify()):
        sc = Scenario(**chain, seed=1)
        obs = sc.run(verify)
        assert obs["moves"] == [] and sc.check(obs) == []


@pytest.fixture(scope="module")
def moe_models(tmp_path_factory):
    from sglang_specv2_fixes.testing.tiny_models import moe as tiny_moe

    out = str(tmp_path_factory.mktemp("moe"))
    return tiny_moe.build(out), tiny_moe.tm.build_all(out)["eagle3"]


def _row_releases():
    import os

    from conftest import ROOT

    from sglang_specv2_fixes.testing.registry import registration

    return registration(os.path.join(ROOT, "tests", "registered", "test_routed_experts_tree.py"))["releases"]


@pytest.mark.skipif(VERSION not in _row_releases(), reason="the registered row does not run on this release")
def test_registered_launch_keeps_spec_v2_tree(moe_models, monkeypatch):
    """tests/registered/test_routed_experts_tree.py's launch on real ServerArgs (tiny Qwen3-MoE target,
    EAGLE3 3/4/8, page 1, triton attention and MoE, routed experts): the plugin's routing keeps spec v2
    tree drafting, stock falls back to spec v1."""
    import sglang.srt.server_args as sa

    # an H100's memory where the release reads it in server_args (later releases read it elsewhere)
    monkeypatch.setattr(sa, "get_device_memory_capacity", lambda device=None: 81559.0, raising=False)
    monkeypatch.delenv("SGLANG_ENABLE_SPEC_V2", raising=False)
    routings = [("stock", None)]  # None: the release's own ServerArgs, untouched
    if patched_here(FIX.name):
        assert not hasattr(sa.ServerArgs.__dict__["_handle_speculative_decoding"], MARK)
        routings.append(("plugin", core.build_fix(FIX.name)["sglang.srt.server_args.ServerArgs._handle_speculative_decoding"]))
    target, draft = moe_models
    got = {}
    for name, routing in routings:
        Launch = sa.ServerArgs
        if routing is not None:

            class Launch(sa.ServerArgs):  # ServerArgs itself stays untouched
                def _handle_speculative_decoding(self, routing=routing):
                    routing(self)

        # the row's command line, parsed by the release's own parser (flag -> field names differ across releases)
        parser = argparse.ArgumentParser()
        sa.ServerArgs.add_cli_args(parser)
        argv = ["--model-path", target, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft,
                "--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8",
                "--page-size", "1", "--attention-backend", "triton", "--moe-runner-backend", "triton",
                "--enable-return-routed-experts", "--disable-piecewise-cuda-graph", "--device", "cuda"]
        args = Launch.from_cli_args(parser.parse_args(argv))
        got[name] = (args.disable_overlap_schedule, args.speculative_eagle_topk, args.speculative_num_draft_tokens)
    if patched_here(FIX.name):
        assert got == {"stock": (True, 4, 8), "plugin": (False, 4, 8)}
    else:  # tree drafting on spec v2 is upstream here: stock keeps the overlap scheduler itself
        assert got == {"stock": (False, 4, 8)}
