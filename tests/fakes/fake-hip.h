/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-hip.h - what the files of the fake HIP runtime share: its ABI, its state, its function list, its checks. */
#ifndef FAKE_HIP_H
#define FAKE_HIP_H

/* Each file of the fake defines _GNU_SOURCE before any include, for twalk_r,
 * secure_getenv, memfd_create and MAP_FIXED_NOREPLACE. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <search.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake-controls.h"
#include "fake-registry.h"
#include "fake-vmm.h"

/* The runtime's API and the test controls must stay reachable by dlsym()
 * whatever -fvisibility the build uses: declared here, they keep default
 * visibility where the fake's files define them. What the files share
 * besides is FAKE_INTERNAL. */
#pragma GCC visibility push(default)

#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>

/*
 * Which ROCm this fake is: FAKE_HIP_ABI 5 (the default, libfake-hip.so) is
 * Debian 12's ROCm 5.2, FAKE_HIP_ABI 6 (libfake-hip6.so) a ROCm 6.2.  What
 * tells them apart for the backend: the version the runtime gives, the
 * layout in which hipMemAllocationProp is read (ROCm 6.0 reordered it), and
 * hipDeviceAttributeVirtualMemoryManagementSupported, which 5.2 does not
 * know.  Both are built against the one header configure found; the layouts
 * are written out here, as each release declares them.
 */
#ifndef FAKE_HIP_ABI
#define FAKE_HIP_ABI 5
#endif
#if FAKE_HIP_ABI == 5
#define FAKE_HIP_VERSION 50221153 /* 5.2.21153 */
struct abi_alloc_prop {
	unsigned char compression_type;
	hipMemLocation location;
	int requested_handle_type;
	int type;
	unsigned short usage;
	void *win32_handle_meta_data;
};
#elif FAKE_HIP_ABI == 6
#define FAKE_HIP_VERSION 60241134 /* 6.2.41134 */
struct abi_alloc_prop {
	int type;
	int requested_handle_type; /* a union with requestedHandleTypes */
	hipMemLocation location;
	void *win32_handle_meta_data;
	struct {
		unsigned char compression_type, gpu_direct_rdma_capable;
		unsigned short usage;
	} alloc_flags;
};
#else
#error "FAKE_HIP_ABI is 5 or 6"
#endif
_Static_assert(sizeof(struct abi_alloc_prop) == 32, "hipMemAllocationProp is 32 bytes in both");
/* The attribute ROCm 5.3 added after 5.2's last, 88. */
#define ATTRIBUTE_VMM_SUPPORTED 89

/* Test controls, reached with dlsym() by tests that dlopen() this library. */
#define FAKE_HIP_FAIL_ON FAKE_CONTROLS_FAIL_ON
FAKE_CONTROLS_DECLARE(hip);
size_t fake_hip_live(void);
void fake_hip_hold_events(int hold);
void fake_hip_vmm(int supported);

#pragma GCC visibility pop

/* Every function of the runtime that this fake provides, in one list: the
 * call counters and fault injection are indexed by it. */
#define FAKE_HIP_FUNCTIONS(X)                                                                      \
	X(hipGetErrorString)                                                                       \
	X(hipGetErrorName)                                                                         \
	X(hipGetLastError)                                                                         \
	X(hipPeekAtLastError)                                                                      \
	X(hipInit)                                                                                 \
	X(hipDriverGetVersion)                                                                     \
	X(hipRuntimeGetVersion)                                                                    \
	X(hipGetDeviceCount)                                                                       \
	X(hipSetDevice)                                                                            \
	X(hipGetDevice)                                                                            \
	X(hipDeviceGetName)                                                                        \
	X(hipDeviceTotalMem)                                                                       \
	X(hipDeviceGetPCIBusId)                                                                    \
	X(hipDeviceSynchronize)                                                                    \
	X(hipMemGetInfo)                                                                           \
	X(hipMalloc)                                                                               \
	X(hipFree)                                                                                 \
	X(hipHostMalloc)                                                                           \
	X(hipHostFree)                                                                             \
	X(hipHostRegister)                                                                         \
	X(hipHostUnregister)                                                                       \
	X(hipMemcpy)                                                                               \
	X(hipMemcpyAsync)                                                                          \
	X(hipStreamCreate)                                                                         \
	X(hipStreamCreateWithFlags)                                                                \
	X(hipStreamDestroy)                                                                        \
	X(hipStreamSynchronize)                                                                    \
	X(hipStreamQuery)                                                                          \
	X(hipEventCreate)                                                                          \
	X(hipEventCreateWithFlags)                                                                 \
	X(hipEventDestroy)                                                                         \
	X(hipEventRecord)                                                                          \
	X(hipEventQuery)                                                                           \
	X(hipEventSynchronize)                                                                     \
	X(hipIpcGetMemHandle)                                                                      \
	X(hipIpcOpenMemHandle)                                                                     \
	X(hipIpcCloseMemHandle)                                                                    \
	X(hipDeviceGetAttribute)                                                                   \
	X(hipMemGetAllocationGranularity)                                                          \
	X(hipMemAddressReserve)                                                                    \
	X(hipMemAddressFree)                                                                       \
	X(hipMemCreate)                                                                            \
	X(hipMemRelease)                                                                           \
	X(hipMemMap)                                                                               \
	X(hipMemUnmap)                                                                             \
	X(hipMemSetAccess)

