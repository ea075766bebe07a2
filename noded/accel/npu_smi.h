// The npu-smi backend: a fallback for nodes where libdcmi.so cannot be loaded. It
// runs `npu-smi info` (no shell; killed after a timeout) and parses its table:
//
//   | NPU   Name                | Health        | Power(W)    Temp(C)   Hugepages-Usage(page)|
//   | Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB) |
//   +===========================+===============+==========================================+
//   | 0     910B3               | OK            | 95.1        36        0    / 0           |
//   | 0                         | 0000:C1:00.0  | 0           0    / 0  3396 / 65536       |
//
// Each chip is two rows: "NPU id, name | health | power, temperature, ..." then
// "chip index [, device or phy id] | bus id | ...". The second header line says
// which extra column the second row has: "Chip Device" (310P: the logic id),
// "Chip Phy-ID" (multi-chip boards), or just "Chip" (910A/910B). Parsing stops at
// the process table ("Process id" header).
//
// Device ids: the Device/Phy-ID column when present; otherwise the NPU id when
// every NPU has exactly one chip (chip index 0; that is the logic id on 910B
// boards); otherwise the chip's position in the output.
//
// Health: npu-smi prints OK, Warning, Alarm or Critical (DCMI health 0..3).
// `npu-smi info` shows no error codes, so a non-OK health is reported as one
// synthetic code (kept with the raw value, so ClusterD's catalog can map it):
//   Warning  -> "NPU_SMI_HEALTH_WARNING"   (health_raw 1)
//   Alarm    -> "NPU_SMI_HEALTH_ALARM"     (health_raw 2)
//   Critical -> "NPU_SMI_HEALTH_CRITICAL"  (health_raw 3)
//   anything else -> "NPU_SMI_HEALTH_UNKNOWN" (health_raw kHealthUnknown)
// "NA" or "-" in the power or temperature column leaves the field empty.
//
// Threads: not thread-safe; one thread calls Init/Devices/Poll (backend.h).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "noded/accel/backend.h"

namespace clusterd::noded {

inline constexpr const char* kNpuSmiHealthWarning = "NPU_SMI_HEALTH_WARNING";
inline constexpr const char* kNpuSmiHealthAlarm = "NPU_SMI_HEALTH_ALARM";
inline constexpr const char* kNpuSmiHealthCritical = "NPU_SMI_HEALTH_CRITICAL";
inline constexpr const char* kNpuSmiHealthUnknown = "NPU_SMI_HEALTH_UNKNOWN";

// One chip of `npu-smi info`.
struct NpuSmiChip {
  int32_t id = 0;  // assigned as described above
  int npu_id = 0;
  int chip = 0;                  // chip index within the NPU
  std::optional<int> column_id;  // the Device / Phy-ID column, if the table has one
  std::string name;              // "910B3"
  std::string health;            // as printed: "OK", "Warning", ...
  std::optional<double> power_w;
  std::optional<double> temperature_c;
  std::string bus_id;  // "0000:C1:00.0"
};

// Parses the text of `npu-smi info`. InvalidArgument (with the line number) when
// there is no device table header, a row is incomplete or a number is malformed,
// or two chips get the same id. A table with no chips parses to an empty list.
StatusOr<std::vector<NpuSmiChip>> ParseNpuSmiInfo(std::string_view text);

// health_raw and the synthetic code (nullopt for OK) for a printed health value.
uint32_t NpuSmiHealthRaw(std::string_view health);
std::optional<std::string> NpuSmiHealthCode(std::string_view health);

// Runs argv[0] (searched on PATH) with argv, without a shell, and returns its
// standard output (standard error is discarded). DeadlineExceeded after `timeout`
// (the process is killed); Unavailable if it cannot start or exits non-zero;
// ResourceExhausted if it prints more than max_output bytes.
StatusOr<std::string> RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                 size_t max_output = 1 << 20);

// The same run, its exit status and output kept whatever they are (a
// validation command's evidence, docs/validation.md).
struct CaptureOptions {
  size_t max_output = 1 << 20;
  // Standard error into the output too (else discarded).
  bool with_stderr = false;
  // More output than max_output keeps its last max_output bytes (truncated),
  // and a timeout is a run with timed_out set, not an error.
  bool keep_tail = false;
};
struct CommandRun {
  int exit_code = -1;  // -1: it did not exit by itself
  int signal = 0;      // the signal that ended it, 0: none
  bool timed_out = false;
  bool truncated = false;
  std::string output;
};
StatusOr<CommandRun> RunCommandCapture(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                       const CaptureOptions& options);

class NpuSmiBackend final : public AcceleratorBackend {
 public:
  // Where the text comes from: the real command, or a fixture in tests.
  using Source = std::function<StatusOr<std::string>()>;

  // `command` split on whitespace, run with RunCommand.
  static Source CommandSource(const std::string& command, std::chrono::milliseconds timeout);

  explicit NpuSmiBackend(Source source);

  // Runs the source once and parses it: fails if npu-smi is missing or its
  // output cannot be parsed.
  Status Init() override;
  StatusOr<std::vector<DeviceInfo>> Devices() override;
  StatusOr<std::vector<DeviceStatus>> Poll() override;
  std::string name() const override { return "npu-smi"; }

 private:
  StatusOr<std::vector<NpuSmiChip>> Read();

  Source source_;
  bool initialised_ = false;
};

}  // namespace clusterd::noded
