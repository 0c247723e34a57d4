"""longattn.attention_map / map_rank_entropy against float64 torch: the N×N
weights of each variant written directly (SPEC §9), rank from
torch.linalg.svdvals, entropy of the rows."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from test_py_common import gen, needs, randn, rel_err
from test_py_linear import phi
from test_py_mhla import block_ids
import longattn

pytestmark = needs("attention_map")


def rows(A):
    """Rows normalized to sum 1; an all-zero row (relu features of a query with
    no positive entry) stays 0 as the library writes it, never NaN."""
    s = A.sum(dim=1, keepdim=True)
    return torch.where(s > 0, A / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(A))


def ref_map(q, k, variant, feature=None, scale=None, W=None, grid=None, blocks=None, p=3.0,
            softplus_param=None):
    q, k = q.double(), k.double()
    N, D = q.shape
    if variant == "softmax":
        s = D ** -0.5 if scale is None else scale
        return torch.softmax(s * q @ k.T, dim=1)
    if variant in ("linear", "mhla"):
        f = feature or ("relu" if variant == "linear" else "relu_eps")
        A = phi(q, f) @ phi(k, f).T
        if variant == "mhla":
            b = block_ids(grid or (N,), blocks)
            A = A * W.double()[b][:, b]
        return rows(A)
    if variant == "focused_flatten":
        sp = F.softplus(torch.zeros(D, dtype=torch.float64) if softplus_param is None
                        else softplus_param.double())

        def focus(x):
            x = (x.clamp_min(0) + 1e-6) / sp
            xp = x ** p
            return x.norm(dim=1, keepdim=True) * xp / xp.norm(dim=1, keepdim=True)
        return rows(focus(q) @ focus(k).T)
    if variant == "focused_blog":
        return rows(((q * D ** -0.5).clamp_min(0) + 1) @ (k.clamp_min(0) + 1).T)
    raise ValueError(variant)


def ref_rank_entropy(A, rtol=1e-6):
    A = torch.as_tensor(np.asarray(A)).double()
    sv = torch.linalg.svdvals(A)
    R = rows(A)
    ent = -(R * torch.where(R > 0, R.log(), torch.zeros_like(R))).sum(1).mean().item()
    return sv, ent


def check(A, rank, ent, ref, rtol=1e-6):
    assert rel_err(A, ref) <= 1e-5
    sv, ent_ref = ref_rank_entropy(A, rtol)
    near = ((sv / sv[0] - rtol).abs() < 1e-3 * rtol).any()  # a σ on the threshold
    if not near:
        assert rank == int((sv > rtol * sv[0]).sum())
    assert abs(ent - ent_ref) <= 1e-5 * max(1.0, abs(ent_ref))


@pytest.mark.parametrize("N,D", [(1, 1), (63, 16), (65, 63), (256, 64)])
@pytest.mark.parametrize("variant", ["softmax", "linear"])
def test_softmax_and_linear_maps(N, D, variant):
    g = gen(N + D)
    q, k = randn(g, N, D), randn(g, N, D)
    A, rank, ent = longattn.attention_map(q, k, variant=variant)
    assert A.shape == (N, N) and A.dtype == torch.float32
    assert isinstance(rank, int) and isinstance(ent, float)
    check(A, rank, ent, ref_map(q, k, variant))
    if variant == "linear":
        A2, _, _ = longattn.attention_map(q, k, variant="linear", feature="elu1")
        assert rel_err(A2, ref_map(q, k, "linear", feature="elu1")) <= 1e-5


def test_softmax_scale_and_f64_numpy():
    g = gen(61)
    q, k = randn(g, 40, 8), randn(g, 40, 8)
    A, rank, ent = longattn.attention_map(q.double().numpy(), k.double().numpy(), scale=2.0)
    assert isinstance(A, np.ndarray) and A.dtype == np.float64
    check(A, rank, ent, ref_map(q, k, "softmax", scale=2.0))
    # low-rank linear map: D = 3 features give rank <= 3
    A, rank, ent = longattn.attention_map(randn(g, 50, 3), randn(g, 50, 3), variant="linear",
                                          feature="elu1")
    assert rank <= 3


@needs("attention_map")
@pytest.mark.parametrize("grid,blocks", [((64,), (8,)), ((8, 12), (2, 3)), ((7, 9), (3, 2))])
def test_mhla_map(grid, blocks):
    g = gen(62)
    N, M = int(np.prod(grid)), int(np.prod(blocks))
    q, k = randn(g, N, 16), randn(g, N, 16)
    W = torch.rand(M, M, generator=g, dtype=torch.float64).float() + 0.05
    A, rank, ent = longattn.attention_map(q, k, variant="mhla", mixing=W,
                                          grid=grid if len(grid) > 1 else None, blocks=blocks)
    check(A, rank, ent, ref_map(q, k, "mhla", W=W, grid=grid, blocks=blocks))


@pytest.mark.parametrize("variant", ["focused_flatten", "focused-blog"])
def test_focused_maps(variant):
    g = gen(63)
    q, k = randn(g, 48, 16), randn(g, 48, 16)
    sp = randn(g, 16) * 0.5
    kw = dict(softplus_param=sp, p=2.0) if "flatten" in variant else {}
    A, rank, ent = longattn.attention_map(q, k, variant=variant, map=(6, 8), **kw)
    check(A, rank, ent, ref_map(q, k, variant.replace("-", "_"),
                                softplus_param=sp if kw else None, p=2.0))


def test_map_rank_entropy_direct_and_errors():
    r, e = longattn.map_rank_entropy(np.eye(8))
    assert (r, e) == (8, 0.0)
    u = np.full((5, 5), 0.2)
    r, e = longattn.map_rank_entropy(u)
    assert r == 1 and abs(e - np.log(5)) < 1e-12
    g = gen(64)
    q, k = randn(g, 10, 4), randn(g, 10, 4)
    with pytest.raises(ValueError) as ex:
        longattn.attention_map(q, k[:9])
    assert "k" in ex.value.message
    with pytest.raises(ValueError) as ex:
        longattn.attention_map(q, k, variant="mhla")  # no mixing
    assert "blocks" in str(ex.value) or "mixing" in str(ex.value)
    with pytest.raises(ValueError) as ex:
        longattn.attention_map(q, k, variant="focused_flatten", map=(3, 4))
    assert "map" in ex.value.message
    with pytest.raises(ValueError, match="variant"):
        longattn.attention_map(q, k, variant="cosine")
    with pytest.raises(ValueError) as ex:
        longattn.map_rank_entropy(np.full((3, 3), np.nan))
    assert "finite" in ex.value.message
