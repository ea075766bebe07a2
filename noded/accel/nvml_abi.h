// The subset of NVIDIA's NVML C ABI (libnvidia-ml.so.1) that the nvml backend
// uses, declared from NVIDIA's public NVML API reference: types, constants and
// function-pointer typedefs only. The library is loaded with dlopen at run
// time, never linked; the test fake includes this header too, so both sides
// agree on the layouts. Entry points that NVML versions (nvmlInit_v2,
// nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2,
// nvmlDeviceGetPciInfo_v3, nvmlEventSetWait_v2) are resolved by their
// versioned names, as nvml.h's macros map them; nvmlSystemGetCudaDriverVersion_v2
// is a function of its own (optional). nvmlDeviceGetCurrentClocksThrottleReasons
// is deprecated since R535 for ...ClocksEventReasons (same bits) and still
// exported.
#pragma once

namespace clusterd::noded::nvml {

// nvmlReturn_t.
using Return = int;
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorResetRequired = 16;
inline constexpr Return kErrorLibRmVersionMismatch = 18;
inline constexpr Return kErrorUnknown = 999;

// Opaque handles.
struct DeviceSt;
using Device = DeviceSt*;
struct EventSetSt;
using EventSet = EventSetSt*;

// Buffer sizes the API reference gives for its string queries.
inline constexpr unsigned kDeviceUuidBufferSize = 96;    // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned kDeviceNameBufferSize = 96;    // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned kDeviceSerialBufferSize = 30;  // NVML_DEVICE_SERIAL_BUFFER_SIZE
inline constexpr unsigned kSystemDriverVersionBufferSize = 80;
inline constexpr unsigned kPciBusIdBufferSize = 32;        // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
inline constexpr unsigned kPciBusIdLegacyBufferSize = 16;  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
inline constexpr unsigned kNvLinkMaxLinks = 18;            // NVML_NVLINK_MAX_LINKS

// nvmlPciInfo_t (the layout nvmlDeviceGetPciInfo_v3 fills).
struct PciInfo {
  char bus_id_legacy[kPciBusIdLegacyBufferSize];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_sub_system_id;
  char bus_id[kPciBusIdBufferSize];  // "00000000:3B:00.0"
};

// nvmlMemory_t, in bytes.
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlEventData_t.
struct EventData {
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the Xid for kEventTypeXidCriticalError
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

// nvmlEventType bits.
inline constexpr unsigned long long kEventTypeSingleBitEccError = 0x1;
inline constexpr unsigned long long kEventTypeDoubleBitEccError = 0x2;
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x8;

// nvmlMemoryErrorType_t and nvmlEccCounterType_t.
inline constexpr int kMemoryErrorCorrected = 0;
inline constexpr int kMemoryErrorUncorrected = 1;
inline constexpr int kVolatileEcc = 0;
inline constexpr int kAggregateEcc = 1;

// nvmlEnableState_t.
inline constexpr int kFeatureDisabled = 0;
inline constexpr int kFeatureEnabled = 1;

// nvmlTemperatureSensors_t.
inline constexpr int kTemperatureGpu = 0;

// nvmlNvLinkErrorCounter_t.
inline constexpr int kNvLinkErrorDlReplay = 0;
inline constexpr int kNvLinkErrorDlRecovery = 1;
inline constexpr int kNvLinkErrorDlCrcFlit = 2;
inline constexpr int kNvLinkErrorDlCrcData = 3;

// nvmlClocksThrottleReason bits (nvmlDeviceGetCurrentClocksThrottleReasons).
inline constexpr unsigned long long kThrottleHwSlowdown = 0x8;
inline constexpr unsigned long long kThrottleSwThermalSlowdown = 0x20;
inline constexpr unsigned long long kThrottleHwThermalSlowdown = 0x40;
inline constexpr unsigned long long kThrottleHwPowerBrakeSlowdown = 0x80;

using InitFn = Return (*)();  // nvmlInit_v2
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return result);
using SystemGetDriverVersionFn = Return (*)(char* version, unsigned int length);
using SystemGetCudaDriverVersionFn = Return (*)(int* cuda_driver_version);            // _v2; 12020 = 12.2
using DeviceGetCountFn = Return (*)(unsigned int* count);                             // _v2
using DeviceGetHandleByIndexFn = Return (*)(unsigned int index, Device* device);      // _v2
using DeviceGetStringFn = Return (*)(Device device, char* buf, unsigned int length);  // UUID, Name, Serial
using DeviceGetPciInfoFn = Return (*)(Device device, PciInfo* pci);                   // _v3
using DeviceGetMemoryInfoFn = Return (*)(Device device, Memory* memory);
using DeviceGetTemperatureFn = Return (*)(Device device, int sensor, unsigned int* temp);
using DeviceGetPowerUsageFn = Return (*)(Device device, unsigned int* milliwatts);
using DeviceGetTotalEccErrorsFn = Return (*)(Device device, int error_type, int counter_type,
                                             unsigned long long* count);
using DeviceGetRetiredPagesPendingStatusFn = Return (*)(Device device, int* is_pending);
using DeviceGetRemappedRowsFn = Return (*)(Device device, unsigned int* corr_rows, unsigned int* unc_rows,
                                           unsigned int* is_pending, unsigned int* failure_occurred);
using DeviceGetCurrentClocksThrottleReasonsFn = Return (*)(Device device, unsigned long long* reasons);
using DeviceGetPcieReplayCounterFn = Return (*)(Device device, unsigned int* value);
using DeviceGetNvLinkStateFn = Return (*)(Device device, unsigned int link, int* is_active);
using DeviceGetNvLinkErrorCounterFn = Return (*)(Device device, unsigned int link, int counter,
                                                 unsigned long long* value);
using DeviceGetMigModeFn = Return (*)(Device device, unsigned int* current_mode, unsigned int* pending_mode);
// MIG devices of a GPU in MIG mode: how many it can have, and the handle of
// the one at `index` (NVML_ERROR_NOT_FOUND where none is made); a MIG
// device's handle answers nvmlDeviceGetUUID with its own "MIG-..." UUID.
using DeviceGetMaxMigDeviceCountFn = Return (*)(Device device, unsigned int* count);
using DeviceGetMigDeviceHandleByIndexFn = Return (*)(Device device, unsigned int index, Device* mig_device);
using EventSetCreateFn = Return (*)(EventSet* set);
using DeviceRegisterEventsFn = Return (*)(Device device, unsigned long long event_types, EventSet set);
using EventSetWaitFn = Return (*)(EventSet set, EventData* data, unsigned int timeout_ms);  // _v2
using EventSetFreeFn = Return (*)(EventSet set);

}  // namespace clusterd::noded::nvml
