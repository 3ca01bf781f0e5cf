/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-ze.h - what the files of the fake Level Zero loader share: its state, its function list, its checks. */
#ifndef FAKE_ZE_H
#define FAKE_ZE_H

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
#include <time.h>
#include <unistd.h>

#include "fake-controls.h"
#include "fake-registry.h"
#include "fake-vmm.h"

/* The loader's API and the test controls must stay reachable by dlsym()
 * whatever -fvisibility the build uses: declared here, they keep default
 * visibility where the fake's files define them. What the files share
 * besides is FAKE_INTERNAL. */
#pragma GCC visibility push(default)

#include <level_zero/ze_api.h>

/* Test controls, reached with dlsym() by tests that dlopen() this library. */
#define FAKE_ZE_FAIL_ON FAKE_CONTROLS_FAIL_ON
FAKE_CONTROLS_DECLARE(ze);
size_t fake_ze_live(void);
void fake_ze_hold_events(int hold);
void fake_ze_limits(size_t max_alloc_bytes, int relaxed);

#pragma GCC visibility pop

/* Every function of the API that this fake provides, in one list: the call
 * counters and fault injection are indexed by it. */
#define FAKE_ZE_FUNCTIONS(X)                                                                       \
	X(zeInit)                                                                                  \
	X(zeDriverGet)                                                                             \
	X(zeDriverGetApiVersion)                                                                   \
	X(zeDriverGetProperties)                                                                   \
	X(zeDriverGetExtensionProperties)                                                          \
	X(zeDeviceGet)                                                                             \
	X(zeDeviceGetProperties)                                                                   \
	X(zeDeviceGetMemoryProperties)                                                             \
	X(zeDevicePciGetPropertiesExt)                                                             \
	X(zeDeviceGetCommandQueueGroupProperties)                                                  \
	X(zeContextCreate)                                                                         \
	X(zeContextDestroy)                                                                        \
	X(zeMemAllocDevice)                                                                        \
	X(zeMemAllocHost)                                                                          \
	X(zeMemFree)                                                                               \
	X(zeMemGetAllocProperties)                                                                 \
	X(zeMemGetAddressRange)                                                                    \
	X(zeCommandListCreateImmediate)                                                            \
	X(zeCommandListDestroy)                                                                    \
	X(zeCommandListAppendMemoryCopy)                                                           \
	X(zeCommandListAppendBarrier)                                                              \
	X(zeCommandListAppendSignalEvent)                                                          \
	X(zeEventPoolCreate)                                                                       \
	X(zeEventPoolDestroy)                                                                      \
	X(zeEventCreate)                                                                           \
	X(zeEventDestroy)                                                                          \
	X(zeEventHostSynchronize)                                                                  \
	X(zeEventQueryStatus)                                                                      \
	X(zeEventHostReset)                                                                        \
	X(zeMemGetIpcHandle)                                                                       \
	X(zeMemOpenIpcHandle)                                                                      \
	X(zeMemCloseIpcHandle)                                                                     \
	X(zeVirtualMemQueryPageSize)                                                               \
	X(zeVirtualMemReserve)                                                                     \
	X(zeVirtualMemFree)                                                                        \
	X(zePhysicalMemCreate)                                                                     \
	X(zePhysicalMemDestroy)                                                                    \
	X(zeVirtualMemMap)                                                                         \
	X(zeVirtualMemUnmap)

#define X(name) F_##name,
enum { FAKE_ZE_FUNCTIONS(X) F_COUNT };
#undef X

/* The least alignment of zeMemAllocDevice. The spec leaves it to the driver;
 * Intel's gives at least a cache line, and the backend may count on that. */
#define DEVICE_ALIGN 64
/* The one granularity of the virtual memory functions, whatever the size
 * asked about: Intel's driver answers 64 KiB for small sizes and 2 MiB for
 * large ones; a single answer keeps the backend's arithmetic testable. */
#define VM_PAGE ((size_t)2 << 20)
/* What zeMemGetAllocProperties reports as a device allocation's page size. */
#define DEVICE_PAGE ((size_t)64 << 10)
#define MAX_DEVICES 64
/* Command queue groups: ordinal 0 computes (and copies), ordinal 1 only copies. */
#define N_GROUPS 2

/* Handles are pointers to these; the driver and devices are in the fake's
 * state, so a handle stays valid for the life of the process as in the
 * real loader. */
struct _ze_driver_handle_t {
	int unused;
};

struct _ze_device_handle_t {
	int phys; /* physical ordinal, before ZE_AFFINITY_MASK */
};

struct _ze_context_handle_t {
	unsigned long objects; /* allocations, lists, pools, reservations, physical memory */
};

struct _ze_command_list_handle_t {
	ze_context_handle_t ctx;
	ze_device_handle_t dev;
	uint32_t ordinal;
};

struct _ze_event_pool_handle_t {
	ze_context_handle_t ctx;
	ze_event_pool_flags_t flags;
	uint32_t count;
	unsigned long live; /* events created from it */
	unsigned char *used; /* count entries: whether an event holds that index */
};

