// Version drift of the accelerator software chain across the cluster
// (docs/faults.md, "Software chain drift"): within a pool of like nodes (a
// node label, else the chip model), the driver and CANN versions that more
// than half of the pool's nodes run, and the nodes that run another. Pure.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "clusterd/state/catalog.h"

namespace clusterd {

// The reporter and code of the drift faults ClusterD raises itself.
inline constexpr char kChainDriftReporter[] = "clusterd-chain";
inline constexpr char kChainDriftCode[] = "CHAIN_VERSION_DRIFT";
inline constexpr char kChainFirmwareCode[] = "CHAIN_FIRMWARE_MISMATCH";
// A pool is judged once this many of its nodes report a version of a link.
inline constexpr size_t kChainDriftMinNodes = 3;

struct NodeVersions {
  std::string node;
  std::string pool;
  std::map<std::string, std::string> versions;  // link (driver, cann) -> version; known ones only
};

struct DriftFinding {
  std::string node;
  std::string pool;
  std::string link;
  std::string version;   // the node's
  std::string expected;  // the pool's majority
  size_t agree = 0;      // nodes of the pool that run `expected`
  size_t known = 0;      // nodes of the pool that report a version of the link
  bool tie = false;      // no majority (a job's nodes only): every version is odd
  std::string Message() const;
};

// Every (node, link) whose version differs from its pool's strict majority,
// by node then link. A pool with fewer than kChainDriftMinNodes known
// versions of a link, or without a strict majority, yields none for it.
std::vector<DriftFinding> FindChainDrift(const std::vector<NodeVersions>& nodes);

// The nodes of one job (`nodes`: their versions, any pool) whose versions
// differ from each other: those off the job's strict majority, or, with no
// majority, every node (tie: e.g. two nodes on two driver versions). The
// pool is "job <id>". At most kChainJobDriftMax findings per job.
inline constexpr size_t kChainJobDriftMax = 256;
std::vector<DriftFinding> FindJobChainDrift(const std::string& job, const std::vector<const NodeVersions*>& nodes);

// The message of CHAIN_FIRMWARE_MISMATCH when the catalog's pair table knows
// `driver` and `firmware` is not among its versions; nullopt otherwise
// (a pair that fits, or a driver the table does not know).
std::optional<std::string> FirmwareMismatch(const Catalog& catalog, const std::string& driver,
                                            const std::string& firmware);

}  // namespace clusterd
