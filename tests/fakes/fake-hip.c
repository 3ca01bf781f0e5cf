/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-hip.c - a host-memory stand-in for libamdhip64.so, with test controls, for the HIP backend's tests. */
#define _GNU_SOURCE /* twalk_r, secure_getenv, memfd_create, MAP_FIXED_NOREPLACE */
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

/* Everything not static is the runtime's API or a test control, and must stay
 * reachable by dlsym() whatever -fvisibility the build uses. */
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
void fake_hip_fail(const char *function, unsigned nth, int error);
unsigned long fake_hip_calls(const char *function);
const char *fake_hip_function(unsigned i);
unsigned long fake_hip_misuses(const char *function);
size_t fake_hip_live(void);
void fake_hip_hold_events(int hold);
void fake_hip_vmm(int supported);

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
#define X(name) #name,
static const char *const function_names[F_COUNT] = {FAKE_HIP_FUNCTIONS(X)};
#undef X

static struct fake_counter counters[F_COUNT];

/* hipMalloc's alignment in ROCm; the backend may count on it. */
#define DEVICE_ALIGN 256
/* The one granularity of the virtual memory functions, minimum and
 * recommended alike. */
#define VM_GRANULARITY ((size_t)2 << 20)
/* Devices are bits of a uint64_t in a mapping's access masks. */
#define MAX_DEVICES 64

/* Read once, on the first call that needs them, as ROCm does at its init. */
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;
static int n_physical;
static int n_visible;
static int visible[MAX_DEVICES];     /* visible ordinal -> physical ordinal */
static size_t capacity;              /* bytes of each device */
static size_t used[MAX_DEVICES];     /* by physical ordinal; under lock */
static __thread int current_device;  /* visible ordinal, per thread as in HIP */
static __thread hipError_t last_error;
static int hold_events;
/* FAKE_HIP_VMM=0, or fake_hip_vmm(0): the devices cannot map memory, and the
 * virtual memory calls answer hipErrorNotSupported. */
static int vmm_supported = -1;

/* The live objects, all under lock: one tree of non-overlapping address ranges
 * (device and host allocations, registrations) so that any address inside one
 * finds it, and one tree each of the stream and event handles. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *ranges;
static void *streams;
static void *events;

enum range_kind { R_DEVICE, R_HOST, R_REGISTERED, R_RESERVED, R_MAPPED, R_KINDS };
static const char *const kind_names[R_KINDS] = {"device allocation", "host allocation",
						"host registration", "address reservation",
						"mapping"};
_Static_assert(R_KINDS <= FAKE_REGISTRY_KINDS, "the registry counts every kind");
static struct fake_registry registry = {
	.fake = "fake-hip",
	.leaks_env = "FAKE_HIP_LEAKS",
	.kind_names = kind_names,
	.n_kinds = R_KINDS,
};
static unsigned long live_streams, live_events;
/* The mappings inside reservations and the physical memory handles. */
static struct fake_vmm vmem =
	FAKE_VMM_INIT(&lock, &registry, &ranges, R_RESERVED, R_MAPPED, "fake-hip-physical");

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

_Static_assert(sizeof(struct fake_ipc_handle) <= sizeof(hipIpcMemHandle_t), "IPC handle too large");
static const char ipc_magic[8] = "fakehip";

/* ---- errors ---- */

/* Names and texts as ROCm's hipGetErrorName and hipGetErrorString give them. */
static const struct fake_code error_table[] = {
	{hipSuccess, "hipSuccess", "no error"},
	{hipErrorInvalidValue, "hipErrorInvalidValue", "invalid argument"},
	{hipErrorOutOfMemory, "hipErrorOutOfMemory", "out of memory"},
	{hipErrorNotInitialized, "hipErrorNotInitialized", "initialization error"},
	{hipErrorDeinitialized, "hipErrorDeinitialized", "driver shutting down"},
	{hipErrorInvalidDevicePointer, "hipErrorInvalidDevicePointer", "invalid device pointer"},
	{hipErrorInvalidMemcpyDirection, "hipErrorInvalidMemcpyDirection",
	 "invalid copy direction for memcpy"},
	{hipErrorInsufficientDriver, "hipErrorInsufficientDriver",
	 "driver version is insufficient for runtime version"},
	{hipErrorNoDevice, "hipErrorNoDevice", "no ROCm-capable device is detected"},
	{hipErrorInvalidDevice, "hipErrorInvalidDevice", "invalid device ordinal"},
	{hipErrorInvalidContext, "hipErrorInvalidContext", "invalid device context"},
	{hipErrorMapFailed, "hipErrorMapFailed", "mapping of buffer object failed"},
	{hipErrorOperatingSystem, "hipErrorOperatingSystem",
	 "OS call failed or operation not supported on this OS"},
	{hipErrorInvalidHandle, "hipErrorInvalidHandle", "invalid resource handle"},
	{hipErrorIllegalState, "hipErrorIllegalState",
	 "the operation cannot be performed in the present state"},
	{hipErrorNotFound, "hipErrorNotFound", "named symbol not found"},
	{hipErrorNotReady, "hipErrorNotReady", "device not ready"},
	{hipErrorIllegalAddress, "hipErrorIllegalAddress", "an illegal memory access was encountered"},
	{hipErrorLaunchFailure, "hipErrorLaunchFailure", "unspecified launch failure"},
	{hipErrorHostMemoryAlreadyRegistered, "hipErrorHostMemoryAlreadyRegistered",
	 "part or all of the requested memory range is already mapped"},
	{hipErrorHostMemoryNotRegistered, "hipErrorHostMemoryNotRegistered",
	 "pointer does not correspond to a registered memory region"},
	{hipErrorNotSupported, "hipErrorNotSupported", "operation not supported"},
	{hipErrorUnknown, "hipErrorUnknown", "unknown error"},
	{hipErrorRuntimeMemory, "hipErrorRuntimeMemory", "runtime memory call returned error"},
	{hipErrorRuntimeOther, "hipErrorRuntimeOther", "runtime call other than memory returned error"},
};

