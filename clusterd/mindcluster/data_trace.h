// MindCluster's profiling switch per job (the TrainingDataTrace service,
// docs/mindcluster.md "TrainingDataTrace"): which of a training job's five
// lightweight-profiling probes (communication operators, step, checkpoint
// saving, forward pass, data loader) are on. MindCluster's faultdiag-online
// sets them by the job's "namespace/name" (Modify); TaskD's manager inside
// the job follows them by the job's UID (Subscribe) and turns the probes on
// and off. The reference keeps them in a ConfigMap data-trace-<name>;
// ClusterD keeps them in its own store (DataTraceStore), so that they
// survive a restart on bare metal too.
//
// Pure domain: no gRPC, no Kubernetes client. The store and the job lookup
// are interfaces (the server implements them over the engine and the state;
// tests with fakes).
//
// Threads: every method is thread-safe (one mutex). Subscribers are called
// under that mutex and must not call back.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/storage/v1/storage.pb.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/status.h"
#include "mindcluster/profiling.pb.h"

namespace clusterd::mindcluster {

// The reply codes of DataTypeRes / DataStatusRes, as the reference's.
inline constexpr int32_t kDataTraceOk = 200;
inline constexpr int32_t kDataTraceInvalid = 300;
inline constexpr int32_t kDataTraceNotFound = 404;
inline constexpr int32_t kDataTraceServerError = 500;

// The two values a switch takes (what faultdiag-online sends and TaskD
// compares with).
inline constexpr std::string_view kSwitchOn = "on";
inline constexpr std::string_view kSwitchOff = "off";

// A job as MindCluster's clients name it: "namespace/name".
struct JobNsName {
  std::string ns;
  std::string name;
  std::string str() const { return ns + "/" + name; }
};

// "namespace/name": exactly one '/', the namespace a DNS-1123 label (at most
// 63 characters), the name a DNS-1123 subdomain (at most 253), as Kubernetes
// allows them. InvalidArgument naming what is wrong otherwise.
StatusOr<JobNsName> ParseJobNsName(std::string_view text);

// Each of the five switches "on" or "off"; InvalidArgument naming the field
// otherwise (an empty one too: TaskD would take it for "on").
Status ValidateProfilingSwitch(const ::ProfilingSwitch& s);

// The switch of a record, and a record's switch fields from one.
::ProfilingSwitch SwitchOf(const storage::v1::DataTraceRecord& r);
void SetSwitch(const ::ProfilingSwitch& s, storage::v1::DataTraceRecord* r);

// Where the switches are kept durably.
class DataTraceStore {
 public:
  virtual ~DataTraceStore() = default;
  // Every record kept, once at start.
  virtual StatusOr<std::vector<storage::v1::DataTraceRecord>> LoadAll() const = 0;
  // Puts `put` and erases the records of the jobs `erase` names
  // ("namespace/name"), in one atomic, durable write, after every write
  // asked for before it; then `done` with the outcome, exactly once, on any
  // thread (it may be called before Write returns).
  virtual void Write(storage::v1::DataTraceRecord put, std::vector<std::string> erase,
                     std::function<void(Status)> done) = 0;
};

// The jobs ClusterD knows. A job has a "namespace/name" when its labels
// k8s.namespace and k8s.name say so (discovery sets them; a job made through
// JobService.CreateJob may carry them too).
class DataTraceJobs {
 public:
  virtual ~DataTraceJobs() = default;
  // The id of the job named `job`; nullopt when no job has that name (with
  // several, the least id).
  virtual std::optional<std::string> IdOf(const JobNsName& job) const = 0;
  // The "namespace/name" of the job with this id: "" when it has none;
  // nullopt when no such job is known.
  virtual std::optional<std::string> NsNameOf(const std::string& id) const = 0;
  // "namespace/name" -> id of every job that has a name (as IdOf).
  virtual std::map<std::string, std::string> Index() const = 0;
};

// One subscription's receiver.
class DataTraceSubscriber {
 public:
  virtual ~DataTraceSubscriber() = default;
  // The job's switches now. Called under the DataTraceSwitches mutex: must
  // be quick (queue it) and must not call back into DataTraceSwitches.
  virtual void Switch(const ::ProfilingSwitch& s) = 0;
};

struct DataTraceOptions {
  // Jobs whose switches are kept (the reference's 10,000 jobs served).
  uint32_t max_jobs = 10000;
  // Subscription streams at once, in all and per job.
  uint32_t max_subscribers = 10000;
  uint32_t max_subscribers_per_job = 8;
};

class DataTraceSwitches {
 public:
  // `store` and `jobs` must outlive this. Metrics (metrics may be nullptr):
  // clusterd_mindcluster_datatrace_jobs (switches kept),
  // ..._subscribers (streams open), ..._changes_total (switches set),
  // ..._messages_total (switches given to subscribers),
  // ..._refused_total{limit="max_jobs"|"max_subscribers"|"max_subscribers_per_job"}.
  DataTraceSwitches(DataTraceStore* store, const DataTraceJobs* jobs, const Clock* clock, DataTraceOptions options,
                    MetricsRegistry* metrics);

