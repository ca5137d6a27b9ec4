# SPDX-License-Identifier: BSD-3-Clause
# GB/s against bytes per rank, from dsp-bench's CSV output (-F csv).
#
#   gnuplot bench/plot.gp
#     bench/run.sh's four 2-rank sweeps, docs/bench/sweep_*.csv -> docs/benchmarks.png
#   gnuplot -e "csv='my.csv'" bench/plot.gp
#     your own run, e.g. from
#       mpirun -np 2 build/bench/dsp-bench -o switch -b 4K -e 64M -f 4 -c 0 -F csv -O my.csv
#     -> my.csv.png. csv may name several files, separated by spaces
#     (csv='a.csv b.csv'): one line each, titled with its file name.
#   Variables, all optional, given with -e before the script:
#     csv   the CSV file(s) to plot (default: the four sweeps above)
#     out   the PNG to write (default: docs/benchmarks.png, or the first file's name + .png)
#     y     the column to plot: 'algbw' (size / time, the default) or 'busbw'
# Columns are found by name in the CSV's header line, so extra columns (shape) do not matter.
if (!exists("y")) y = "algbw"
if (!exists("out")) out = exists("csv") ? word(csv, 1).".png" : "docs/benchmarks.png"

set terminal pngcairo size 900,560 font ",11" noenhanced
set output out
set datafile separator ","
set logscale x 2
set logscale y 2
set format x "%.0b%B"
set ylabel y." (GB/s)"
set key top left
set grid

if (exists("csv")) {
  set xlabel "bytes per rank"
  plot for [f in csv] f using "size":y with linespoints lw 2 title f
} else {
  set xlabel "bytes per rank (float [A, B, 128] switched 0 -> 1, 2 ranks)"
  d = "docs/bench/sweep_"
  plot d."switch.csv" using "size":y with linespoints lw 2 title "dsp::dynamic_switch (agreement check on)", \
       d."mpi-alltoall.csv" using "size":y with linespoints title "MPI_Alltoall (same bytes)", \
       d."mpi-alltoallw.csv" using "size":y with linespoints title "MPI_Alltoallw (subarrays)", \
       d."memcpy.csv" using "size":y with linespoints dt 2 title "memcpy of the local block"
}
