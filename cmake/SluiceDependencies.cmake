# One place that finds sluice's dependencies; used by the build and by the installed package
# config, so a consumer's find_package(sluice) resolves exactly what the build resolved.
include_guard(GLOBAL)

# sluice_find_engine(<ENGINE> <package> <found-variable> [find_package arguments...]): sets
# SLUICE_HAVE_<ENGINE>. SLUICE_ENABLE_<ENGINE> unset: found if present; ON: required; OFF: skipped.
macro(sluice_find_engine engine package found)
  set(SLUICE_HAVE_${engine} OFF)
  if(NOT DEFINED SLUICE_ENABLE_${engine} OR SLUICE_ENABLE_${engine})
    if(SLUICE_ENABLE_${engine})
      find_package(${package} REQUIRED ${ARGN})
    else()
      find_package(${package} QUIET ${ARGN})
    endif()
    if(${found})
      set(SLUICE_HAVE_${engine} ON)
    endif()
  endif()
endmacro()

macro(sluice_find_dependencies)
  include(CMakeFindDependencyMacro)
  find_package(Threads REQUIRED)
  find_package(fmt 9 REQUIRED)

  if(NOT DEFINED SLUICE_ENABLE_OPENMP)
    set(SLUICE_ENABLE_OPENMP ON)
  endif()
  if(SLUICE_ENABLE_OPENMP)
    find_package(OpenMP COMPONENTS CXX)
  endif()

  find_package(PkgConfig QUIET)
  set(SLUICE_HAVE_HWLOC OFF)
  if(PkgConfig_FOUND AND NOT SLUICE_DISABLE_HWLOC)
    pkg_check_modules(hwloc QUIET IMPORTED_TARGET hwloc)
    if(hwloc_FOUND)
      set(SLUICE_HAVE_HWLOC ON)
    endif()
  endif()

  # Optional engines: "if found" unless forced ON (then required) or OFF. libtorch (Debian:
  # libtorch-dev) is the engine of sluice::torch, the adapter of include/sluice/torch/.
  sluice_find_engine(MPI MPI MPI_CXX_FOUND COMPONENTS CXX)
  sluice_find_engine(ZMQ cppzmq cppzmq_FOUND)
  sluice_find_engine(CUDA CUDAToolkit CUDAToolkit_FOUND)
  sluice_find_engine(TORCH Torch Torch_FOUND)

  # NCCL: the CUDA Toolkit's own copy or a system package (libnccl-dev); SLUICE_ENABLE_NCCL=OFF skips
  # it, =ON makes it required.
  set(SLUICE_HAVE_NCCL OFF)
  if(SLUICE_HAVE_CUDA AND (NOT DEFINED SLUICE_ENABLE_NCCL OR SLUICE_ENABLE_NCCL))
    find_path(SLUICE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(SLUICE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(SLUICE_NCCL_INCLUDE_DIR AND SLUICE_NCCL_LIBRARY)
      set(SLUICE_HAVE_NCCL ON)
      if(NOT TARGET sluice::nccl_library)
        add_library(sluice::nccl_library UNKNOWN IMPORTED)
        set_target_properties(sluice::nccl_library PROPERTIES IMPORTED_LOCATION "${SLUICE_NCCL_LIBRARY}"
                              INTERFACE_INCLUDE_DIRECTORIES "${SLUICE_NCCL_INCLUDE_DIR}")
      endif()
    elseif(SLUICE_ENABLE_NCCL)
      message(FATAL_ERROR "sluice: SLUICE_ENABLE_NCCL=ON but nccl.h / libnccl were not found")
    endif()
  endif()
endmacro()
