# cmake -DNM=<nm> -DOBJECTS=<a.o;b.o> -P no_kernel_code.cmake
# Fails if the objects of a translation unit built with SLUICE_SEPARATE_KERNELS define one of the
# kernels or functions sluice::kernels holds (the extern template declarations or SLUICE_DECL
# stopped working), or if they call none (then the check says nothing).
set(_kernel "(sluice::detail::optim::run_(dense|sparse)<|sluice::detail::compress::select_top_k<|\
sluice::layout::(add|deserialize|serialize)\\(|sluice::feedback_state::(save|restore)\\(|\
sluice::detail::pipeline::stages::(~stages|reset|start|applied|emit)\\(|sluice::detail::pipeline::read_checkpoint\\(|sluice::detail::read_sysfs\\()")
set(_defined 0)
set(_called 0)
foreach(_o IN LISTS OBJECTS)
  execute_process(COMMAND ${NM} -C ${_o} OUTPUT_VARIABLE _out RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${NM} -C ${_o} failed (${_rc})")
  endif()
  string(REPLACE "\n" ";" _lines "${_out}")
  foreach(_l IN LISTS _lines)
    if(_l MATCHES "^[0-9a-f]+ [TtWw] .*${_kernel}")
      message(SEND_ERROR "${_o} defines a kernel of sluice::kernels: ${_l}")
      math(EXPR _defined "${_defined} + 1")
    elseif(_l MATCHES "^ +U .*${_kernel}")
      math(EXPR _called "${_called} + 1")
    endif()
  endforeach()
endforeach()
if(_called EQUAL 0)
  message(FATAL_ERROR "the objects call no kernel of sluice::kernels: ${OBJECTS}")
endif()
message(STATUS "${_called} kernels of sluice::kernels called, ${_defined} defined here")
