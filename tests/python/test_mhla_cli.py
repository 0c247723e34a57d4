"""`longattn run mhla`, `run mhla --causal` and `run mhla-init` against a
direct torch (float64) formulation of each SPEC §5 formula, written here
independently of the C code: block ids from floor(c*g/n) per axis, summaries
as einsums over a one-hot block assignment, the causal form as the masked
pairwise product. Bad input: exit 2, a one-line message, no output file."""
import math
import os
import subprocess

import numpy as np
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("LA_BUILD", "build"))
EXE = os.path.join(BUILD, "longattn")

SEED = int(os.environ.get("LA_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
print(f"# test_mhla_cli: LA_TEST_SEED={SEED}")


def run(*args):
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, timeout=300)


def feat(name, x):
    if name == "identity":
        return x
    if name == "relu":
        return torch.relu(x)
    if name == "relu_eps":
        return torch.relu(x) + 1e-6
    if name == "relu1":
        return torch.relu(x) + 1
    if name == "elu1":
        return torch.where(x >= 0, x + 1, torch.exp(torch.clamp(x, max=0)))
    raise ValueError(name)


def block_ids(grid, blocks):
    """Block id of every token (raster order): floor(c*g/n) per axis."""
    coords = torch.meshgrid(*[torch.arange(n) for n in grid], indexing="ij")
    bid = torch.zeros(grid, dtype=torch.long)
    for c, n, g in zip(coords, grid, blocks):
        bid = bid * g + (c * g) // n
    return bid.reshape(-1)


def ref_mhla(q, k, v, W, grid, blocks, feature="relu_eps", normalize="per_query", eps=1e-6,
             scale=1.0):
    """SPEC §5.2. q,k [B,N,H,D], v [B,N,H,Dv], W [M,M] or [H,M,M], float64."""
    B, N, H, D = q.shape
    M = math.prod(blocks)
    bid = block_ids(grid, blocks)
    onehot = torch.nn.functional.one_hot(bid, M).double()            # [N, M]
    Wh = W.expand(H, M, M) if W.dim() == 2 else W                     # [H, M, M]
    qf, kf = scale * feat(feature, q), feat(feature, k)
    S = torch.einsum("nm,bnhd,bnhe->bhmde", onehot, kf, v)            # block summaries
    z = torch.einsum("nm,bnhd->bhmd", onehot, kf)
    St = torch.einsum("hij,bhjde->bhide", Wh, S)                      # mixing
    zt = torch.einsum("hij,bhjd->bhid", Wh, z)
    num = torch.einsum("bnhd,bhnde->bnhe", qf, St[:, :, bid])
    if normalize == "none":
        return num
    if normalize == "per_query":
        den = torch.einsum("bnhd,bhnd->bnh", qf, zt[:, :, bid])
        return num / (den + eps)[..., None]
    # released_vision: the query at t's position inside each block j
    pos = torch.zeros(N, dtype=torch.long)
    count = [0] * M
    for t in range(N):
        pos[t] = count[bid[t]]
        count[bid[t]] += 1
    L = count[0]
    at = torch.zeros(M, L, dtype=torch.long)
    at[bid, pos] = torch.arange(N)
    R = torch.einsum("bjwhd,bhjd->bhjw", qf[:, at], z)                # q~_{j,w} . z_j
    den = torch.einsum("hij,bhjw->bhiw", Wh, R)[:, :, bid, pos]       # [B,H,N]
    return num / (den.permute(0, 2, 1) + eps)[..., None]


def ref_mhla_causal(q, k, v, W, C, feature="relu", normalize="none", eps=1e-6, scale=None):
    """SPEC §5.4 as the masked pairwise product: A_ts = W[t//C, s//C] q~_t.k~_s, s <= t."""
    B, N, H, D = q.shape
    scale = D ** -0.5 if scale is None else scale
    nc = (N + C - 1) // C
    Wh = W.expand(H, *W.shape[-2:]) if W.dim() == 2 else W
    blk = torch.arange(N) // C
    Wts = Wh[:, blk][:, :, blk]                                       # [H, N, N]
    mask = torch.tril(torch.ones(N, N, dtype=torch.bool))
    qf, kf = scale * feat(feature, q), feat(feature, k)
    A = torch.einsum("bthd,bshd->bhts", qf, kf) * torch.where(mask, Wts, torch.zeros(()))
    out = torch.einsum("bhts,bshe->bthe", A, v)
    if normalize == "per_query":
        out = out / (A.sum(-1).permute(0, 2, 1) + eps)[..., None]
    assert nc <= W.shape[-1]
    return out


def ref_init(kind, blocks):
    M = math.prod(blocks)
    if kind == "uniform_causal":
        i = torch.arange(M, dtype=torch.float64)[:, None]
        j = torch.arange(M)[None, :]
        return torch.where(j <= i, 1.0 / (i + 1), torch.zeros(()))
    cen = torch.stack(torch.meshgrid(*[torch.arange(g, dtype=torch.float64) + 0.5 for g in blocks],
                                     indexing="ij"), -1).reshape(M, -1)
    dist = torch.cdist(cen, cen)
    if kind == "locality":
        mx = dist.max(1, keepdim=True).values
        w = 1 - dist / mx if M > 1 else torch.ones(1, 1, dtype=torch.float64)
        return w / w.sum(1, keepdim=True)
    w = 1 - dist / dist.max() if M > 1 else torch.ones(1, 1, dtype=torch.float64)
    return w / w.sum(0, keepdim=True)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)


