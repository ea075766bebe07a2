// Sizes every answer of ClusterD is built to. A gRPC client accepts 4 MiB per
// message unless it raises its limit (grpcurl, every language's default), and
// the server refuses to send more (kMaxSendBytes), so each Get, List and
// Watch answer is bounded here, by construction, well below it: List pages
// stop early by bytes, a node's faults and a job's impacts are cut (and say
// so), Watch splits its batches, and a stored item is never larger than
// kMaxItemBytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace clusterd {

// The server's max send message size: what every client accepts by default.
inline constexpr size_t kMaxSendBytes = 4 << 20;
// A List page takes items while it holds less than this (the first item
// always goes on the page).
inline constexpr size_t kPageBytes = 2 << 20;
// A GetNode answer takes active faults while it holds less than this.
inline constexpr size_t kAnswerBytes = 3 << 20;
// A job's record (placement, policy, labels) at most: a job and its impacts
// fit one answer.
inline constexpr size_t kMaxJobBytes = 3 << 20;
// A job's impacts in one answer at most (besides max_job_impacts).
inline constexpr size_t kImpactBytes = 512 << 10;
// Ranks listed per impact at most (FaultImpact.total_ranks counts them all).
inline constexpr size_t kMaxImpactRanks = 4096;
// A Watch response takes events while it holds less than this; one larger
// event travels alone.
inline constexpr size_t kWatchBatchBytes = 1 << 20;

// One page of a List answer: at most max_items items and, past the first,
// at most kPageBytes of them. Once an item does not fit, none does (pages
// follow key order; the token resumes after the last item taken).
class PageBudget {
 public:
  explicit PageBudget(int32_t max_items, size_t max_bytes = kPageBytes)
      : max_items_(max_items), max_bytes_(max_bytes) {}
  // Whether an item of `bytes` goes on the page (it is then counted).
  bool Take(size_t bytes) {
    if (closed_) return false;
    if (items_ >= max_items_ || (items_ > 0 && used_ + bytes > max_bytes_)) {
      closed_ = true;
      return false;
    }
    ++items_;
    used_ += bytes;
    return true;
  }
  bool closed() const { return closed_; }

 private:
  const int32_t max_items_;
  const size_t max_bytes_;
  int32_t items_ = 0;
  size_t used_ = 0;
  bool closed_ = false;
};

}  // namespace clusterd