#define X(name) F_##name,
enum { FAKE_HIP_FUNCTIONS(X) F_COUNT };
#undef X

/* hipMalloc's alignment in ROCm; the backend may count on it. */
#define DEVICE_ALIGN 256
/* The one granularity of the virtual memory functions, minimum and
 * recommended alike. */
#define VM_GRANULARITY ((size_t)2 << 20)
/* Devices are bits of a uint64_t in a mapping's access masks. */
#define MAX_DEVICES 64

enum range_kind { R_DEVICE, R_HOST, R_REGISTERED, R_RESERVED, R_MAPPED, R_KINDS };
_Static_assert(R_KINDS <= FAKE_REGISTRY_KINDS, "the registry counts every kind");

/* What hipMemCreate makes; its device is a physical ordinal. */
struct ihipMemGenericAllocationHandle {
	struct fake_physical phys; /* the whole of it */
};

/* Mappings are struct fake_mapping, in vmem.mappings; their access masks are
 * of visible devices. */
struct range {
	struct fake_range span; /* first, for the registry; its kind is an enum range_kind */
	size_t mapped; /* host allocations and reservations: the length given to mmap() */
	int dev;       /* device allocations and reservations: physical ordinal */
};

struct ihipStream_t {
	int dev;
	unsigned flags;
};

struct ihipEvent_t {
	struct fake_event held; /* first, for the walks over held events; stream is a hipStream_t */
	unsigned flags;
	int recorded;
};

/* Everything the fake keeps, but what each thread keeps: fake-hip.c
 * defines it. */
struct fake_hip {
	/* Read once, on the first call that needs them, as ROCm does at its init. */
	pthread_once_t devices_once;
	int n_physical;
	int n_visible;
	int visible[MAX_DEVICES]; /* visible ordinal -> physical ordinal */
	size_t capacity;          /* bytes of each device */
	size_t used[MAX_DEVICES]; /* by physical ordinal; under lock */
	int hold_events;
	/* FAKE_HIP_VMM=0, or fake_hip_vmm(0): the devices cannot map memory,
	 * and the virtual memory calls answer hipErrorNotSupported. -1: not
	 * read yet. */
	int vmm_supported;

	/* The live objects, all under lock: one tree of non-overlapping address
	 * ranges (device and host allocations, registrations) so that any
	 * address inside one finds it, and one tree each of the stream and
	 * event handles; in vmem the mappings inside reservations and the
	 * physical memory handles. */
	pthread_mutex_t lock;
	void *ranges;
	void *streams;
	void *events;
	struct fake_registry registry;
	unsigned long live_streams, live_events;
	struct fake_vmm vmem;

	struct fake_counter counters[F_COUNT];
};
extern struct fake_hip fake FAKE_INTERNAL;

/* What HIP keeps per thread. */
struct fake_hip_thread {
	int current_device; /* visible ordinal */
	hipError_t last_error;
};
extern __thread struct fake_hip_thread this_thread FAKE_INTERNAL;

/* Like ROCm 5.2, every call records its result, success too, for hipGetLastError. */
static inline hipError_t done(hipError_t err)
{
	this_thread.last_error = err;
	return err;
}

/* ---- call counting and fault injection ---- */

extern const struct fake_controls controls FAKE_INTERNAL;

_Static_assert(hipSuccess == 0, "fake_controls_enter answers 0 for success");

FAKE_CONTROLS_CALLS(hipError_t, controls)

/* Each API function begins with this: counted, maybe failed on demand. */
#define ENTER(name)                                                                                \
	do {                                                                                       \
		hipError_t injected_ = enter(F_##name);                                            \
		if (injected_ != hipSuccess)                                                       \
			return done(injected_);                                                    \
	} while (0)

/* ---- devices (fake-hip.c) ---- */

/* The visible devices, read at the first call. */
int device_count(void) FAKE_INTERNAL;

/* hipSuccess where device (visible ordinal) exists. */
hipError_t check_device(int device) FAKE_INTERNAL;

/* Without devices, ROCm fails every call that needs its init. */
#define NEED_DEVICES()                                                                             \
	do {                                                                                       \
		if (device_count() == 0)                                                           \
			return done(hipErrorNoDevice);                                             \
	} while (0)

/* ---- the registries ---- */

/* The live range holding address p, under lock; NULL if none. */
static inline struct range *range_at(const void *p)
{
	return fake_range_in(&fake.ranges, (uintptr_t)p, 1);
}

/* Whether handle h is a live stream (the default ones too), under lock. */
static inline int stream_known(hipStream_t s)
{
	return s == NULL || s == hipStreamPerThread || fake_handle_known(&fake.streams, s);
}

static inline int event_known(hipEvent_t e)
{
	return fake_handle_known(&fake.events, e);
}

#endif
