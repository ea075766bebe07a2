// Compiled by ctest (layering.unlinked_header_does_not_compile) with only
// clusterd_common's include path: the first include must be found, the second
// must not, because clusterd_engine is not linked.
#include "clusterd/engine/engine.h"
#include "common/status.h"
