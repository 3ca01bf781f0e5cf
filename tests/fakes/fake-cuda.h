/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-cuda.h - what the files of the fake CUDA driver share: its state, its function list, its checks. */
#ifndef FAKE_CUDA_H
#define FAKE_CUDA_H

/* Each file of the fake defines _GNU_SOURCE before any include, for twalk_r,
 * secure_getenv, memfd_create, MAP_FIXED_NOREPLACE and strchrnul. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <search.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fake-controls.h"
#include "fake-registry.h"
#include "fake-vmm.h"

/* The driver's API and the test controls must stay reachable by dlsym()
 * whatever -fvisibility the build uses: declared here, they keep default
 * visibility where the fake's files define them. What the files share
 * besides is FAKE_INTERNAL. */
#pragma GCC visibility push(default)

#include <cuda.h>

/* cuda.h renames most entry points to their newest version (cuMemAlloc is
 * cuMemAlloc_v2), so the definitions below export the names libcuda exports.
 * The driver keeps the first cuDeviceGetUuid beside cuDeviceGetUuid_v2. */
#undef cuDeviceGetUuid
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);

/* Test controls, reached with dlsym() by tests that dlopen() this library. */
#define FAKE_CUDA_FAIL_ON FAKE_CONTROLS_FAIL_ON
FAKE_CONTROLS_DECLARE(cuda);
size_t fake_cuda_live(void);
void fake_cuda_hold_events(int hold);
void fake_cuda_context_current(int dev);

#pragma GCC visibility pop

/* Every function of the driver that this fake provides, in one list: the
 * call counters and fault injection are indexed by it. */
#define FAKE_CUDA_FUNCTIONS(X)                                                                     \
	X(cuGetErrorString)                                                                        \
	X(cuGetErrorName)                                                                          \
	X(cuInit)                                                                                  \
	X(cuDriverGetVersion)                                                                      \
	X(cuDeviceGetCount)                                                                        \
	X(cuDeviceGet)                                                                             \
	X(cuDeviceGetName)                                                                         \
	X(cuDeviceTotalMem)                                                                        \
	X(cuDeviceGetPCIBusId)                                                                     \
	X(cuDeviceGetAttribute)                                                                    \
	X(cuDeviceGetUuid)                                                                         \
	X(cuDeviceGetUuid_v2)                                                                      \
	X(cuDevicePrimaryCtxRetain)                                                                \
	X(cuDevicePrimaryCtxRelease)                                                               \
	X(cuCtxSetCurrent)                                                                         \
	X(cuCtxGetCurrent)                                                                         \
	X(cuCtxGetDevice)                                                                          \
	X(cuCtxPushCurrent)                                                                        \
	X(cuCtxPopCurrent)                                                                         \
	X(cuCtxSynchronize)                                                                        \
	X(cuMemGetInfo)                                                                            \
	X(cuMemAlloc)                                                                              \
	X(cuMemFree)                                                                               \
	X(cuMemAllocHost)                                                                          \
	X(cuMemHostAlloc)                                                                          \
	X(cuMemFreeHost)                                                                           \
	X(cuMemHostRegister)                                                                       \
	X(cuMemHostUnregister)                                                                     \
	X(cuMemHostGetDevicePointer)                                                               \
	X(cuMemcpyHtoD)                                                                            \
	X(cuMemcpyDtoH)                                                                            \
	X(cuMemcpyHtoDAsync)                                                                       \
	X(cuMemcpyDtoHAsync)                                                                       \
	X(cuStreamCreate)                                                                          \
	X(cuStreamDestroy)                                                                         \
	X(cuStreamSynchronize)                                                                     \
	X(cuStreamQuery)                                                                           \
	X(cuStreamWaitValue32)                                                                     \
	X(cuEventCreate)                                                                           \
	X(cuEventDestroy)                                                                          \
	X(cuEventRecord)                                                                           \
	X(cuEventQuery)                                                                            \
	X(cuEventSynchronize)                                                                      \
	X(cuMemGetAllocationGranularity)                                                           \
	X(cuMemAddressReserve)                                                                     \
	X(cuMemAddressFree)                                                                        \
	X(cuMemCreate)                                                                             \
	X(cuMemRelease)                                                                            \
	X(cuMemMap)                                                                                \
	X(cuMemUnmap)                                                                              \
	X(cuMemSetAccess)                                                                          \
	X(cuIpcGetMemHandle)                                                                       \
	X(cuIpcOpenMemHandle)                                                                      \
	X(cuIpcCloseMemHandle)

/* Two levels, so that the header's renaming applies before # does: the
 * names the tests give are the exported ones, "cuMemAlloc_v2". */
#define STR_(s) #s
#define STR(s) STR_(s)

#define X(name) F_##name,
enum { FAKE_CUDA_FUNCTIONS(X) F_COUNT };
#undef X

/* cuMemAlloc's documented alignment; the backend may count on it. */
#define DEVICE_ALIGN 256
/* The one granularity of the virtual memory functions, minimum and
 * recommended alike, as on current NVIDIA GPUs. */
#define VM_GRANULARITY ((size_t)2 << 20)
/* Devices are bits of a uint64_t in a mapping's access masks. */
#define MAX_DEVICES 64
/* The driver's context stack has no set depth; a test that needs more than
 * this is pushing in a loop. */
#define CTX_STACK_DEPTH 32

