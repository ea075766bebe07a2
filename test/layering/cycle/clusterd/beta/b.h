// ... and beta includes alpha: a folder-level cycle.
#pragma once

#include "clusterd/alpha/a.h"