/* Like ROCm 5.2, every call records its result, success too, for hipGetLastError. */
static hipError_t done(hipError_t err)
{
	last_error = err;
	return err;
}

/* ---- call counting and fault injection ---- */

static const struct fake_controls controls =
	FAKE_CONTROLS_INIT(hip, HIP, "error", INT_MAX, function_names, counters, error_table);

FAKE_CONTROLS_EXPORTS(hip, controls)

_Static_assert(hipSuccess == 0, "fake_controls_enter answers 0 for success");

FAKE_CONTROLS_CALLS(hipError_t, controls)

/* Each API function begins with this: counted, maybe failed on demand. */
#define ENTER(name)                                                                                \
	do {                                                                                       \
		hipError_t injected_ = enter(F_##name);                                            \
		if (injected_ != hipSuccess)                                                       \
			return done(injected_);                                                    \
	} while (0)

__attribute__((constructor)) static void fake_hip_load(void)
{
	fake_controls_load(&controls);
}

/* ---- devices ---- */

/* HIP_VISIBLE_DEVICES as ROCm reads it (and CUDA_VISIBLE_DEVICES when that is
 * unset or empty, as ROCm does too): decimal physical ordinals, comma-separated;
 * an entry that is not one ("01", "x", out of range) ends the list, and a
 * repeated one is skipped. */
static void parse_visible(const char *list)
{
	const char *p = list;
	char *end;

	n_visible = 0;
	while (*p) {
		int seen = 0;
		long v;

		if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9'))
			break;
		errno = 0;
		v = strtol(p, &end, 10);
		if (errno || (*end && *end != ',') || v >= n_physical)
			break;
		for (int i = 0; i < n_visible; i++)
			seen |= visible[i] == v;
		if (!seen)
			visible[n_visible++] = (int)v;
		p = *end ? end + 1 : end;
	}
}

static void devices_init(void)
{
	const char *list = getenv("HIP_VISIBLE_DEVICES");

	n_physical = (int)fake_controls_env_number(&controls, "FAKE_HIP_DEVICES", 2, 0, MAX_DEVICES);
	if (__atomic_load_n(&vmm_supported, __ATOMIC_RELAXED) < 0)
		__atomic_store_n(&vmm_supported,
				 (int)fake_controls_env_number(&controls, "FAKE_HIP_VMM", 1, 0, 1),
				 __ATOMIC_RELAXED);
	capacity = (size_t)fake_controls_env_number(&controls, "FAKE_HIP_MEMORY_MB", 1024, 0,
						    (long)(SIZE_MAX >> 21)) << 20;
	if (!list || !*list)
		list = getenv("CUDA_VISIBLE_DEVICES");
	if (list && *list) {
		parse_visible(list);
		return;
	}
	n_visible = n_physical;
	for (int i = 0; i < n_physical; i++)
		visible[i] = i;
}

static int device_count(void)
{
	pthread_once(&devices_once, devices_init);
	return n_visible;
}

/* hipSuccess where device (visible ordinal) exists. */
static hipError_t check_device(int device)
{
	int n = device_count();

	if (n == 0)
		return hipErrorNoDevice;
	return device < 0 || device >= n ? misuse(hipErrorInvalidDevice) : hipSuccess;
}

/* Without devices, ROCm fails every call that needs its init. */
#define NEED_DEVICES()                                                                             \
	do {                                                                                       \
		if (device_count() == 0)                                                           \
			return done(hipErrorNoDevice);                                             \
	} while (0)

/* ---- the registries ---- */

/* The live range holding address p, under lock; NULL if none. */
static struct range *range_at(const void *p)
{
	return fake_range_in(&ranges, (uintptr_t)p, 1);
}

/* Whether handle h is a live stream (the default ones too), under lock. */
static int stream_known(hipStream_t s)
{
	return s == NULL || s == hipStreamPerThread || fake_handle_known(&streams, s);
}

static int event_known(hipEvent_t e)
{
	return fake_handle_known(&events, e);
}

/* ---- errors and versions ---- */

const char *hipGetErrorName(hipError_t hip_error)
{
	int i = fake_controls_code_index(&controls, (int)hip_error);

	enter(F_hipGetErrorName); /* counted; it has no way to fail */
	return i < 0 ? "hipErrorUnknown" : error_table[i].name;
}

const char *hipGetErrorString(hipError_t hipError)
{
	int i = fake_controls_code_index(&controls, (int)hipError);

	enter(F_hipGetErrorString);
	return i < 0 ? "unknown error" : error_table[i].text;
}

hipError_t hipGetLastError(void)
{
	hipError_t err = last_error;

	ENTER(hipGetLastError);
	last_error = hipSuccess;
	return err;
}

hipError_t hipPeekAtLastError(void)
{
	ENTER(hipPeekAtLastError);
	return done(last_error);
}

hipError_t hipInit(unsigned int flags)
{
	ENTER(hipInit);
	if (flags != 0)
		return done(misuse(hipErrorInvalidValue));
	NEED_DEVICES();
	return done(hipSuccess);
}

hipError_t hipDriverGetVersion(int *driverVersion)
{
	ENTER(hipDriverGetVersion);
	if (!driverVersion)
		return done(misuse(hipErrorInvalidValue));
	*driverVersion = FAKE_HIP_VERSION;
	return done(hipSuccess);
}

hipError_t hipRuntimeGetVersion(int *runtimeVersion)
{
	ENTER(hipRuntimeGetVersion);
	if (!runtimeVersion)
		return done(misuse(hipErrorInvalidValue));
	*runtimeVersion = FAKE_HIP_VERSION;
	return done(hipSuccess);
}

/* ---- devices ---- */

hipError_t hipGetDeviceCount(int *count)
{
	ENTER(hipGetDeviceCount);
	if (!count)
		return done(misuse(hipErrorInvalidValue));
	*count = device_count();
	return done(*count ? hipSuccess : hipErrorNoDevice);
}

hipError_t hipSetDevice(int deviceId)
{
	hipError_t err;

	ENTER(hipSetDevice);
	if ((err = check_device(deviceId)) != hipSuccess)
		return done(err);
	current_device = deviceId;
	return done(hipSuccess);
}

hipError_t hipGetDevice(int *deviceId)
{
	ENTER(hipGetDevice);
	NEED_DEVICES();
	if (!deviceId)
		return done(misuse(hipErrorInvalidValue));
	*deviceId = current_device;
	return done(hipSuccess);
}

hipError_t hipDeviceGetName(char *name, int len, hipDevice_t device)
{
	hipError_t err;

	ENTER(hipDeviceGetName);
	if ((err = check_device(device)) != hipSuccess)
		return done(err);
	if (!name || len <= 0)
		return done(misuse(hipErrorInvalidValue));
	/* The physical ordinal in the name lets a test see HIP_VISIBLE_DEVICES at work. */
	snprintf(name, (size_t)len, "Fake HIP device %d", visible[device]);
	return done(hipSuccess);
}

hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t device)
{
	hipError_t err;

	ENTER(hipDeviceTotalMem);
	if ((err = check_device(device)) != hipSuccess)
		return done(err);
	if (!bytes)
		return done(misuse(hipErrorInvalidValue));
	*bytes = capacity;
	return done(hipSuccess);
}

