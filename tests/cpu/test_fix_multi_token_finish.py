"""multi-token-finish on each release's real ``Req`` with the tiny model's real tokenizer (``tiny_models.llama``:
word-level, ``t7`` … ``t1023``, decode joins tokens with spaces, EOS ``</s>`` = 2, vocab size 1024).

A step appends a run of accepted tokens to ``output_ids`` and calls the release's finish check
(``check_finished`` / ``update_finish_state``) with the run's length, as the spec-v2 decode result processing does;
non-speculative decoding is the same with runs of one token. Three bodies run: stock (the release's own ``Req``), the
plugin body (the patch file compiled, on a ``Req`` subclass; every release has one) and the oracle: the plugin body
fed one token at a time, which is stock one-token decoding (test_one_token_steps_are_stock_results pins that, the
``>= vocab_size`` bound on 0.5.11 … 0.5.13 aside).

What the table claims is checked per release: A (stop-string window, finished_len at the stop string, ``>=
vocab_size``) is in the release iff its patch file replaces ``Req.tail_str``; B (stops before the length cap) iff the
release's own finish check tests max_new_tokens before the stop checks; C (the check first in the release's order
wins wherever in the run it matches, not the first finish in the run; open upstream as of 0.5.23) on every release.
Each hand-written case names the bug it shows, and stock must differ from the expected result exactly on the releases
that have that bug; the generated differential must find the plugin equal to the oracle in every case and stock
differing from it on every release (only C-shaped differences on 0.5.18+, B- or C-shaped where only B and C are
present).
"""

import functools
import random

import pytest
from conftest import LINE, requires_sglang

from sglang_specv2_fixes import core, patchfile, releases
from sglang_specv2_fixes.catalog import Patched
from sglang_specv2_fixes.fixes import multi_token_finish
from sglang_specv2_fixes.testing.tiny_models import llama as tm

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = multi_token_finish.FIX
ENTRY = releases.entry(FIX.name, LINE) if LINE else None
PATCHED = isinstance(ENTRY, Patched)
# A is in the release iff the line's patch file replaces tail_str (0.5.11 … 0.5.13)
BUG = {
    "A": PATCHED and any(t.qualname == "Req.tail_str" for t in patchfile.load(FIX.name, ENTRY.name).targets),
}
V, EOS, BOS = tm.V, tm.EOS, tm.BOS
WORDS = range(len(tm.SPECIALS), V)  # t7 … t1023
PLUGIN_ONLY = pytest.mark.skipif(not PATCHED, reason=f"{FIX.name} is upstream on {LINE}: stock is the plugin body")


def t(*names):
    """Token ids of ``t<N>`` names (``"eos"``, ``"V"`` for EOS and the id equal to the vocab size)."""
    return [EOS if n == "eos" else V if n == "V" else int(n[1:]) for n in " ".join(names).split()]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from sglang.srt.utils.hf_transformers_utils import get_tokenizer

    d = tmp_path_factory.mktemp("tokenizer")
    tm.write_tokenizer(str(d))
    return get_tokenizer(str(d))


def finish_name():
    from sglang.srt.managers.schedule_batch import Req

    return "update_finish_state" if hasattr(Req, "update_finish_state") else "check_finished"


# where each check of the release's own finish method starts (its one-token order, which decides a tie)
_MARKS = {"length": "self.sampling_params.max_new_tokens", "grammar": "self.grammar", "token":
          "self._check_token_based_finish(", "vocab": "self._check_vocab_boundary_finish(", "str":
          "self._check_str_based_finish("}


@functools.lru_cache(maxsize=None)
def stock_order():
    """The release's one-token check order, read from its own ``check_finished`` / ``update_finish_state``."""
    import inspect

    from sglang.srt.managers.schedule_batch import Req

    src = inspect.getsource(getattr(Req, finish_name()))
    return tuple(sorted(_MARKS, key=lambda c: src.index(_MARKS[c])))


def stock_checks_first(first, then):
    """Stock checks ``first`` before ``then`` (so a ``first`` finish later in a run beats an earlier ``then``)."""
    return stock_order().index(first) < stock_order().index(then)