@pytest.fixture
def rng():
    return np.random.default_rng(SEED)


def save(tmp_path, name, arr):
    p = tmp_path / f"{name}.npy"
    np.save(p, arr)
    return str(p)


def inputs(rng, tmp_path, B, N, H, D, Dv, M, per_head=False, dtype=np.float32):
    q = rng.standard_normal((B, N, H, D)).astype(dtype)
    k = rng.standard_normal((B, N, H, D)).astype(dtype)
    v = rng.standard_normal((B, N, H, Dv)).astype(dtype)
    W = rng.uniform(0.05, 1.0, (H, M, M) if per_head else (M, M)).astype(dtype)
    files = [save(tmp_path, n, a) for n, a in (("q", q), ("k", k), ("v", v), ("w", W))]
    t = [torch.from_numpy(x.astype(np.float32).astype(np.float64)) for x in (q, k, v, W)]
    return files, t


NONCAUSAL = [
    # grid, blocks, per_head, feature, normalize
    ((1000,), (7,), False, "relu_eps", "per_query"),
    ((65,), (8,), True, "elu1", "none"),
    ((64,), (4,), False, "relu", "released_vision"),
    ((7, 9), (2, 3), True, "relu_eps", "per_query"),
    ((7, 9), (2, 3), False, "relu1", "none"),
    ((16, 16), (4, 4), False, "relu_eps", "released_vision"),
    ((6, 10, 10), (3, 5, 2), False, "relu_eps", "per_query"),
    ((6, 10, 10), (3, 5, 2), True, "elu1", "none"),
    ((4, 6, 6), (2, 3, 2), True, "relu_eps", "released_vision"),
    ((21, 6, 5), (3, 2, 1), False, "identity", "none"),
]


@pytest.mark.parametrize("grid,blocks,per_head,feature,normalize", NONCAUSAL)
def test_mhla_matches_torch(rng, tmp_path, grid, blocks, per_head, feature, normalize):
    N, M = math.prod(grid), math.prod(blocks)
    B, H, D, Dv = 2, 3, 16, 24
    (fq, fk, fv, fw), (q, k, v, W) = inputs(rng, tmp_path, B, N, H, D, Dv, M, per_head)
    out = tmp_path / "o.npy"
    args = ["run", "mhla", "--q", fq, "--k", fk, "--v", fv, "--mixing", fw,
            "--feature", feature, "--normalize", normalize, "--out", out, "--threads", 2,
            "--grid", "x".join(map(str, grid)), "--blocks", "x".join(map(str, blocks))]
    r = run(*args)
    assert r.returncode == 0, r.stderr
    got = np.load(out)
    assert got.dtype == np.float32 and got.shape == (B, N, H, Dv)
    want = ref_mhla(q, k, v, W, grid, blocks, feature, normalize).numpy()
    e = rel(got, want)
    print(f"grid {grid} blocks {blocks} {normalize} {feature}: rel {e:.2e}")
    assert e <= 1e-5


