# Runs one packaging test in script mode: MODE is find_package or add_subdirectory. In find_package
# mode the consumer is also configured as on a machine without the CUDA Toolkit
# (CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit): it must configure with the engines it asks for (mpi,
# zmq, when this machine has them), and asking for `cuda` there must fail with sluice's message;
# the installed sluice::kernels (its sources and the impl/*.ipp headers) must build and link a
# second consumer.
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
  # The default build then builds sluice-plan only (SLUICE_BUILD_TOOLS), which the install needs.
  run(${CMAKE_COMMAND} -S "${SLUICE_SOURCE_DIR}" -B "${WORK_DIR}/sluice-build" ${common}
      -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF -DSLUICE_BUILD_EXAMPLES=OFF -DSLUICE_VERIFY_HEADERS=OFF
      -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --build "${WORK_DIR}/sluice-build")
  run(${CMAKE_COMMAND} --install "${WORK_DIR}/sluice-build")
  foreach(f include/sluice/sluice.hpp bin/sluice-run share/sluice/netns.sh)
    if(NOT EXISTS "${WORK_DIR}/prefix/${f}")
      message(FATAL_ERROR "install did not place ${f}")
    endif()
  endforeach()
  # sluice-plan is built where CLI11 and nlohmann-json are found; then it must be installed and run.
  if(EXISTS "${WORK_DIR}/sluice-build/examples/sluice_plan/sluice-plan")
    if(NOT EXISTS "${WORK_DIR}/prefix/bin/sluice-plan")
      message(FATAL_ERROR "sluice-plan was built but the install did not place bin/sluice-plan")
    endif()
    run("${WORK_DIR}/prefix/bin/sluice-plan" --example)
  endif()
  run("${WORK_DIR}/prefix/bin/sluice-run" -n 2 --quiet -- true)
  set(consumer -S "${CMAKE_CURRENT_LIST_DIR}/consumer" ${common} -DCONSUMER_MODE=find_package
               -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
  file(GLOB installed RELATIVE "${WORK_DIR}/prefix/share/cmake/sluice" "${WORK_DIR}/prefix/share/cmake/sluice/sluice-*Targets.cmake")
  set(engines "")
  foreach(f IN LISTS installed)
    string(REGEX REPLACE "^sluice-(.*)Targets\\.cmake$" "\\1" e "${f}")
    if(e MATCHES "^(mpi|zmq)$")
      list(APPEND engines ${e})
    endif()
  endforeach()
  list(JOIN engines "\\;" engines_arg)
  run(${CMAKE_COMMAND} ${consumer} -B "${WORK_DIR}/consumer-nocuda" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
      "-DSLUICE_COMPONENTS=${engines_arg}")
  if(EXISTS "${WORK_DIR}/prefix/share/cmake/sluice/sluice-cudaTargets.cmake")
    execute_process(COMMAND ${CMAKE_COMMAND} ${consumer} -B "${WORK_DIR}/consumer-nocuda-cuda"
                            -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DSLUICE_COMPONENTS=cuda
                    WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "CUDAToolkit")
      message(FATAL_ERROR "requiring the cuda component without the CUDA Toolkit must fail naming it (rc ${rc}):\n${out}\n${err}")
    endif()
  endif()
  run(${CMAKE_COMMAND} ${consumer} -B "${WORK_DIR}/consumer-build" -DCONSUMER_KERNELS=ON)
else()
  run(${CMAKE_COMMAND} -S "${CMAKE_CURRENT_LIST_DIR}/consumer" -B "${WORK_DIR}/consumer-build" ${common}
      -DCONSUMER_MODE=add_subdirectory -DSLUICE_SOURCE_DIR=${SLUICE_SOURCE_DIR})
endif()
run(${CMAKE_COMMAND} --build "${WORK_DIR}/consumer-build")
run("${WORK_DIR}/consumer-build/consumer")
if(MODE STREQUAL "find_package")
  run("${WORK_DIR}/consumer-build/consumer_kernels")
endif()