def bug(name):
    """A (see BUG), B (stock checks max_new_tokens before EOS), or "C:x>y": stock checks x before y, so a run holding y
    and then x ends at x (the tokens between are emitted)."""
    if name == "C":  # in every release
        return True
    if name == "B":
        return stock_checks_first("length", "token")
    if name.startswith("C:"):
        return stock_checks_first(*name[2:].split(">"))
    return BUG[name]


@functools.lru_cache(maxsize=None)
def req_class(plugin):
    """The release's ``Req``, or (plugin) a subclass whose targets are the functions compiled from the patch file."""
    from sglang.srt.managers.schedule_batch import Req

    if not (plugin and PATCHED):
        return Req
    built = core.build_fix(FIX.name)  # the patch file applied to the installed source, fingerprints checked
    attrs = {}
    for target, fn in built.items():
        owner, name = target.rsplit(".", 2)[-2:]
        assert owner == "Req" and name in Req.__dict__, target
        attrs[name] = fn
    return type("PluginReq", (Req,), attrs)


def make_req(tok, plugin, prefix=(), *, stop=None, stop_regex=None, stop_token_ids=None, max_new_tokens=64,
             vocab_size=V, ignore_eos=False):
    from sglang.srt.sampling.sampling_params import SamplingParams

    sp = SamplingParams(max_new_tokens=max_new_tokens, stop=stop, stop_regex=stop_regex,
                        stop_token_ids=stop_token_ids, ignore_eos=ignore_eos)
    sp.normalize(tok)
    req = req_class(plugin)("r", "", [BOS, 10, 11], sp, eos_token_ids={EOS}, vocab_size=vocab_size)
    req.tokenizer = tok
    req.output_ids.extend(prefix)
    return req


def outcome(req):
    """(finish class, its JSON, finished_len, output_ids_through_stop): what the output streamer emits."""
    r = req.finished_reason
    return (type(r).__name__ if r else None, r.to_json() if r else None, req.finished_len,
            list(req.output_ids_through_stop))


def emitted(o):
    """An outcome without finished_len (stock 0.5.11 … 0.5.13 leave it None at a stop string; the tokens sent are
    output_ids_through_stop either way)."""
    return o[0], o[1], o[3]


def run(tok, plugin, runs, prefix=(), **params):
    """Append each run and check once per run (a speculative step), stopping at the finish; the outcome."""
    req = make_req(tok, plugin, prefix, **params)
    fn = getattr(req, finish_name())
    for r in runs:
        if req.finished():
            break
        req.output_ids.extend(r)
        fn(len(r))
    return outcome(req)


def oracle(tok, runs, prefix=(), **params):
    """The plugin body fed one token at a time: non-speculative decoding."""
    return run(tok, True, [[x] for r in runs for x in r], prefix, **params)


