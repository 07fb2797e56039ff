// Small CPU and thread utilities: spin hints, pinning, scheduling class, and
// per-thread CPU time (for reporting what a thread cost, never for asserting).
#pragma once

#include <pthread.h>

#include <cstdint>
#include <string>

#include "ferry/common/status.h"

namespace ferry {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Pins the calling thread to one CPU. kInvalidArgument if the CPU does not exist.
Status pin_current_thread(int cpu);
// Moves the calling thread to SCHED_FIFO at `priority` (1..99); needs root or
// CAP_SYS_NICE, otherwise kPermissionDenied.
Status set_current_thread_fifo(int priority);
// CPU time consumed by the calling thread (CLOCK_THREAD_CPUTIME_ID), ns.
uint64_t thread_cpu_time_ns();
// CPU time consumed by another (live) thread of this process, ns; 0 if the
// thread has exited.
uint64_t thread_cpu_time_ns(pthread_t thread);
// CPU time consumed by the whole process (CLOCK_PROCESS_CPUTIME_ID), ns.
uint64_t process_cpu_time_ns();
// Number of CPUs this process could run on at startup.
int available_cpus();
// One line describing the machine (CPU model, cores) for benchmark reports.
std::string machine_description();

}  // namespace ferry