hipError_t hipDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
	hipError_t err;

	ENTER(hipDeviceGetPCIBusId);
	if ((err = check_device(device)) != hipSuccess)
		return done(err);
	/* ROCm wants room for all of "dddd:bb:dd.f" and its NUL. */
	if (!pciBusId || len < 13)
		return done(misuse(hipErrorInvalidValue));
	snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", visible[device] + 1);
	return done(hipSuccess);
}

/* Copies run at once, so waiting for the device is waiting for held events. */
hipError_t hipDeviceSynchronize(void)
{
	struct fake_release_filter f = {.dev = -1};

	ENTER(hipDeviceSynchronize);
	NEED_DEVICES();
	f.dev = current_device;
	fake_events_release(&lock, &events, &f);
	return done(hipSuccess);
}

hipError_t hipMemGetInfo(size_t *free, size_t *total)
{
	int dev;

	ENTER(hipMemGetInfo);
	NEED_DEVICES();
	if (!free || !total)
		return done(misuse(hipErrorInvalidValue));
	dev = visible[current_device];
	pthread_mutex_lock(&lock);
	*free = capacity - used[dev];
	pthread_mutex_unlock(&lock);
	*total = capacity;
	return done(hipSuccess);
}

/* ---- memory ---- */

hipError_t hipMalloc(void **ptr, size_t size)
{
	struct range *r;
	int dev;

	ENTER(hipMalloc);
	NEED_DEVICES();
	if (!ptr)
		return done(misuse(hipErrorInvalidValue));
	*ptr = NULL;
	if (size == 0)
		return done(hipSuccess);
	dev = visible[current_device];
	if ((r = malloc(sizeof *r)))
		*r = (struct range){.dev = dev};
	if (fake_vmm_alloc_device(&vmem, r ? &r->span : NULL, R_DEVICE, size, DEVICE_ALIGN, &used[dev],
				  capacity, NULL) != FAKE_VMM_OK) {
		free(r);
		return done(hipErrorOutOfMemory);
	}
	*ptr = (void *)r->span.base;
	return done(hipSuccess);
}