# ----------------------------------------------------------------------------------- hand-written cases
# (id, prefix, runs, params, expected (class, matched or length, finished_len, emitted tokens), bug it shows)
STR, TOK, LEN = "FINISH_MATCHED_STR", "FINISH_MATCHED_TOKEN", "FINISH_LENGTH"
CASES = [
    # stop string (2 tokens: window 3) early in an 8-token run: stock's window never sees it
    ("stop-str-early-in-long-run", t("t100 t101"), [t("t102 t500 t501 t103 t104 t105 t106 t107")],
     dict(stop=["t500 t501"]), (STR, "t500 t501", 5, t("t100 t101 t102 t500 t501")), "A"),
    # completed by the run's first token (its first half came with the previous run)
    ("stop-str-at-run-start", t("t100"), [t("t500"), t("t501 t102 t103 t104")],
     dict(stop=["t500 t501"]), (STR, "t500 t501", 3, t("t100 t500 t501")), "A"),
    # the run's last token completes it: stock sees it and emits the same tokens (finished_len left None)
    ("stop-str-at-run-end", t("t100"), [t("t102 t103 t500 t501")],
     dict(stop=["t500 t501"]), (STR, "t500 t501", 5, t("t100 t102 t103 t500 t501")), None),
    # a stop string that starts and ends inside tokens ("t512 t513" holds "12 t51")
    ("stop-str-spans-two-tokens", t("t100"), [t("t102 t512 t513 t104 t105 t106")],
     dict(stop=["12 t51"]), (STR, "12 t51", 4, t("t100 t102 t512 t513")), "A"),
    # stop string, then EOS in the same run: the string ends the request (stock ends at the EOS, string leaked)
    ("stop-str-then-eos-one-run", t("t100"), [t("t500 t501 eos t103")],
     dict(stop=["t500 t501"]), (STR, "t500 t501", 3, t("t100 t500 t501")), "A"),
    # EOS inside a run that crosses max_new_tokens: stock returns length at the cap, with the junk after the EOS
    ("eos-in-run-crossing-max-new-tokens", t("t100 t101 t102"), [t("t103 eos t104 t105")],
     dict(max_new_tokens=6), (TOK, EOS, 5, t("t100 t101 t102 t103 eos")), "B"),
    ("stop-token-in-run-crossing-max-new-tokens", t("t100 t101 t102"), [t("t103 t777 t104 t105")],
     dict(max_new_tokens=6, stop_token_ids=[777]), (TOK, 777, 5, t("t100 t101 t102 t103 t777")), "B"),
    ("stop-str-in-run-crossing-max-new-tokens", t("t100"), [t("t500 t501 t103 t104 t105")],
     dict(max_new_tokens=4, stop=["t500 t501"]), (STR, "t500 t501", 3, t("t100 t500 t501")), "B"),
    # a run that ends exactly at max_new_tokens, no stop: length (every release)
    ("run-ends-at-max-new-tokens", t("t100"), [t("t101 t102 t103")],
     dict(max_new_tokens=4), (LEN, 4, 4, t("t100 t101 t102 t103")), None),
    # EOS is the max_new_tokens-th token: a tie, the release's own order decides (length first up to 0.5.17)
    ("eos-at-max-new-tokens", t("t100"), [t("t101 t102 eos")],
     dict(max_new_tokens=4),
     {True: (LEN, 4, 4, t("t100 t101 t102 eos")), False: (TOK, EOS, 4, t("t100 t101 t102 eos"))}, None),
    # the stop lies past the cap: length at the cap (every release)
    ("eos-past-max-new-tokens", t("t100"), [t("t101 t102 t103 eos")],
     dict(max_new_tokens=3), (LEN, 3, 3, t("t100 t101 t102")), None),
    # token id == vocab_size is out of range: NaN finish, the id replaced by EOS (stock 0.5.11 … 0.5.13 let it pass)
    ("token-id-equal-to-vocab-size", t("t100"), [t("t101 V t102")],
     dict(), (STR, "NaN happened", 3, t("t100 t101 eos")), "A"),
    # a stop regex early in a long run: stock finds it but leaves finished_len None (the tokens after it are sent)
    ("stop-regex-early-in-long-run", t("t100"), [t("t102 t500 t501 t103 t104 t105")],
     dict(stop_regex=["t50[0-9] t501"]), ("FINISHED_MATCHED_REGEX", "t50[0-9] t501", 4, t("t100 t102 t500 t501")),
     "A"),
    # C, the first finish in the run wins: a stop token, then a stop string in the same run (0.5.14+ end at the string)
    ("stop-token-then-stop-str-one-run", t("t100"), [t("t5 t500 t501 t103")],
     dict(stop=["t500 t501"], stop_token_ids=[5]), (TOK, 5, 2, t("t100 t5")), "C:str>token"),
    # EOS, then an out-of-range id in the same run (0.5.14+ sanitize the id and end there)
    ("eos-then-negative-id-one-run", t("t100"), [t("t101 eos"), [-1], t("t102")],
     dict(), (TOK, EOS, 3, t("t100 t101 eos")), None),
    ("eos-then-negative-id-in-one-run", t("t100"), [t("t101 eos") + [-1] + t("t102")],
     dict(), (TOK, EOS, 3, t("t100 t101 eos")), "C:vocab>token"),
    # an out-of-range id, then a stop token in the same run (0.5.11 … 0.5.13 end at the stop token, id unsanitized)
    ("negative-id-then-stop-token-one-run", t("t100"), [t("t101") + [-1] + t("t5 t102")],
     dict(stop_token_ids=[5]), (STR, "NaN happened", 3, t("t100 t101 eos")), "C:token>vocab"),
    # a stop string the stop list names second completes before the first one (one check, two finishes)
    ("second-stop-str-first-in-run", t("t100"), [t("t102 t600 t103 t500 t104")],
     dict(stop=["t500", "t600"]), (STR, "t600", 3, t("t100 t102 t600")), "C"),
]


