#!/usr/bin/env python3
"""Host check of pg_gather_f16q_kernel's query staging (src/cuda/paged_gather.cu).

For random e4m3 query blocks (HI 64 and 32, dI 128) this replays
  old: sc_load_q's swizzled e4m3 rows, the B ldmatrix.x4 of pg_gather_kernel
       when it also ran e4m3 (lane addressing as in its bf16 form, then the
       m8n8 distribution: register m of lane L = word L % 4 of the row L / 4
       of matrix m) and the emulation's
       F2FP.F16.E4M3.UNPACK_B of each register's low / high 16 bits, giving
       per (k-step, n-tile, lane) B_lo = {lo r[2n], lo r[2n+1]},
       B_hi = {hi r[2n], hi r[2n+1]} (n-tile 2jp + n; dev/sass_trace_e4m3_mma.py
       reads this pairing off the SASS);
  new: pg_qf16_fetch / pg_qf16_store (every thread's chunks, word by word) and the
       k-loop's 16-byte load at lane·16 + (ks·NT + j)·512, B_lo = words 0-1,
       B_hi = words 2-3;
and asserts that both give the same f16x2 words for every k-step, n-tile
and lane, that the staging writes each word of the area exactly once, and
that the new row assignment (pg_row16, pg_issue16's pairs) copies every
chunk row once with its own lookup and stores the old epilogue's rows,
and (check_ring) that the chunk loop unrolled by PG_STAGES finds, at each
chunk's epilogue, that chunk in its stage and its own scale and flag in
the stage's registers, for every c0 <= c1 span up to 12 chunks.
The conversion is modelled twice: as an exact e4m3 -> f16 map, and as the
identity on the 16 input bits (so equality means the same bits went into
the same conversion instruction)."""
import random

def e4m3_to_f16(b):
    s, e, m = b >> 7, (b >> 3) & 15, b & 7
    if e == 15 and m == 7:
        return (s << 15) | 0x7e00  # a NaN (the device's pattern may differ; any fixed map will do)
    if e == 0:
        if m == 0:
            return s << 15
        # m * 2^-9, normal in f16
        sh = 0
        while not (m & 8):
            m <<= 1; sh += 1
        return (s << 15) | ((9 - sh) << 10) | ((m & 7) << 7)
    return (s << 15) | ((e - 7 + 15) << 10) | (m << 7)

def e4m3_value(b):
    s, e, m = b >> 7, (b >> 3) & 15, b & 7
    v = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -v if s else v

# the map is exact: every non-NaN code round-trips through struct's half format
import struct
for b in range(256):
    if (b & 0x7f) != 0x7f:
        assert struct.unpack('<e', struct.pack('<H', e4m3_to_f16(b)))[0] == e4m3_value(b), b

def cvt_exact(pair16):
    return e4m3_to_f16(pair16 & 0xff) | (e4m3_to_f16(pair16 >> 8) << 16)

def cvt_tag(pair16):
    return pair16

def word(bs, o):
    return bs[o] | bs[o + 1] << 8 | bs[o + 2] << 16 | bs[o + 3] << 24

