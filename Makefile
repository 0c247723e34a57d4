# longattn — hand-written Makefile (llm.c style): detects OpenBLAS, OpenMP
# and nvcc; builds the library, the CLI and the tests.
#
#   make              build/longattn, build/liblongattn.a, build/liblongattn.so
#   make test         build and run every test (installs missing Debian packages)
#   make demo         build and run `longattn demo`
#   make test-asan    the C tests under ASan + UBSan
#   make test-portable the C tests built without -march=native (no AVX-512 paths)
#   make test-tsan    the C tests under ThreadSanitizer (build-tsan)
#   make fuzz         libFuzzer targets: the .npy reader, the CLI option parser
#   make cuda-build-check  compile every CUDA test, the harness and every dev driver
#   make install PREFIX=/usr/local   (make uninstall removes what it installed)
#
# Options: CUDA=0 skips the CUDA backend even when nvcc exists;
#          CUDA_ARCH=all (default: sm_90a + sm_80 + compute_80 PTX), ptx80
#          (compute_80 PTX only) or sm90a (sm_90a only);
#          SKIP_DEPS=1 skips the Debian package check.

PREFIX ?= /usr/local
VERSION := 0.1.0
BUILD  ?= build
CC     ?= cc
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -fPIC -fvisibility=hidden -Iinclude -Isrc
SONAME := liblongattn.so.0
OPT    ?= -O3 -march=native -ffp-contract=fast
CFLAGS ?= $(OPT) -g
LDLIBS := -lm -lpthread -ldl

# ---- Debian packages (idempotent; a no-op when all are present) ----------
ifneq ($(SKIP_DEPS),1)
DEPS_BUILD := $(shell bash scripts/setup.sh build >&2; echo ok)
endif

# ---- OpenMP ------------------------------------------------------------
OMP_OK := $(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo yes)
ifeq ($(OMP_OK),yes)
  CFLAGS_BASE += -fopenmp
  LDLIBS += -fopenmp
endif

# ---- BLAS: OpenBLAS (cblas) if present, else the builtin blocked loop -----
BLAS_INC := $(firstword $(wildcard /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h /usr/include/openblas/cblas.h /usr/include/x86_64-linux-gnu/cblas.h /usr/include/cblas.h))
ifneq ($(BLAS_INC),)
  ifneq ($(wildcard /usr/lib/x86_64-linux-gnu/libopenblas.so /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so),)
    CFLAGS_BASE += -DLA_HAVE_CBLAS -DLA_BLAS_OPENBLAS -I$(dir $(BLAS_INC))
    LDLIBS += -lopenblas
    BLAS := openblas
  else
    BLAS := builtin
  endif
else
  BLAS := builtin
endif
# LAPACK (dgesdd for the analysis tools)
ifneq ($(wildcard /usr/lib/x86_64-linux-gnu/liblapack.so /usr/lib/x86_64-linux-gnu/liblapack.so.3),)
  CFLAGS_BASE += -DLA_HAVE_LAPACK
  LDLIBS += -llapack
endif

# ---- CUDA -----------------------------------------------------------------
NVCC ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
ifeq ($(CUDA),0)
  NVCC :=
