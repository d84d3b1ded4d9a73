// The process's peak resident memory, for the reports of quantize, bench and compare.
#pragma once

#include <cstdint>

namespace lowbit {

// Peak resident set size of this process in bytes: VmHWM from /proc/self/status (the high-water
// mark of this program's own address space, not inherited across exec), or getrusage's ru_maxrss
// where /proc is not mounted.
int64_t peak_rss_bytes();

// Lowers the high-water mark to the current resident size (Linux >= 4.0: /proc/self/clear_refs),
// so that a later peak_rss_bytes() measures one phase (bench: the model running, not the memory
// bandwidth probe's buffers). Returns false where the kernel does not allow it.
bool reset_peak_rss();

}  // namespace lowbit
