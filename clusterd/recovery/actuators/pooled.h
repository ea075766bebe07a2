// Building blocks for actuators: the shipped ones here (actuator.cc, exec.cc,
// webhook.cc), the Kubernetes room's (k8s) and their tests. Not for callers
// of an actuator (use actuator.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "clusterd/recovery/actuators/actuator.h"

namespace clusterd {

namespace actuator_internal {

// Runs one action to the end on a worker thread and says how it went.
using RunAction = std::function<ActionResult(const ActionRequest&)>;

// An Actuator that runs `run` for each action on `workers` threads (at least
// one), in the order Execute was called; `done` runs on the worker right
// after. An exception from `run` fails the action with its message. Stop()
// refuses new actions, finishes the queued and running ones and joins the
// workers; it must not be called from a `done` callback.
std::unique_ptr<Actuator> MakePooledActuator(std::string kind, int workers, RunAction run);

// `text` as one line of valid UTF-8 of at most `max_bytes` bytes: control
// characters (line breaks included) become spaces, invalid bytes '?', and
// surrounding whitespace is trimmed.
std::string OneLine(std::string_view text, size_t max_bytes);

// The longest message an actuator reports for one action (its output's last
// line, an answer's start).
inline constexpr size_t kMaxMessageBytes = 512;

}  // namespace actuator_internal

}  // namespace clusterd
