// A fixture of layering.folder_cycle_is_found: alpha includes beta ...
#pragma once

#include "clusterd/beta/b.h"
