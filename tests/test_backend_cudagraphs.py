"""CUDA-graph capture and replay (tilex.backend.cudagraphs) checked on CPU: a fake graph backend with
CUDA graphs' semantics (capturing runs nothing; a replay re-runs the captured call on the same static
inputs and writes the same output memory) stands in for torch.cuda's, so the runner's own logic (which
call warms up, which captures, which inputs are used in place or copied, how often the graph's in-place
writes happen) is tested against eager on fresh random data. The real graphs: tests/test_backend_decode.py
(GPU) and benchmarks/diagnose_cuda_graphs.py."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tilex.backend  # noqa: E402,F401  (registers "tilex")
from tilex.backend.cudagraphs import GraphRunner  # noqa: E402

from test_backend_decode import decode_steps  # noqa: E402
from test_backend_hf import rel_err, tiny  # noqa: E402


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _copy_into(dst, src) -> None:
    if isinstance(dst, torch.Tensor):
        dst.copy_(src)
    elif isinstance(dst, (list, tuple)):
        for d, s in zip(dst, src):
            _copy_into(d, s)


class FakeGraph:
    def __init__(self, fn, out):
        self.fn, self.out = fn, out

    def replay(self):
        _copy_into(self.out, self.fn())   # the captured work, into the captured outputs' memory


class FakeGraphs:
    """torch.cuda graphs' semantics on CPU tensors: warm_up runs the call; capture runs nothing (the call
    runs once for its outputs' layout and every tensor it reads is restored: nothing was written);
    replay re-runs it on the captured static inputs."""

    def __init__(self):
        self.warm_ups = self.captures = 0
        self.expired = []  # the tensors the runner expired (CUDA: their storage raises on access)

    def expire(self, t, msg):
        assert "overwritten" in msg
        self.expired.append(t)

    @staticmethod
    def can_borrow() -> bool:
        return True   # CudaGraphs.share works on CPU storages too; expire is recorded above

    def eligible(self, args) -> bool:
        return all(isinstance(a, torch.Tensor) for a in args)

    def warm_up(self, fn):
        self.warm_ups += 1
        return fn()

    def capture(self, fn, static):
        saved = [t.clone() for t in static]
        out = fn()
        for t, s in zip(static, saved):
            t.copy_(s)
        self.captures += 1
        return FakeGraph(fn, out), out


def test_replays_apply_in_place_writes_once_per_call():
    """A graph that advances a counter and writes a cache row in place (HF StaticCache's update): the
    counter and the cache after each of 6 calls (run, warm up + capture, 4 replays) equal eager's."""
    g = torch.Generator().manual_seed(31)

    def f(x, kc, counter):
        pos = torch.arange(1) + counter
        counter.add_(1)
        kc.index_copy_(2, pos, x)
        return kc.sum(-1) * 2.0
    kc, counter = torch.zeros(1, 2, 8, 4), torch.tensor(0)
    ekc, ecounter = kc.clone(), counter.clone()
    graphs, progs = FakeGraphs(), []
    cf = torch.compile(f, backend="tilex", options={"programs": progs, "cuda_graphs": graphs})
    with torch.no_grad():
        for _ in range(6):
            x = torch.randn(1, 2, 1, 4, generator=g)
            out, ref = cf(x, kc, counter), f(x, ekc, ecounter)
            torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
            assert int(counter) == int(ecounter) and torch.equal(kc, ekc)
    runner = progs[0].graph_runner
    assert (graphs.warm_ups, graphs.captures, runner.replays) == (1, 1, 4) and not runner.disabled


def test_moved_input_used_in_place_runs_without_the_graph():
    """A mutated input whose storage moved after capture: that call runs the program (its writes land in the
    caller's tensor), later calls with the captured storage replay again."""
    def f(x, kc, pos):
        kc.index_copy_(2, pos, x)
        return kc.sum(-1)
    kc = torch.zeros(1, 2, 4, 4)
    graphs, progs = FakeGraphs(), []
    cf = torch.compile(f, backend="tilex", options={"programs": progs, "cuda_graphs": graphs})
    x, pos = torch.randn(1, 2, 1, 4, generator=torch.Generator().manual_seed(32)), torch.tensor([1])
    with torch.no_grad():
        cf(x, kc, pos)
        cf(x, kc, pos)
        other = torch.zeros(1, 2, 4, 4)
        torch.testing.assert_close(cf(x + 1, other, pos), f(x + 1, other.clone(), pos), rtol=0, atol=0)
        assert torch.equal(other[:, :, 1], (x + 1)[:, :, 0])
        cf(x, kc, pos)
    assert progs[0].graph_runner.replays == 1


def test_host_decision_on_an_input_refuses_the_graph():
    """A library step whose check reads an input's value on the host (attention_prefill's causal-mask check on
    a mask passed in) would replay the captured verdict: that program runs without a graph."""
    import torch.nn.functional as F

    def f(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    g = torch.Generator().manual_seed(33)
    q, k, v = (torch.randn(1, 2, 8, 16, generator=g) for _ in range(3))
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    graphs, progs = FakeGraphs(), []
    cf = torch.compile(f, backend="tilex", options={"programs": progs, "cuda_graphs": graphs})
    with torch.no_grad():
        for mask in (causal, causal, ~causal | torch.eye(8, dtype=torch.bool), causal):
            torch.testing.assert_close(cf(q, k, v, mask), f(q, k, v, mask), rtol=1e-5, atol=1e-5)
    runner = progs[0].graph_runner
    assert runner.disabled and graphs.captures == 0
    assert "attention_prefill" in progs[0].host_decisions()


def test_runner_copies_inputs_that_are_not_static_or_mutated():
    """Token ids that reuse call 1's address are still copied into the static buffer (their values change)."""
    class Prog:
        def __call__(self, x, w):
            return x * w
    graphs = FakeGraphs()
    runner = GraphRunner(Prog(), static=[1], mutated=set(), graphs=graphs)
    w = torch.tensor([2.0, 3.0])
    x = torch.tensor([1.0, 1.0])
    for i in range(5):
        x.fill_(float(i))      # the same storage every call, new values
        assert torch.equal(runner(x, w), x * w)
    assert runner.borrowed == [False, True] and runner.replays == 3


def test_decode_steps_with_graphs_match_eager_on_cpu():
    """transformers' StaticCache decode (the counter `cumulative_length` and the caches written in place) through
    the runner: every step's logits and tokens as eager's (the H200's wrong tokens from the 4th one, session 17)."""
    model = tiny("llama", layers=1)
    ids = torch.randint(1, 96, (1, 4), generator=torch.Generator().manual_seed(34))
    ref = decode_steps(model, model, ids, 5)
    graphs, progs = FakeGraphs(), []
    cm = torch.compile(model, backend="tilex", options={"programs": progs, "cuda_graphs": graphs})
    out = decode_steps(cm, model, ids, 5)
    assert rel_err(out, ref) < 1e-4 and torch.equal(out.argmax(-1), ref.argmax(-1))
    decode = progs[-1].graph_runner
    assert decode.mutated and not decode.disabled and decode.replays == 3


def test_outputs_borrowed_from_the_graph_when_asked():
    """cuda_graphs=CudaGraphs(clone_outputs=False) semantics (an attribute of the graphs object): a replay returns
    the graph's output tensor itself (no copy: what Inductor's reduce-overhead returns), correct when returned and
    overwritten by the next replay; the default returns copies that stay valid."""
    g = torch.Generator().manual_seed(5)
    f = lambda x, w: torch.tanh(x @ w) * 2.0  # noqa: E731
    w = torch.randn(8, 8, generator=g)
    for clone in (True, False):
        torch._dynamo.reset()
        graphs, progs = FakeGraphs(), []
        graphs.clone_outputs = clone
        cf = torch.compile(f, backend="tilex", options={"programs": progs, "cuda_graphs": graphs})
        outs = []
        with torch.no_grad():
            for _ in range(5):
                x = torch.randn(4, 8, generator=g)
                outs.append((cf(x, w), f(x, w)))
                torch.testing.assert_close(outs[-1][0], outs[-1][1], rtol=1e-5, atol=1e-5)   # right when returned
        runner = progs[0].graph_runner
        assert runner.replays == 3 and runner.clone_outputs is clone
        if clone:   # copies: every earlier result still holds its own values
            assert all(o.data_ptr() != runner.out[0].data_ptr() for o, _ in outs)
            for got, ref in outs:
                torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
        else:       # borrowed: the replays (calls 3-5) returned the graph's one output memory, now the last values,
            #         each time as a new tensor object, and each replay expired the one the previous handed out
            ptr = runner.out[0].data_ptr()
            assert [o.data_ptr() == ptr for o, _ in outs] == [False, False, True, True, True]
            assert len({id(o) for o, _ in outs[2:]}) == 3 and all(o is not runner.out[0] for o, _ in outs)
            assert [id(t) for t in graphs.expired] == [id(outs[2][0]), id(outs[3][0])] and runner.expired == 2
            assert not torch.allclose(outs[2][0], outs[2][1])
            torch.testing.assert_close(outs[4][0], outs[4][1], rtol=1e-5, atol=1e-5)
            # a handed-out result keeps the graph's output memory alive after the runner is gone
            assert outs[4][0]._tilex_graph_output is runner.out[0]


def test_cuda_graphs_option_names_its_values():
    with pytest.raises(Exception, match="cuda_graphs=.borow.: expected True, False or .borrow."):
        torch.compile(lambda x: x + 1, backend="tilex", options={"cuda_graphs": "borow"})(torch.randn(3))


@pytest.mark.gpu
def test_borrowed_outputs_raise_once_overwritten_on_cuda():
    """cuda_graphs="borrow" on torch.cuda's graphs: the latest result is right; a kept earlier one raises on access
    once a later replay overwrote its memory (torch's per-tensor access error: a view taken of it before then is
    not covered, session 25's probe_borrow.py); the default (copies) keeps every result."""
    g = torch.Generator("cuda").manual_seed(6)
    f = lambda x, w: torch.tanh(x @ w) * 2.0  # noqa: E731
    w = torch.randn(64, 96, device="cuda", generator=g)
    for mode in ("borrow", True):
        torch._dynamo.reset()
        progs = []
        cf = torch.compile(f, backend="tilex", options={"programs": progs, "cuda_graphs": mode})
        outs = []
        with torch.no_grad():
            for _ in range(6):
                x = torch.randn(33, 64, device="cuda", generator=g)
                got = cf(x, w)
                outs.append((got, f(x, w)))
                torch.testing.assert_close(got, outs[-1][1], rtol=1e-4, atol=1e-4)
        runner = progs[0].graph_runner
        assert runner.replays == 4 and not runner.disabled
        if mode == "borrow":
            for got, _ in outs[2:5]:   # replays 1-3: overwritten by the next
                with pytest.raises(RuntimeError, match="has overwritten"):
                    got.sum()
            torch.testing.assert_close(outs[5][0], outs[5][1], rtol=1e-4, atol=1e-4)
        else:
            for got, ref in outs:
                torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_borrow_falls_back_to_copies_without_torchs_storage_calls(monkeypatch):
    """A torch lacking the private storage calls: cuda_graphs='borrow' warns once and replays return copies."""
    g = torch.Generator().manual_seed(7)
    f = lambda x, w: torch.tanh(x @ w)  # noqa: E731
    w = torch.randn(8, 8, generator=g)
    graphs, progs = FakeGraphs(), []
    graphs.clone_outputs = False
    graphs.can_borrow = lambda: False
    cf = torch.compile(f, backend="tilex", options={"programs": progs, "cuda_graphs": graphs})
    with torch.no_grad():
        outs = [(cf(x, w), f(x, w)) for x in (torch.randn(4, 8, generator=g) for _ in range(5))]
    runner = progs[0].graph_runner
    assert runner.replays == 3 and runner.clone_outputs and not graphs.expired
    for got, ref in outs:   # copies: every result keeps its values
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