struct _ze_event_handle_t {
	ze_event_pool_handle_t pool;
	uint32_t index;
	int signalled;
	int pending; /* signalled while events were held, and not waited for since */
};

struct _ze_physical_mem_handle_t {
	struct fake_physical phys; /* first, for fake-vmm.h; its device is a physical ordinal */
	ze_context_handle_t ctx;
};

enum range_kind { R_DEVICE, R_HOST, R_RESERVED, R_MAPPED, R_KINDS };
_Static_assert(R_KINDS <= FAKE_REGISTRY_KINDS, "the registry counts every kind");

/* Mappings are struct fake_mapping, in vmem.mappings; their owner is the
 * context. */
struct range {
	struct fake_range span; /* first, for the registry; its kind is an enum range_kind */
	size_t mapped; /* host allocations and reservations: the length given to mmap() */
	ze_context_handle_t ctx;
	int phys; /* device allocations: physical ordinal */
};

/* A command queue group's properties. */
struct queue_group {
	ze_command_queue_group_property_flags_t flags;
	size_t fill;
	uint32_t queues;
};
extern const struct queue_group groups[N_GROUPS] FAKE_INTERNAL;

/* Everything the fake keeps: fake-ze.c defines it. */
struct fake_ze {
	struct _ze_driver_handle_t the_driver;
	struct _ze_device_handle_t device_table[MAX_DEVICES]; /* by visible ordinal */

	/* Read once, at the first zeInit, as the loader reads its environment. */
	pthread_once_t devices_once;
	int n_physical;
	int n_visible;
	size_t capacity;          /* bytes of each device */
	size_t max_alloc;         /* maxMemAllocSize: FAKE_ZE_MAX_ALLOC_MB, else capacity */
	int relaxed_limits;       /* ZE_experimental_relaxed_allocation_limits: FAKE_ZE_RELAXED_LIMITS */
	size_t used[MAX_DEVICES]; /* by physical ordinal; under lock */
	int initialized;          /* a zeInit succeeded */
	int hold_events;

	/* The live objects, all under lock: one tree of non-overlapping address
	 * ranges (device and host allocations, reservations) so that any address
	 * inside one finds it, one tree each of the other handles, and in vmem
	 * the mappings inside reservations and the physical memory handles. */
	pthread_mutex_t lock;
	pthread_cond_t event_cond; /* signalled events; on CLOCK_MONOTONIC */
	void *ranges;
	void *contexts;
	void *lists;
	void *pools;
	void *events;
	struct fake_registry registry;
	unsigned long live_contexts, live_lists, live_pools, live_events;
	struct fake_vmm vmem;

	struct fake_counter counters[F_COUNT];
};
extern struct fake_ze fake FAKE_INTERNAL;

/* ---- call counting and fault injection ---- */

extern const struct fake_controls controls FAKE_INTERNAL;

_Static_assert(ZE_RESULT_SUCCESS == 0, "fake_controls_enter answers 0 for success");

FAKE_CONTROLS_CALLS(ze_result_t, controls)

/* Each API function begins with this: counted, maybe failed on demand; and,
 * as the spec says, refused before a successful zeInit. */
#define ENTER(name)                                                                                \
	do {                                                                                       \
		ze_result_t injected_ = enter(F_##name);                                           \
		if (injected_ != ZE_RESULT_SUCCESS)                                                \
			return injected_;                                                          \
		if (F_##name != F_zeInit &&                                                        \
		    !__atomic_load_n(&fake.initialized, __ATOMIC_ACQUIRE))                         \
			return misuse(ZE_RESULT_ERROR_UNINITIALIZED);                              \
	} while (0)

/* ---- the registries (fake-ze.c) ---- */

/* The live range holding address p, under lock; NULL if none. */
static inline struct range *range_at(const void *p)
{
	return fake_range_in(&fake.ranges, (uintptr_t)p, 1);
}

static inline int power_of_two_or_zero(size_t n)
{
	return (n & (n - 1)) == 0;
}

/* The usual first check of a handle argument, under lock. */
ze_result_t check_handle(void *const *tree, const void *h) FAKE_INTERNAL;
ze_result_t check_device(ze_device_handle_t d) FAKE_INTERNAL;
/* check_handle for a context, taking the lock: for calls that need only that. */
ze_result_t check_context(ze_context_handle_t ctx) FAKE_INTERNAL;
/* The checks of the calls that make something of a context on a device. */
ze_result_t check_context_device(ze_context_handle_t ctx, ze_device_handle_t d) FAKE_INTERNAL;
/* The usual checks of a call on a context about memory, under lock: the
 * context, and the pointers the call must be given (given: whether they are). */
ze_result_t check_context_pointers(ze_context_handle_t ctx, int given) FAKE_INTERNAL;
/* Enters handle h, just made in ctx, in tree, counting it in *live and in
 * the context's objects; takes the lock. On failure h is the caller's. */
ze_result_t context_adopt(ze_context_handle_t ctx, void **tree, void *h,
			  unsigned long *live) FAKE_INTERNAL;

#endif
