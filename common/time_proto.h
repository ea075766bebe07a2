// TimePoint <-> google.protobuf.Timestamp, nanosecond exact.
#pragma once

#include <chrono>

#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/time_util.h>

#include "common/clock.h"

namespace clusterd {

inline google::protobuf::Timestamp ToTimestamp(TimePoint t) {
  return google::protobuf::util::TimeUtil::NanosecondsToTimestamp(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

inline TimePoint FromTimestamp(const google::protobuf::Timestamp& t) {
  return TimePoint(std::chrono::duration_cast<TimePoint::duration>(
      std::chrono::nanoseconds(google::protobuf::util::TimeUtil::TimestampToNanoseconds(t))));
}

}  // namespace clusterd
