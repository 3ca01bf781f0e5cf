/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* ze.h - what the Level Zero backend's files share: the loader's functions, the state of the devices, streams and events, and how a failure is reported. */
#ifndef DEVCACHE_BACKENDS_ZE_H
#define DEVCACHE_BACKENDS_ZE_H

#include "../runtime.h"

#include <level_zero/ze_api.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Every loader function the backend calls, resolved by name; the pointers
 * take their types from the vendor's declarations. */
#define ZE_FUNCTIONS(X)                                                                    \
	X(zeInit) X(zeDriverGet) X(zeDeviceGet) X(zeDeviceGetProperties)                     \
	X(zeDeviceGetMemoryProperties) X(zeDeviceGetCommandQueueGroupProperties)           \
	X(zeContextCreate) X(zeContextDestroy) X(zeMemAllocDevice) X(zeMemAllocHost)         \
	X(zeMemFree) X(zeMemGetAddressRange) X(zeCommandListCreateImmediate)                 \
	X(zeCommandListDestroy) X(zeCommandListAppendMemoryCopy) X(zeCommandListAppendBarrier) \
	X(zeEventPoolCreate) X(zeEventPoolDestroy) X(zeEventCreate) X(zeEventDestroy)        \
	X(zeEventHostSynchronize) X(zeEventQueryStatus) X(zeEventHostReset)
/* Capabilities: present where these resolve. */
#define ZE_IPC_FUNCTIONS(X) X(zeMemGetIpcHandle) X(zeMemOpenIpcHandle) X(zeMemCloseIpcHandle)
#define ZE_VMM_FUNCTIONS(X)                                                                \
	X(zeVirtualMemQueryPageSize) X(zeVirtualMemReserve) X(zeVirtualMemFree)              \
	X(zePhysicalMemCreate) X(zePhysicalMemDestroy) X(zeVirtualMemMap) X(zeVirtualMemUnmap)
#define ZE_OPTIONAL_FUNCTIONS(X) X(zeDevicePciGetPropertiesExt) X(zeDriverGetExtensionProperties)

/* Events come from pools of this many; a pool is made when the last is full. */
#define POOL_EVENTS 64

struct ze_pool {
	ze_event_pool_handle_t pool;
	uint64_t used; /* a bit per event index */
	uint64_t lost; /* events the loader would not destroy: never reused */
	struct ze_pool *next;
};

/* A stream is an immediate command list.  Command lists are not
 * thread-safe, and the allocator and the model loader's workers copy on
 * one stream from several threads, so each has a lock. */
struct ze_stream {
	ze_command_list_handle_t list;
	pthread_mutex_t lock;
	int dev;
};

/* A Level Zero event starts unsignalled, and waiting for one never
 * signalled waits for ever; a libdevcache event, as a CUDA or HIP one, is
 * complete until it is first recorded.  recorded bridges the two. */
struct ze_event {
	ze_event_handle_t event;
	struct ze_pool *pool;
	uint32_t index;
	bool recorded; /* atomic */
};

struct ze_dev {
	ze_driver_handle_t driver;
	ze_device_handle_t device;
	ze_context_handle_t context;
	uint32_t copy_ordinal;       /* the queue group copies go to */
	struct ze_stream dflt;       /* the default stream */
	pthread_mutex_t pool_lock;
	struct ze_pool *pools;
	uint64_t allocated;          /* atomic: bytes of zeMemAllocDevice live */
	uint64_t total;
	uint64_t max_alloc;          /* maxMemAllocSize */
	bool relaxed;                /* its driver relaxes maxMemAllocSize on request */
	unsigned lost;               /* atomic: objects of its context the loader would not free */
};

struct ze_state {
	const struct devcache_backend_host *host;
	void *lib;
	char lib_name[256];
	int n_devices;
	struct ze_dev *devs;
	ze_context_handle_t *contexts; /* one per driver */
	uint32_t n_contexts;
	bool ipc, vmm;
#define FIELD(name) __typeof__(name) *name;
	ZE_FUNCTIONS(FIELD)
	ZE_IPC_FUNCTIONS(FIELD)
	ZE_VMM_FUNCTIONS(FIELD)
	ZE_OPTIONAL_FUNCTIONS(FIELD)
#undef FIELD
};

/* fail() reports the failure of a loader call: the library's error code for
 * r, and a message naming the device (dev < 0: none) and the call; left()
 * logs an object the loader would not give back (ze.c). */
int fail(struct ze_state *s, ze_result_t r, const char *what, int dev);
void left(struct ze_state *s, int dev, const char *what, const char *call, ze_result_t r);

#define CHECK(s, call, what, dev)                                                          \
	do {                                                                               \
		ze_result_t r_ = (call);                                                   \
		if (r_ != ZE_RESULT_SUCCESS)                                               \
			return fail((s), r_, (what), (dev));                               \
	} while (0)

/* A stream on the device's copy engine: the default one, or a new one (ze-stream.c). */
int stream_open(struct ze_state *s, int dev, struct ze_stream *st);

/* The entries of struct devcache_backend_ops that ze-stream.c and ze-vm.c hold. */
int ze_memcpy_htod(void *state, int dev, void *dst, const void *src, size_t size,
		   devcache_stream_t stream);
int ze_memcpy_dtoh(void *state, int dev, void *dst, const void *src, size_t size,
		   devcache_stream_t stream);
int ze_stream_create(void *state, int dev, devcache_stream_t *stream_p);
int ze_stream_destroy(void *state, int dev, devcache_stream_t stream);
int ze_stream_synchronize(void *state, int dev, devcache_stream_t stream);
int ze_event_create(void *state, int dev, devcache_event_t *event_p);
int ze_event_destroy(void *state, int dev, devcache_event_t event);
int ze_event_record(void *state, int dev, devcache_event_t event, devcache_stream_t stream);
int ze_event_query(void *state, int dev, devcache_event_t event);
int ze_event_synchronize(void *state, int dev, devcache_event_t event);
int ze_vm_granularity(void *state, int dev, size_t *granularity_p);
int ze_vm_reserve(void *state, int dev, size_t size, void **va_p);
int ze_vm_release(void *state, int dev, void *va, size_t size);
int ze_vm_create(void *state, int dev, size_t size, void **handle_p);
int ze_vm_destroy(void *state, int dev, void *handle);
int ze_vm_map(void *state, int dev, void *va, size_t size, void *handle);
int ze_vm_unmap(void *state, int dev, void *va, size_t size);

#endif /* DEVCACHE_BACKENDS_ZE_H */
