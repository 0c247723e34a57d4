#!/usr/bin/env bash
# Compare the PTX of every CUDA kernel of src/cuda at BASE_REV with the
# working tree's, kernel by kernel.
#
#   scripts/check_ptx.sh BASE_REV [KERNEL_REGEX]
#
# Both trees' src/cuda/*.cu are compiled with `nvcc -ptx` and the flags of
# the Makefile's NVCCFLAGS; every .entry (and every non-inlined .func) is
# cut out of the PTX and normalized so that only code differences remain:
# comments, .loc / .file lines and debug labels are dropped; the file hash of
# anonymous-namespace names (`_GLOBAL__N__<hash>_<n>_<file>_cu_<hash>`),
# the per-file function number in block labels ($L__BB<n>_) and local depots
# are replaced by placeholders; string constants and virtual registers are
# numbered per kernel in order of first use.
# A kernel keeps its name across files when its signature is kept, so a
# kernel moved to another file compares equal if its code is unchanged.
#
# Output: one line per kernel (identical / DIFFERENT / removed / added;
# renamed: a kernel gone from BASE_REV whose code, its own name aside, equals
# a new kernel's; reordered: the same instructions in another order, which
# nvcc sometimes emits for an unchanged kernel: rerun),
# then the counts. Exit status 1 when a kernel present in both is different.
# KERNEL_REGEX limits the report to kernels whose demangled name matches.
# PTX of BASE_REV is cached under ${LA_PTX_CACHE:-/tmp/la_ptx_cache}/<sha>.
set -euo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 BASE_REV [KERNEL_REGEX]" >&2
    exit 2
fi
BASE=$1
FILTER=${2:-}
ROOT=$(git rev-parse --show-toplevel)
cd "$ROOT"
SHA=$(git rev-parse --verify "$BASE^{commit}")
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
FLAGS=(-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo
       --expt-relaxed-constexpr -Iinclude -Isrc)
