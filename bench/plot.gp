# SPDX-License-Identifier: BSD-3-Clause
# GB/s (size / time per rank) against size per rank, from bench/run.sh's sweeps.
set terminal pngcairo size 900,560 font ",11" noenhanced
set output "docs/benchmarks.png"
set datafile separator ","
set logscale x 2
set logscale y 2
set format x "%.0b%B"
set xlabel "bytes per rank (float [A, B, 128] switched 0 -> 1, 2 ranks)"
set ylabel "algbw (GB/s)"
set key top left
set grid
d = "docs/bench/sweep_"
plot d."switch.csv" every ::1 using 5:9 with linespoints lw 2 title "dsp::dynamic_switch (agreement check on)", \
     d."mpi-alltoall.csv" every ::1 using 5:9 with linespoints title "MPI_Alltoall (same bytes)", \
     d."mpi-alltoallw.csv" every ::1 using 5:9 with linespoints title "MPI_Alltoallw (subarrays)", \
     d."memcpy.csv" every ::1 using 5:9 with linespoints dt 2 title "memcpy of the local block"
