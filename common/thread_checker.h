// ThreadChecker: asserts that what one thread owns is touched only by that
// thread (the Engine's writer, for instance). A checker binds to the first
// thread that checks it, so an owner constructed on one thread can be handed
// to the thread that runs it; Detach() lets the next checking thread bind.
//
// CLUSTERD_DCHECK_ON_THREAD asserts in debug builds (the sanitizer build
// runs every test with it) and compiles to nothing with NDEBUG (the release
// build), where the checker costs one unused word.
#pragma once

#include <atomic>
#include <cassert>
#include <thread>

namespace clusterd {

class ThreadChecker {
 public:
  // Thread-safe. True on the bound thread; binds the calling thread when
  // none is bound.
  bool CalledOnValidThread() const {
    const std::thread::id self = std::this_thread::get_id();
    std::thread::id bound{};
    if (owner_.compare_exchange_strong(bound, self, std::memory_order_acq_rel)) return true;
    return bound == self;
  }
  // Thread-safe. Unbinds: the next thread that checks owns it.
  void Detach() { owner_.store(std::thread::id{}, std::memory_order_release); }

 private:
  mutable std::atomic<std::thread::id> owner_{};
};

}  // namespace clusterd

#ifdef NDEBUG
#define CLUSTERD_DCHECK_ON_THREAD(checker) static_cast<void>(0)
#else
#define CLUSTERD_DCHECK_ON_THREAD(checker) \
  assert((checker).CalledOnValidThread() && "called off the thread that owns this")
#endif