def check(HI, q, cvt):
    NT, RB, KS = HI // 8, 128, 4
    # old: sc_load_q<HI, 128, 1> staging, chunk c of row h at c ^ (h & 7)
    sm = bytearray(HI * RB)
    for h in range(HI):
        for c in range(8):
            d = h * RB + ((c ^ (h & 7)) * 16)
            sm[d:d + 16] = q[h][c * 16:c * 16 + 16]
    old = {}
    for ks in range(KS):
        kx = ks << 5
        for jp in range(NT // 2):
            addr = []
            for lane in range(32):
                hb, cb = (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1
                b_off = hb * RB + ((cb ^ (hb & 7)) * 16)
                addr.append((b_off ^ kx) + jp * 16 * RB)
            for lane in range(32):
                r = [word(sm, addr[8 * m + lane // 4] + 4 * (lane % 4)) for m in range(4)]
                for n in range(2):
                    lo = [cvt(r[2 * n] & 0xffff), cvt(r[2 * n + 1] & 0xffff)]
                    hi = [cvt(r[2 * n] >> 16), cvt(r[2 * n + 1] >> 16)]
                    old[(ks, 2 * jp + n, lane)] = (lo, hi)
    # new: pg_qf16_store<HI> (thread tid: chunks tid + k·256), then the k-loop's 16-byte loads
    words = {}
    for tid in range(256):
        for i in (tid + k * 256 for k in range(HI * 8 // 256)):
            h, c = i >> 3, i & 7
            ks, odd = c >> 1, c & 1
            e = ((ks * NT + (h >> 3)) * 32 + 4 * (h & 7)) * 16 // 4  # word index
            for qd in range(4):
                w = word(q[h], c * 16 + 4 * qd)
                for idx, val in ((e + qd * 4 + odd, cvt(w & 0xffff)), (e + qd * 4 + 2 + odd, cvt(w >> 16))):
                    assert idx not in words, ('word written twice', idx)
                    words[idx] = val
    assert sorted(words) == list(range(KS * NT * 32 * 4)), 'staging does not cover the area'
    for ks in range(KS):
        for j in range(NT):
            for lane in range(32):
                b = (lane * 16 + (ks * NT + j) * 512) // 4
                w = [words[b + i] for i in range(4)]
                lo, hi = old[(ks, j, lane)]
                assert [w[0], w[1]] == lo and [w[2], w[3]] == hi, (HI, ks, j, lane, w, lo, hi)
    return len(old)

def check_rows():
    def row16(warp, lane):
        g, qd = lane >> 2, lane & 3
        return 32 * warp + 16 * (qd >> 1) + 8 * (qd & 1) + g
    copied = {}
    for warp in range(8):
        for lane in range(32):
            part = lane & 1
            mine = row16(warp, lane)  # this thread's lookup
            other = row16(warp, lane ^ 1)  # its pair's lookup (shfl_xor 1)
            for j in range(2):
                meta_row = mine if j == part else other
                r = row16(warp, (lane & ~1) | j)
                assert r == meta_row, 'copy row and lookup differ'
                for k in range(4):
                    ch = part + 2 * k
                    assert (r, ch) not in copied
                    copied[(r, ch)] = 1
            # the old epilogue's row for this lane (MT = 2)
            g, qd = lane >> 2, lane & 3
            assert 16 * (2 * warp + qd // 2) + g + 8 * (qd & 1) == mine
    assert len(copied) == 256 * 8

def check_ring(PG_STAGES=3):
    """pg_gather_f16q_kernel's chunk bookkeeping, statement by statement:
    stage contents, scale[] and the packed flags against the chunk whose
    epilogue reads them (chunk c's meta stands for its lookup)."""
    for c0 in range(0, 4):
        for n in range(1, 13):
            c1 = c0 + n
            stage = [None] * PG_STAGES
            scale = [None] * PG_STAGES
            flags = 0
            meta = lambda c: ('scale', c, c % 3)  # flag of chunk c: c % 3 (any 2-bit value)
            nx = None
            for st in range(PG_STAGES - 1):
                if c0 + st < c1:
                    nx = meta(c0 + st)
                    stage[st], scale[st] = nx[1], nx
                    flags |= nx[2] << (2 * st)
            if c0 + PG_STAGES - 1 < c1:
                nx = meta(c0 + PG_STAGES - 1)
            done = []
            def chunk(S, c):
                nonlocal flags, nx
                SN = (S + PG_STAGES - 1) % PG_STAGES
                cn = c + PG_STAGES - 1
                if cn < c1:
                    assert nx == meta(cn)
                    stage[SN], scale[SN] = cn, nx
                    flags = (flags & ~(3 << (2 * SN))) | (nx[2] << (2 * SN))
                if cn + 1 < c1:
                    nx = meta(cn + 1)
                assert stage[S] == c and scale[S] == meta(c) and (flags >> (2 * S)) & 3 == c % 3, (c0, c1, c, S)
                done.append(c)
            c = c0
            while True:
                chunk(0, c); c += 1
                if c >= c1: break
                chunk(1, c); c += 1
                if c >= c1: break
                chunk(2, c); c += 1
                if c >= c1: break
            assert done == list(range(c0, c1))

def check_smem():
    """pg_geom16's regions (as in the source) do not overlap, every access
    of the kernel falls in its region, and two CTAs fit an SM (228 KB, 1 KB
    reserved per CTA)."""
    for HI in (64, 32):
        NT, RB, KS, ROWS, STAGES = HI // 8, 128, 4, 256, 3
        KEYS = KS * NT * 32 * 16
        WS = KEYS + STAGES * ROWS * RB
        SMEM = WS + HI * 4
        assert 2 * (SMEM + 1024) <= 228 * 1024, (HI, SMEM)
        # B loads: lane*16 + (ks*NT + j)*512 .. +16
        hi_b = max(l * 16 + (ks * NT + j) * 512 + 16 for l in range(32) for ks in range(KS) for j in range(NT))
        assert hi_b == KEYS
        # stage copies (pg_issue16<HI>): KEYS + (st*ROWS + r)*RB + chunk*16, r < 256
        for st in range(STAGES):
            lo_s, hi_s = KEYS + st * ROWS * RB, KEYS + (st * ROWS + 255) * RB + 8 * 16
            assert KEYS <= lo_s and hi_s <= WS
        # A ldmatrix reads: a_off + stage*ROWS*RB ^ (ks << 5) + mt*16*RB within the stage
        for warp in range(8):
            for lane in range(32):
                ra, ca = 32 * warp + (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4
                a_off = KEYS + ra * RB + ((ca ^ (ra & 7)) * 16)
                for st in range(STAGES):
                    for ks in range(KS):
                        for mt in range(2):
                            o = ((a_off + st * ROWS * RB) ^ (ks << 5)) + mt * 16 * RB
                            assert KEYS + st * ROWS * RB <= o and o + 16 <= KEYS + (st + 1) * ROWS * RB
        print('smem HI %d: %d bytes (q fragments %d, ring %d, weights %d)' % (HI, SMEM, KEYS, WS - KEYS, HI * 4))

random.seed(1)
n = 0
for HI in (64, 32):
    for trial in range(20):
        q = [bytes(random.randrange(256) for _ in range(128)) for _ in range(HI)]
        if trial == 0:  # every e4m3 code, NaNs and zeros included
            q = [bytes(((h * 128 + d) * 1) & 0xff for d in range(128)) for h in range(HI)]
        for cvt in (cvt_exact, cvt_tag):
            n += check(HI, q, cvt)
check_rows()
check_ring()
check_smem()
print('ok: f16 q fragments equal the ldmatrix + F2FP registers (%d lane-fragments checked); rows and ring ok' % n)
