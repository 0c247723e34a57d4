"""The ctypes structs and enums of longattn._lib match include/longattn.h:
a C program compiled here against the header prints every sizeof/offsetof
and enum value, and the test compares them with ctypes. Also checks that
every function the header declares has a ctypes signature."""
import ctypes
import os
import re
import shutil
import subprocess

import pytest

from test_py_common import ROOT
from longattn import _lib

HEADER = os.path.join(ROOT, "include", "longattn.h")

ENUMS = {
    "LA_OK": _lib.LA_OK, "LA_ERR_ARG": _lib.LA_ERR_ARG, "LA_ERR_SHAPE": _lib.LA_ERR_SHAPE,
    "LA_ERR_DTYPE": _lib.LA_ERR_DTYPE, "LA_ERR_NOMEM": _lib.LA_ERR_NOMEM,
    "LA_ERR_OVERFLOW": _lib.LA_ERR_OVERFLOW, "LA_ERR_UNSUPPORTED": _lib.LA_ERR_UNSUPPORTED,
    "LA_ERR_DEVICE": _lib.LA_ERR_DEVICE, "LA_ERR_IO": _lib.LA_ERR_IO,
    "LA_ERR_FORMAT": _lib.LA_ERR_FORMAT, "LA_ERR_INTERNAL": _lib.LA_ERR_INTERNAL,
    "LA_F32": _lib.LA_F32, "LA_F64": _lib.LA_F64, "LA_BF16": _lib.LA_BF16,
    "LA_I32": _lib.LA_I32, "LA_F16": _lib.LA_F16, "LA_FP8_E4M3": _lib.LA_FP8_E4M3,
    "LA_DEVICE_CPU": _lib.LA_DEVICE_CPU, "LA_DEVICE_CUDA": _lib.LA_DEVICE_CUDA,
    "LA_MAX_DIMS": _lib.LA_MAX_DIMS,
    "LA_FEATURE_IDENTITY": _lib.FEATURES["identity"], "LA_FEATURE_RELU": _lib.FEATURES["relu"],
    "LA_FEATURE_RELU_EPS": _lib.FEATURES["relu_eps"], "LA_FEATURE_RELU1": _lib.FEATURES["relu1"],
    "LA_FEATURE_ELU1": _lib.FEATURES["elu1"],
    "LA_FOCUSED_FLATTEN": _lib.FOCUSED_VARIANTS["flatten"],
    "LA_FOCUSED_BLOG": _lib.FOCUSED_VARIANTS["blog"],
    "LA_MHLA_NORM_PER_QUERY": _lib.MHLA_NORMALIZE["per_query"],
    "LA_MHLA_NORM_NONE": _lib.MHLA_NORMALIZE["none"],
    "LA_MHLA_NORM_RELEASED_VISION": _lib.MHLA_NORMALIZE["released_vision"],
    "LA_MHLA_INIT_LOCALITY": _lib.MHLA_INIT_KINDS["locality"],
    "LA_MHLA_INIT_LOCALITY_GLOBAL": _lib.MHLA_INIT_KINDS["locality_global"],
    "LA_MHLA_INIT_UNIFORM_CAUSAL": _lib.MHLA_INIT_KINDS["uniform_causal"],
    "LA_MAP_SOFTMAX": _lib.MAP_VARIANTS["softmax"], "LA_MAP_LINEAR": _lib.MAP_VARIANTS["linear"],
    "LA_MAP_MHLA": _lib.MAP_VARIANTS["mhla"],
    "LA_MAP_FOCUSED_FLATTEN": _lib.MAP_VARIANTS["focused_flatten"],
    "LA_MAP_FOCUSED_BLOG": _lib.MAP_VARIANTS["focused_blog"],
}


def _c_program():
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "longattn.h"',
             'int main(void) {']
    for cname in _lib.STRUCTS:
        lines.append('printf("sizeof %s %%zu %%zu\\n", sizeof(%s), _Alignof(%s));'
                     % (cname, cname, cname))
        for field, _ in _lib.STRUCTS[cname]._fields_:
            lines.append('printf("offsetof %s.%s %%zu %%zu\\n", offsetof(%s, %s), '
                         'sizeof(((%s *)0)->%s));' % (cname, field, cname, field, cname, field))
    for name in ENUMS:
        lines.append('printf("enum %s %%d\\n", (int)%s);' % (name, name))
    lines.append('printf("enum_size %zu\\n", sizeof(la_dtype));')
    lines.append("return 0; }")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("abi")
    src, exe = d / "abi.c", d / "abi"
    src.write_text(_c_program())
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o",
                    str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return [line.split() for line in out.splitlines()]


def test_struct_sizes_and_offsets_match_c(c_layout):
    checked = 0
    for row in c_layout:
        if row[0] == "sizeof":
            cls = _lib.STRUCTS[row[1]]
            assert ctypes.sizeof(cls) == int(row[2]), row
            assert ctypes.alignment(cls) == int(row[3]), row
            checked += 1
        elif row[0] == "offsetof":
            sname, field = row[1].split(".")
            desc = getattr(_lib.STRUCTS[sname], field)
            assert desc.offset == int(row[2]), row
            assert desc.size == int(row[3]), row
            checked += 1
    assert checked == sum(1 + len(c._fields_) for c in _lib.STRUCTS.values())


def test_enum_values_match_c(c_layout):
    seen = 0
    for row in c_layout:
        if row[0] == "enum":
            assert ENUMS[row[1]] == int(row[2]), row
            seen += 1
        elif row[0] == "enum_size":
            assert int(row[1]) == ctypes.sizeof(ctypes.c_int)
    assert seen == len(ENUMS)


def _header_functions():
    text = open(HEADER).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    # declarations: "<type> la_name(" at statement start (not typedef'd fn pointers)
    return set(re.findall(r"^[A-Za-z_][\w \*]*?\b(la_\w+)\s*\(", text, flags=re.M))


def _header_structs():
    text = open(HEADER).read()
    return set(re.findall(r"typedef struct (la_\w+) \{", text))


def test_every_header_function_has_a_signature():
    declared = _header_functions()
    assert "la_softmax_attention" in declared and "la_map_rank_entropy" in declared
    assert declared == set(_lib.SIGNATURES), (declared ^ set(_lib.SIGNATURES))


def test_every_header_struct_is_bound():
    assert _header_structs() == set(_lib.STRUCTS)


def test_signature_arity_matches_header():
    text = re.sub(r"/\*.*?\*/", "", open(HEADER).read(), flags=re.S)
    for name, (_, argtypes) in _lib.SIGNATURES.items():
        m = re.search(r"\b%s\s*\(([^)]*)\)\s*;" % name, text)
        assert m, name
        params = [p for p in m.group(1).split(",") if p.strip() and p.strip() != "void"]
        assert len(params) == len(argtypes), (name, params, argtypes)