JOBS=${JOBS:-2}
CACHE=${LA_PTX_CACHE:-/tmp/la_ptx_cache}/$SHA

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# compile_tree SRC_ROOT OUT_DIR: PTX of SRC_ROOT/src/cuda/*.cu into OUT_DIR
compile_tree() {
    local src=$1 out=$2
    mkdir -p "$out"
    ( cd "$src" && ls src/cuda/*.cu ) | \
        xargs -P "$JOBS" -I{} sh -c 'cd "$1" && f=$(basename "$2" .cu) &&
            "$3" '"${FLAGS[*]}"' -ptx "$2" -o "$4/$f.ptx"' _ "$src" {} "$NVCC" "$out"
}

if [ ! -d "$CACHE" ]; then
    mkdir -p "$TMP/base"
    git archive "$SHA" src include | tar -x -C "$TMP/base"
    compile_tree "$TMP/base" "$TMP/base_ptx"
    mkdir -p "$(dirname "$CACHE")"
    rm -rf "$CACHE.tmp" && cp -r "$TMP/base_ptx" "$CACHE.tmp" && mv "$CACHE.tmp" "$CACHE"
fi
compile_tree "$ROOT" "$TMP/work_ptx"

/usr/bin/python3 - "$CACHE" "$TMP/work_ptx" "$FILTER" <<'EOF'
import glob, os, re, subprocess, sys

base_dir, work_dir, filt = sys.argv[1], sys.argv[2], sys.argv[3]

anon = re.compile(r'(\d+)_GLOBAL__N__')

def strip_anon(s):
    # `<len>_GLOBAL__N__<hash>_<n>_<file>_cu_<hash>` -> `6_ANON_`: the length
    # prefix says how many characters the namespace name spans.
    out, pos = [], 0
    for m in anon.finditer(s):
        if m.start() < pos:
            continue
        n = int(m.group(1))
        out.append(s[pos:m.start()])
        out.append('6_ANON_')
        pos = m.start() + len(m.group(1)) + n
    out.append(s[pos:])
    return ''.join(out)

head = re.compile(r'^\s*(?:\.visible\s+|\.weak\s+)?(\.entry|\.func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)')

def kernels(path):
    res = {}
    lines = open(path).read().split('\n')
    i = 0
    while i < len(lines):
        m = head.match(lines[i])
        if not m:
            i += 1
            continue
        # a prototype ends with ';' before any '{'
        j, body = i, []
        while j < len(lines) and '{' not in lines[j] and not lines[j].rstrip().endswith(';'):
            body.append(lines[j]); j += 1
        if j >= len(lines) or '{' not in lines[j]:
            i = j + 1
            continue
        depth = 0
        while j < len(lines):
            body.append(lines[j])
            depth += lines[j].count('{') - lines[j].count('}')
            j += 1
            if depth == 0:
                break
        raw = m.group(2)
        name = strip_anon(raw)
        # the kernel's own name (its .entry line, its parameters) is not code
        # (also inside the names of its local statics: _ZZ<name without _Z>E...)
        res[(m.group(1), name)] = normalize([l.replace(raw[2:], '@SELF@') for l in body])
        i = j
    return res

def normalize(body):
    out = []
    for l in body:
        l = l.split('//')[0].rstrip()
        s = l.strip()
        if not s or s.startswith('.loc') or s.startswith('.file') or s.startswith('$L__tmp') \
           or s.startswith('$L__func_') or s.startswith('.pragma'):
            continue
        l = strip_anon(l)
        l = re.sub(r'\$L__BB\d+_', '$L__BB_', l)
        l = re.sub(r'__local_depot\d+', '__local_depot', l)
        l = re.sub(r'\$L__tmp\d+', '$L__tmp', l)
        out.append(l)
    text = '\n'.join(out)
    # virtual registers: renumbered per class in order of first use (the
    # compiler's numbering is not stable across runs), declared counts dropped
    text = re.sub(r'(\.reg \.\w+\s+%\w+)<\d+>', r'\1<>', text)
    regs, nreg = {}, {}
    def ren(m):
        r = regs.get(m.group(0))
        if r is None:
            cls = m.group(1)
            nreg[cls] = nreg.get(cls, 0) + 1
            r = regs[m.group(0)] = '%%%s#%d' % (cls, nreg[cls])
        return r
    text = re.sub(r'%(rd|rs|r|fd|f|p|h|hh|q)(\d+)', ren, text)
    # string / global constants: numbered in order of appearance
    names = {}
    def num(m):
        return names.setdefault(m.group(0), '$str#%d' % len(names))
    text = re.sub(r'\$str(\$\d+)?', num, text)
    return text

def collect(d):
    allk = {}
    for f in sorted(glob.glob(os.path.join(d, '*.ptx'))):
        for k, v in kernels(f).items():
            allk[k] = (os.path.basename(f)[:-4], v)
    return allk

def demangle(names):
    if not names:
        return {}
    p = subprocess.run(['c++filt'], input='\n'.join(names), capture_output=True, text=True)
    d = p.stdout.split('\n')
    return {n: (d[i] if i < len(d) and d[i] else n) for i, n in enumerate(names)}

def same_multiset(a, b):
    # the same instructions, registers aside, in another order (nvcc does not
    # always emit a kernel the same way twice: rerun before reading much
    # into it)
    strip = lambda t: sorted(re.sub(r'%\w+#\d+', '%', l) for l in t.split('\n'))
    return strip(a) == strip(b)

base, work = collect(base_dir), collect(work_dir)
# LA_PTX_DUMP=dir: the normalized bodies, base/ and work/, one file per kernel
dump = os.environ.get('LA_PTX_DUMP')
if dump:
    for side, ks in (('base', base), ('work', work)):
        os.makedirs(os.path.join(dump, side), exist_ok=True)
        for k, (f, body) in ks.items():
            fn = re.sub(r'[^\w]+', '_', k[1])[-120:]
            open(os.path.join(dump, side, fn + '.ptx'), 'w').write(body + '\n')
keys = sorted(set(base) | set(work), key=lambda k: k[1])
dm = demangle([k[1] for k in keys])
rx = re.compile(filt) if filt else None
count = {'identical': 0, 'DIFFERENT': 0, 'removed': 0, 'added': 0, 'renamed': 0, 'reordered': 0}
# a kernel only in the base whose code equals that of a kernel only in the
# working tree was renamed (e.g. a template parameter with one value left
# removed): reported once, as renamed
only_b = [k for k in keys if k in base and k not in work]
only_w = [k for k in keys if k in work and k not in base]
renamed = {}
for kb in only_b:
    for kw in only_w:
        if kw not in renamed.values() and kb[0] == kw[0] and base[kb][1] == work[kw][1]:
            renamed[kb] = kw
            break
for k in keys:
    name = dm[k[1]].replace('(anonymous namespace)::', '')
    if rx and not rx.search(name):
        continue
    kind = '' if k[0] == '.entry' else ' [.func]'
    if k in base and k in work:
        st = 'identical' if base[k][1] == work[k][1] else 'DIFFERENT'
        if st == 'DIFFERENT' and same_multiset(base[k][1], work[k][1]):
            st = 'reordered'
        where = base[k][0] if base[k][0] == work[k][0] else '%s -> %s' % (base[k][0], work[k][0])
    elif k in renamed:
        st = 'renamed'
        where = '%s -> %s: %s' % (base[k][0], work[renamed[k]][0],
                                 dm[renamed[k][1]].replace('(anonymous namespace)::', ''))
    elif k in renamed.values():
        continue
    elif k in base:
        st, where = 'removed', base[k][0]
    else:
        st, where = 'added', work[k][0]
    count[st] += 1
    print('%-9s %s%s  (%s)' % (st, name, kind, where))
print('summary: %d identical, %d renamed (same code), %d reordered (same instructions), '
      '%d different, %d removed, %d added' %
      (count['identical'], count['renamed'], count['reordered'], count['DIFFERENT'], count['removed'],
       count['added']))
sys.exit(1 if count['DIFFERENT'] else 0)
EOF
