# SPDX-License-Identifier: BSD-3-Clause
# Finds FFTW (double precision) for the 3-D FFT example, its test and its
# benchmark; included from examples/, tests/ and bench/. Nothing is required:
#   DSP_FFTW3_FOUND       fftw3.h and libfftw3 were found
#   DSP_FFTW3_MPI_FOUND   also fftw3-mpi.h and libfftw3_mpi (FFTW-MPI)
# dsp_fft3d_link(<target>) adds FFTW's include directory and libraries to a
# target, and FFT3D_HAVE_FFTW_MPI when FFTW-MPI was found. On Debian:
# apt-get install libfftw3-dev libfftw3-mpi-dev (scripts/deps.sh does).
find_path(DSP_FFTW3_INCLUDE_DIR fftw3.h)
find_library(DSP_FFTW3_LIB fftw3)
find_path(DSP_FFTW3_MPI_INCLUDE_DIR fftw3-mpi.h)
find_library(DSP_FFTW3_MPI_LIB fftw3_mpi)
set(DSP_FFTW3_FOUND OFF)
set(DSP_FFTW3_MPI_FOUND OFF)
if(DSP_FFTW3_INCLUDE_DIR AND DSP_FFTW3_LIB)
  set(DSP_FFTW3_FOUND ON)
  if(DSP_FFTW3_MPI_INCLUDE_DIR AND DSP_FFTW3_MPI_LIB AND DSP_WITH_MPI)
    set(DSP_FFTW3_MPI_FOUND ON)
  endif()
endif()

function(dsp_fft3d_link target)
  target_include_directories(${target} SYSTEM PRIVATE ${DSP_FFTW3_INCLUDE_DIR})
  if(DSP_FFTW3_MPI_FOUND)
    target_include_directories(${target} SYSTEM PRIVATE ${DSP_FFTW3_MPI_INCLUDE_DIR})
    target_compile_definitions(${target} PRIVATE FFT3D_HAVE_FFTW_MPI)
    target_link_libraries(${target} PRIVATE ${DSP_FFTW3_MPI_LIB})
  endif()
  target_link_libraries(${target} PRIVATE ${DSP_FFTW3_LIB})
endfunction()