endif
CUDA_SRCS := $(wildcard src/cuda/*.cu)
ifneq ($(and $(NVCC),$(CUDA_SRCS)),)
  WITH_CUDA := 1
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
  # Targets: sm_90a (every kernel, the Hopper-only wgmma / TMA-style / fp8
  # ones included), sm_80 SASS and compute_80 PTX (the portable and mma.sync
  # kernels, for Ampere, Ada and later GPUs through the driver's JIT; the
  # Hopper-only kernels have a trap for a body there and their selection
  # functions never pick them: src/cuda/ptx.cuh). CUDA_ARCH=ptx80 builds the
  # compute_80 PTX alone (tests/cuda/gpu_sm80.sh runs that build on the H200);
  # CUDA_ARCH=sm90a the sm_90a code alone (quicker builds for the H200).
  # Objects do not record the targets: give each CUDA_ARCH its own BUILD.
  CUDA_ARCH ?= all
  ifeq ($(CUDA_ARCH),all)
    CUDA_GENCODE := -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80 \
                    -gencode=arch=compute_80,code=compute_80 -DLA_CUDA_HAVE_SM90A=1
  else ifeq ($(CUDA_ARCH),ptx80)
    CUDA_GENCODE := -gencode=arch=compute_80,code=compute_80
  else ifeq ($(CUDA_ARCH),sm90a)
    CUDA_GENCODE := -gencode=arch=compute_90a,code=sm_90a -DLA_CUDA_HAVE_SM90A=1
  else
    $(error CUDA_ARCH=$(CUDA_ARCH): expected all, ptx80 or sm90a)
  endif
  NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_GENCODE) -lineinfo \
               --expt-relaxed-constexpr -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -Iinclude -Isrc
  CFLAGS_BASE += -DLA_WITH_CUDA
  LDLIBS += -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/targets/x86_64-linux/lib -lcudart_static -lrt -lstdc++
endif

ALL_CFLAGS = $(CFLAGS_BASE) $(CFLAGS) -DLA_BLAS_NAME=\"$(BLAS)\"

# ---- sources --------------------------------------------------------------
CORE_SRCS := $(filter-out src/core/devmem_nocuda.c,$(wildcard src/core/*.c)) $(wildcard src/ops/*.c) $(wildcard src/cpu/*.c)
ifneq ($(WITH_CUDA),1)
  CORE_SRCS += src/core/devmem_nocuda.c
endif
LIB_OBJS  := $(CORE_SRCS:%.c=$(BUILD)/obj/%.o)
ifeq ($(WITH_CUDA),1)
  LIB_OBJS += $(CUDA_SRCS:%.cu=$(BUILD)/obj/%.o)
endif
CLI_SRCS  := $(wildcard cli/*.c)
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
# The CLI finds its plot scripts beside the executable or here (make install).
$(CLI_OBJS): ALL_CFLAGS += -DCLI_SHARE_DIR=\"$(PREFIX)/share/longattn\"
ifeq ($(WITH_CUDA),1)
# cli/cli_devmem.c stages --device cuda arrays through the CUDA runtime itself
$(CLI_OBJS): ALL_CFLAGS += -I$(CUDA_HOME)/include
endif
TEST_SRCS := $(wildcard tests/core/test_*.c tests/cpu/test_*.c tests/cli/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
# The backend harness: one binary from tests/backend/ (test_backend_ops.c and
# every case table cases_*.c); it runs the CPU cases everywhere and the CUDA
# cases where a device is present.
BACKEND_SRCS := tests/backend/test_backend_ops.c $(wildcard tests/backend/cases_*.c)
BACKEND_OBJS := $(BACKEND_SRCS:%.c=$(BUILD)/obj/%.o)
BACKEND_BIN  := $(BUILD)/tests/backend/test_backend_ops
TEST_BINS    += $(BACKEND_BIN)

.PHONY: all lib cli tests test demo study-smoke study-report clean install uninstall test-asan test-tsan test-portable fuzz deps \
        cuda-tests dev-cuda info install-python test-torch-compile
all: $(BUILD)/liblongattn.a $(BUILD)/liblongattn.so $(BUILD)/longattn $(BUILD)/longattn.pc

info:
	@echo "cc=$(CC) blas=$(BLAS) openmp=$(OMP_OK) nvcc=$(NVCC) cuda=$(WITH_CUDA)"

$(BUILD)/obj/%.o: %.c $(wildcard include/*.h src/core/*.h src/cpu/*.h src/cuda/*.h cli/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu $(wildcard include/*.h src/core/*.h src/cuda/*.h src/cuda/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/liblongattn.a: $(LIB_OBJS)
	@mkdir -p $(BUILD)
	rm -f $@ && ar rcs $@ $^

# Only the LA_API functions of include/longattn.h are exported: the objects are
# compiled with hidden visibility and the version script hides whatever the
# static CUDA runtime brings along.
$(BUILD)/liblongattn.so: $(LIB_OBJS) scripts/liblongattn.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=scripts/liblongattn.map -o $@ $(LIB_OBJS) $(LDLIBS)
	ln -sf liblongattn.so $(BUILD)/$(SONAME)

# ---- longattn._fastcall: the Python package's compiled call path ----------
# python/longattn/_fastcall.c against the CPython API only (no link to
# liblongattn: it calls the addresses of the library that ctypes loaded),
# built beside liblongattn.so for $(PYTHON), named with that interpreter's
# EXT_SUFFIX (another Python ignores it). Without that interpreter's Python.h
# (Debian: python3-dev, which the deps step installs) it is skipped with a
# message and the package calls through ctypes. `make pyext PYTHON=python3`
# builds it for another interpreter.
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)
PY_INC := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
PY_EXT := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX") or "")' 2>/dev/null)
.PHONY: pyext
ifneq ($(and $(PY_EXT),$(wildcard $(PY_INC)/Python.h)),)
PYEXT := $(BUILD)/_fastcall$(PY_EXT)
# (optional: a failed compile says so and leaves the package on ctypes)
$(PYEXT): python/longattn/_fastcall.c include/longattn.h
	@mkdir -p $(BUILD)
	$(CC) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -fPIC -fvisibility=hidden \
	    -O2 -Iinclude -I$(PY_INC) -shared $< -o $@ \
	  || { rm -f $@; echo "pyext: compiling $< for $(PYTHON) failed; longattn calls through ctypes"; }
pyext: $(PYEXT)
all: $(PYEXT)
else
all: pyext
pyext:
	@echo "pyext: skipped: no Python.h for $(PYTHON) (include dir '$(PY_INC)'; Debian: apt-get install python3-dev); longattn calls through ctypes"
endif

$(BUILD)/longattn: $(CLI_OBJS) $(BUILD)/liblongattn.a
	$(CC) $(ALL_CFLAGS) -o $@ $(CLI_OBJS) $(BUILD)/liblongattn.a $(LDLIBS)
	@echo "built $@ (blas=$(BLAS), openmp=$(OMP_OK), cuda=$(if $(WITH_CUDA),yes,no))"

$(BUILD)/longattn.pc:
	@mkdir -p $(BUILD)
	@printf 'prefix=$(PREFIX)\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: longattn\nDescription: attention over long sequences (MHLA, focused linear attention, HISA)\nVersion: $(VERSION)\nLibs: -L$${libdir} -llongattn\nLibs.private: $(LDLIBS)\nCflags: -I$${includedir}\n' > $@

$(BUILD)/tests/%: tests/%.c tests/test_util.h $(wildcard tests/*/*.h) $(BUILD)/liblongattn.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests -o $@ $< $(BUILD)/liblongattn.a $(LDLIBS)

