# cmake -DBUILD_DIR=... -DTARGET=... -DEXPECTED=... -P expect_compile_error.cmake
# Builds TARGET, which must fail, with EXPECTED (a plain substring) somewhere in the compiler's output.
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but it must not")
endif()
string(FIND "${out}${err}" "${EXPECTED}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${TARGET} failed to compile, but without the expected text\n  expected: ${EXPECTED}\n  got:\n${out}${err}")
endif()
message(STATUS "${TARGET}: failed to compile with the expected error: ${EXPECTED}")