/* Removes the range based at ptr if it is of kind; under no lock. */
static struct range *take_range(void *ptr, enum range_kind kind)
{
	return fake_vmm_take(&vmem, (uintptr_t)ptr, kind);
}

hipError_t hipFree(void *ptr)
{
	struct range *r;

	ENTER(hipFree);
	NEED_DEVICES();
	if (!ptr)
		return done(hipSuccess);
	/* Stricter than ROCm, which also frees hipHostMalloc memory here: a
	 * backend that mixes the two is wrong on CUDA and should be told. */
	if (!(r = take_range(ptr, R_DEVICE)))
		return done(misuse(hipErrorInvalidValue));
	free(ptr);
	free(r);
	return done(hipSuccess);
}

#define HOST_MALLOC_FLAGS                                                                          \
	(hipHostMallocPortable | hipHostMallocMapped | hipHostMallocWriteCombined |                \
	 hipHostMallocNumaUser | hipHostMallocCoherent | hipHostMallocNonCoherent)

hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags)
{
	struct range *r;

	ENTER(hipHostMalloc);
	NEED_DEVICES();
	if (!ptr)
		return done(misuse(hipErrorInvalidValue));
	*ptr = NULL;
	if ((flags & ~(unsigned)HOST_MALLOC_FLAGS) ||
	    (flags & hipHostMallocCoherent && flags & hipHostMallocNonCoherent))
		return done(misuse(hipErrorInvalidValue));
	if (size == 0)
		return done(hipSuccess);
	if (!(r = malloc(sizeof *r)))
		return done(hipErrorOutOfMemory);
	*r = (struct range){0};
	if (fake_vmm_alloc_host(&vmem, &r->span, R_HOST, size, &r->mapped) != FAKE_VMM_OK) {
		free(r);
		return done(hipErrorOutOfMemory);
	}
	*ptr = (void *)r->span.base;
	return done(hipSuccess);
}

hipError_t hipHostFree(void *ptr)
{
	struct range *r;

	ENTER(hipHostFree);
	NEED_DEVICES();
	if (!ptr)
		return done(hipSuccess);
	if (!(r = take_range(ptr, R_HOST)))
		return done(misuse(hipErrorInvalidValue));
	munmap(ptr, r->mapped);
	free(r);
	return done(hipSuccess);
}

#define HOST_REGISTER_FLAGS (hipHostRegisterPortable | hipHostRegisterMapped | hipHostRegisterIoMemory)

hipError_t hipHostRegister(void *hostPtr, size_t sizeBytes, unsigned int flags)
{
	struct range *r, *other;

	ENTER(hipHostRegister);
	NEED_DEVICES();
	if (!hostPtr || sizeBytes == 0 || (flags & ~(unsigned)HOST_REGISTER_FLAGS) ||
	    sizeBytes > UINTPTR_MAX - (uintptr_t)hostPtr)
		return done(misuse(hipErrorInvalidValue));
	if (!(r = malloc(sizeof *r)))
		return done(hipErrorOutOfMemory);
	*r = (struct range){
		.span = {.base = (uintptr_t)hostPtr, .size = sizeBytes, .kind = R_REGISTERED}};
	pthread_mutex_lock(&lock);
	other = fake_range_add(&registry, &ranges, &r->span);
	pthread_mutex_unlock(&lock);
	if (other == r)
		return done(hipSuccess);
	free(r);
	if (!other)
		return done(hipErrorOutOfMemory);
	/* Pinned memory pinned again is ROCm's error; device memory is no host memory. */
	return done(other->span.kind == R_DEVICE ? misuse(hipErrorInvalidValue) :
					      misuse(hipErrorHostMemoryAlreadyRegistered));
}

hipError_t hipHostUnregister(void *hostPtr)
{
	struct range *r;

	ENTER(hipHostUnregister);
	NEED_DEVICES();
	if (!hostPtr)
		return done(misuse(hipErrorInvalidValue));
	if (!(r = take_range(hostPtr, R_REGISTERED)))
		return done(misuse(hipErrorHostMemoryNotRegistered));
	free(r);
	return done(hipSuccess);
}

/* ---- copies ---- */

/* Whether visible device dev may copy [p, p + size) in a reservation, under
 * lock: a run of adjacent mappings, each giving dev the access asked for.
 * Mapped memory a device may not touch faults on a device; here the copy
 * fails with hipErrorIllegalAddress instead of the fake's own SIGSEGV. */
static hipError_t mapped_side(uintptr_t p, size_t size, int dev, int write)
{
	switch (fake_vmm_reach(&vmem, p, size, dev, write)) {
	case FAKE_VMM_REACHED:
		return hipSuccess;
	case FAKE_VMM_DENIED:
		return misuse(hipErrorIllegalAddress);
	default:
		return misuse(hipErrorInvalidValue);
	}
}

/* Whether [p, p + size) may be copied, under lock: where p is inside a known
 * range, the copy must end inside it too, as ROCm checks; where the kind says
 * p is device memory, it must be; reserved address space must be mapped for
 * the current device. */