  // Reads every record from the store. Once, before any other call.
  Status Load();

  // Sets the job's switches for `actor`. `done` gets the outcome once the
  // change is durable and every subscriber of the job has been given it, or
  // at once when it is refused (then nothing changed):
  // InvalidArgument (jobNsName, a switch), NotFound (no job of that name),
  // ResourceExhausted (max_jobs other jobs' switches are kept), or the
  // store's error. A job whose switches are kept for a job that is gone
  // (deleted, or replaced by a new job of the same name) gives its slot up
  // when one is needed.
  void Modify(std::string_view job_ns_name, const ::ProfilingSwitch* s, const std::string& actor,
              std::function<void(Status)> done);

  // The job's switches: InvalidArgument (jobNsName), NotFound (no job of
  // that name, or none set for it).
  StatusOr<::ProfilingSwitch> Get(std::string_view job_ns_name) const;

  // Follows the switches of the job with this id (its UID): `subscriber`
  // gets the current ones at once (when set) and every Modify after.
  // InvalidArgument (the id), NotFound (no such job), ResourceExhausted (a
  // limit). Returns the handle for Unsubscribe.
  StatusOr<uint64_t> Subscribe(const std::string& job_id, std::shared_ptr<DataTraceSubscriber> subscriber);
  void Unsubscribe(uint64_t handle);

  size_t job_count() const;
  size_t subscriber_count() const;

 private:
  struct Group {
    std::map<uint64_t, std::shared_ptr<DataTraceSubscriber>> subscribers;
  };
  // Under mu_.
  void UpdateGaugesLocked();
  Status RefuseLocked(Counter* counter, std::string why);

  DataTraceStore* const store_;
  const DataTraceJobs* const jobs_;
  const Clock* const clock_;
  const DataTraceOptions options_;
  Gauge* jobs_gauge_ = nullptr;
  Gauge* subscribers_gauge_ = nullptr;
  Counter* changes_ = nullptr;
  Counter* messages_ = nullptr;
  Counter* refused_jobs_ = nullptr;
  Counter* refused_subscribers_ = nullptr;
  Counter* refused_job_subscribers_ = nullptr;

  std::mutex write_mu_;  // Modify's decision and its Write, in order
  mutable std::mutex mu_;
  std::map<std::string, storage::v1::DataTraceRecord> records_;  // by "namespace/name"
  std::set<std::string> reserved_;                               // new jobs being written
  std::map<std::string, Group> groups_;                          // by job id
  std::map<uint64_t, std::string> handles_;                      // handle -> job id
  size_t subscribers_ = 0;
  uint64_t next_handle_ = 1;
};

}  // namespace clusterd::mindcluster