def expected_outcome(exp):
    if isinstance(exp, dict):  # a tie: keyed by "the release checks max_new_tokens first"
        exp = exp[stock_checks_first("length", "token")]
    cls, value, flen, tokens = exp
    as_json = {"type": "length", "length": value} if cls == LEN else {"type": "stop", "matched": value}
    return cls, as_json, flen, tokens


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_case(tok, case):
    _, prefix, runs, params, exp, shows = case
    want = expected_outcome(exp)
    assert oracle(tok, runs, prefix, **params) == want, "the expectation is non-speculative decoding's result"
    assert run(tok, True, runs, prefix, **params) == want
    stock = run(tok, False, runs, prefix, **params)
    if shows and bug(shows):
        assert emitted(stock) != emitted(want), f"stock {LINE} should show bug {shows} here: {stock}"
    else:
        assert emitted(stock) == emitted(want), f"bug {shows} is not in stock {LINE}"


def test_first_finish_in_the_run_wins_beyond_upstream(tok):
    """Beyond upstream (open as of 0.5.23): a run holding a stop token and a stop string ends at whichever comes first,
    as one-token decoding does. Stock lets the check first in its order win wherever in the run it matches: 0.5.14+
    (strings before tokens) end ``[t5, t500, t501]`` at the string, 0.5.11 … 0.5.13 (tokens first) end
    ``[t500, t501, t5]`` at the token; so stock fails one of the two shapes on every release."""
    params = dict(stop=["t500 t501"], stop_token_ids=[5])
    shapes = [  # (run, expected, stock's order picks the later finish)
        (t("t5 t500 t501 t103"), (TOK, {"type": "stop", "matched": 5}, 2, t("t100 t5")),
         stock_checks_first("str", "token")),
        (t("t500 t501 t5 t103"), (STR, {"type": "stop", "matched": "t500 t501"}, 3, t("t100 t500 t501")),
         stock_checks_first("token", "str")),
    ]
    for r, want, stock_wrong in shapes:
        assert oracle(tok, [r], t("t100"), **params) == want
        assert run(tok, True, [r], t("t100"), **params) == want
        stock = run(tok, False, [r], t("t100"), **params)
        assert (emitted(stock) != emitted(want)) == stock_wrong, (LINE, r, stock)
    assert any(shape[2] for shape in shapes), f"stock {LINE} should fail one shape"


def test_only_the_winner_is_committed(tok):
    """The checks run without committing: an out-of-range id after the first finish is left as it is (the vocab
    check's rewrite to EOS is undone), the stop token before it ends the request; where the id comes first its rewrite
    is kept."""
    req = make_req(tok, True, t("t100"), stop_token_ids=[5])
    req.output_ids.extend(t("t101 t5") + [-1])
    getattr(req, finish_name())(3)
    assert outcome(req) == (TOK, {"type": "stop", "matched": 5}, 3, t("t100 t101 t5"))
    assert list(req.output_ids) == t("t100 t101 t5") + [-1]
    req = make_req(tok, True, t("t100"), stop_token_ids=[5])
    req.output_ids.extend([-1] + t("t5 t102"))
    getattr(req, finish_name())(3)
    assert outcome(req) == (STR, {"type": "stop", "matched": "NaN happened"}, 2, t("t100 eos"))
    assert list(req.output_ids) == t("t100 eos t5 t102")


class _Terminated:
    def is_terminated(self):
        return True


def test_grammar_termination_ties_follow_the_release_order(tok):
    """A grammar-terminated run ends at an EOS inside it (the first finish); where termination and EOS land on the
    same token, the release's own order picks the reason: grammar termination (finished_len unset) up to 0.5.16,
    EOS from 0.5.17 (#31738). One-token steps and the tie give stock's result."""
    def step(plugin, r):
        req = make_req(tok, plugin, t("t100"))
        req.grammar = _Terminated()
        req.output_ids.extend(r)
        getattr(req, finish_name())(len(r))
        return outcome(req)

    grammar_first = stock_checks_first("grammar", "token")
    for r in (t("eos"), t("t101 eos")):
        want = (TOK, {"type": "stop", "matched": EOS}, None if grammar_first else len(r) + 1, t("t100") + r)
        assert step(True, r) == step(False, r) == want, r
    r = t("eos t101")
    assert step(True, r) == (TOK, {"type": "stop", "matched": EOS}, 2, t("t100 eos"))
    assert (step(False, r)[3] != t("t100 eos")) == grammar_first  # stock up to 0.5.16: the whole run