static hipError_t copy_side(const void *p, size_t size, int must_be_device, int write)
{
	struct range *r = range_at(p);
	uintptr_t a = (uintptr_t)p;

	if (!r)
		return must_be_device ? misuse(hipErrorInvalidValue) : hipSuccess;
	if (size > r->span.base + r->span.size - a)
		return misuse(hipErrorInvalidValue);
	if (r->span.kind == R_RESERVED)
		return mapped_side(a, size, current_device, write);
	return must_be_device && r->span.kind != R_DEVICE ? misuse(hipErrorInvalidValue)
							  : hipSuccess;
}

/* Under the lock, so that a racing unmap cannot take what it reads. */
static hipError_t copy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind)
{
	int dst_device, src_device;
	hipError_t err;

	if ((unsigned)kind > hipMemcpyDefault)
		return misuse(hipErrorInvalidMemcpyDirection);
	if (sizeBytes == 0)
		return hipSuccess;
	if (!dst || !src)
		return misuse(hipErrorInvalidValue);
	dst_device = kind == hipMemcpyHostToDevice || kind == hipMemcpyDeviceToDevice;
	src_device = kind == hipMemcpyDeviceToHost || kind == hipMemcpyDeviceToDevice;
	pthread_mutex_lock(&lock);
	err = copy_side(dst, sizeBytes, dst_device, 1);
	if (err == hipSuccess)
		err = copy_side(src, sizeBytes, src_device, 0);
	if (err == hipSuccess)
		memmove(dst, src, sizeBytes);
	pthread_mutex_unlock(&lock);
	return err;
}

hipError_t hipMemcpy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind)
{
	ENTER(hipMemcpy);
	NEED_DEVICES();
	return done(copy(dst, src, sizeBytes, kind));
}

/* The copy is done before this returns, in the calling thread: work on one
 * stream then completes in order, and is done whenever anyone could wait. */
hipError_t hipMemcpyAsync(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind,
			  hipStream_t stream)
{
	int known;

	ENTER(hipMemcpyAsync);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	known = stream_known(stream);
	pthread_mutex_unlock(&lock);
	if (!known)
		return done(misuse(hipErrorInvalidHandle));
	return done(copy(dst, src, sizeBytes, kind));
}

/* ---- streams ---- */

static hipError_t stream_create(hipStream_t *stream, unsigned flags)
{
	struct ihipStream_t *s;

	if (!stream)
		return misuse(hipErrorInvalidValue);
	if (flags & ~(unsigned)hipStreamNonBlocking)
		return misuse(hipErrorInvalidValue);
	if (!(s = malloc(sizeof *s)))
		return hipErrorOutOfMemory;
	*s = (struct ihipStream_t){.dev = current_device, .flags = flags};
	if (!fake_handle_register(&lock, &streams, s, &live_streams))
		return hipErrorOutOfMemory;
	*stream = s;
	return hipSuccess;
}

hipError_t hipStreamCreate(hipStream_t *stream)
{
	ENTER(hipStreamCreate);
	NEED_DEVICES();
	return done(stream_create(stream, hipStreamDefault));
}

hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags)
{
	ENTER(hipStreamCreateWithFlags);
	NEED_DEVICES();
	return done(stream_create(stream, flags));
}

hipError_t hipStreamDestroy(hipStream_t stream)
{
	int known;

	ENTER(hipStreamDestroy);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	/* The default streams are not the caller's to destroy. */
	known = stream != hipStreamPerThread && fake_handle_remove(&streams, stream, &live_streams);
	if (known)
		fake_events_forget_stream(&events, stream);
	pthread_mutex_unlock(&lock);
	if (!known)
		return done(misuse(hipErrorInvalidHandle));
	free(stream);
	return done(hipSuccess);
}

/* Held events recorded on stream: what its work still waits for. */
static hipError_t stream_wait(hipStream_t stream, int release)
{
	struct fake_release_filter f = {.dev = -1, .stream = stream};
	int known;

	pthread_mutex_lock(&lock);
	known = stream_known(stream);
	pthread_mutex_unlock(&lock);
	if (!known)
		return misuse(hipErrorInvalidHandle);
	if (stream == hipStreamPerThread)
		f.stream = NULL;
	return fake_events_stream_busy(&lock, &events, &f, release, &hold_events) ?
		       hipErrorNotReady :
		       hipSuccess;
}

hipError_t hipStreamSynchronize(hipStream_t stream)
{
	ENTER(hipStreamSynchronize);
	NEED_DEVICES();
	return done(stream_wait(stream, 1));
}

hipError_t hipStreamQuery(hipStream_t stream)
{
	ENTER(hipStreamQuery);
	NEED_DEVICES();
	return done(stream_wait(stream, 0));
}

/* ---- events ---- */

#define EVENT_FLAGS                                                                                \
	(hipEventBlockingSync | hipEventDisableTiming | hipEventInterprocess |                     \
	 hipEventReleaseToDevice | hipEventReleaseToSystem)

static hipError_t event_create(hipEvent_t *event, unsigned flags)
{
	struct ihipEvent_t *e;

	if (!event || (flags & ~(unsigned)EVENT_FLAGS))
		return misuse(hipErrorInvalidValue);
	/* As in CUDA and ROCm, an interprocess event cannot time. */
	if (flags & hipEventInterprocess && !(flags & hipEventDisableTiming))
		return misuse(hipErrorInvalidValue);
	if (!(e = malloc(sizeof *e)))
		return hipErrorOutOfMemory;
	*e = (struct ihipEvent_t){.held.dev = current_device, .flags = flags};
	if (!fake_handle_register(&lock, &events, e, &live_events))
		return hipErrorOutOfMemory;
	*event = e;
	return hipSuccess;
}

