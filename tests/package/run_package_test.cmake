# Runs one packaging test in script mode: MODE is find_package or add_subdirectory.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

set(common -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} -S "${SLUICE_SOURCE_DIR}" -B "${WORK_DIR}/sluice-build" ${common}
      -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF -DSLUICE_BUILD_EXAMPLES=OFF
      -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --install "${WORK_DIR}/sluice-build")
  if(NOT EXISTS "${WORK_DIR}/prefix/include/sluice/sluice.hpp")
    message(FATAL_ERROR "install did not place include/sluice/sluice.hpp")
  endif()
  run(${CMAKE_COMMAND} -S "${CMAKE_CURRENT_LIST_DIR}/consumer" -B "${WORK_DIR}/consumer-build" ${common}
      -DCONSUMER_MODE=find_package -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
else()
  run(${CMAKE_COMMAND} -S "${CMAKE_CURRENT_LIST_DIR}/consumer" -B "${WORK_DIR}/consumer-build" ${common}
      -DCONSUMER_MODE=add_subdirectory -DSLUICE_SOURCE_DIR=${SLUICE_SOURCE_DIR})
endif()
run(${CMAKE_COMMAND} --build "${WORK_DIR}/consumer-build")
run("${WORK_DIR}/consumer-build/consumer")
