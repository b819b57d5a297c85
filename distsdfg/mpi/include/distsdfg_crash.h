// What a crashing rank says: its rank, the program, and the communication step it was in or had
// last finished, with that step's array, kernel and source line (distsdfg/runtime/crash.py).
//
// The marker is a small struct that Python owns, one per process; every program library gets its
// address in ``__distsdfg_crash_marker`` when it is loaded. ``run_step`` stores the step's index
// before the step and ``-2 - index`` after it (two stores per step); Python stores the program's
// legend (its name, then one line per step, in step order) and -1 before each call. The signal
// handler, installed once per process from a library that is never unloaded, writes one line such as
//
//   distsdfg: rank 1 crashed (SIGSEGV, address 0x7f...) in `heat`, after step 0 (scatter `T` for
//   `heat_map` (heat.py:10)) and before step 1 (gather `T` for `heat_map` (heat.py:10)): in the
//   kernels between them
//
// then hands the signal to the handler that was installed before it (Python's faulthandler prints
// the Python stack, then the process ends as it would have).
#pragma once
#ifndef DISTSDFG_CRASH_H
#define DISTSDFG_CRASH_H
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

extern "C" {
struct distsdfg_crash_marker {
    int64_t rank;
    volatile int64_t step;          // the step in progress; -2 - index once it finished; -1 before the first
    const char* volatile legend;    // "name\nline of step 0\nline of step 1\n...", or null
};

// Weak: one per library, whichever translation units include this header.
__attribute__((weak, visibility("default"))) distsdfg_crash_marker* __distsdfg_crash_marker = nullptr;
}

namespace distsdfg_crash {
// Only async-signal-safe calls below (write, sigaction, raise); text is built in a static buffer.
static char text[4096];
static size_t used;
static distsdfg_crash_marker* marker;
static struct sigaction previous[65];

static inline void put(const char* s, size_t n) {
    for (size_t i = 0; i < n && used + 1 < sizeof text; ++i) text[used++] = s[i];
}
static inline void put(const char* s) { put(s, std::strlen(s)); }
static inline void put_int(long long v) {
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
    do { digits[n++] = static_cast<char>('0' + u % 10); u /= 10; } while (u != 0);
    if (v < 0) put("-");
    while (n > 0) put(&digits[--n], 1);
}
static inline void put_hex(uintptr_t v) {
    static const char hex[] = "0123456789abcdef";
    char digits[20];
    int n = 0;
    do { digits[n++] = hex[v & 15]; v >>= 4; } while (v != 0);
    put("0x");
    while (n > 0) put(&digits[--n], 1);
}
// Line ``k`` (0: the program's name) of the legend.
static inline void put_line(const char* legend, long long k) {
    const char* p = legend;
    for (long long i = 0; i < k && p != nullptr; ++i) {
        p = std::strchr(p, '\n');
        if (p != nullptr) ++p;
    }
    if (p == nullptr || *p == '\0') return put("?");
    const char* end = std::strchr(p, '\n');
    put(p, end != nullptr ? static_cast<size_t>(end - p) : std::strlen(p));
}
static inline long long steps(const char* legend) {
    long long n = -1;
    for (const char* p = legend; (p = std::strchr(p, '\n')) != nullptr; ++p) ++n;
    return n;
}
static inline const char* signal_name(int sig) {
    switch (sig) {
        case SIGSEGV: return "SIGSEGV";
        case SIGBUS: return "SIGBUS";
        case SIGFPE: return "SIGFPE";
        case SIGILL: return "SIGILL";
        case SIGABRT: return "SIGABRT";
        default: return "a signal";
    }
}

static void handler(int sig, siginfo_t* info, void*) {
    const distsdfg_crash_marker* m = marker;
    const char* legend = m->legend;
    used = 0;
    put("distsdfg: rank ");
    put_int(m->rank);
    put(" crashed (");
    put(signal_name(sig));
    if (sig != SIGABRT && info != nullptr) {
        put(", address ");
        put_hex(reinterpret_cast<uintptr_t>(info->si_addr));
    }
    put(")");
    if (legend == nullptr) {
        put(" outside the distributed programs' calls");
    } else {
        const long long step = m->step, n = steps(legend);
        put(" in `");
        put_line(legend, 0);
        put("`, ");
        if (step >= 0) {
            put("in communication step ");
            put_int(step);
            put(" (");
            put_line(legend, step + 1);
            put(")");
        } else if (step == -1) {
            put("before its first communication step");
            if (n > 0) {
                put(" (step 0: ");
                put_line(legend, 1);
                put("): in the kernels before it");
            } else {
                put(" (it has none): in its kernels");
            }
        } else {
            const long long done = -2 - step;
            put("after step ");
            put_int(done);
            put(" (");
            put_line(legend, done + 1);
            put(")");
            if (done + 1 < n) {
                put(" and before step ");
                put_int(done + 1);
                put(" (");
                put_line(legend, done + 2);
                put("): in the kernels between them");
            } else {
                put(", its last: in the kernels after it");
            }
        }
    }
    put("\n");
    ssize_t ignored = write(2, text, used);
    (void)ignored;
    // The handler installed before this one (Python's faulthandler, MPI's, the default) takes it from here.
    sigaction(sig, &previous[sig], nullptr);
    raise(sig);
}
}  // namespace distsdfg_crash

// Installs the handler for the signals of a crash (once per process; the library must stay loaded).
extern "C" __attribute__((weak, visibility("default"))) int __distsdfg_crash_install(distsdfg_crash_marker* m) {
    distsdfg_crash::marker = m;
    struct sigaction act;
    std::memset(&act, 0, sizeof act);
    act.sa_sigaction = distsdfg_crash::handler;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    static const int signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (int sig : signals)
        if (sigaction(sig, &act, &distsdfg_crash::previous[sig]) != 0) return -1;
    return 0;
}
#endif  // DISTSDFG_CRASH_H