def test_mhla_defaults_and_float64_input(rng, tmp_path):
    """Default --grid N with --blocks = M of --mixing, relu_eps, per_query, scale 1;
    float64 files are accepted (computed in float32); --scale and --eps apply."""
    B, N, H, D, Dv, M = 1, 63, 2, 8, 5, 4
    (fq, fk, fv, fw), (q, k, v, W) = inputs(rng, tmp_path, B, N, H, D, Dv, M, dtype=np.float64)
    out = tmp_path / "o.npy"
    r = run("run", "mhla", "--q", fq, "--k", fk, "--v", fv, "--mixing", fw, "--out", out)
    assert r.returncode == 0, r.stderr
    want = ref_mhla(q, k, v, W, (N,), (M,)).numpy()
    assert rel(np.load(out), want) <= 1e-5
    r = run("run", "mhla", "--q", fq, "--k", fk, "--v", fv, "--mixing", fw, "--out", out,
            "--scale", 0.5, "--eps", 0.1)
    assert r.returncode == 0, r.stderr
    want = ref_mhla(q, k, v, W, (N,), (M,), eps=0.1, scale=0.5).numpy()
    assert rel(np.load(out), want) <= 1e-5


def test_mhla_all_ones_is_global_linear_attention(rng, tmp_path):
    B, N, H, D, Dv = 1, 63, 2, 8, 8
    (fq, fk, fv, _), (q, k, v, _) = inputs(rng, tmp_path, B, N, H, D, Dv, 6)
    fw = save(tmp_path, "ones", np.ones((6, 6), np.float32))
    out = tmp_path / "o.npy"
    r = run("run", "mhla", "--q", fq, "--k", fk, "--v", fv, "--mixing", fw, "--grid", "7x9",
            "--blocks", "2x3", "--out", out)
    assert r.returncode == 0, r.stderr
    qf, kf = feat("relu_eps", q), feat("relu_eps", k)
    A = torch.einsum("bthd,bshd->bhts", qf, kf)
    want = torch.einsum("bhts,bshe->bthe", A, v) / (A.sum(-1).permute(0, 2, 1) + 1e-6)[..., None]
    assert rel(np.load(out), want.numpy()) <= 1e-5


CAUSAL = [
    # N, C, extra M, per_head, feature, normalize, scale
    (200, 64, 0, False, None, None, None),
    (1, 64, 0, False, None, None, None),
    (130, 16, 3, True, "relu", "per_query", None),
    (100, 7, 0, False, "elu1", "none", 0.3),
    (90, 100, 0, True, "relu1", "per_query", 1.0),
]


