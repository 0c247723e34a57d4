# longattn — hand-written Makefile (llm.c style): detects OpenBLAS, OpenMP
# and nvcc; builds the library, the CLI and the tests.
#
#   make              build/longattn, build/liblongattn.a, build/liblongattn.so
#   make test         build and run every test (installs missing Debian packages)
#   make demo         build and run `longattn demo`
#   make test-asan    the C tests under ASan + UBSan
#   make test-portable the C tests built without -march=native (no AVX-512 paths)
#   make fuzz         libFuzzer target for the .npy reader (short run)
#   make install PREFIX=/usr/local
#
# Options: CUDA=0 skips the CUDA backend even when nvcc exists;
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
  NVCCFLAGS ?= -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo \
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
TEST_SRCS := $(wildcard tests/core/test_*.c tests/cpu/test_*.c tests/cli/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
CUDA_TEST_SRCS := $(wildcard tests/cuda/test_*.c)
CUDA_TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(CUDA_TEST_SRCS))

.PHONY: all lib cli tests test demo clean install test-asan test-portable fuzz deps cuda-tests info \
        install-python test-torch-compile
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

$(BUILD)/longattn: $(CLI_OBJS) $(BUILD)/liblongattn.a
	$(CC) $(ALL_CFLAGS) -o $@ $(CLI_OBJS) $(BUILD)/liblongattn.a $(LDLIBS)
	@echo "built $@ (blas=$(BLAS), openmp=$(OMP_OK), cuda=$(if $(WITH_CUDA),yes,no))"

$(BUILD)/longattn.pc:
	@mkdir -p $(BUILD)
	@printf 'prefix=$(PREFIX)\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: longattn\nDescription: attention over long sequences (MHLA, focused linear attention, HISA)\nVersion: $(VERSION)\nLibs: -L$${libdir} -llongattn\nLibs.private: $(LDLIBS)\nCflags: -I$${includedir}\n' > $@

$(BUILD)/tests/%: tests/%.c tests/test_util.h $(wildcard tests/*/*.h) $(BUILD)/liblongattn.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests -o $@ $< $(BUILD)/liblongattn.a $(LDLIBS)

tests: all $(TEST_BINS)
cuda-tests: all $(CUDA_TEST_BINS)

test: tests
ifneq ($(SKIP_DEPS),1)
	@bash scripts/setup.sh test
endif
	@bash tests/run_all.sh $(BUILD)

demo: all
	$(BUILD)/longattn demo

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

# libFuzzer target for the .npy reader (needs clang).
FUZZ_SECONDS ?= 20
fuzz:
	@mkdir -p $(BUILD)/fuzz
	clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
	    tests/fuzz/fuzz_npy.c src/core/npy.c src/core/status.c src/core/tensor.c -o $(BUILD)/fuzz/fuzz_npy -lm
	@mkdir -p $(BUILD)/fuzz/corpus && cp tests/fuzz/corpus/* $(BUILD)/fuzz/corpus/ 2>/dev/null || true
	$(BUILD)/fuzz/fuzz_npy -max_total_time=$(FUZZ_SECONDS) -max_len=4096 $(BUILD)/fuzz/corpus

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/longattn.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/liblongattn.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/liblongattn.so $(DESTDIR)$(PREFIX)/lib/liblongattn.so.$(VERSION)
	ln -sf liblongattn.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/liblongattn.so
	install -m 755 $(BUILD)/longattn $(DESTDIR)$(PREFIX)/bin/
	sed 's|^prefix=.*|prefix=$(PREFIX)|' $(BUILD)/longattn.pc > $(DESTDIR)$(PREFIX)/lib/pkgconfig/longattn.pc

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
	rm -rf build build-asan build-portable
