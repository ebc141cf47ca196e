# sluice_add_kernels(<name>)
#
# A static library <name> holding what sluice can compile once: the stamped kernels (the optimizer
# steps of every step rule, moment precision, shadow and index width,
# include/sluice/optim/detail/instances.hpp, and the top-k selection of every element type,
# include/sluice/compress/detail/instances.hpp) and the functions that are not templates (the
# pipeline's scheduler, plans and checkpoint reader, layouts, feedback state, the cache probe:
# SLUICE_DECL in include/sluice/config.hpp, bodies in include/sluice/*/impl/*.ipp), for trainers
# whose translation units include a pipeline, an optimizer or a codec. Linking it defines
# SLUICE_SEPARATE_KERNELS for the consumer, whose translation units then declare those kernels
# `extern template` and those functions without their bodies, and generate no code for them. A
# program links it into every unit that includes sluice, or into none. It is compiled with the consumer's
# compiler and flags; the header-only default (sluice::sluice alone) is unchanged. The top-level
# project and find_package(sluice) create it as sluice::kernels (EXCLUDE_FROM_ALL: built when linked).
set(_SLUICE_KERNELS_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/kernels")  # in the tree and installed alike

function(sluice_add_kernels name)
  set(_sources "")
  foreach(_unit IN ITEMS optim_sgd optim_adam compress_select runtime)
    list(APPEND _sources "${_SLUICE_KERNELS_SOURCE_DIR}/${_unit}.cpp")
  endforeach()
  add_library(${name} STATIC EXCLUDE_FROM_ALL ${_sources})
  target_link_libraries(${name} PUBLIC sluice::sluice)
  target_compile_definitions(${name} PUBLIC SLUICE_SEPARATE_KERNELS=1)
endfunction()
