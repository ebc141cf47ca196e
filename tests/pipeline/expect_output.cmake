# cmake -DCMD=<arg|arg|...> -DLIMIT=<seconds> -DEXPECT=<regex@@regex...> [-DREJECT=<regex>] -P expect_output.cmake
# Runs CMD (arguments separated by '|'); fails when it runs past LIMIT seconds (a hang), when its
# output lacks any EXPECT regex or contains REJECT. The exit status is not checked: a job that
# mpirun aborts ends non-zero by design.
string(REPLACE "|" ";" cmd "${CMD}")
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${cmd} TIMEOUT ${LIMIT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(TIMESTAMP t1 "%s")
math(EXPR secs "${t1} - ${t0}")
set(all "${out}${err}")
if(rc MATCHES "timeout" OR secs GREATER_EQUAL LIMIT)
  message(FATAL_ERROR "hang: still running after ${LIMIT} s (status: ${rc})\n${all}")
endif()
string(REPLACE "@@" ";" expected "${EXPECT}")
foreach(re IN LISTS expected)
  if(NOT all MATCHES "${re}")
    message(FATAL_ERROR "ended after ${secs} s (status ${rc}) without the expected output: ${re}\n${all}")
  endif()
endforeach()
if(DEFINED REJECT AND all MATCHES "${REJECT}")
  message(FATAL_ERROR "ended after ${secs} s (status ${rc}) with output that must not appear: ${REJECT}\n${all}")
endif()
message(STATUS "ended after ${secs} s (status ${rc}) with the expected outcome\n${all}")
