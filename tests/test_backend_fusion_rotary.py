"""fusion.transpose_outer_products: HF's rotary table `(inv_freq[None, :, None] @ positions[:, None, :])
.transpose(1, 2)` is rewritten as the outer product of the transposed operands, so its cat reads `freqs`
contiguous: no copy of the transposed bmm output before the generated rotary kernel (it was one per prefill
forward, a torch direct_copy kernel on the GPU). Values bit-identical to eager (each element is one product)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tilex.backend as B  # noqa: E402,F401  (registers "tilex")


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def rotary_table(inv_freq, pos):
    inv = inv_freq[None, :, None].float().expand(pos.shape[0], -1, 1)
    freqs = (inv @ pos[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * 1.5, emb.sin()


@pytest.mark.parametrize("batch,seq", [(1, 37), (3, 20)])
def test_rotary_table_reads_freqs_without_a_copy(batch, seq):
    g = torch.Generator().manual_seed(61)
    inv_freq = torch.rand(8, generator=g)
    pos = torch.randint(0, 500, (batch, seq), generator=g)
    progs = []
    cf = torch.compile(rotary_table, backend="tilex", options={"programs": progs, "strict": True}, dynamic=False)
    with torch.no_grad():
        got = cf(inv_freq, pos)
    ref = rotary_table(inv_freq, pos)
    for a, b in zip(got, ref):
        assert a.shape == b.shape and (a - b).abs().max() < 1e-6
    (p,) = progs
    assert [s.label for s in p.steps if s.copies] == []
    gen = [s for s in p.steps if s.kind == "generated"]
    assert gen and not any(s.kind == "library" for s in p.steps)
    def product_under(n):  # the node under matmul's same-shape views (_unsafe_view / view) of its bmm
        while str(n.target) in ("aten._unsafe_view.default", "aten.view.default", "aten.reshape.default"):
            n = n.args[0]
        return n
    assert not any(str(n.target) == "aten.transpose.int" and "bmm" in str(product_under(n.args[0]).target)
                   for n in p.gm.graph.nodes)  # no transpose of an outer product is left (the reviewer's nit)


@pytest.mark.parametrize("tail", ["none", "unsqueeze", "slice"])
def test_transposed_outer_product_that_is_an_output_keeps_its_strides(tail):
    """A transpose that is a graph output, directly or through a view, is not rewritten: the caller sees eager's
    strides (the reviewer's case: a view of the transpose as the output)."""
    def f(a, b):
        t = torch.bmm(a, b).transpose(1, 2)
        return t.unsqueeze(0) if tail == "unsqueeze" else t[:, :3] if tail == "slice" else t
    g = torch.Generator().manual_seed(62)
    a, b = torch.randn(2, 5, 1, generator=g), torch.randn(2, 1, 7, generator=g)
    progs = []
    cf = torch.compile(f, backend="tilex", options={"programs": progs}, dynamic=False)
    with torch.no_grad():
        out = cf(a, b)
    ref = f(a, b)
    assert torch.equal(out, ref) and out.stride() == ref.stride()
