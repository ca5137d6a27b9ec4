# SPDX-License-Identifier: BSD-3-Clause
# Generates dsp.pc (pkg-config) at configure time from the Kokkos target found
# by dspDependencies.cmake; dspInstall.cmake installs it.
#
# Cflags: -std=c++20, dsp's include directory and Kokkos's (-isystem; plus the compile
# options and definitions Kokkos asks of its users, e.g. -fopenmp for an OpenMP
# Kokkos). Libs: the Kokkos core library (the only Kokkos library dsp's headers
# use) and what it links against, as CMake would link a consumer. Kokkos 3.x
# from Trilinos (Debian) calls it trilinos_kokkoscore; Kokkos 4 (and 3.x
# standalone) Kokkos::kokkoscore. MPI is not in the file: it comes from the MPI
# compiler wrapper (mpicxx).

# Replaces the generator expressions Kokkos' exported targets use by what they
# mean for a C++ consumer, e.g. $<$<COMPILE_LANGUAGE:CXX>:-extended-lambda;-arch=sm_90>
# by its two options; drops (with a note) those that cannot be resolved here.
function(_dsp_pc_resolve out value)
  string(REGEX REPLACE "\\$<\\$<(COMPILE|LINK)_LANGUAGE:CXX>:([^<>]*)>" "\\2" value "${value}")
  string(REGEX REPLACE "\\$<(LINK_ONLY|INSTALL_INTERFACE):([^<>]*)>" "\\2" value "${value}")
  string(REGEX REPLACE "\\$<BUILD_INTERFACE:[^<>]*>" "" value "${value}")
  set(result "")
  foreach(item IN LISTS value)
    if(item MATCHES "\\$<|>$")
      message(STATUS "dsp.pc: skipped '${item}' from the Kokkos targets (generator expression)")
    elseif(NOT item STREQUAL "")
      list(APPEND result "${item}")
    endif()
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# The file an imported library target points at, for the build type if it has one.
function(_dsp_pc_location tgt out)
  set(loc "")
  get_target_property(configs ${tgt} IMPORTED_CONFIGURATIONS)
  string(TOUPPER "${CMAKE_BUILD_TYPE}" bt)
  if(configs)
    list(FIND configs "${bt}" i)
    if(i LESS 0)
      list(GET configs 0 bt)
    endif()
    get_target_property(loc ${tgt} IMPORTED_LOCATION_${bt})
  endif()
  if(NOT loc)
    get_target_property(loc ${tgt} IMPORTED_LOCATION)
  endif()
  set(${out} "${loc}" PARENT_SCOPE)
endfunction()

# A library file as linker flags: -l<name> (after -L<dir> and an rpath when the
# directory is not one the compiler searches anyway), or the path itself when
# -l<name> would not find that file.
function(_dsp_pc_library_flags file out)
  get_filename_component(dir "${file}" DIRECTORY)
  get_filename_component(name "${file}" NAME)
  set(flags "${file}")
  if(name MATCHES "^lib(.+)\\.(so|a|dylib)(\\.[0-9.]+)?$")
    set(base "${CMAKE_MATCH_1}")
    if(EXISTS "${dir}/lib${base}${CMAKE_SHARED_LIBRARY_SUFFIX}" OR EXISTS "${dir}/lib${base}.a")
      set(flags "-l${base}")
      if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
        set(flags "-L${dir}" "-Wl,-rpath,${dir}" "-l${base}")
      endif()
    endif()
  endif()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

# Collects, depth first, the usage requirements of `tgt` and of every target it
# links to into _dsp_pc_incs, _dsp_pc_cflags and _dsp_pc_libs (parent scope).
# With libraries OFF, only include directories are collected.
function(_dsp_pc_walk tgt libraries)
  get_property(seen GLOBAL PROPERTY _dsp_pc_seen)
  if(tgt IN_LIST seen)
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY _dsp_pc_seen ${tgt})
  foreach(p INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES)
    get_target_property(v ${tgt} ${p})
    if(v)
      _dsp_pc_resolve(v "${v}")
      list(APPEND _dsp_pc_incs ${v})
    endif()
  endforeach()
  if(libraries)
    get_target_property(v ${tgt} INTERFACE_COMPILE_OPTIONS)
    if(v)
      _dsp_pc_resolve(v "${v}")
      list(APPEND _dsp_pc_cflags ${v})
    endif()
    get_target_property(v ${tgt} INTERFACE_COMPILE_DEFINITIONS)
    if(v)
      _dsp_pc_resolve(v "${v}")
      foreach(d IN LISTS v)
        list(APPEND _dsp_pc_cflags "-D${d}")
      endforeach()
    endif()
    get_target_property(type ${tgt} TYPE)
    if(type MATCHES "^(SHARED|STATIC|UNKNOWN)_LIBRARY$")
      _dsp_pc_location(${tgt} loc)
      if(loc)
        _dsp_pc_library_flags("${loc}" f)
        list(APPEND _dsp_pc_libs ${f})
      endif()
    endif()
    get_target_property(v ${tgt} INTERFACE_LINK_OPTIONS)
    if(v)
      _dsp_pc_resolve(v "${v}")
      foreach(o IN LISTS v)
        if(NOT o MATCHES "^-D")  # Kokkos marks its link lines with -DKOKKOS_DEPENDENCE
          list(APPEND _dsp_pc_libs "${o}")
        endif()
      endforeach()
    endif()
    get_target_property(deps ${tgt} INTERFACE_LINK_LIBRARIES)
    if(deps)
      _dsp_pc_resolve(deps "${deps}")
      foreach(d IN LISTS deps)
        if(TARGET ${d})
          _dsp_pc_walk(${d} ON)
        elseif(IS_ABSOLUTE "${d}")
          _dsp_pc_library_flags("${d}" f)
          list(APPEND _dsp_pc_libs ${f})
        elseif(d MATCHES "^-D")
          # Kokkos marks its link lines with -DKOKKOS_DEPENDENCE; not a library.
        elseif(d MATCHES "^-")
          list(APPEND _dsp_pc_libs "${d}")
        else()
          list(APPEND _dsp_pc_libs "-l${d}")
        endif()
      endforeach()
    endif()
  endif()
  set(_dsp_pc_incs "${_dsp_pc_incs}" PARENT_SCOPE)
  set(_dsp_pc_cflags "${_dsp_pc_cflags}" PARENT_SCOPE)
  set(_dsp_pc_libs "${_dsp_pc_libs}" PARENT_SCOPE)