hipError_t hipEventCreate(hipEvent_t *event)
{
	ENTER(hipEventCreate);
	NEED_DEVICES();
	return done(event_create(event, hipEventDefault));
}

hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags)
{
	ENTER(hipEventCreateWithFlags);
	NEED_DEVICES();
	return done(event_create(event, flags));
}

hipError_t hipEventDestroy(hipEvent_t event)
{
	int known;

	ENTER(hipEventDestroy);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	known = fake_handle_remove(&events, event, &live_events);
	pthread_mutex_unlock(&lock);
	if (!known)
		return done(misuse(hipErrorInvalidHandle));
	free(event);
	return done(hipSuccess);
}

hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream)
{
	hipError_t err = hipSuccess;

	ENTER(hipEventRecord);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	if (!event_known(event) || !stream_known(stream)) {
		err = misuse(hipErrorInvalidHandle);
	} else {
		event->recorded = 1;
		event->held.pending = __atomic_load_n(&hold_events, __ATOMIC_RELAXED) != 0;
		event->held.stream = stream == hipStreamPerThread ? NULL : stream;
		event->held.dev =
			stream && stream != hipStreamPerThread ? stream->dev : current_device;
	}
	pthread_mutex_unlock(&lock);
	return done(err);
}

hipError_t hipEventQuery(hipEvent_t event)
{
	hipError_t err = hipSuccess;

	ENTER(hipEventQuery);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	if (!event_known(event))
		err = misuse(hipErrorInvalidHandle);
	else if (event->held.pending && __atomic_load_n(&hold_events, __ATOMIC_RELAXED))
		err = hipErrorNotReady;
	pthread_mutex_unlock(&lock);
	return done(err);
}

/* Waiting for a held event is what lets it complete: a single-threaded test
 * must not hang here. */
hipError_t hipEventSynchronize(hipEvent_t event)
{
	hipError_t err = hipSuccess;

	ENTER(hipEventSynchronize);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	if (event_known(event))
		event->held.pending = 0;
	else
		err = misuse(hipErrorInvalidHandle);
	pthread_mutex_unlock(&lock);
	return done(err);
}

void fake_hip_hold_events(int hold)
{
	__atomic_store_n(&hold_events, hold, __ATOMIC_RELAXED);
}

/* ---- attributes ---- */

/* The few the fake answers; an attribute it does not model is the test's
 * to add, and is refused as a misuse rather than guessed at. */
hipError_t hipDeviceGetAttribute(int *pi, hipDeviceAttribute_t attr, int deviceId)
{
	hipError_t err;

	ENTER(hipDeviceGetAttribute);
	if ((err = check_device(deviceId)) != hipSuccess)
		return done(err);
	if (!pi)
		return done(misuse(hipErrorInvalidValue));
	switch ((int)attr) {
	case hipDeviceAttributeWarpSize:
		*pi = 64;
		return done(hipSuccess);
	case hipDeviceAttributeMemoryPoolsSupported:
		*pi = 0;
		return done(hipSuccess);
	case ATTRIBUTE_VMM_SUPPORTED:
#if FAKE_HIP_ABI >= 6
		*pi = __atomic_load_n(&vmm_supported, __ATOMIC_RELAXED);
		return done(hipSuccess);
#else
		/* Past 5.2's last attribute: an invalid value to it, not a misuse. */
		return done(hipErrorInvalidValue);
#endif
	default:
		return done(misuse(hipErrorInvalidValue));
	}
}

/* ---- virtual memory ---- */

/* The devices can map memory, or (0) cannot: the calls then answer
 * hipErrorNotSupported.  Read by the backend when it starts. */
void fake_hip_vmm(int supported)
{
	device_count(); /* FAKE_HIP_VMM is read once, before this */
	__atomic_store_n(&vmm_supported, supported != 0, __ATOMIC_RELAXED);
}

static int vmm(void)
{
	device_count();
	return __atomic_load_n(&vmm_supported, __ATOMIC_RELAXED);
}

static int vm_aligned(uintptr_t n)
{
	return fake_vmm_aligned(n, VM_GRANULARITY);
}

/* Pinned memory of a visible device is all the fake makes; prop is read in
 * the layout of the release the fake is. */
static hipError_t check_prop(const hipMemAllocationProp *prop)
{
	const struct abi_alloc_prop *p = (const void *)prop;

	if (!p || p->type != hipMemAllocationTypePinned ||
	    p->location.type != hipMemLocationTypeDevice)
		return misuse(hipErrorInvalidValue);
	return check_device(p->location.id);
}

