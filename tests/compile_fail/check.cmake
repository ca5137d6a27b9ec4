# SPDX-License-Identifier: BSD-3-Clause
# Runs one compile test: builds DSP_TARGET in BUILD_DIR and checks the outcome.
# compile_ok must build. Every other target must fail with exactly ERRORS
# compiler errors (default 1) and its output must match EXPECT: the
# static_assert that names the rule, with nothing after it (no "incomplete
# type", no "no match"). Only a failed constant expression (the cost model's
# overflow) needs two with GCC: "non-constant condition" and the throw that
# caused it (nvcc reports the throw as a note: one error).
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${DSP_TARGET} --config ${CONFIG}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
string(APPEND out "${err}")
string(REPLACE ";" "," out "${out}")  # messages contain ';', CMake's list separator
if(DSP_TARGET STREQUAL "compile_ok")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "compile_ok did not build:\n${out}")
  endif()
  return()
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "${DSP_TARGET} compiled, but it must not")
endif()
string(REGEX MATCHALL "[^\n]*error:[^\n]*" errors "${out}")
list(LENGTH errors count)
if(NOT ERRORS)
  set(ERRORS 1)
endif()
if(NOT count EQUAL ERRORS)
  message(FATAL_ERROR "${DSP_TARGET}: expected ${ERRORS} compiler error(s), got ${count}:\n${out}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "${DSP_TARGET}: the error does not match '${EXPECT}':\n${out}")
endif()
message(STATUS "${DSP_TARGET}: ${errors}")