endfunction()

function(dsp_generate_pkg_config output)
  set(_dsp_pc_incs "")
  set(_dsp_pc_cflags "")
  set(_dsp_pc_libs "")
  set_property(GLOBAL PROPERTY _dsp_pc_seen "")
  # The core library: Kokkos::kokkos links it (Kokkos 4: Kokkos::kokkoscore;
  # Debian's Kokkos 3.4: trilinos_kokkoscore), besides containers, algorithms
  # and simd, which dsp does not use. Only the core's libraries are taken.
  _dsp_pc_walk(Kokkos::kokkos OFF)
  set(core "")
  get_target_property(deps Kokkos::kokkos INTERFACE_LINK_LIBRARIES)
  if(deps)
    foreach(d IN LISTS deps)
      if(TARGET ${d} AND d MATCHES "kokkoscore$")
        set(core ${d})
      endif()
    endforeach()
  endif()
  if(core)
    _dsp_pc_walk(${core} ON)
  else()
    # A Kokkos whose umbrella target is the library itself.
    set_property(GLOBAL PROPERTY _dsp_pc_seen "")
    _dsp_pc_walk(Kokkos::kokkos ON)
  endif()

  set(dirs "")
  foreach(d IN LISTS _dsp_pc_incs)
    if(EXISTS "${d}")
      file(REAL_PATH "${d}" d)
    endif()
    if(NOT d IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      list(APPEND dirs "${d}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  # -isystem, as CMake treats an imported target's directories: Kokkos 3.4's
  # headers warn under -std=c++20 (-Wvolatile, -Wdeprecated-enum-enum-conversion).
  set(incs "")
  foreach(d IN LISTS dirs)
    list(APPEND incs "-isystem" "${d}")
  endforeach()
  list(REMOVE_DUPLICATES _dsp_pc_cflags)
  list(REMOVE_DUPLICATES _dsp_pc_libs)
  if(NOT _dsp_pc_libs)
    message(WARNING "dsp.pc: found no Kokkos library to link in the Kokkos::kokkos target; Libs is empty")
  endif()
  list(JOIN incs " " DSP_PC_CFLAGS)
  list(JOIN _dsp_pc_cflags " " cflags)
  string(STRIP "-std=c++20 -I\${includedir} ${DSP_PC_CFLAGS} ${cflags}" DSP_PC_CFLAGS)
  list(JOIN _dsp_pc_libs " " DSP_PC_LIBS)

  # The installed file finds its prefix from its own location (${pcfiledir}), so
  # `cmake --install --prefix` elsewhere and moving the tree keep it right.
  set(pcdir "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  if(IS_ABSOLUTE "${pcdir}")
    set(DSP_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  else()
    file(RELATIVE_PATH rel "/root/${pcdir}" "/root")
    string(REGEX REPLACE "/$" "" rel "${rel}")
    set(DSP_PC_PREFIX "\${pcfiledir}/${rel}")
  endif()
  if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(DSP_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
  else()
    set(DSP_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
  endif()

  if(DSP_WITH_MPI)
    set(DSP_PC_MPI_NOTE "# dsp was configured with MPI (dsp::MpiCommunicator, <dsp/mpi.hpp>). MPI's own flags are not
# here: MPI comes from the MPI compiler wrapper, so compile and link with mpicxx:
#   mpicxx -O2 app.cpp $(pkg-config --cflags --libs dsp) -o app")
  else()
    set(DSP_PC_MPI_NOTE "# dsp was configured without MPI: these flags are for <dsp/dsp.hpp> with a plain C++20
# compiler (for <dsp/mpi.hpp>, MPI would come from mpicxx, not from this file).")
  endif()
  set(DSP_PC_NCCL_NOTE "")
  if(DSP_WITH_NCCL)
    set(DSP_PC_NCCL_NOTE "# NCCL backend (<dsp/nccl.hpp>): NCCL and the CUDA runtime are not in these flags; add
#   -I${NCCL_INCLUDE_DIR} ${NCCL_LIBRARY} -L${CUDAToolkit_LIBRARY_DIR} -lcudart
# and compile with the compiler your Kokkos CUDA build uses.")
  endif()
  configure_file("${PROJECT_SOURCE_DIR}/cmake/dsp.pc.in" "${output}" @ONLY)
endfunction()
