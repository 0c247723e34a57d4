# Sourced by dev/emu_*_bwd.sh: builds a host-emulation driver of the
# tensor-core backward kernels. The CUDA backward sources of the linear
# family are compiled with g++ -DLA_BWD_EMU (src/cuda/bwd_emu.cuh: one
# std::thread per CUDA thread, ldmatrix and mma.sync by their fragment
# layouts, cp.async a plain copy) and linked with dev/emu_NAME.cpp and a
# CPU-only liblongattn.a.
#   emu_build NAME BUILD_DIR   -> BUILD_DIR/emu_NAME
emu_build() {
  local name=$1 O=$2 f objs=()
  local inc=${CUDA_INC:-/usr/local/cuda/include}
  mkdir -p "$O/obj"
  make -s -j2 SKIP_DEPS=1 CUDA=0 BUILD="$O/lib" "$O/lib/liblongattn.a" > /dev/null
  for f in linear_causal_bwd_tc mhla_causal_bwd_tc linear_bwd mhla_bwd linblock_bwd \
           linblock_bwd_tc linblock_bwd_mix linblock_bwd_mix2; do
    g++ -std=c++20 -O2 -fopenmp -DLA_BWD_EMU -x c++ -w -Iinclude -Isrc -I"$inc" \
        -c "src/cuda/$f.cu" -o "$O/obj/$f.o"
    objs+=("$O/obj/$f.o")
  done
  g++ -std=c++20 -O2 -w -Iinclude -Isrc -I"$inc" "dev/emu_$name.cpp" "${objs[@]}" \
      "$O/lib/liblongattn.a" -o "$O/emu_$name" -fopenmp -lopenblas -llapack -lm \
      -lpthread -ldl -lstdc++
}
