# SPDX-License-Identifier: BSD-3-Clause
# The Python module (python/, docs/python.md): built where pybind11 and mpi4py
# are found for one Python interpreter. DSP_BUILD_PYTHON: AUTO (the default at
# the top level: build it when found), ON (require it), OFF. Off in sanitizer
# builds: an ASan module does not load into an uninstrumented interpreter.
#
# The interpreter: Python_EXECUTABLE when given; else the first of `python3`
# on PATH and /usr/bin/python3 that imports mpi4py and numpy (Debian's
# python3-mpi4py and pybind11-dev belong to /usr/bin/python3, which need not
# be the first python3 on PATH).
set(DSP_PYTHON_MISSING "")
if(NOT Python_EXECUTABLE)
  find_program(_dsp_path_python python3)
  foreach(_py IN ITEMS "${_dsp_path_python}" /usr/bin/python3)
    if(_py AND EXISTS "${_py}")
      execute_process(COMMAND "${_py}" -c "import mpi4py, numpy" RESULT_VARIABLE _dsp_py_rc OUTPUT_QUIET ERROR_QUIET)
      if(_dsp_py_rc EQUAL 0)
        set(Python_EXECUTABLE "${_py}")
        break()
      endif()
    endif()
  endforeach()
endif()
if(NOT Python_EXECUTABLE)
  set(DSP_PYTHON_MISSING "no python3 that imports mpi4py and numpy (Debian: python3-mpi4py python3-numpy)")
else()
  set(PYBIND11_FINDPYTHON ON)
  find_package(pybind11 CONFIG QUIET)
  if(NOT pybind11_FOUND)
    set(DSP_PYTHON_MISSING "no pybind11 (Debian: pybind11-dev)")
  else()
    execute_process(COMMAND "${Python_EXECUTABLE}" -c "import mpi4py; print(mpi4py.get_include())"
                    OUTPUT_VARIABLE DSP_MPI4PY_INCLUDE_DIR OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _dsp_py_rc)
    if(NOT _dsp_py_rc EQUAL 0 OR NOT EXISTS "${DSP_MPI4PY_INCLUDE_DIR}/mpi4py/mpi4py.h")
      set(DSP_PYTHON_MISSING "mpi4py's C headers not found for ${Python_EXECUTABLE}")
    endif()
  endif()
endif()
if(DSP_PYTHON_MISSING STREQUAL "")
  set(DSP_WITH_PYTHON ON)
  set(Python3_VERSION_MAJOR ${Python_VERSION_MAJOR})
  set(Python3_VERSION_MINOR ${Python_VERSION_MINOR})
  add_subdirectory(python)
  message(STATUS "dsp: the Python module with ${Python_EXECUTABLE} (${Python_VERSION})")
elseif(DSP_BUILD_PYTHON STREQUAL "ON")
  message(FATAL_ERROR "DSP_BUILD_PYTHON=ON but ${DSP_PYTHON_MISSING}")
else()
  message(STATUS "dsp: ${DSP_PYTHON_MISSING}: the Python module and its tests are left out")
endif()