hipError_t hipMemGetAllocationGranularity(size_t *granularity, const hipMemAllocationProp *prop,
					  hipMemAllocationGranularity_flags option)
{
	hipError_t err;

	ENTER(hipMemGetAllocationGranularity);
	NEED_DEVICES();
	if (!granularity || (option != hipMemAllocationGranularityMinimum &&
			     option != hipMemAllocationGranularityRecommended))
		return done(misuse(hipErrorInvalidValue));
	if ((err = check_prop(prop)) != hipSuccess)
		return done(err);
	if (!vmm())
		return done(hipErrorNotSupported);
	*granularity = VM_GRANULARITY;
	return done(hipSuccess);
}

/* Address space only, PROT_NONE, aligned to the granularity at least so that
 * its start can be mapped.  addr is a hint the fake does not take. */
hipError_t hipMemAddressReserve(void **ptr, size_t size, size_t alignment, void *addr,
				unsigned long long flags)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct range *r;

	ENTER(hipMemAddressReserve);
	NEED_DEVICES();
	(void)addr;
	if (!ptr || flags || size == 0 || (size & (page - 1)) || (alignment & (alignment - 1)))
		return done(misuse(hipErrorInvalidValue));
	if (alignment < VM_GRANULARITY)
		alignment = VM_GRANULARITY;
	if (!(r = malloc(sizeof *r)))
		return done(hipErrorOutOfMemory);
	*r = (struct range){.dev = visible[current_device]};
	if (fake_vmm_reserve(&vmem, &r->span, NULL, size, alignment, &r->mapped, NULL) !=
	    FAKE_VMM_OK) {
		free(r);
		return done(hipErrorOutOfMemory);
	}
	*ptr = (void *)r->span.base;
	return done(hipSuccess);
}

/* Whole reservations.  One with mappings still in it is refused: the
 * caller unmaps first, and the fake leaves nothing dangling. */
hipError_t hipMemAddressFree(void *devPtr, size_t size)
{
	struct range *r;

	ENTER(hipMemAddressFree);
	NEED_DEVICES();
	if (!(r = fake_vmm_unreserve(&vmem, (uintptr_t)devPtr, size)))
		return done(misuse(hipErrorInvalidValue));
	munmap(devPtr, r->mapped);
	free(r);
	return done(hipSuccess);
}

/* Counted against the device's capacity like hipMalloc.  No shareable
 * handle type is offered. */
hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle, size_t size,
			const hipMemAllocationProp *prop, unsigned long long flags)
{
	const struct abi_alloc_prop *p = (const void *)prop;
	hipMemGenericAllocationHandle_t pm;
	hipError_t err;
	int dev;

	ENTER(hipMemCreate);
	NEED_DEVICES();
	if (!handle || flags || size == 0 || !vm_aligned(size))
		return done(misuse(hipErrorInvalidValue));
	if ((err = check_prop(prop)) != hipSuccess)
		return done(err);
	if (!vmm() || p->requested_handle_type != hipMemHandleTypeNone)
		return done(hipErrorNotSupported);
	dev = visible[p->location.id];
	if (!(pm = malloc(sizeof *pm)))
		return done(hipErrorOutOfMemory);
	if (fake_physical_create(&vmem, &pm->phys, dev, size, &used[dev], capacity, NULL) !=
	    FAKE_VMM_OK) {
		free(pm);
		return done(hipErrorOutOfMemory);
	}
	*handle = pm;
	return done(hipSuccess);
}

/* Memory still mapped is freed when its last mapping goes. */
hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle)
{
	ENTER(hipMemRelease);
	NEED_DEVICES();
	return done(fake_physical_release(&vmem, handle) ? hipSuccess :
							  misuse(hipErrorInvalidValue));
}

/* Mapped but not accessible: the pages stay PROT_NONE until hipMemSetAccess.
 * The range lies in one reservation and overlaps no mapping; ptr and size
 * are multiples of the granularity, and the offset is 0. */
hipError_t hipMemMap(void *ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
		     unsigned long long flags)
{
	hipError_t err = hipErrorInvalidValue;
	uintptr_t a = (uintptr_t)ptr;
	struct fake_physical *pm;
	struct fake_mapping *m;

	ENTER(hipMemMap);
	NEED_DEVICES();
	if (!ptr || size == 0 || offset || flags || !vm_aligned(a) || !vm_aligned(size))
		return done(misuse(hipErrorInvalidValue));
	if (!(m = malloc(sizeof *m)))
		return done(hipErrorOutOfMemory);
	pthread_mutex_lock(&lock);
	pm = fake_physical_of(&vmem, handle);
	if (fake_vmm_map_target(&vmem, a, size, pm, 0))
		err = fake_vmm_map(&vmem, m, a, size, pm, 0, PROT_NONE, NULL) ? hipSuccess :
									       hipErrorOutOfMemory;
	pthread_mutex_unlock(&lock);
	if (err != hipSuccess)
		free(m);
	/* Nothing matched: the caller named what is not there. */
	return done(err == hipErrorInvalidValue ? misuse(err) : err);
}

hipError_t hipMemUnmap(void *ptr, size_t size)
{
	int ok;

	ENTER(hipMemUnmap);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	ok = fake_vmm_whole_mappings(&vmem, (uintptr_t)ptr, size);
	if (ok)
		fake_vmm_unmap(&vmem, (uintptr_t)ptr, size);
	pthread_mutex_unlock(&lock);
	return done(ok ? hipSuccess : misuse(hipErrorInvalidValue));
}

