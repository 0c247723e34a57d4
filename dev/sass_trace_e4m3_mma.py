#!/usr/bin/env python3
"""Symbolic trace of one k-step of the sm_90 e4m3 mma.sync emulation in SASS.

Usage: sass_trace_e4m3_mma.py FILE.sass FIRST_ADDR LAST_ADDR ABASE BBASE
(cuobjdump -sass output of one kernel; the addresses, hex, bound the k-step
loop body; ABASE / BBASE: the address registers of the A (key) and B
(query) LDSM, e.g. R32 R78; BBASE "lds" for pg_gather_f16q_kernel, whose B
comes from LDS.128 of the f16 fragments: register i of the load at offset
0x200·j = word i of n-tile j's entry, {lo b0, lo b1, hi b0, hi b1}).

It prints, for every HMMA, which unpacked bytes feed A and B and what the
accumulator input is, and asserts the emulation's form: per e4m3 mma
(m-tile, n-tile), HMMA(lo A, lo B, RZ), then HMMA(hi A, hi B, that), then
one FADD per element into a loop-carried accumulator (4 distinct ones per mma).
For the old kernel this reads the mapping off ptxas's emulation; for the
new one it checks that the hand-issued sequence is the same."""
import re, sys

path, first, last, abase, bbase = sys.argv[1], int(sys.argv[2], 16), int(sys.argv[3], 16), sys.argv[4], sys.argv[5]
ins = []
for line in open(path):
    m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?);', line)
    if not m:
        continue
    addr = int(m.group(1), 16)
    if first <= addr <= last:
        ins.append((addr, m.group(2).strip()))

reg = {}  # register -> symbolic value
def r(n):
    return 'R%d' % n
def num(s):
    return int(s.strip().split('.')[0].lstrip('R'))
hmmas, fadds = [], []
for addr, t in ins:
    op = t.split()[0]
    args = t[len(op):].replace('.reuse', '')
    args = [a.strip() for a in args.split(',')]
    if op.startswith('LDSM'):
        m = re.match(r'\[(R\d+)\+UR\d+(?:\+0x([0-9a-f]+))?\]', args[1])
        base, off = m.group(1), int(m.group(2) or '0', 16)
        kind = 'A' if base == abase else 'B' if base == bbase else '?'
        d = num(args[0])
        for i in range(4):
            reg[r(d + i)] = ('ld', kind, off // 0x800, i)
    elif op.startswith('LDS') and bbase == 'lds':
        m = re.match(r'\[(R\d+)(?:\+0x([0-9a-f]+))?\]', args[1])
        off = int(m.group(2) or '0', 16)
        d = num(args[0])
        for i in range(4):
            reg[r(d + i)] = ('lds', off // 0x200, i)
    elif op.startswith('F2FP'):
        d = num(args[0]); s = args[1]
        half = 'hi' if s.endswith('.H1') else 'lo'
        src = reg.get(r(num(s)))
        reg[r(d)] = ('unp', src, half)
    elif op.startswith('HMMA'):
        d, a, b = num(args[0]), num(args[1]), num(args[2])
        c = args[3]
        A = [reg.get(r(a + i)) for i in range(4)]
        B = [reg.get(r(b + i)) for i in range(2)]
        C = 'zero' if c == 'RZ' else [reg.get(r(num(c) + i)) for i in range(4)]
        k = len(hmmas)
        hmmas.append((addr, A, B, C))
        for i in range(4):
            reg[r(d + i)] = ('hmma', k, i)
    elif op == 'FADD':
        d, x, y = num(args[0]), args[1], args[2]
        vx, vy = reg.get(r(num(x))), reg.get(r(num(y)))
        fadds.append((addr, d, vx, vy))
        reg[r(d)] = ('fadd', vx, vy)

def show_unp(v):
    if v is not None and v[0] == 'lds':
        return 'qf16[n%d].w%d' % (v[1], v[2])
    if v is None or v[0] != 'unp' or v[1] is None:
        return str(v)
    _, (_, kind, idx, i), half = v
    return '%s%d.r%d.%s' % (kind, idx, i, half)

ok = True
for k, (addr, A, B, C) in enumerate(hmmas):
    cs = 'zero' if C == 'zero' else 'hmma#%d' % C[0][1] if C[0] and C[0][0] == 'hmma' else str(C)
    print('%04x hmma#%-2d A=[%s] B=[%s] C=%s' % (addr, k, ' '.join(map(show_unp, A)), ' '.join(map(show_unp, B)), cs))
# checks: pairs (lo from zero, hi chained), A = regs 0..3 of one A load, B = regs
# 2n, 2n+1 of one B load (n-tile 2jp + n), same half on every operand
pairs = {}
for k, (addr, A, B, C) in enumerate(hmmas):
    ha = {v[2] for v in A}
    assert len(ha) == 1, (k, A)
    half = ha.pop()
    mt = A[0][1][2]
    assert all(v[1][1] == 'A' and v[1][2] == mt and v[1][3] == i for i, v in enumerate(A)), k
    if bbase == 'lds':
        j, w0 = B[0][1], B[0][2]
        assert B[0][0] == 'lds' and B[1] == ('lds', j, w0 + 1) and w0 == (0 if half == 'lo' else 2), k
        key = (mt, j)
    else:
        assert {v[2] for v in B} == {half}, k
        jp, i0 = B[0][1][2], B[0][1][3]
        assert B[0][1][1] == 'B' and i0 % 2 == 0 and B[1][1] == ('ld', 'B', jp, i0 + 1), k
        key = (mt, 2 * jp + i0 // 2)
    if half == 'lo':
        assert C == 'zero', k
        pairs[key] = [k]
    else:
        assert C != 'zero' and all(C[i] == ('hmma', pairs[key][0], i) for i in range(4)), k
        pairs[key].append(k)
assert len(pairs) == len(hmmas) // 2 and all(len(v) == 2 for v in pairs.values())
second = {v[1]: key for key, v in pairs.items()}
acc_of = {}
for addr, d, vx, vy in fadds:
    h = vx if vx and vx[0] == 'hmma' else vy
    other = vy if h is vx else vx
    assert h[0] == 'hmma' and h[1] in second, (addr, vx, vy)
    assert other is None  # the loop-carried accumulator (not written in the body before)
    key = second[h[1]] + (h[2],)
    assert key not in acc_of.values()
    acc_of[d] = key
assert len(acc_of) == 4 * len(pairs)
print('ok: %d e4m3 mmas,' % len(pairs) + ' each = hmma(lo A, lo B, 0) -> hmma(hi A, hi B, that) -> 4 FADD into the accumulator')
for key in sorted(pairs):
    print('  mma (mt %d, n-tile %d): hmma#%d then #%d' % (key + tuple(pairs[key])))
