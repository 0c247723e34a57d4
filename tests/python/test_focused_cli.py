"""`longattn run focused` and `longattn run attn-map` against direct torch /
numpy formulations of SPEC §4 and §9 (float64), plus bad input.

The torch references follow the published code paths: the FLatten module's
forward (softplus scale, focusing power with norms over all channels, mean
form with eps beside the mean, F.conv2d depthwise on v with bias) and the
blog's second listing with its einsum corrected ("bhnd,bhne->bhde")."""
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("LA_BUILD", "build"))
EXE = os.path.join(BUILD, "longattn")

SEED = int(os.environ.get("LA_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
print(f"# test_focused_cli: LA_TEST_SEED={SEED}")


def run(*args):
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, timeout=300)


def save(d, name, a):
    p = os.path.join(d, name)
    np.save(p, a)
    return p


# ---------------------------------------------------------------------------
# torch references (float64)
# ---------------------------------------------------------------------------
def flatten_torch(q, k, v, Hm, Wm, conv=None, bias=None, s=None, p=3.0, eps=1e-6):
    q, k, v = (torch.from_numpy(x).double() for x in (q, k, v))
    B, N, H, D = q.shape
    C = H * D
    s = torch.zeros(C, dtype=torch.float64) if s is None else torch.from_numpy(s).double()
    scale = F.softplus(s)
    qc = (F.relu(q.reshape(B, N, C)) + 1e-6) / scale
    kc = (F.relu(k.reshape(B, N, C)) + 1e-6) / scale
    qn, kn = qc.norm(dim=-1, keepdim=True), kc.norm(dim=-1, keepdim=True)
    qc, kc = qc ** p, kc ** p
    qc = qc / qc.norm(dim=-1, keepdim=True) * qn
    kc = kc / kc.norm(dim=-1, keepdim=True) * kn
    qh = qc.reshape(B, N, H, D).permute(0, 2, 1, 3)
    kh = kc.reshape(B, N, H, D).permute(0, 2, 1, 3)
    vh = v.permute(0, 2, 1, 3)
    z = 1 / (qh @ kh.mean(dim=-2, keepdim=True).transpose(-2, -1) + eps)
    kv = (kh.transpose(-2, -1) * N ** -0.5) @ (vh * N ** -0.5)
    x = qh @ kv * z
    if conv is not None:
        w = torch.from_numpy(conv).double()
        if w.dim() == 3:
            w = w[:, None]
        Dv = vh.shape[-1]
        vv = vh.reshape(B * H, N, Dv).permute(0, 2, 1).reshape(B * H, Dv, Hm, Wm)
        b = None if bias is None else torch.from_numpy(bias).double()
        fm = F.conv2d(vv, w, b, padding=w.shape[-1] // 2, groups=Dv)
        x = x + fm.reshape(B, H, Dv, N).permute(0, 1, 3, 2)
    return x.permute(0, 2, 1, 3).numpy()


def blog_torch(q, k, v, Hm, Wm, conv=None, focus=None, eps=1e-6):
    q, k, v = (torch.from_numpy(x).double() for x in (q, k, v))
    B, N, H, D = q.shape
    C = H * D
    qh = q.permute(0, 2, 1, 3) * D ** -0.5
    q_phi = F.relu(qh) + 1.0
    k_phi = F.relu(k.permute(0, 2, 1, 3)) + 1.0
    if conv is not None:
        w = torch.from_numpy(conv).double()
        if w.dim() == 3:
            w = w[:, None]
        k2 = k_phi.permute(0, 1, 3, 2).reshape(B, C, Hm, Wm)
        k2 = F.conv2d(k2, w, None, padding=w.shape[-1] // 2, groups=C)
        k_phi = k2.reshape(B, H, D, N).permute(0, 1, 3, 2)
    f = torch.full((H,), 2.0, dtype=torch.float64) if focus is None else torch.as_tensor(focus).double()
    k_phi = k_phi * f.view(1, H, 1, 1)
    vh = v.permute(0, 2, 1, 3)
    kv = torch.einsum("bhnd,bhne->bhde", k_phi, vh)
    ctx = torch.einsum("bhnd,bhde->bhne", q_phi, kv)
    z = torch.einsum("bhnd,bhd->bhn", q_phi, k_phi.sum(dim=-2)).unsqueeze(-1)
    out = ctx / (z + eps)
    return out.permute(0, 2, 1, 3).numpy()  # per-token concatenation of heads


def rel(a, b):
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)


# ---------------------------------------------------------------------------
FLATTEN_CASES = [
    # B, Hm, Wm, H, D, ks, bias, softplus, p
    (1, 7, 9, 3, 16, 3, True, True, 3.0),
    (2, 8, 8, 1, 64, 5, False, False, 3.0),
    (1, 1, 1, 3, 1, 1, True, True, 3.0),
    (1, 25, 40, 3, 16, 5, True, False, 2.5),
    (1, 7, 9, 3, 16, 0, False, True, 3.0),
]


@pytest.mark.parametrize("B,Hm,Wm,H,D,ks,use_bias,use_sp,p", FLATTEN_CASES)
def test_flatten_vs_torch(tmp_path, B, Hm, Wm, H, D, ks, use_bias, use_sp, p):
    r = np.random.default_rng(SEED + Hm * 100 + D)
    N = Hm * Wm
    q, k, v = (r.standard_normal((B, N, H, D)) for _ in range(3))
    conv = r.standard_normal((D, ks, ks)) * 0.3 if ks else None
    bias = r.standard_normal(D) if (ks and use_bias) else None
    s = r.standard_normal(H * D) if use_sp else None
    args = ["run", "focused", "--q", save(tmp_path, "q.npy", q), "--k", save(tmp_path, "k.npy", k),
            "--v", save(tmp_path, "v.npy", v), "--map", f"{Hm}x{Wm}", "--p", p,
            "--out", tmp_path / "o.npy"]
    if conv is not None:
        args += ["--conv", save(tmp_path, "c.npy", conv)]
    if bias is not None:
        args += ["--conv-bias", save(tmp_path, "b.npy", bias)]
    if s is not None:
        args += ["--softplus-param", save(tmp_path, "s.npy", s)]
    res = run(*args)
    assert res.returncode == 0, res.stderr
    out = np.load(tmp_path / "o.npy")
    assert out.dtype == np.float32 and out.shape == (B, N, H, D)
    # the CLI computes in float32 from inputs rounded to float32
    f32 = lambda x: None if x is None else x.astype(np.float32).astype(np.float64)  # noqa: E731
    ref = flatten_torch(f32(q), f32(k), f32(v), Hm, Wm, f32(conv), f32(bias), f32(s), p)
    assert rel(out, ref) <= 1e-5


BLOG_CASES = [
    # B, Hm, Wm, H, D, ks, conv rank, focus ("num", "file", None)
    (1, 7, 9, 3, 16, 3, 3, "file"),
    (2, 8, 8, 1, 64, 5, 4, None),
    (1, 1, 1, 3, 1, 1, 3, "num"),
    (1, 25, 40, 3, 16, 3, 4, "file"),
    (1, 7, 9, 3, 16, 0, 0, None),
]


@pytest.mark.parametrize("B,Hm,Wm,H,D,ks,crank,focus", BLOG_CASES)
def test_blog_vs_torch(tmp_path, B, Hm, Wm, H, D, ks, crank, focus):
    r = np.random.default_rng(SEED + 7 + Hm * 100 + D)
    N, C = Hm * Wm, H * D
    q, k, v = (r.standard_normal((B, N, H, D)) for _ in range(3))
    args = ["run", "focused", "--variant", "blog", "--q", save(tmp_path, "q.npy", q),
            "--k", save(tmp_path, "k.npy", k), "--v", save(tmp_path, "v.npy", v),
            "--map", f"{Hm}x{Wm}", "--out", tmp_path / "o.npy"]
    conv = None
    if ks:
        conv = r.standard_normal((C, ks, ks)) * 0.2
        conv[:, ks // 2, ks // 2] += 1.0  # dirac init plus noise
        args += ["--conv", save(tmp_path, "c.npy", conv if crank == 3 else conv[:, None])]
    fvec = None
    if focus == "file":
        fvec = 0.5 + r.random(H)
        args += ["--focus", save(tmp_path, "f.npy", fvec)]
    elif focus == "num":
        fvec = np.full(H, 1.25)
        args += ["--focus", "1.25"]
    res = run(*args)
    assert res.returncode == 0, res.stderr
    out = np.load(tmp_path / "o.npy")
    f32 = lambda x: None if x is None else x.astype(np.float32).astype(np.float64)  # noqa: E731
    ref = blog_torch(f32(q), f32(k), f32(v), Hm, Wm, f32(conv), f32(fvec))
    assert rel(out, ref) <= 1e-5


def test_blog_printed_einsum_gives_column_sums():
    """SPEC §4 (i), in torch: the listing's einsum with two token indices makes
    every token's output the sum of its head's values."""
    r = np.random.default_rng(SEED + 99)
    B, H, N, D = 1, 3, 20, 8
    k_phi = torch.from_numpy(np.abs(r.standard_normal((B, H, N, D))) + 1)
    q_phi = torch.from_numpy(np.abs(r.standard_normal((B, H, N, D))) + 1)
    v = torch.from_numpy(r.standard_normal((B, H, N, D)))
    kv = torch.einsum("bhnd,bhme->bhde", k_phi, v)  # as printed
    ctx = torch.einsum("bhnd,bhde->bhne", q_phi, kv)
    z = torch.einsum("bhnd,bhd->bhn", q_phi, k_phi.sum(dim=-2)).unsqueeze(-1)
    out = (ctx / (z + 1e-6)).numpy()
    colsum = v.sum(dim=2, keepdim=True).numpy()
    assert rel(out, np.broadcast_to(colsum, out.shape)) < 1e-6


# ---------------------------------------------------------------------------
# attn-map vs numpy
# ---------------------------------------------------------------------------
def feat(name, x):
    return {"identity": lambda x: x, "relu": lambda x: np.maximum(x, 0),
            "relu_eps": lambda x: np.maximum(x, 0) + 1e-6,
            "relu1": lambda x: np.maximum(x, 0) + 1,
            "elu1": lambda x: np.where(x >= 0, x + 1, np.exp(np.minimum(x, 0)))}[name](x)


def flatten_feat(x, p, s=None):
    sp = np.log1p(np.exp(np.zeros(x.shape[1]) if s is None else s))
    xp = (np.maximum(x, 0) + 1e-6) / sp
    y = xp ** p
    return y / np.linalg.norm(y, axis=1, keepdims=True) * np.linalg.norm(xp, axis=1, keepdims=True)


def block_ids(grid, blocks):
    ids = np.zeros(grid, dtype=np.int64)
    for idx in np.ndindex(*grid):
        b = 0
        for c, n, g in zip(idx, grid, blocks):
            b = b * g + (c * g) // n
        ids[idx] = b
    return ids.reshape(-1)


def map_numpy(variant, q, k, feature=None, W=None, grid=None, blocks=None, p=3.0, s=None):
    N, D = q.shape
    if variant == "softmax":
        x = (q * D ** -0.5) @ k.T
        x = np.exp(x - x.max(axis=1, keepdims=True))
    elif variant in ("linear", "mhla"):
        x = feat(feature, q) @ feat(feature, k).T
        if variant == "mhla":
            b = block_ids(grid, blocks)
            x = x * W[b][:, b]
    elif variant == "focused-flatten":
        x = flatten_feat(q, p, s) @ flatten_feat(k, p, s).T
    else:
        x = (np.maximum(q * D ** -0.5, 0) + 1) @ (np.maximum(k, 0) + 1).T
    sm = x.sum(axis=1, keepdims=True)
    # a row with no weight (relu features missing every key) stays zero
    return x / np.where(sm > 0, sm, 1)


def rank_entropy(A, rtol=1e-6):
    sv = np.linalg.svd(A, compute_uv=False)
    rank = int(np.sum(sv > rtol * sv[0]))
    sm = A.sum(axis=1, keepdims=True)
    P = A / np.where(sm > 0, sm, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        H = -np.where(P > 0, P * np.log(P), 0).sum(axis=1)
    return rank, H.mean()


MAP_CASES = [
    ("softmax", {}, 200, 16),
    ("linear", {"feature": "relu"}, 200, 16),
    ("linear", {"feature": "elu1"}, 65, 63),
    ("mhla", {"feature": "relu_eps", "grid": (16, 16), "blocks": (4, 4)}, 256, 16),
    ("mhla", {"feature": "relu_eps", "grid": (3, 5, 7), "blocks": (2, 2, 3)}, 105, 8),
    ("mhla", {"feature": "relu", "grid": (100,), "blocks": (7,)}, 100, 4),
    ("focused-flatten", {"p": 3.0}, 63, 16),
    ("focused-flatten", {"p": 2.5, "s": True}, 120, 8),
    ("focused-blog", {}, 99, 16),
]


@pytest.mark.parametrize("variant,opt,N,D", MAP_CASES)
def test_attn_map_vs_numpy(tmp_path, variant, opt, N, D):
    r = np.random.default_rng(SEED + N + D)
    q = r.standard_normal((N, D)).astype(np.float32).astype(np.float64)
    k = r.standard_normal((N, D)).astype(np.float32).astype(np.float64)
    args = ["run", "attn-map", "--variant", variant, "--q", save(tmp_path, "q.npy", q),
            "--k", save(tmp_path, "k.npy", k), "--out", tmp_path / "m.npy"]
    kw = {}
    if "feature" in opt:
        args += ["--feature", opt["feature"]]
        kw["feature"] = opt["feature"]
    if variant == "mhla":
        M = int(np.prod(opt["blocks"]))
        W = (0.05 + r.random((M, M))).astype(np.float32).astype(np.float64)
        args += ["--mixing", save(tmp_path, "w.npy", W), "--grid", "x".join(map(str, opt["grid"])),
                 "--blocks", "x".join(map(str, opt["blocks"]))]
        kw.update(W=W, grid=opt["grid"], blocks=opt["blocks"])
    if "p" in opt:
        args += ["--p", opt["p"]]
        kw["p"] = opt["p"]
    if opt.get("s"):
        s = r.standard_normal(D).astype(np.float32).astype(np.float64)
        args += ["--softplus-param", save(tmp_path, "s.npy", s)]
        kw["s"] = s
    res = run(*args)
    assert res.returncode == 0, res.stderr
    A = np.load(tmp_path / "m.npy")
    ref = map_numpy(variant, q, k, **kw)
    assert A.shape == (N, N) and A.dtype == np.float32
    assert rel(A, ref) <= 1e-5
    rank, ent = rank_entropy(ref)
    line = res.stdout.strip().splitlines()[-1]
    got_rank = int(line.split()[0].split("=")[1])
    got_ent = float(line.split()[1].split("=")[1])
    assert got_rank == rank, (line, rank)
    assert abs(got_ent - ent) <= 1e-5 * max(1, ent), (line, ent)
    if variant in ("linear", "focused-flatten", "focused-blog"):
        assert got_rank <= D  # one shared d x d summary: rank capped at d


# ---------------------------------------------------------------------------
# bad input: exit 2, a message naming the option, no output file
# ---------------------------------------------------------------------------
def _inputs(tmp_path, B=1, N=20, H=2, D=8):
    r = np.random.default_rng(SEED + 5)
    return [save(tmp_path, n + ".npy", r.standard_normal((B, N, H, D)).astype(np.float32))
            for n in ("q", "k", "v")]


BAD = [
    # extra args, substring expected in the message
    (["--map", "4x4"], "--map"),
    (["--map", "5x4", "--conv", ("conv", (8, 2, 2))], "--conv"),          # even kernel
    (["--map", "4x5", "--conv", ("conv", (8, 5, 5))], "--conv"),          # larger than the map
    (["--map", "4x5", "--conv", ("conv", (16, 3, 3))], "--conv"),         # [C,k,k] to flatten
    (["--map", "4x5", "--conv", ("conv", (8, 3, 1))], "--conv"),          # not square
    (["--map", "4x5", "--conv", ("conv", (8, 2, 3, 3))], "--conv"),       # [D,2,k,k]
    (["--map", "4x5", "--variant", "blog", "--conv", ("conv", (8, 3, 3))], "--conv"),
    (["--map", "4x5", "--conv-bias", ("bias", (8,))], "conv_bias"),      # bias without conv
    (["--map", "4x5", "--softplus-param", ("sp", (8,))], "softplus"),    # needs H*D = 16
    (["--map", "4x5", "--variant", "blog", "--focus", ("f", (3,))], "focus"),
    (["--map", "4x5", "--focus", "2"], "--focus"),                        # blog-only option
    (["--map", "4x5", "--variant", "blog", "--p", "2"], "--p"),           # flatten-only option
    (["--map", "4x5", "--variant", "nope"], "--variant"),
    (["--map", "4x5x2"], "--map"),
    (["--map", "4x5", "--p", "-1"], "p="),
]


@pytest.mark.parametrize("extra,needle", BAD)
def test_focused_bad_input(tmp_path, extra, needle):
    q, k, v = _inputs(tmp_path)
    args = ["run", "focused", "--q", q, "--k", k, "--v", v]
    for a in extra:
        if isinstance(a, tuple):
            name, shape = a
            args.append(save(tmp_path, name + ".npy", np.ones(shape, np.float32)))
        else:
            args.append(a)
    out = tmp_path / "o.npy"
    res = run(*args, "--out", out)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert needle in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not out.exists()
    assert not [f for f in os.listdir(tmp_path) if f.startswith("o.npy")]


def test_attn_map_bad_input(tmp_path):
    r = np.random.default_rng(SEED + 3)
    q = save(tmp_path, "q.npy", r.standard_normal((12, 4)).astype(np.float32))
    k = save(tmp_path, "k.npy", r.standard_normal((12, 4)).astype(np.float32))
    k3 = save(tmp_path, "k3.npy", r.standard_normal((11, 4)).astype(np.float32))
    w = save(tmp_path, "w.npy", np.ones((4, 4), np.float32))
    out = tmp_path / "m.npy"
    cases = [
        (["--k", k3], "--k"),
        (["--k", k, "--variant", "mhla"], "--mixing"),
        (["--k", k, "--variant", "mhla", "--mixing", w, "--grid", "3x5", "--blocks", "2x2"], "--grid"),
        (["--k", k, "--variant", "mhla", "--mixing", w, "--grid", "3x4", "--blocks", "2x1"], "mixing"),
        (["--k", k, "--variant", "focused-flatten", "--map", "5x5"], "--map"),
        (["--k", k, "--variant", "linear", "--feature", "tanh"], "--feature"),
        (["--k", k, "--variant", "sparse"], "--variant"),
        (["--k", k, "--rtol", "-1"], "--rtol"),
    ]
    for extra, needle in cases:
        res = run("run", "attn-map", "--q", q, *extra, "--out", out)
        assert res.returncode == 2, (extra, res.stderr)
        assert needle in res.stderr, (extra, res.stderr)
        assert not out.exists()
    res = run("run", "attn-map", "--q", q, "--k", k, "--variant", "mhla", "--mixing", w,
              "--grid", "3x4", "--blocks", "2x2", "--out", out)
    assert res.returncode == 0 and out.exists() and res.stdout.startswith("rank=")


# ---------------------------------------------------------------------------
# longattn collapse: a small run, JSON shape and the rank bounds
# ---------------------------------------------------------------------------
def test_collapse_small(tmp_path):
    import json
    js, png = tmp_path / "c.json", tmp_path / "c.png"
    res = run("collapse", "--nmin", 64, "--nmax", 128, "--d", 16, "--json-out", js, "--png", png)
    assert res.returncode == 0, res.stderr
    data = json.loads(js.read_text())
    rows = {(r["N"], r["variant"]): r for r in data["results"]}
    assert len(rows) == 2 * 6
    for N in (64, 128):
        assert rows[(N, "linear")]["rank"] <= 16
        assert rows[(N, "focused-flatten")]["rank"] <= 16
        assert rows[(N, "mhla-4")]["rank"] > rows[(N, "linear")]["rank"]
        assert rows[(N, "mhla-4")]["rank"] <= rows[(N, "mhla-4")]["rank_bound"]
        assert rows[(N, "softmax")]["rank"] <= N
        for r in data["results"]:
            assert 0 <= r["entropy"] <= r["ln_N"] + 1e-9
    try:
        import matplotlib  # noqa: F401
        assert png.exists() and png.read_bytes()[:4] == b"\x89PNG"
    except ImportError:
        assert "matplotlib" in res.stderr


def test_collapse_bad_options(tmp_path):
    for args in (["--nmin", 100], ["--nmax", 32], ["--variants", "nothing"], ["--d", 0]):
        res = run("collapse", *args, "--json-out", tmp_path / "c.json", "--png", "none")
        assert res.returncode == 2 and res.stderr.strip(), (args, res.stderr)
        assert not (tmp_path / "c.json").exists()