@PLUGIN_ONLY
def test_tie_order_is_the_release_order():
    """The order the patched body hands to first_finish is the one the release's own finish method runs."""
    import inspect

    fn = getattr(req_class(True), finish_name())
    names = [n for n in dir(multi_token_finish) if n.startswith("ORDER_") and n in inspect.getsource(fn)]
    assert len(names) == 1, names
    assert getattr(multi_token_finish, names[0]) == stock_order()


def test_emitted_text_with_and_without_stop_trim(tok):
    """What the detokenizer makes of the emitted tokens (``trim_matched_stop``, ``no_stop_trim`` is
    include_stop_str_in_output): the oracle's text with the plugin body in both modes; stock 0.5.11 … 0.5.13 send the
    tokens accepted after a stop string when the stop string is kept."""
    from sglang.srt.managers.detokenizer_manager import DetokenizerManager

    manager = DetokenizerManager.__new__(DetokenizerManager)
    runs, prefix, params = [t("t102 t500 t501 t103 t104")], t("t100"), dict(stop=["t501"])
    texts = {}
    for name, o in (("oracle", oracle(tok, runs, prefix, **params)), ("plugin", run(tok, True, runs, prefix, **params)),
                    ("stock", run(tok, False, runs, prefix, **params))):
        text = tok.decode(o[3])
        texts[name] = [manager.trim_matched_stop(text, o[1], keep) for keep in (False, True)]
    assert texts["oracle"] == ["t100 t102 t500 ", "t100 t102 t500 t501"]
    assert texts["plugin"] == texts["oracle"]
    assert (texts["stock"] != texts["oracle"]) == BUG["A"], texts["stock"]


def test_missing_vocab_size_still_finishes_by_length(tok):
    """Prefill-only embedding / scoring requests have no vocab size; with the stops checked before the length, the
    vocab check must not compare against None (#33758's guard)."""
    for plugin in (True, False):
        o = run(tok, plugin, [t("t100")], max_new_tokens=0, vocab_size=None)
        assert o == (LEN, {"type": "length", "length": 0}, 0, []), (plugin, o)


@PLUGIN_ONLY
def test_stop_match_prefix_check_keeps_the_stock_window(tok):
    """``check_match_stop_str_prefix`` (the streamer's hold-back) calls ``tail_str()`` with no argument: the plugin
    body gives stock's answer on every prefix of a sequence."""
    seq = t("t100 t50 t500 t5 t501 t502 t503 t12 t512 t513")
    answers = []
    for stop in (["t500 t501"], ["t50"], ["12 t51"], ["t9"]):
        for n in range(len(seq) + 1):
            got = [make_req(tok, plugin, seq[:n], stop=stop).check_match_stop_str_prefix() for plugin in (False, True)]
            assert got[0] == got[1], (stop, n)
            answers.append(got[0])
    assert True in answers and False in answers


# ----------------------------------------------------------------------------------- generated differential
def stop_string(rng, tok, seq):
    """A stop string cut from the decoded text of 1-3 consecutive tokens (no vocab-size id among them): it may start
    and end inside a token, never with a space, so it touches exactly as many tokens as it encodes to and the stock
    window (stop_str_max_len + 1 tokens) covers it when it ends at the window's last token."""
    spots = [i for i in range(len(seq)) if seq[i] != V]
    i = rng.choice(spots)
    j = i + 1
    while j < len(seq) and j - i < 3 and seq[j] != V and rng.random() < 0.5:
        j += 1
    text = tok.decode(seq[i:j])
    if j - i == 1:
        a = rng.randrange(len(text))
        return text[a:rng.randrange(a + 1, len(text) + 1)]
    first, last = text.split(" ")[0], text.split(" ")[-1]
    a = rng.randrange(len(first))
    b = len(text) - rng.randrange(len(last))
    return text[a:b]


