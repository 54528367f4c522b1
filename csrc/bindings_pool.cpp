// Bindings of the pooling family (filled in by the pooling work).
#include <nanobind/nanobind.h>

namespace nb = nanobind;

namespace lattice {

void bind_pool(nb::module_& m) { (void)m; }

}  // namespace lattice