/* Access is kept per device, for the copies to check; the pages allow what
 * any device was given, since the host stands in for them all. */
hipError_t hipMemSetAccess(void *ptr, size_t size, const hipMemAccessDesc *desc, size_t count)
{
	struct fake_access acc = {0};
	hipError_t err;

	ENTER(hipMemSetAccess);
	NEED_DEVICES();
	if (!desc || count == 0)
		return done(misuse(hipErrorInvalidValue));
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != hipMemLocationTypeDevice)
			return done(misuse(hipErrorInvalidValue));
		if ((err = check_device(desc[i].location.id)) != hipSuccess)
			return done(err);
		if (desc[i].flags != hipMemAccessFlagsProtNone &&
		    desc[i].flags != hipMemAccessFlagsProtRead &&
		    desc[i].flags != hipMemAccessFlagsProtReadWrite)
			return done(misuse(hipErrorInvalidValue));
		fake_access_give(&acc, desc[i].location.id,
				 desc[i].flags != hipMemAccessFlagsProtNone,
				 desc[i].flags == hipMemAccessFlagsProtReadWrite);
	}
	return done(fake_vmm_set_access(&vmem, (uintptr_t)ptr, size, &acc) ?
			    hipSuccess :
			    misuse(hipErrorInvalidValue));
}

/* ---- IPC ---- */

hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *handle, void *devPtr)
{
	struct fake_ipc_handle h;
	struct range *r;
	int found;

	ENTER(hipIpcGetMemHandle);
	NEED_DEVICES();
	if (!handle || !devPtr)
		return done(misuse(hipErrorInvalidValue));
	pthread_mutex_lock(&lock);
	r = range_at(devPtr);
	found = r && r->span.kind == R_DEVICE;
	if (found)
		fake_ipc_export(&h, ipc_magic, &r->span, r->dev, (uintptr_t)devPtr);
	pthread_mutex_unlock(&lock);
	if (!found)
		return done(misuse(hipErrorInvalidValue));
	memset(handle, 0, sizeof *handle);
	memcpy(handle, &h, sizeof h);
	return done(hipSuccess);
}

/* The memory is this process's heap, so only this process can open a handle:
 * it gets the exporter's own address back. A handle from another process is
 * well formed but cannot be mapped here. */
hipError_t hipIpcOpenMemHandle(void **devPtr, hipIpcMemHandle_t handle, unsigned int flags)
{
	hipError_t err = hipErrorInvalidValue;
	struct fake_ipc_handle h;
	struct range *r;

	ENTER(hipIpcOpenMemHandle);
	NEED_DEVICES();
	if (!devPtr || flags != hipIpcMemLazyEnablePeerAccess)
		return done(misuse(hipErrorInvalidValue));
	memcpy(&h, &handle, sizeof h);
	if (memcmp(h.magic, ipc_magic, sizeof h.magic) != 0)
		return done(misuse(hipErrorInvalidValue));
	if (h.pid != getpid())
		return done(hipErrorMapFailed);
	pthread_mutex_lock(&lock);
	r = fake_ipc_open(&registry, &ranges, h.base, h.serial, R_DEVICE);
	if (r) {
		*devPtr = (char *)r->span.base + h.offset;
		err = hipSuccess;
	}
	pthread_mutex_unlock(&lock);
	/* Nothing matched: the caller named what is not there. */
	return done(err == hipErrorInvalidValue ? misuse(err) : err);
}

hipError_t hipIpcCloseMemHandle(void *devPtr)
{
	hipError_t err = hipErrorInvalidValue;

	ENTER(hipIpcCloseMemHandle);
	NEED_DEVICES();
	if (!devPtr)
		return done(misuse(hipErrorInvalidValue));
	pthread_mutex_lock(&lock);
	if (fake_vmm_ipc_close(&vmem, (uintptr_t)devPtr, R_DEVICE, 0))
		err = hipSuccess;
	pthread_mutex_unlock(&lock);
	/* Nothing matched: the caller named what is not there. */
	return done(err == hipErrorInvalidValue ? misuse(err) : err);
}

/* ---- leaks ---- */

size_t fake_hip_live(void)
{
	size_t n;

	pthread_mutex_lock(&lock);
	n = registry.live_count[R_DEVICE] + registry.live_count[R_HOST] +
	    registry.live_count[R_RESERVED] + registry.live_count[R_MAPPED] + vmem.live_physicals +
	    live_streams + live_events;
	pthread_mutex_unlock(&lock);
	return n;
}

/* What the report says beyond the ranges, under lock. */
static void unload_report(void)
{
	const struct fake_leak others[] = {
		{"physical allocation", vmem.live_physicals, 1, vmem.physical_bytes, "live"},
		{"stream", live_streams, 0, 0, "live"},
		{"event", live_events, 0, 0, "live"},
	};

	fake_registry_unload(&registry, others, sizeof others / sizeof *others);
}

__attribute__((destructor)) static void fake_hip_unload(void)
{
	pthread_mutex_lock(&lock);
	unload_report();
	pthread_mutex_unlock(&lock);
}

#pragma GCC visibility pop