enum range_kind { R_DEVICE, R_HOST, R_REGISTERED, R_RESERVED, R_MAPPED, R_KINDS };
_Static_assert(R_KINDS <= FAKE_REGISTRY_KINDS, "the registry counts every kind");

/* A primary context per visible device; its handle stays the same across
 * release and retain, as the driver's does. */
struct CUctx_st {
	int dev;       /* visible ordinal */
	unsigned refs; /* under lock; 0: inactive, "destroyed" */
};

/* Physical memory's device (a struct fake_physical's) is a visible ordinal;
 * mappings are struct fake_mapping, in vmem.mappings. */
struct range {
	struct fake_range span; /* first, for the registry; its kind is an enum range_kind */
	size_t mapped; /* host allocations and reservations: the length given to mmap() */
	int dev;       /* device allocations and reservations: visible ordinal */
};

/* A wait on a 32-bit word (cuStreamWaitValue32): what the stream's later
 * work waits for.  addr NULL: none. */
struct word_wait {
	const uint32_t *addr;
	uint32_t value;
	unsigned op; /* CU_STREAM_WAIT_VALUE_GEQ, _EQ, _AND, _NOR */
};

struct CUstream_st {
	int dev;
	unsigned flags;
	struct word_wait wait; /* under lock */
};

struct CUevent_st {
	struct fake_event held; /* first, for the walks over held events; stream is a CUstream */
	unsigned flags;
	struct word_wait wait;  /* the stream's, unmet when recorded; under lock */
};

/* Everything the fake keeps, but what each thread keeps: fake-cuda.c
 * defines it. */
struct fake_cuda {
	/* Read once, at the first cuInit, as the driver reads its environment. */
	pthread_once_t devices_once;
	int n_physical;
	int n_visible;
	int visible[MAX_DEVICES]; /* visible ordinal (a CUdevice) -> physical ordinal */
	size_t capacity;          /* bytes of each device */
	size_t used[MAX_DEVICES]; /* by physical ordinal; under lock */
	int vmm_supported;
	/* FAKE_CUDA_COPY_MS: each copy to or from a device takes this long, as a
	 * slow link would (for what shows progress over time: the tool's bar). */
	long copy_ms;
	int initialized; /* a cuInit succeeded */
	int hold_events;

	/* The live objects, all under lock: one tree of non-overlapping address
	 * ranges (device and host allocations, registrations, reservations) so
	 * that any address inside one finds it, one tree each of the stream and
	 * event handles, and in vmem the mappings inside reservations and the
	 * physical memory handles. */
	pthread_mutex_t lock;
	void *ranges;
	void *streams;
	void *events;
	struct fake_registry registry;
	unsigned long live_streams, live_events;
	struct fake_vmm vmem;
	struct CUctx_st primaries[MAX_DEVICES];

	struct fake_counter counters[F_COUNT];
};
extern struct fake_cuda fake FAKE_INTERNAL;

/* The per-thread context stack, as in the driver; the top is current. */
struct fake_cuda_thread {
	CUcontext ctx_stack[CTX_STACK_DEPTH];
	int ctx_depth;
};
extern __thread struct fake_cuda_thread this_thread FAKE_INTERNAL;

/* ---- call counting and fault injection ---- */

extern const struct fake_controls controls FAKE_INTERNAL;

_Static_assert(CUDA_SUCCESS == 0, "fake_controls_enter answers 0 for success");

FAKE_CONTROLS_CALLS(CUresult, controls)

/* Returns what expr returns, unless that is success. */
#define TRY(expr)                                                                                  \
	do {                                                                                       \
		CUresult try_ = (expr);                                                            \
		if (try_ != CUDA_SUCCESS)                                                          \
			return try_;                                                               \
	} while (0)

/* For the few functions the driver answers before cuInit: counted, maybe
 * failed on demand. The name is pasted at once, before the header's renaming
 * could apply to it. */
#define ENTER_ANYTIME(name) TRY(enter(F_##name))

/* Each other API function begins with this; as the driver documents, it is
 * refused before a successful cuInit. */
#define ENTER(name)                                                                                \
	do {                                                                                       \
		TRY(enter(F_##name));                                                              \
		if (F_##name != F_cuInit &&                                                        \
		    !__atomic_load_n(&fake.initialized, __ATOMIC_ACQUIRE))                         \
			return misuse(CUDA_ERROR_NOT_INITIALIZED);                                 \
	} while (0)

/* ---- the registries ---- */

/* The live range holding address p, under lock; NULL if none. */
static inline struct range *range_at(uintptr_t p)
{
	return fake_range_in(&fake.ranges, p, 1);
}

static inline int is_default_stream(CUstream s)
{
	return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

/* Whether s is a live stream (the default ones too), under lock. */
static inline int stream_known(CUstream s)
{
	return is_default_stream(s) || fake_handle_known(&fake.streams, s);
}

/* ---- devices and contexts (fake-cuda.c) ---- */

/* CUDA_SUCCESS where dev is a visible device; a misuse otherwise. */
CUresult check_device(CUdevice dev) FAKE_INTERNAL;

static inline CUcontext current_context(void)
{
	return this_thread.ctx_depth ? this_thread.ctx_stack[this_thread.ctx_depth - 1] : NULL;
}

/* The device of the calling thread's current context, for the calls that
 * need one; dev_p may be NULL. */
CUresult current_device(int *dev_p) FAKE_INTERNAL;

#endif
