#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Regenerates docs/benchmarks.md's numbers and plot in one go:
#   bash bench/run.sh            (BUILD_DIR=build-bench, RANKS="2 4", MIN_TIME=0.3,
#                                 FFT_SIZES=64,128,256)
# Builds the benchmarks, runs the Google Benchmark suite and the 3-D FFT
# benchmark (dsp-bench-fft3d) at each rank count, sweeps sizes with dsp-bench
# for the plot, records the machine and its load, and draws
# docs/benchmarks.png with gnuplot. Outputs go to docs/bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
DSP_WITH_BENCH=1 bash scripts/deps.sh
source scripts/mpi_env.sh
build="${BUILD_DIR:-build-bench}"
out=docs/bench
mkdir -p "$out"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDSP_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "$build" -j2 --target dsp-bench dsp-bench-suite dsp-bench-fft3d >/dev/null

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
  echo "mpi: $(mpirun --version | head -1)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- include bench || echo ' (modified)')"
  echo "load before: $(uptime | sed 's/.*load average: //')"
} > "$out/machine.txt"

for n in ${RANKS:-2 4}; do
  mpirun -np "$n" "$build/bench/dsp-bench-suite" --benchmark_min_time="${MIN_TIME:-0.3}" --benchmark_color=false > "$out/suite_np$n.txt"
done
# The forward 3-D FFT, dsp slab and pencils against FFTW-MPI (docs/fft3d.md), with the load around each run.
for n in ${RANKS:-2 4}; do
  { echo "load before: $(uptime | sed 's/.*load average: //')"
    mpirun -np "$n" "$build/bench/dsp-bench-fft3d" --sizes="${FFT_SIZES:-64,128,256}" \
      --benchmark_min_time="${MIN_TIME:-0.3}" --benchmark_color=false
    echo "load after: $(uptime | sed 's/.*load average: //')"; } > "$out/fft3d_np$n.txt"
done

# GB/s against size, 2 ranks, float [A, B, 128] switched 0 -> 1 and its references.
sweep=(-b 4K -e 64M -f 4 -n 20 -w 3 --inner 128 -F csv)
for op in switch mpi-alltoall mpi-alltoallw memcpy; do
  mpirun -np 2 "$build/bench/dsp-bench" -o "$op" -c 0 "${sweep[@]}" > "$out/sweep_$op.csv"
done
echo "load after: $(uptime | sed 's/.*load average: //')" >> "$out/machine.txt"
gnuplot bench/plot.gp
bash bench/table.sh
echo "wrote $out/, docs/benchmarks.png and the tables in docs/benchmarks.md"