$(BUILD)/obj/tests/backend/%.o: tests/backend/%.c tests/test_util.h $(wildcard tests/backend/*.h) \
                                $(wildcard include/*.h src/core/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests -Itests/backend -c $< -o $@

$(BACKEND_BIN): $(BACKEND_OBJS) $(BUILD)/liblongattn.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $(BACKEND_OBJS) $(BUILD)/liblongattn.a $(LDLIBS)

tests: all $(TEST_BINS)
# The GPU tests: the harness's CUDA cases (every operator, forward and
# backward, and the paged index cache are case tables of tests/backend/).
cuda-tests: all $(BACKEND_BIN)

# ---- compile checks of the GPU-only code (CI: nvcc without a GPU) --------------
# `make cuda-build-check` builds, in its own tree, the CUDA library, the
# harness (its CUDA cases included) and every dev driver -- the GPU drivers
# of `make dev-cuda` and the CPU ones (dev/*.c) --, each linked against
# liblongattn.a, so that none can rot; they run only on the GPU machine.
# Without nvcc (or with CUDA=0) it says so and does nothing.
CUDA_CHECK_BUILD ?= build-cudacheck
DEV_C_SRCS := $(wildcard dev/*.c)
DEV_C_BINS := $(DEV_C_SRCS:%.c=$(BUILD)/%)

.PHONY: cuda-build-check dev-c
cuda-build-check:
ifeq ($(WITH_CUDA),1)
	$(MAKE) BUILD=$(CUDA_CHECK_BUILD) SKIP_DEPS=1 $(CUDA_CHECK_BUILD)/tests/backend/test_backend_ops \
	    $(CUDA_CHECK_BUILD)/bench/headline dev-cuda dev-c
	@echo "cuda-build-check: the harness and the dev drivers compiled and linked"
else
	@echo "cuda-build-check: no nvcc (or CUDA=0): nothing compiled"
endif

dev-c: $(DEV_C_BINS)

$(BUILD)/dev/%: dev/%.c $(BUILD)/liblongattn.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< $(BUILD)/liblongattn.a $(LDLIBS) -o $@

# The dev/ GPU drivers (validate, then time; run on the GPU machine) and the
# host emulator of the softmax tensor-core kernel, built against the static
# library so that CI compiles them: `make dev-cuda`.
DEV_CUDA_SRCS := $(wildcard dev/bench_gpu_*.cu dev/bench_hisa2.cu dev/emu_softmax_tc.cu dev/cuda/*.cu)
DEV_CUDA_BINS := $(patsubst dev/%.cu,$(BUILD)/dev/%,$(DEV_CUDA_SRCS))
DEV_NVCCFLAGS := -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DLA_CUDA_HAVE_SM90A=1 -Iinclude -Isrc -Xcompiler -fopenmp
$(BUILD)/dev/%: dev/%.cu dev/bench_gpu_common.cuh $(BUILD)/liblongattn.a
	@mkdir -p $(dir $@)
	$(NVCC) $(DEV_NVCCFLAGS) $< $(BUILD)/liblongattn.a -o $@ $(filter-out -fopenmp -lcudart_static,$(LDLIBS))
dev-cuda: all $(DEV_CUDA_BINS)

# bench/headline: the headline forward rows of docs/PERF.md on the GPU, public
# API only (run on the GPU machine; tests/cuda/gpu_ab.sh). headline_base is the
# same source against another tree's header and static library, for the A/B
# against an older commit:
#   make BUILD=build-gpu HEADLINE_BASE=DIR build-gpu/bench/headline_base
# links DIR/include/longattn.h and DIR/$(HEADLINE_BASE_BUILD)/liblongattn.a.
ifeq ($(WITH_CUDA),1)
HEADLINE_CFLAGS = $(filter-out -Iinclude -Isrc,$(ALL_CFLAGS)) -I$(CUDA_HOME)/include
HEADLINE_BASE_BUILD ?= build-ab
$(BUILD)/bench/headline: bench/headline.c include/longattn.h $(BUILD)/liblongattn.a
	@mkdir -p $(dir $@)
	$(CC) $(HEADLINE_CFLAGS) -Iinclude $< $(BUILD)/liblongattn.a $(LDLIBS) -o $@
$(BUILD)/bench/headline_base: bench/headline.c $(HEADLINE_BASE)/include/longattn.h \
                              $(HEADLINE_BASE)/$(HEADLINE_BASE_BUILD)/liblongattn.a
	@mkdir -p $(dir $@)
	$(CC) $(HEADLINE_CFLAGS) -I$(HEADLINE_BASE)/include $< \
	    $(HEADLINE_BASE)/$(HEADLINE_BASE_BUILD)/liblongattn.a $(LDLIBS) -o $@
endif

test: tests
ifneq ($(SKIP_DEPS),1)
	@bash scripts/setup.sh test
endif
	@bash tests/run_all.sh $(BUILD)

demo: all
	$(BUILD)/longattn demo

# The training study (studies/train, docs/TRAINING_STUDY.md): the tiny CPU
# setting, which checks that every attention variant's loss falls.
study-smoke: all
ifneq ($(SKIP_DEPS),1)
	@bash scripts/setup.sh test
endif
	LA_BUILD=$(BUILD) PYTHONPATH=python /usr/bin/python3 studies/train/run_study.py --suite smoke \
	    --device cpu --check-falls

# The study's tables and plots again from its committed results (docs/TRAINING_STUDY.md).
STUDY_DIR := docs/training_study
# the MQAR recipe and the focused cell on the tensor-core backward passes (gpu_study.sh grid)
RECIPE_DIR := $(STUDY_DIR)/recipe
# the issue's full grid on the graph loop (gpu_study.sh mqar-a, mqar-b, mqar-c, nearest, mqar-s345)
GRID_DIR := $(STUDY_DIR)/grid
study-report:
	/usr/bin/python3 studies/train/report.py \
	    $(STUDY_DIR)/results_s012.json,$(STUDY_DIR)/results_s012_part2.json \
	    $(STUDY_DIR)/results_s345.json,$(STUDY_DIR)/results_s345_part2.json \
	    --md $(STUDY_DIR)/tables.md --plots $(STUDY_DIR)
	/usr/bin/python3 studies/train/report.py --task mqar \
	    $(RECIPE_DIR)/mqar64x4_s012.json,$(RECIPE_DIR)/mqar256x16_s012_cut.json,$(RECIPE_DIR)/timing.json \
	    $(RECIPE_DIR)/mqar64x4_s345_cut.json \
	    --md $(RECIPE_DIR)/tables_mqar.md --plots $(RECIPE_DIR) --prefix recipe_
	/usr/bin/python3 studies/train/report.py --task nearest \
	    $(STUDY_DIR)/results_s012.json,$(RECIPE_DIR)/focused_s012.json,$(RECIPE_DIR)/timing.json \
	    $(STUDY_DIR)/results_s345.json,$(RECIPE_DIR)/focused_s345.json \
	    --md $(RECIPE_DIR)/tables_nearest.md --plots $(RECIPE_DIR) --prefix focused_
	/usr/bin/python3 studies/train/report.py --task mqar \
	    $(GRID_DIR)/mqar_a_s012.json,$(GRID_DIR)/mqar_b_s012.json,$(GRID_DIR)/mqar_c_s012.json,$(RECIPE_DIR)/mqar64x4_s012.json,$(GRID_DIR)/timing.json \
	    $(GRID_DIR)/mqar_s345.json,$(GRID_DIR)/mqar_c_s345.json \
	    --md $(GRID_DIR)/tables_mqar.md --plots $(GRID_DIR) --prefix grid_
	/usr/bin/python3 studies/train/report.py --task nearest \
	    $(GRID_DIR)/nearest_s012.json,$(GRID_DIR)/timing.json $(GRID_DIR)/nearest_s345.json \
	    --md $(GRID_DIR)/tables_nearest.md --plots $(GRID_DIR) --prefix grid_2d_

# Sanitizer build of the C tests in a separate tree.
# -march=native so the sanitizers also watch the AVX-512 kernels.
test-asan:
	$(MAKE) BUILD=build-asan CUDA=0 OPT="-O1 -march=native -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	    tests
	LA_ASAN=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 LA_SKIP_PYTHON=1 bash tests/run_all.sh build-asan

# The portable paths (no AVX-512, no -march=native), as on other CPUs.
test-portable:
	$(MAKE) BUILD=build-portable CUDA=0 OPT="-O2" tests
	LA_SKIP_PYTHON=1 bash tests/run_all.sh build-portable

# ThreadSanitizer build of the C tests. libgomp is not built with TSan, so
# the hand-over of data through its barriers looks like races to it (false
# positives on every parallel region): the tests run with OMP_THREAD_LIMIT=1
# (which also caps the operators' explicit num_threads clauses, unlike
# OMP_NUM_THREADS), so no OpenMP region has a second thread. The thread
# safety TSan checks is then the library's own: tests/core/test_threads runs
# several contexts on plain pthreads at once, and tests/core/test_hardening
# concurrent la_sgemm calls (the OpenBLAS thread-count hand-over).
test-tsan:
	$(MAKE) BUILD=build-tsan CUDA=0 OPT="-O1 -g -march=native -fno-omit-frame-pointer -fsanitize=thread" tests
	LA_TSAN=1 OMP_THREAD_LIMIT=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" LA_SKIP_PYTHON=1 \
	    bash tests/run_all.sh build-tsan

# libFuzzer targets (need clang): the .npy reader and the CLI option parser.
FUZZ_SECONDS ?= 20
FUZZ_CLI_SECONDS ?= $(FUZZ_SECONDS)
FUZZ_CC := clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Iinclude -Isrc
fuzz:
	@mkdir -p $(BUILD)/fuzz
	$(FUZZ_CC) tests/fuzz/fuzz_npy.c src/core/npy.c src/core/memcheck.c src/core/status.c src/core/tensor.c \
	    -o $(BUILD)/fuzz/fuzz_npy -lm
	$(FUZZ_CC) -Icli tests/fuzz/fuzz_cli.c cli/args.c -o $(BUILD)/fuzz/fuzz_cli -lm
	@mkdir -p $(BUILD)/fuzz/corpus $(BUILD)/fuzz/corpus_cli
	@cp tests/fuzz/corpus/* $(BUILD)/fuzz/corpus/ 2>/dev/null || true
	@cp tests/fuzz/corpus_cli/* $(BUILD)/fuzz/corpus_cli/ 2>/dev/null || true
	$(BUILD)/fuzz/fuzz_npy -max_total_time=$(FUZZ_SECONDS) -max_len=4096 $(BUILD)/fuzz/corpus
	$(BUILD)/fuzz/fuzz_cli -max_total_time=$(FUZZ_CLI_SECONDS) -max_len=1024 -close_fd_mask=3 $(BUILD)/fuzz/corpus_cli

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/longattn.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/liblongattn.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/liblongattn.so $(DESTDIR)$(PREFIX)/lib/liblongattn.so.$(VERSION)
	ln -sf liblongattn.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/liblongattn.so
	install -m 755 $(BUILD)/longattn $(DESTDIR)$(PREFIX)/bin/
	sed 's|^prefix=.*|prefix=$(PREFIX)|' $(BUILD)/longattn.pc > $(DESTDIR)$(PREFIX)/lib/pkgconfig/longattn.pc
	install -d $(DESTDIR)$(PREFIX)/share/longattn
	install -m 644 $(SHARE_FILES) $(DESTDIR)$(PREFIX)/share/longattn/

# The files `make install` puts in place, and nothing else.
SHARE_FILES := scripts/plot_collapse.py scripts/plot_eval_index.py
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/include/longattn.h
	rm -f $(DESTDIR)$(PREFIX)/lib/liblongattn.a $(DESTDIR)$(PREFIX)/lib/liblongattn.so \
	    $(DESTDIR)$(PREFIX)/lib/$(SONAME) $(DESTDIR)$(PREFIX)/lib/liblongattn.so.$(VERSION)
	rm -f $(DESTDIR)$(PREFIX)/lib/pkgconfig/longattn.pc
	rm -f $(DESTDIR)$(PREFIX)/bin/longattn
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/share/longattn/,$(notdir $(SHARE_FILES)))
	-rmdir $(DESTDIR)$(PREFIX)/share/longattn 2>/dev/null

# The Python package into the current interpreter's environment (a venv on
# Debian: docs/PYTHON.md), with this build's library bundled.
PIP ?= pip
install-python: $(BUILD)/liblongattn.so
	LA_BUILD=$(BUILD) $(PIP) install --no-build-isolation ./python

# torch.compile / custom-op tests under a PyPI torch >= 2.4 in a venv
# ($(BUILD)/venv-torch); skipped with a printed reason when it cannot install.
test-torch-compile: $(BUILD)/liblongattn.so
	bash scripts/torch_compile_check.sh $(BUILD)

clean:
	rm -rf build build-asan build-portable build-tsan $(CUDA_CHECK_BUILD)
