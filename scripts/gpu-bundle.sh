#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Gathers what scripts/gpu-checks.sh runs into one folder that a device machine
# with the NVIDIA driver (and NCCL) but no MPI can run from: the binaries of a
# CUDA build, the shared libraries they load, and Debian's Open MPI runtime
# (docs/gpu.md, "What remains for a session with a GPU").
#
#   bash scripts/gpu-bundle.sh <cuda-build-dir> <bundle-dir>
#   . <bundle-dir>/env.sh && bash scripts/gpu-checks.sh <bundle-dir> <log-dir>   # on the device machine
#
# <bundle-dir>/bin  test_nccl, dsp_serial_tests, dsp_mpi_tests, dsp-bench (stripped
#                   copies; STRIP=0 keeps the symbols); a missing one is named, not fatal
# <bundle-dir>/lib  every library ldd finds for them but glibc's, the driver's (libcuda,
#                   libnvidia-*) and NCCL's: the device machine's own NCCL is used
#                   (CARRY_NCCL=1 carries the build's)
# <bundle-dir>/mpi  Open MPI and PMIx in their /usr layout (OPAL_PREFIX and
#                   PMIX_INSTALL_PREFIX point there), with the libraries their
#                   components load, help texts and orted
# <bundle-dir>/env.sh  sets PATH, LD_LIBRARY_PATH, OPAL_PREFIX, PMIX_INSTALL_PREFIX, the
#                   component paths, MPIEXEC, and Open MPI's choices for one node
#                   (shared memory, no network components), and lets it run as root
#
# It prints each part's size and the total, and fails when the total passes
# LIMIT_MB (default 64: what the device tool carries in all). Give <bundle-dir>
# a name the repository ignores (e.g. build-gpu-bundle) so that the tool can
# carry it. Debian 12's Open MPI 4.1 is assumed (its paths are checked).
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 <cuda-build-dir> <bundle-dir>" >&2; exit 2; }
build="$1"
out="$2"
limit_mb="${LIMIT_MB:-64}"
arch_dir=/usr/lib/x86_64-linux-gnu
ompi_lib="$arch_dir/openmpi/lib" # Open MPI's prefix is /usr
pmix_dir="$arch_dir/pmix2"       # PMIx's prefix
pmix_lib="$pmix_dir/lib"
for p in "$ompi_lib/openmpi3" "$pmix_lib/pmix" "$pmix_dir/share" /usr/bin/orted /usr/bin/orterun /usr/share/openmpi; do
  [ -e "$p" ] || { echo "gpu-bundle.sh: $p not found (Debian 12's openmpi-bin and libopenmpi3 expected)" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/mpi/bin" "$out/mpi/share"

# The binaries.
bins=()
for name in test_nccl dsp_serial_tests dsp_mpi_tests dsp-bench; do
  found=""
  for f in "$build/tests/$name" "$build/bench/$name" "$build/$name"; do
    [ -x "$f" ] && { found="$f"; break; }
  done
  if [ -z "$found" ]; then
    echo "gpu-bundle.sh: $name not found under $build (not carried: its steps will fail)" >&2
    continue
  fi
  cp "$found" "$out/bin/$name"
  [ "${STRIP:-1}" = 1 ] && strip --strip-unneeded "$out/bin/$name"
  bins+=("$out/bin/$name")
done

# Open MPI and PMIx, their /usr layout under mpi/: the components (the
# libraries themselves go to lib/ with the others, below), help texts, orted.
# The network components (UCX, libfabric, PSM, InfiniBand, OpenSHMEM's) are
# left out: one node needs shared memory only, and their libraries are large.
mkdir -p "$out/mpi/${ompi_lib#/usr/}" "$out/mpi/${pmix_lib#/usr/}"
cp -a "$ompi_lib/openmpi3" "$out/mpi/${ompi_lib#/usr/}/"
cp -a "$pmix_lib/pmix" "$out/mpi/${pmix_lib#/usr/}/"
rm -f "$out/mpi/${ompi_lib#/usr/}"/openmpi3/mca_{atomic,btl,mtl,osc,pml,spml,sshmem}_{ucx,ofi,openib,psm,psm2}.so \
  "$out/mpi/${ompi_lib#/usr/}"/openmpi3/mca_{memheap,scoll,spml,sshmem,atomic}_*.so
cp -a "$pmix_dir/share" "$out/mpi/${pmix_dir#/usr/}/"
cp -a /usr/share/openmpi "$out/mpi/share/"
cp /usr/bin/orted /usr/bin/orterun "$out/mpi/bin/"
ln -s orterun "$out/mpi/bin/mpiexec"
ln -s orterun "$out/mpi/bin/mpirun"

# Every library the binaries, orted and the MPI components load, but glibc's,
# the driver's and (unless CARRY_NCCL=1) NCCL's.
keep() {
  case "$(basename "$1")" in
    ld-linux* | libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | libresolv.so* | libutil.so*) return 1 ;;
    libcuda.so* | libnvidia-*) return 1 ;;
    libnccl*) [ "${CARRY_NCCL:-0}" = 1 ] ;;
    *) return 0 ;;
  esac
}
mapfile -t objects < <(printf '%s\n' "${bins[@]}" "$out/mpi/bin/orted" "$out/mpi/bin/orterun";
  find "$out/mpi/lib" -name '*.so*' -type f)