def generate(rng, tok, n_cases, vocab_boundary=True):
    """Random cases: (prefix, runs, params). Each picks one to three finish causes placed in the sequence: a stop
    string, EOS, a stop token, max_new_tokens inside the sequence, an id equal to the vocab size."""
    out = []
    for _ in range(n_cases):
        n = rng.randint(3, 36)
        seq = [rng.choice(WORDS) for _ in range(n)]
        causes = rng.sample(["str", "str", "eos", "stop_token", "length", "length"] + ["vocab"] * vocab_boundary,
                            rng.randint(1, 3))
        params = dict(max_new_tokens=n + 4)
        if "eos" in causes:
            seq[rng.randrange(n)] = EOS
        if "vocab" in causes:
            seq[rng.randrange(n)] = V
        if "stop_token" in causes:
            params["stop_token_ids"] = [seq[rng.randrange(n)]]
        if "length" in causes:
            params["max_new_tokens"] = rng.randint(1, n)
        if "str" in causes:
            params["stop"] = [stop_string(rng, tok, seq)]
        runs, i = [], 0
        while i < n:
            k = min(n - i, rng.choice([1, 2, 3, 4, 5, 6, 8]))
            runs.append(seq[i:i + k])
            i += k
        out.append((runs, params))
    return out


def run_end(runs, pos):
    """Number of tokens through the end of the run that holds output position ``pos`` (1-based)."""
    end = 0
    for r in runs:
        end += len(r)
        if end >= pos:
            return end
    return end


def length_masks_stop(stock, want):
    """B's shape: stock finished at the length cap where non-speculative decoding stops earlier or at the cap on a
    stop (EOS, stop token, stop string, out-of-vocab id) inside the run that reached the cap."""
    return stock[0] == LEN and want[0] != LEN


def first_in_run_shaped(runs, stock, want):
    """C's shape: stock finished later in the run that holds non-speculative decoding's finish, on a stop (or, where
    stock checks the stops before max_new_tokens, on the cap that a later stop crossed)."""
    f = len(want[3])
    return (stock[0] != LEN or not bug("B")) and f < len(stock[3]) <= run_end(runs, f)


def test_generated_multi_token_runs_match_one_token_decoding(tok):
    rng = random.Random(20261124)
    cases = generate(rng, tok, 500)
    stock_diffs = []
    kinds = set()
    for runs, params in cases:
        want = oracle(tok, runs, **params)
        plugin = run(tok, True, runs, **params)
        stock = run(tok, False, runs, **params)
        kinds.add(want[0])
        assert plugin == want, (runs, params)
        if emitted(stock) != emitted(want):
            stock_diffs.append((runs, params, want, stock))
    assert {STR, TOK, LEN} <= kinds, kinds
    b_shaped = [d for d in stock_diffs if bug("B") and length_masks_stop(d[3], d[2])]
    c_shaped = [d for d in stock_diffs if first_in_run_shaped(d[0], d[3], d[2])]
    assert c_shaped, f"{LINE}: stock should end a run at a later stop of its order (C, every release)"
    assert bool(b_shaped) == bug("B"), "B: a stop inside the run that reaches max_new_tokens"
    other = [d for d in stock_diffs if d not in b_shaped and d not in c_shaped]
    if BUG["A"]:
        assert other, "A: stop strings missed or leaked without the cap or a later stop"
    else:
        assert other == [], other[:3]


@PLUGIN_ONLY
def test_one_token_steps_are_stock_results(tok):
    """Non-speculative decoding (and spec v1, which checks after each token): the plugin body gives exactly stock's
    result, the finish reason of a tie included (the release's own order decides it). On 0.5.11 … 0.5.13 the
    plugin adds A's fixes: ``token_id == vocab_size`` is out of range, and a stop string's finished_len is set
    (stock leaves it None; the same tokens are emitted)."""
    rng = random.Random(7)
    cases = generate(rng, tok, 400)
    same = 0
    for runs, params in cases:
        one = [[x] for r in runs for x in r]
        stock, plugin = run(tok, False, one, **params), run(tok, True, one, **params)
        if BUG["A"]:
            stock, plugin = emitted(stock), emitted(plugin)
            if V in [x for r in runs for x in r] and stock != plugin:
                assert plugin[1] == {"type": "stop", "matched": "NaN happened"}, (runs, params, stock, plugin)
                continue
        assert stock == plugin, (runs, params, stock, plugin)
        same += 1
    assert same >= 300, same
