"""MHLA (longattn.mhla, mhla_causal, MHLADecoder, mhla_init, mhla_project)
against direct float64 torch formulations: block summaries by einsum over a
token->block one-hot (any grid, uneven blocks), the released-vision
denominator over [blocks, positions] block views, causal chunks written
token by token, initializers from block-centre distances."""
import numpy as np
import pytest
import torch

from test_py_common import bhnd, gen, needs, randn, rel_err
from test_py_linear import phi
import longattn


def block_ids(grid, blocks):
    """Block id of every token of a raster-ordered grid (SPEC §5.1)."""
    axes = [torch.arange(n) for n in grid]
    coords = torch.meshgrid(*axes, indexing="ij")
    bid = torch.zeros(grid, dtype=torch.long)
    for c, n, gsz in zip(coords, grid, blocks):
        bid = bid * gsz + (c * gsz) // n
    return bid.reshape(-1)


def ref_mhla(q, k, v, W, grid, blocks, feature="relu_eps", normalize="per_query", eps=1e-6,
             scale=1.0):
    q, k, v, W = (torch.as_tensor(x).double() for x in (q, k, v, W))
    B, N, H, D = q.shape
    M = int(np.prod(blocks))
    qt, kt = scale * phi(q, feature), phi(k, feature)
    bid = block_ids(grid, blocks)
    P = torch.nn.functional.one_hot(bid, M).double()  # [N, M]
    S = torch.einsum("nm,bnhd,bnhe->bmhde", P, kt, v)
    z = torch.einsum("nm,bnhd->bmhd", P, kt)
    Wh = W.expand(H, M, M) if W.dim() == 2 else W  # [H, M, M]
    St = torch.einsum("hib,xbhde->xihde", Wh, S)  # x = batch
    zt = torch.einsum("hib,xbhd->xihd", Wh, z)
    St_t, zt_t = St[:, bid], zt[:, bid]  # per token [B, N, H, D, Dv]
    num = torch.einsum("bnhd,bnhde->bnhe", qt, St_t)
    if normalize == "none":
        return num
    if normalize == "per_query":
        return num / (torch.einsum("bnhd,bnhd->bnh", qt, zt_t)[..., None] + eps)
    # released_vision: denominator Σ_b W[i,b] (q̃_{b,w}·z_b), w = position in block,
    # over block views [B, M, P, H, D] (equal block sizes)
    sizes = [n // g for n, g in zip(grid, blocks)]
    shp = [B]
    for g_, s_ in zip(blocks, sizes):
        shp += [g_, s_]
    nd = len(grid)
    perm = [0] + [1 + 2 * a for a in range(nd)] + [2 + 2 * a for a in range(nd)]
    qv = qt.reshape(*shp, H, D).permute(*perm, -2, -1).reshape(B, M, -1, H, D)
    den_bw = torch.einsum("bmwhd,bmhd->bmwh", qv, z)  # q̃_{b,w}·z_b
    den = torch.einsum("hib,xbwh->xiwh", Wh, den_bw)  # [B, M(i), P(w), H]
    # back to token order: token t -> (block i, position w)
    den_tok = den.reshape(B, *blocks, *sizes, H)
    inv = [0]
    for a in range(nd):
        inv += [1 + a, 1 + nd + a]
    den_tok = den_tok.permute(*inv, -1).reshape(B, N, H)
    return num / (den_tok[..., None] + eps)


def ref_mhla_causal(q, k, v, W, chunk=64, feature="relu", normalize="none", eps=1e-6,
                    scale=None):
    q, k, v, W = (torch.as_tensor(x).double() for x in (q, k, v, W))
    B, N, H, D = q.shape
    scale = D ** -0.5 if scale is None else scale
    qt, kt = scale * phi(q, feature), phi(k, feature)
    Wh = W.expand(H, *W.shape[-2:]) if W.dim() == 2 else W
    out = torch.zeros(B, N, H, v.shape[-1], dtype=torch.float64)
    nblk = (N + chunk - 1) // chunk
    S = [torch.einsum("bnhd,bnhe->bhde", kt[:, i * chunk:(i + 1) * chunk],
                      v[:, i * chunk:(i + 1) * chunk]) for i in range(nblk)]
    z = [kt[:, i * chunk:(i + 1) * chunk].sum(1) for i in range(nblk)]
    for t in range(N):
        i = t // chunk
        Sm = sum(Wh[:, i, b, None, None] * S[b] for b in range(i)) if i else 0
        zm = sum(Wh[:, i, b, None] * z[b] for b in range(i)) if i else 0
        lo = i * chunk
        Sm = Sm + Wh[:, i, i, None, None] * torch.einsum("bnhd,bnhe->bhde", kt[:, lo:t + 1],
                                                         v[:, lo:t + 1])
        zm = zm + Wh[:, i, i, None] * kt[:, lo:t + 1].sum(1)
        o = torch.einsum("bhd,bhde->bhe", qt[:, t], Sm)
        if normalize == "per_query":
            o = o / (torch.einsum("bhd,bhd->bh", qt[:, t], zm)[..., None] + eps)
        out[:, t] = o
    return out


def rand_W(g, *shape):
    return torch.rand(*shape, generator=g, dtype=torch.float64).float() + 0.05


MHLA_CASES = [  # B, grid, blocks, H, D, Dv, per_head
    (1, (1,), (1,), 1, 1, 1, False),
    (2, (63,), (4,), 2, 16, 16, False),
    (1, (65,), (5,), 3, 63, 17, True),
    (1, (16, 16), (4, 4), 2, 32, 32, False),
    (1, (7, 9), (3, 2), 2, 16, 8, True),          # uneven blocks
    (1, (4, 6, 10), (2, 3, 5), 1, 8, 8, False),   # 3-D grid
    (1, (1000,), (10,), 2, 64, 32, False),
]


@needs("mhla")
@pytest.mark.parametrize("B,grid,blocks,H,D,Dv,per_head", MHLA_CASES)
@pytest.mark.parametrize("normalize", ["per_query", "none"])
def test_mhla_matches_reference(B, grid, blocks, H, D, Dv, per_head, normalize):
    g = gen(int(np.prod(grid)) + D)
    N, M = int(np.prod(grid)), int(np.prod(blocks))
    q, k, v = randn(g, B, N, H, D), randn(g, B, N, H, D), randn(g, B, N, H, Dv)
    W = rand_W(g, H, M, M) if per_head else rand_W(g, M, M)
    o = longattn.mhla(q, k, v, W, grid=grid if len(grid) > 1 else None, blocks=blocks,
                      normalize=normalize)
    assert o.shape == (B, N, H, Dv) and o.dtype == torch.float32
    tol = 1e-4 if N >= 1000 else 1e-5
    assert rel_err(o, ref_mhla(q, k, v, W, grid, blocks, normalize=normalize)) <= tol


@needs("mhla")
@pytest.mark.parametrize("grid,blocks", [((64,), (8,)), ((8, 12), (2, 3)),
                                         ((4, 4, 6), (2, 2, 3))])
def test_mhla_released_vision(grid, blocks):
    g = gen(31)
    N, M = int(np.prod(grid)), int(np.prod(blocks))
    q, k, v = randn(g, 2, N, 2, 16), randn(g, 2, N, 2, 16), randn(g, 2, N, 2, 8)
    W = rand_W(g, M, M)
    o = longattn.mhla(q, k, v, W, grid=grid, blocks=blocks, normalize="released_vision")
    r = ref_mhla(q, k, v, W, grid, blocks, normalize="released_vision")
    assert rel_err(o, r) <= 1e-5
    # differs from per_query (the option is passed through)
    assert rel_err(o, ref_mhla(q, k, v, W, grid, blocks)) > 1e-4
    with pytest.raises(ValueError) as e:  # uneven blocks: a clear error
        longattn.mhla(q[:, :N - 1], k[:, :N - 1], v[:, :N - 1], W, grid=(N - 1,),
                      blocks=(M,), normalize="released_vision")
    assert e.value.message


@needs("mhla")
def test_mhla_options_strided_numpy_dtypes():
    g = gen(32)
    grid, blocks = (12, 10), (3, 2)
    N, M = 120, 6
    q, k, v = randn(g, 2, N, 2, 16), randn(g, 2, N, 2, 16), randn(g, 2, N, 2, 8)
    W = rand_W(g, M, M)
    for feature in ("relu", "elu1", "relu1"):
        o = longattn.mhla(q, k, v, W, grid="12x10", blocks="3x2", feature=feature, scale=0.5,
                          eps=1e-3)
        r = ref_mhla(q, k, v, W, grid, blocks, feature=feature, scale=0.5, eps=1e-3)
        assert rel_err(o, r) <= 1e-5, feature
    o = longattn.mhla(q, k, v, W, grid=grid, blocks=blocks)
    assert rel_err(longattn.mhla(bhnd(q), bhnd(k), bhnd(v), W, grid=grid, blocks=blocks),
                   o) <= 1e-6
    on = longattn.mhla(q.numpy(), k.numpy(), v.numpy(), W.numpy(), grid=grid, blocks=blocks)
    assert isinstance(on, np.ndarray) and on.dtype == np.float32
    assert rel_err(on, o) <= 1e-6
    ob = longattn.mhla(q.bfloat16(), k.bfloat16(), v.bfloat16(), W, grid=grid, blocks=blocks)
    assert ob.dtype == torch.bfloat16
    assert rel_err(ob, ref_mhla(q.bfloat16(), k.bfloat16(), v.bfloat16(), W, grid,
                                blocks)) <= 1e-2
    # blocks defaults to M for a 1-D grid
    o1 = longattn.mhla(q, k, v, W)
    assert rel_err(o1, ref_mhla(q, k, v, W, (N,), (M,))) <= 1e-5


@needs("mhla")
def test_mhla_bad_arguments():
    g = gen(33)
    q, k, v = randn(g, 1, 16, 2, 8), randn(g, 1, 16, 2, 8), randn(g, 1, 16, 2, 8)
    with pytest.raises(ValueError) as e:  # mixing does not match the block count
        longattn.mhla(q, k, v, rand_W(g, 5, 5), blocks=4)
    assert e.value.message and "mixing" in e.value.message
    with pytest.raises(ValueError) as e:  # grid does not cover N
        longattn.mhla(q, k, v, rand_W(g, 4, 4), grid=(3, 3), blocks=(2, 2))
    assert e.value.message
    with pytest.raises(ValueError, match="normalize"):
        longattn.mhla(q, k, v, rand_W(g, 4, 4), blocks=4, normalize="bogus")
    with pytest.raises(ValueError, match="same rank"):
        longattn.mhla(q, k, v, rand_W(g, 4, 4), grid=(4, 4), blocks=4)


CAUSAL_CASES = [  # B, N, H, D, Dv, chunk, per_head
    (1, 1, 1, 1, 1, 64, False),
    (2, 63, 2, 16, 16, 16, False),
    (1, 65, 3, 63, 17, 64, True),
    (1, 130, 2, 64, 32, 32, False),
]


@needs("mhla_causal")
@pytest.mark.parametrize("B,N,H,D,Dv,chunk,per_head", CAUSAL_CASES)
@pytest.mark.parametrize("normalize", ["none", "per_query"])
def test_mhla_causal_matches_reference(B, N, H, D, Dv, chunk, per_head, normalize):
    g = gen(N + D + chunk)
    q, k, v = randn(g, B, N, H, D), randn(g, B, N, H, D), randn(g, B, N, H, Dv)
    M = (N + chunk - 1) // chunk + 1  # M may exceed ceil(N/C)
    W = rand_W(g, H, M, M) if per_head else rand_W(g, M, M)
    feature = "relu_eps" if normalize == "per_query" else "relu"
    o = longattn.mhla_causal(q, k, v, W, chunk=chunk, normalize=normalize, feature=feature)
    r = ref_mhla_causal(q, k, v, W, chunk, normalize=normalize, feature=feature)
    assert o.shape == (B, N, H, Dv)
    assert rel_err(o, r) <= 1e-5
    # entries above the diagonal are ignored
    Wu = W.clone()
    Wu[..., 0, -1] = 1e6
    o2 = longattn.mhla_causal(q, k, v, Wu, chunk=chunk, normalize=normalize, feature=feature)
    assert rel_err(o2, o) <= 1e-6
    assert rel_err(longattn.mhla_causal(bhnd(q), bhnd(k), bhnd(v), W, chunk=chunk,
                                        normalize=normalize, feature=feature), o) <= 1e-6


@needs("mhla_causal")
def test_mhla_causal_scale_and_errors():
    g = gen(34)
    q, k, v = randn(g, 1, 50, 2, 16), randn(g, 1, 50, 2, 16), randn(g, 1, 50, 2, 8)
    W = rand_W(g, 4, 4)
    o = longattn.mhla_causal(q, k, v, W, chunk=16, scale=0.3, feature="elu1")
    assert rel_err(o, ref_mhla_causal(q, k, v, W, 16, feature="elu1", scale=0.3)) <= 1e-5
    with pytest.raises(ValueError) as e:  # M < ceil(N / chunk)
        longattn.mhla_causal(q, k, v, rand_W(g, 3, 3), chunk=16)
    assert "mixing" in e.value.message


@needs("MHLADecoder", "mhla_causal")
@pytest.mark.parametrize("normalize", ["none", "per_query"])
def test_decoder_equals_chunkwise_forward(normalize):
    g = gen(35)
    B, N, H, D, Dv, C = 2, 75, 2, 16, 8, 16
    q, k, v = randn(g, B, N, H, D), randn(g, B, N, H, D), randn(g, B, N, H, Dv)
    W = longattn.mhla_init(5, "uniform_causal")
    full = longattn.mhla_causal(q, k, v, torch.from_numpy(W), chunk=C, normalize=normalize)
    with longattn.MHLADecoder(W, B, H, D, Dv, chunk=C, normalize=normalize) as dec:
        outs, t = [], 0
        for n in [1, 1, 5, 16, 1, 20, 31]:  # steps that cross block edges
            outs.append(dec.append(q[:, t:t + n], k[:, t:t + n], v[:, t:t + n]))
            t += n
        assert t == N and len(dec) == N and dec.length == N
    assert rel_err(torch.cat(outs, 1), full) <= 1e-5
    with pytest.raises(ValueError, match="closed"):
        dec.append(q[:, :1], k[:, :1], v[:, :1])


@needs("MHLADecoder")
def test_decoder_errors_and_numpy():
    g = gen(36)
    W = longattn.mhla_init(2, "uniform_causal")
    dec = longattn.MHLADecoder(W, 1, 2, 8, chunk=4)
    q = randn(g, 1, 3, 2, 8).numpy()
    o = dec.append(q, q, q)
    assert isinstance(o, np.ndarray) and o.shape == (1, 3, 2, 8)
    with pytest.raises(ValueError) as e:  # wrong head dim
        dec.append(q[..., :4], q[..., :4], q[..., :4])
    assert e.value.message
    with pytest.raises(ValueError) as e:  # beyond M*chunk = 8 tokens
        dec.append(*(randn(g, 1, 6, 2, 8).numpy(),) * 3)
    assert e.value.message
    dec.close()
    dec.close()  # idempotent


def ref_init(blocks, kind):
    if kind == "uniform_causal":
        M = blocks[0]
        i = torch.arange(M)[:, None].double()
        j = torch.arange(M)[None, :]
        return torch.where(j <= i, 1.0 / (i + 1), torch.zeros(()).double())
    axes = [torch.arange(b, dtype=torch.float64) + 0.5 for b in blocks]
    cent = torch.stack([c.reshape(-1) for c in torch.meshgrid(*axes, indexing="ij")], 1)
    d = torch.cdist(cent, cent)
    if kind == "locality":
        W = 1 - d / d.max(dim=1, keepdim=True).values
        return W / W.sum(dim=1, keepdim=True)
    W = 1 - d / d.max()
    return W / W.sum(dim=0, keepdim=True)


@needs("mhla_init")
@pytest.mark.parametrize("blocks,kind", [((4, 4), "locality"), ((3, 5, 10), "locality"),
                                         ((7,), "locality"), ((4, 4), "locality_global"),
                                         ((2, 3, 4), "locality_global"),
                                         ((32,), "uniform_causal"), ((1,), "uniform_causal")])
def test_mhla_init_matches_formula(blocks, kind):
    W = longattn.mhla_init(blocks, kind)
    M = int(np.prod(blocks))
    assert isinstance(W, np.ndarray) and W.shape == (M, M) and W.dtype == np.float32
    assert rel_err(W, ref_init(blocks, kind)) <= 1e-5
    Wt = longattn.mhla_init("x".join(map(str, blocks)), kind, like=torch.zeros(1))
    assert isinstance(Wt, torch.Tensor) and torch.equal(Wt, torch.from_numpy(W))


@needs("mhla_init")
def test_mhla_init_errors():
    with pytest.raises(ValueError, match="kind"):
        longattn.mhla_init(4, "gaussian")
    with pytest.raises(ValueError) as e:  # uniform_causal is 1-D
        longattn.mhla_init((2, 2), "uniform_causal")
    assert e.value.message


@needs("mhla_project")
def test_mhla_project():
    g = gen(37)
    W = randn(g, 6, 6) * 2
    r = W.clamp(1e-5, 1)  # in float32, as the library stores it
    out = longattn.mhla_project(W.clone(), causal=False)
    assert rel_err(out, r) == 0
    Wn = W.numpy().copy()
    assert longattn.mhla_project(Wn, causal=True) is Wn  # in place, returns its argument
    assert rel_err(Wn, torch.tril(r)) == 0
    Wh = randn(g, 2, 5, 5)
    ref = torch.tril(Wh.clamp(1e-5, 1))
    assert rel_err(longattn.mhla_project(Wh, causal=True), ref) == 0
    with pytest.raises(ValueError) as e:
        longattn.mhla_project(randn(g, 3, 4))
    assert e.value.message