missing=0
for lib in $(for o in "${objects[@]}"; do ldd "$o" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'; done | sort -u); do
  keep "$lib" || continue
  [ -e "$out/lib/$(basename "$lib")" ] || cp -L "$lib" "$out/lib/"
done
# Not found here and not carried: the driver's (the device machine has it; this
# machine, without a GPU, may not), and libraries of components MPI skips.
for o in "${objects[@]}"; do
  if ldd "$o" 2>/dev/null | grep 'not found' | grep -Evq '^\s*(libcuda\.so|libnvidia-)'; then
    case "$o" in
      "$out"/mpi/*/openmpi3/* | "$out"/mpi/*/pmix/*) ;;
      *) echo "gpu-bundle.sh: $o needs a library not found here:" >&2; ldd "$o" | grep 'not found' >&2; missing=1 ;;
    esac
  fi
done

cat > "$out/env.sh" <<EOF
# Generated by scripts/gpu-bundle.sh: source it before scripts/gpu-checks.sh on the device machine.
b="\$(cd "\$(dirname "\${BASH_SOURCE[0]:-\$0}")" && pwd)"
export PATH="\$b/mpi/bin:\$b/bin:\$PATH"
export LD_LIBRARY_PATH="\$b/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export OPAL_PREFIX="\$b/mpi" PMIX_INSTALL_PREFIX="\$b/mpi/${pmix_dir#/usr/}"
export OMPI_MCA_mca_base_component_path="\$b/mpi/${ompi_lib#/usr/}/openmpi3"
export PMIX_MCA_mca_base_component_path="\$b/mpi/${pmix_lib#/usr/}/pmix"
# One node: shared memory only; no network components (their libraries are not carried).
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=sm,pt2pt
export OMPI_MCA_btl_vader_single_copy_mechanism=none PMIX_MCA_gds=hash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export MPIEXEC="\$b/mpi/bin/mpiexec"
EOF

size() { du -sb "$1" | awk -v n="$2" '{printf "  %-34s %7.1f MiB\n", n, $1 / 1048576}'; }
echo "gpu-bundle.sh: $out"
for f in "$out"/bin/*; do size "$f" "bin/$(basename "$f")"; done
for f in "$out"/lib/*; do size "$f" "lib/$(basename "$f")"; done
size "$out/mpi" "mpi (Open MPI, PMIx)"
total=$(du -sb "$out" | awk '{print $1}')
awk -v t="$total" -v l="$limit_mb" 'BEGIN {printf "gpu-bundle.sh: total %.1f MiB (limit %d MiB)\n", t / 1048576, l}'
[ "$total" -le $((limit_mb * 1048576)) ] || { echo "gpu-bundle.sh: over the limit" >&2; exit 1; }
[ $missing = 0 ] || exit 1
