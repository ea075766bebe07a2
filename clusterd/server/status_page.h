// The live status page served at "/" on ClusterD's HTTP port
// (clusterd/server/status_page/index.html, compiled in at build time). It
// carries no cluster data: it reads the JSON API (http_api.h) from the
// browser, so serving it needs no token.
#pragma once

#include <string_view>

namespace clusterd {

std::string_view StatusPageHtml();

}  // namespace clusterd
