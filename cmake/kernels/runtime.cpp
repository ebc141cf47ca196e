// sluice::kernels: the functions that are not templates, compiled once (<sluice/impl/src.hpp>).
#include <sluice/impl/src.hpp>
