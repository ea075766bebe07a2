#include "noded/collectors/memory.h"

namespace clusterd::noded {
namespace {

// "some avg10=0.00 avg60=0.00 avg300=0.00 total=0"
std::optional<Pressure> ParsePressureLine(std::string_view line) {
  auto f = SplitWhitespace(line);
  if (f.size() < 5) return std::nullopt;
  Pressure p;
  int found = 0;
  for (size_t i = 1; i < f.size(); ++i) {
    size_t eq = f[i].find('=');
    if (eq == std::string_view::npos) continue;
    auto key = f[i].substr(0, eq);
    auto val = f[i].substr(eq + 1);
    if (key == "total") {
      auto v = ParseUint(val);
      if (!v) return std::nullopt;
      p.total_us = *v;
      ++found;
      continue;
    }
    auto v = ParseDouble(val);
    if (!v) return std::nullopt;
    double* slot = key == "avg10" ? &p.avg10 : key == "avg60" ? &p.avg60 : key == "avg300" ? &p.avg300 : nullptr;
    if (slot == nullptr) continue;
    *slot = *v;
    ++found;
  }
  if (found < 4) return std::nullopt;
  return p;
}

}  // namespace

MemoryCollector::MemoryCollector(std::string root) : fs_(std::move(root)) {}

StatusOr<MemoryReading> MemoryCollector::Collect() const {
  auto meminfo = fs_.Read("/proc/meminfo");
  if (!meminfo.ok()) return meminfo.status();

  MemoryReading r;
  std::string_view rest = *meminfo;
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    // "MemTotal:       16318396 kB" (HugePages_* lines have no unit: a count).
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    auto f = SplitWhitespace(line.substr(colon + 1));
    if (f.empty()) continue;
    if (auto v = ParseUint(f[0])) r.meminfo_kib[std::string(Trim(line.substr(0, colon)))] = *v;
  }
  auto get = [&](const char* key) -> std::optional<uint64_t> {
    auto it = r.meminfo_kib.find(key);
    if (it == r.meminfo_kib.end()) return std::nullopt;
    return it->second;
  };
  auto total = get("MemTotal");
  if (!total || *total == 0) return DataLoss(fs_.Path("/proc/meminfo") + ": no MemTotal");
  r.total_kib = *total;
  if (auto avail = get("MemAvailable")) {
    r.available_kib = *avail;
  } else {
    r.available_kib = get("MemFree").value_or(0) + get("Buffers").value_or(0) + get("Cached").value_or(0);
  }
  r.available_percent = 100.0 * static_cast<double>(r.available_kib) / static_cast<double>(r.total_kib);
  r.hardware_corrupted_kib = get("HardwareCorrupted").value_or(0);

  if (auto psi = fs_.Read("/proc/pressure/memory"); psi.ok()) {
    std::string_view prest = *psi;
    while (!prest.empty()) {
      size_t nl = prest.find('\n');
      std::string_view line = prest.substr(0, nl);
      prest = nl == std::string_view::npos ? std::string_view() : prest.substr(nl + 1);
      if (line.starts_with("some "))
        r.pressure_some = ParsePressureLine(line);
      else if (line.starts_with("full "))
        r.pressure_full = ParsePressureLine(line);
    }
  }

  for (const auto& name : fs_.List("/sys/devices/system/edac/mc")) {
    if (!name.starts_with("mc") || !ParseUint(std::string_view(name).substr(2))) continue;
    const std::string dir = "/sys/devices/system/edac/mc/" + name;
    auto ce = fs_.ReadUint(dir + "/ce_count");
    auto ue = fs_.ReadUint(dir + "/ue_count");
    if (!ce && !ue) continue;
    EdacController mc{name, ce.value_or(0), ue.value_or(0)};
    r.ecc_corrected += mc.ce_count;
    r.ecc_uncorrected += mc.ue_count;
    r.edac.push_back(std::move(mc));
  }
  return r;
}

}  // namespace clusterd::noded
