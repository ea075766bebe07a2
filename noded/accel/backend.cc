#include "noded/accel/backend.h"

#include <cstdio>

#include "noded/accel/ascend_backend.h"
#include "noded/accel/npu_smi.h"
#include "noded/accel/nvml_backend.h"
#include "noded/accel/sim_backend.h"

namespace clusterd::noded {

std::string FormatErrorCode(uint32_t code) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08X", code);
  return buf;
}

StatusOr<std::unique_ptr<AcceleratorBackend>> MakeBackend(const BackendOptions& options) {
  if (options.kind == "none") return std::unique_ptr<AcceleratorBackend>(std::make_unique<NoneBackend>());
  if (options.kind == "sim") {
    if (options.sim_devices < 0 || options.sim_devices > kMaxSimDevices) {
      return InvalidArgument("sim_devices: " + std::to_string(options.sim_devices) + " is not in 0.." +
                             std::to_string(kMaxSimDevices));
    }
    return std::unique_ptr<AcceleratorBackend>(std::make_unique<SimBackend>(options.sim_devices));
  }
  if (options.kind == "ascend") {
    return std::unique_ptr<AcceleratorBackend>(
        std::make_unique<AscendBackend>(AscendBackendOptions{MakeAscendPaths(options)}));
  }
  if (options.kind == "nvml") {
    if (options.nvml_call_timeout.count() <= 0) return InvalidArgument("nvml_call_timeout: must be positive");
    NvmlBackendOptions o;
    o.paths = MakeNvmlPaths(options);
    o.call_timeout = options.nvml_call_timeout;
    o.xid_hold = options.nvml_xid_hold;
    return std::unique_ptr<AcceleratorBackend>(std::make_unique<NvmlBackend>(std::move(o)));
  }
  if (options.kind == "npu-smi") {
    if (options.npu_smi_command.find_first_not_of(" \t") == std::string::npos) {
      return InvalidArgument("npu_smi_command: must not be empty");
    }
    if (options.npu_smi_timeout.count() <= 0) return InvalidArgument("npu_smi_timeout: must be positive");
    return std::unique_ptr<AcceleratorBackend>(std::make_unique<NpuSmiBackend>(
        NpuSmiBackend::CommandSource(options.npu_smi_command, options.npu_smi_timeout)));
  }
  return InvalidArgument("accelerator: unknown kind '" + options.kind +
                         "' (expected ascend, nvml, npu-smi, sim or none)");
}

}  // namespace clusterd::noded
