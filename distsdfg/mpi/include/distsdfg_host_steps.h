// Host steps of one element type from a prebuilt shared library (distsdfg/toolchain.py).
//
// Instantiating run_step<T, HostMem> costs about 3 s of compile time per element type and program;
// the toolchain compiles it once per type into a cached library that defines
//     DISTSDFG_DEFINE_HOST_STEP(T, NAME)       (an extern "C" function NAME running the step)
// and a program that uses it declares, after distsdfg_runtime.h,
//     DISTSDFG_DECLARE_HOST_STEP(T, NAME)      (StepRunner<T, HostMem> forwards to NAME)
// so that the program's own copy of the runtime is never instantiated for that type. The library's
// communicator caches are its own (one Context per caller's communicator, as in a program); it is
// linked with -z nodelete, so it outlives the programs that use it.
#pragma once
#ifndef DISTSDFG_HOST_STEPS_H
#define DISTSDFG_HOST_STEPS_H

#define DISTSDFG_DECLARE_HOST_STEP(T, NAME)                                                   \
    extern "C" void NAME(const int64_t* plan, int64_t index, const T* src, T* dst, MPI_Comm comm); \
    namespace distsdfg {                                                                      \
    namespace {                                                                               \
    template <>                                                                               \
    struct StepRunner<T, HostMem, false> {                                                    \
        static void run(const int64_t* plan, int64_t index, const T* src, T* dst, MPI_Comm comm) { \
            NAME(plan, index, src, dst, comm);                                                \
        }                                                                                     \
    };                                                                                        \
    }                                                                                         \
    }

#define DISTSDFG_DEFINE_HOST_STEP(T, NAME)                                                    \
    extern "C" void NAME(const int64_t* plan, int64_t index, const T* src, T* dst, MPI_Comm comm) { \
        distsdfg::StepRunner<T, distsdfg::HostMem>::run(plan, index, src, dst, comm);         \
    }

#endif  // DISTSDFG_HOST_STEPS_H