@pytest.mark.parametrize("N,C,extra,per_head,feature,normalize,scale", CAUSAL)
def test_mhla_causal_matches_torch(rng, tmp_path, N, C, extra, per_head, feature, normalize, scale):
    B, H, D, Dv = 2, 2, 16, 12
    M = (N + C - 1) // C + extra
    (fq, fk, fv, fw), (q, k, v, W) = inputs(rng, tmp_path, B, N, H, D, Dv, M, per_head)
    # the upper triangle is ignored: fill it with garbage in the file
    Wf = np.load(fw)
    iu = np.triu_indices(M, 1)
    Wf[(..., *iu)] = 1e30
    np.save(fw, Wf)
    opts = ["--chunk", C]
    if feature:
        opts += ["--feature", feature]
    if normalize:
        opts += ["--normalize", normalize]
    if scale is not None:
        opts += ["--scale", scale]
    want = ref_mhla_causal(q, k, v, W, C, feature or "relu", normalize or "none", 1e-6,
                           scale).numpy()
    for extra_opts in ([], ["--decode"], ["--decode", "--prefill", N // 2 + 1]):
        out = tmp_path / "o.npy"
        r = run("run", "mhla", "--causal", "--q", fq, "--k", fk, "--v", fv, "--mixing", fw,
                "--out", out, *opts, *extra_opts)
        assert r.returncode == 0, r.stderr
        e = rel(np.load(out), want)
        print(f"causal N={N} C={C} {extra_opts}: rel {e:.2e}")
        assert e <= 1e-5


@pytest.mark.parametrize("kind,blocks", [
    ("locality", (4, 4)), ("locality", (3, 5, 2)), ("locality", (7,)), ("locality", (1,)),
    ("locality_global", (4, 4)), ("locality_global", (3, 5, 10)), ("locality_global", (2, 3)),
    ("uniform_causal", (32,)), ("uniform_causal", (1,)),
])
def test_mhla_init_matches_torch(tmp_path, kind, blocks):
    out = tmp_path / "w.npy"
    r = run("run", "mhla-init", "--blocks", "x".join(map(str, blocks)), "--init", kind,
            "--out", out)
    assert r.returncode == 0, r.stderr
    got = np.load(out)
    M = math.prod(blocks)
    assert got.shape == (M, M) and got.dtype == np.float32
    want = ref_init(kind, blocks).numpy()
    assert np.abs(got - want).max() <= 1e-6
    if kind == "locality_global":
        assert np.allclose(got.sum(0), 1, atol=1e-5)
    else:
        assert np.allclose(got.sum(1), 1, atol=1e-5)


def test_mhla_init_default_is_locality(tmp_path):
    out = tmp_path / "w.npy"
    assert run("run", "mhla-init", "--blocks", "4x4", "--out", out).returncode == 0
    assert np.abs(np.load(out) - ref_init("locality", (4, 4)).numpy()).max() <= 1e-6


def _bad(tmp_path, args, word):
    out = tmp_path / "bad_out.npy"
    r = run(*args, "--out", out)
    assert r.returncode == 2, (args, r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert word in lines[0], (word, lines[0])
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith("bad_out")]
    return lines[0]


def test_mhla_bad_input(rng, tmp_path):
    (fq, fk, fv, fw6), _ = inputs(rng, tmp_path, 1, 63, 2, 8, 4, 6)
    fw4 = save(tmp_path, "w4", np.ones((4, 4), np.float32))
    fwh = save(tmp_path, "wh", np.ones((3, 6, 6), np.float32))
    fw1 = save(tmp_path, "w1", np.ones((6,), np.float32))
    fk2 = save(tmp_path, "k2", np.ones((1, 62, 2, 8), np.float32))
    fi = save(tmp_path, "qi", np.ones((1, 63, 2, 8), np.int32))
    base = ["run", "mhla", "--q", fq, "--k", fk, "--v", fv]
    cases = [
        (base + ["--mixing", fw4, "--grid", "7x9", "--blocks", "2x3"], "block grid has 6"),
        (base + ["--mixing", fw6, "--grid", "7x8", "--blocks", "2x3"], "grid 7x8"),
        (base + ["--mixing", fw6, "--grid", "62"], "N = 63"),
        (base + ["--mixing", fw6, "--grid", "7x9", "--blocks", "8x1"], "block grid has 8"),
        (base + ["--mixing", fw6, "--grid", "7x9", "--blocks", "2x3", "--normalize",
                 "released_vision"], "equal block sizes"),
        (base + ["--mixing", fw6, "--grid", "7x9", "--blocks", "2x3x1"], "rank"),
        (base + ["--mixing", fw6, "--grid", "7x9"], "--blocks"),
        (base + ["--mixing", fwh, "--grid", "7x9", "--blocks", "2x3"], "[H,M,M]"),
        (base + ["--mixing", fw1], "--mixing"),
        (base + ["--mixing", fw6, "--normalize", "sometimes"], "--normalize"),
        (base + ["--mixing", fw6, "--feature", "tanh"], "--feature"),
        (base + ["--mixing", fw6, "--chunk", "8"], "--chunk"),
        (base + ["--mixing", fw6, "--eps", "-1"], "eps"),
        (["run", "mhla", "--q", fq, "--k", fk2, "--v", fv, "--mixing", fw6], "k is"),
        (["run", "mhla", "--q", fi, "--k", fk, "--v", fv, "--mixing", fw6], "int32"),
        (["run", "mhla", "--q", str(tmp_path / "missing.npy"), "--k", fk, "--v", fv,
          "--mixing", fw6], "missing.npy"),
        (base + ["--mixing", fw6, "--causal", "--chunk", "8"], "too small"),
        (base + ["--mixing", fw6, "--causal", "--grid", "63"], "--grid"),
        (base + ["--mixing", fw6, "--causal", "--chunk", "0"], "chunk"),
        (base + ["--mixing", fw6, "--causal", "--normalize", "released_vision"], "released_vision"),
        (base + ["--mixing", fw6, "--causal", "--chunk", "8", "--decode"], "capacity"),
        (base + ["--mixing", fw6, "--causal", "--decode", "--prefill", "64"], "--prefill"),
        (["run", "mhla-init", "--blocks", "4x4", "--init", "gaussian"], "--init"),
        (["run", "mhla-init", "--blocks", "4x0"], "--blocks"),
        (["run", "mhla-init", "--blocks", "4x4", "--init", "uniform_causal"], "uniform_causal"),
        (["run", "mhla-init", "--blocks", "200x200"], "16384"),
    ]
    for args, word in cases:
        msg = _bad(tmp_path, args, word)
        print(msg)
