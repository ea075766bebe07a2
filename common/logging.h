// One named spdlog logger per component ("store", "ingest", "agent", ...).
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace clusterd {

// Returns the logger for a component, creating it on first use. Thread-safe.
std::shared_ptr<spdlog::logger> GetLogger(const std::string& component);

// Sets the level of every existing and future logger ("debug", "info", ...).
void SetLogLevel(const std::string& level);

}  // namespace clusterd
