/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-ze.c - a host-memory stand-in for libze_loader.so.1, with test controls, for the Level Zero backend's tests. */
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
#include <time.h>
#include <unistd.h>

#include "fake-controls.h"
#include "fake-registry.h"
#include "fake-vmm.h"

/* Everything not static is the loader's API or a test control, and must stay
 * reachable by dlsym() whatever -fvisibility the build uses. */
#pragma GCC visibility push(default)

#include <level_zero/ze_api.h>

/* Test controls, reached with dlsym() by tests that dlopen() this library. */
#define FAKE_ZE_FAIL_ON FAKE_CONTROLS_FAIL_ON
void fake_ze_fail(const char *function, unsigned nth, int result);
unsigned long fake_ze_calls(const char *function);
const char *fake_ze_function(unsigned i);
unsigned long fake_ze_misuses(const char *function);
size_t fake_ze_live(void);
void fake_ze_hold_events(int hold);
void fake_ze_limits(size_t max_alloc_bytes, int relaxed);

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
#define X(name) #name,
static const char *const function_names[F_COUNT] = {FAKE_ZE_FUNCTIONS(X)};
#undef X

static struct fake_counter counters[F_COUNT];

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

/* Handles are pointers to these; the driver and devices are static, so a
 * handle stays valid for the life of the process as in the real loader. */
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

static struct _ze_driver_handle_t the_driver;
static struct _ze_device_handle_t device_table[MAX_DEVICES]; /* by visible ordinal */

/* Read once, at the first zeInit, as the loader reads its environment. */
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;
static int n_physical;
static int n_visible;
static size_t capacity;          /* bytes of each device */
static size_t max_alloc;         /* maxMemAllocSize: FAKE_ZE_MAX_ALLOC_MB, else capacity */
static int relaxed_limits;       /* ZE_experimental_relaxed_allocation_limits: FAKE_ZE_RELAXED_LIMITS */
static size_t used[MAX_DEVICES]; /* by physical ordinal; under lock */
static int initialized;          /* a zeInit succeeded */
static int hold_events;

/* The live objects, all under lock: one tree of non-overlapping address
 * ranges (device and host allocations, reservations) so that any address
 * inside one finds it, one tree each of the other handles, and in vmem the
 * mappings inside reservations and the physical memory handles. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t event_cond; /* signalled events; on CLOCK_MONOTONIC */
static void *ranges;
static void *contexts;
static void *lists;
static void *pools;
static void *events;

enum range_kind { R_DEVICE, R_HOST, R_RESERVED, R_MAPPED, R_KINDS };
static const char *const kind_names[R_KINDS] = {"device allocation", "host allocation",
						"virtual reservation", "virtual mapping"};
_Static_assert(R_KINDS <= FAKE_REGISTRY_KINDS, "the registry counts every kind");
static struct fake_registry registry = {
	.fake = "fake-ze",
	.leaks_env = "FAKE_ZE_LEAKS",
	.kind_names = kind_names,
	.n_kinds = R_KINDS,
};
static unsigned long live_contexts, live_lists, live_pools, live_events;
static struct fake_vmm vmem =
	FAKE_VMM_INIT(&lock, &registry, &ranges, R_RESERVED, R_MAPPED, "fake-ze-physical");

/* Mappings are struct fake_mapping, in vmem.mappings; their owner is the
 * context. */
struct range {
	struct fake_range span; /* first, for the registry; its kind is an enum range_kind */
	size_t mapped; /* host allocations and reservations: the length given to mmap() */
	ze_context_handle_t ctx;
	int phys; /* device allocations: physical ordinal */
};

/* What an IPC handle carries; it must fit ZE_MAX_IPC_HANDLE_SIZE. */
struct ipc_handle {
	char magic[8];
	pid_t pid;
	uintptr_t base;
	unsigned long serial;
};
_Static_assert(sizeof(struct ipc_handle) <= sizeof(ze_ipc_mem_handle_t), "IPC handle too large");
static const char ipc_magic[8] = "fakeze";

/* ---- results ---- */

/* The API has no error strings, so no texts. */
#define RESULT(name) {name, #name, NULL}
static const struct fake_code result_table[] = {
	RESULT(ZE_RESULT_SUCCESS),
	RESULT(ZE_RESULT_NOT_READY),
	RESULT(ZE_RESULT_ERROR_DEVICE_LOST),
	RESULT(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY),
	RESULT(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY),
	RESULT(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE),
	RESULT(ZE_RESULT_ERROR_MODULE_LINK_FAILURE),
	RESULT(ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET),
	RESULT(ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE),
	RESULT(ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS),
	RESULT(ZE_RESULT_ERROR_NOT_AVAILABLE),
	RESULT(ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE),
	RESULT(ZE_RESULT_ERROR_UNINITIALIZED),
	RESULT(ZE_RESULT_ERROR_UNSUPPORTED_VERSION),
	RESULT(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE),
	RESULT(ZE_RESULT_ERROR_INVALID_ARGUMENT),
	RESULT(ZE_RESULT_ERROR_INVALID_NULL_HANDLE),
	RESULT(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE),
	RESULT(ZE_RESULT_ERROR_INVALID_NULL_POINTER),
	RESULT(ZE_RESULT_ERROR_INVALID_SIZE),
	RESULT(ZE_RESULT_ERROR_UNSUPPORTED_SIZE),
	RESULT(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT),
	RESULT(ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT),
	RESULT(ZE_RESULT_ERROR_INVALID_ENUMERATION),
	RESULT(ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION),
	RESULT(ZE_RESULT_ERROR_OVERLAPPING_REGIONS),
	RESULT(ZE_RESULT_ERROR_UNKNOWN),
};
#undef RESULT

/* ---- call counting and fault injection ---- */

/* Codes go up to UINT_MAX: 0x78000004 and the like are written unsigned. */
static const struct fake_controls controls =
	FAKE_CONTROLS_INIT(ze, ZE, "result", UINT_MAX, function_names, counters, result_table);

FAKE_CONTROLS_EXPORTS(ze, controls)

_Static_assert(ZE_RESULT_SUCCESS == 0, "fake_controls_enter answers 0 for success");

FAKE_CONTROLS_CALLS(ze_result_t, controls)

/* Each API function begins with this: counted, maybe failed on demand; and,
 * as the spec says, refused before a successful zeInit. */
#define ENTER(name)                                                                                \
	do {                                                                                       \
		ze_result_t injected_ = enter(F_##name);                                           \
		if (injected_ != ZE_RESULT_SUCCESS)                                                \
			return injected_;                                                          \
		if (F_##name != F_zeInit && !__atomic_load_n(&initialized, __ATOMIC_ACQUIRE))      \
			return misuse(ZE_RESULT_ERROR_UNINITIALIZED);                              \
	} while (0)

__attribute__((constructor)) static void fake_ze_load(void)
{
	pthread_condattr_t attr;

	/* Timed waits count time that a clock change cannot stretch. */
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&event_cond, &attr);
	pthread_condattr_destroy(&attr);

	fake_controls_load(&controls);
}

/* ---- devices ---- */

/* ZE_AFFINITY_MASK as Intel's driver reads it: comma-separated root device
 * indices, each maybe with ".sub-device" (and ".sub-sub-device"). The fake has
 * no sub-devices: an entry naming one selects its whole root device. Entries
 * that are no index, or name no device, are ignored; devices selected keep
 * their physical order (the driver keeps a set, so "1,0" is "0,1"). A mask
 * that selects nothing leaves no device, and so no driver. */
static void parse_affinity(const char *mask, int *selected)
{
	const char *p = mask;
	char *end;

	while (*p) {
		long v;

		errno = 0;
		v = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;
		if (v >= 0 && !errno && v < n_physical && (*end == '\0' || *end == ',' || *end == '.'))
			selected[v] = 1;
		p = strchr(p, ',');
		if (!p)
			break;
		p++;
	}
}

static void devices_init(void)
{
	const char *mask = getenv("ZE_AFFINITY_MASK");
	int selected[MAX_DEVICES] = {0};

	n_physical = (int)fake_controls_env_number(&controls, "FAKE_ZE_DEVICES", 2, 0, MAX_DEVICES);
	capacity = (size_t)fake_controls_env_number(&controls, "FAKE_ZE_MEMORY_MB", 1024, 0,
						    (long)(SIZE_MAX >> 21)) << 20;
	max_alloc = (size_t)fake_controls_env_number(&controls, "FAKE_ZE_MAX_ALLOC_MB",
						     (long)(capacity >> 20), 1,
						     (long)(SIZE_MAX >> 21)) << 20;
	relaxed_limits = (int)fake_controls_env_number(&controls, "FAKE_ZE_RELAXED_LIMITS", 1, 0, 1);
	if (mask && *mask)
		parse_affinity(mask, selected);
	else
		for (int i = 0; i < n_physical; i++)
			selected[i] = 1;
	n_visible = 0;
	for (int i = 0; i < n_physical; i++)
		if (selected[i])
			device_table[n_visible++].phys = i;
}

static int driver_known(ze_driver_handle_t d)
{
	return d == &the_driver;
}

static int device_known(ze_device_handle_t d)
{
	uintptr_t p = (uintptr_t)d, first = (uintptr_t)device_table;

	return p >= first && p < first + (size_t)n_visible * sizeof *device_table &&
	       (p - first) % sizeof *device_table == 0;
}

/* The two-call idiom: a zero count or no array asks for the count; a count
 * too large is cut down. Returns how many entries to fill. */
static uint32_t count_idiom(uint32_t *count_p, const void *array, uint32_t n)
{
	if (*count_p == 0 || !array) {
		*count_p = n;
		return 0;
	}
	if (*count_p > n)
		*count_p = n;
	return *count_p;
}

/* ---- the registries ---- */

/* The live range holding address p, under lock; NULL if none. */
static struct range *range_at(const void *p)
{
	return fake_range_in(&ranges, (uintptr_t)p, 1);
}

/* The usual first check of a handle argument, under lock. */
static ze_result_t check_handle(void *const *tree, const void *h)
{
	if (!h)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
	/* What the validation layer's handle tracking answers for a stale handle. */
	return fake_handle_known(tree, h) ? ZE_RESULT_SUCCESS : misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
}

static ze_result_t check_driver(ze_driver_handle_t d)
{
	if (!d)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
	return driver_known(d) ? ZE_RESULT_SUCCESS : misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
}

static ze_result_t check_device(ze_device_handle_t d)
{
	if (!d)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
	return device_known(d) ? ZE_RESULT_SUCCESS : misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
}

/* check_handle for a context, taking the lock: for calls that need only that. */
static ze_result_t check_context(ze_context_handle_t ctx)
{
	ze_result_t res;

	pthread_mutex_lock(&lock);
	res = check_handle(&contexts, ctx);
	pthread_mutex_unlock(&lock);
	return res;
}

/* The checks of the calls that make something of a context on a device. */
static ze_result_t check_context_device(ze_context_handle_t ctx, ze_device_handle_t d)
{
	ze_result_t res = check_context(ctx);

	return res != ZE_RESULT_SUCCESS ? res : check_device(d);
}

/* The usual checks of a call on a context about memory, under lock: the
 * context, and the pointers the call must be given (given: whether they are). */
static ze_result_t check_context_pointers(ze_context_handle_t ctx, int given)
{
	ze_result_t res = check_handle(&contexts, ctx);

	if (res == ZE_RESULT_SUCCESS && !given)
		res = misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	return res;
}

/* Enters handle h, just made in ctx, in tree, counting it in *live and in
 * the context's objects; takes the lock. The context may have gone
 * meanwhile: a race in the caller, refused. On failure h is the caller's. */
static ze_result_t context_adopt(ze_context_handle_t ctx, void **tree, void *h,
				 unsigned long *live)
{
	ze_result_t res = ZE_RESULT_SUCCESS;

	pthread_mutex_lock(&lock);
	if (!fake_handle_known(&contexts, ctx))
		res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	else if (!fake_handle_add(tree, h, live))
		res = ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	else
		ctx->objects++;
	pthread_mutex_unlock(&lock);
	return res;
}

static int power_of_two_or_zero(size_t n)
{
	return (n & (n - 1)) == 0;
}

/* ---- driver ---- */

/* With no device, the loader finds no driver: zeInit fails with
 * ZE_RESULT_ERROR_UNINITIALIZED, as libze_loader does, and every later call
 * is refused the same way. So is zeInit(ZE_INIT_FLAG_VPU_ONLY): this driver
 * is a GPU driver. */
ze_result_t zeInit(ze_init_flags_t flags)
{
	ENTER(zeInit);
	if (flags > (ZE_INIT_FLAG_GPU_ONLY | ZE_INIT_FLAG_VPU_ONLY))
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	pthread_once(&devices_once, devices_init);
	if (n_visible == 0 || flags == ZE_INIT_FLAG_VPU_ONLY)
		return ZE_RESULT_ERROR_UNINITIALIZED;
	__atomic_store_n(&initialized, 1, __ATOMIC_RELEASE);
	return ZE_RESULT_SUCCESS;
}

ze_result_t zeDriverGet(uint32_t *pCount, ze_driver_handle_t *phDrivers)
{
	ENTER(zeDriverGet);
	if (!pCount)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (count_idiom(pCount, phDrivers, 1))
		phDrivers[0] = &the_driver;
	return ZE_RESULT_SUCCESS;
}

ze_result_t zeDriverGetApiVersion(ze_driver_handle_t hDriver, ze_api_version_t *version)
{
	ze_result_t res;

	ENTER(zeDriverGetApiVersion);
	if ((res = check_driver(hDriver)) != ZE_RESULT_SUCCESS)
		return res;
	if (!version)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	*version = ZE_API_VERSION_1_4;
	return ZE_RESULT_SUCCESS;
}

ze_result_t zeDriverGetProperties(ze_driver_handle_t hDriver, ze_driver_properties_t *pDriverProperties)
{
	static const char uuid[ZE_MAX_DRIVER_UUID_SIZE] = "fake-ze-driver";
	ze_result_t res;

	ENTER(zeDriverGetProperties);
	if ((res = check_driver(hDriver)) != ZE_RESULT_SUCCESS)
		return res;
	if (!pDriverProperties)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	memcpy(pDriverProperties->uuid.id, uuid, sizeof uuid);
	pDriverProperties->driverVersion = 1;
	return ZE_RESULT_SUCCESS;
}

/* The one extension the fake has, unless FAKE_ZE_RELAXED_LIMITS=0. */
ze_result_t zeDriverGetExtensionProperties(ze_driver_handle_t hDriver, uint32_t *pCount,
					   ze_driver_extension_properties_t *pExtensionProperties)
{
	ze_result_t res;

	ENTER(zeDriverGetExtensionProperties);
	if ((res = check_driver(hDriver)) != ZE_RESULT_SUCCESS)
		return res;
	if (!pCount)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (count_idiom(pCount, pExtensionProperties,
			__atomic_load_n(&relaxed_limits, __ATOMIC_RELAXED) ? 1 : 0)) {
		snprintf(pExtensionProperties[0].name, sizeof pExtensionProperties[0].name, "%s",
			 ZE_RELAXED_ALLOCATION_LIMITS_EXP_NAME);
		pExtensionProperties[0].version = ZE_RELAXED_ALLOCATION_LIMITS_EXP_VERSION_CURRENT;
	}
	return ZE_RESULT_SUCCESS;
}

/* ---- devices ---- */

ze_result_t zeDeviceGet(ze_driver_handle_t hDriver, uint32_t *pCount, ze_device_handle_t *phDevices)
{
	ze_result_t res;
	uint32_t n;

	ENTER(zeDeviceGet);
	if ((res = check_driver(hDriver)) != ZE_RESULT_SUCCESS)
		return res;
	if (!pCount)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	n = count_idiom(pCount, phDevices, (uint32_t)n_visible);
	for (uint32_t i = 0; i < n; i++)
		phDevices[i] = &device_table[i];
	return ZE_RESULT_SUCCESS;
}

/* What the caller fills in (stype, pNext) is left as it is. */
ze_result_t zeDeviceGetProperties(ze_device_handle_t hDevice, ze_device_properties_t *pDeviceProperties)
{
	ze_device_properties_t *p = pDeviceProperties;
	ze_result_t res;

	ENTER(zeDeviceGetProperties);
	if ((res = check_device(hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (!p)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	p->type = ZE_DEVICE_TYPE_GPU;
	p->vendorId = 0x8086;
	p->deviceId = 0x0bd5;
	p->flags = 0;
	p->subdeviceId = 0;
	p->coreClockRate = 1600;
	p->maxMemAllocSize = __atomic_load_n(&max_alloc, __ATOMIC_RELAXED);
	p->maxHardwareContexts = 65536;
	p->maxCommandQueuePriority = 0;
	p->numThreadsPerEU = 8;
	p->physicalEUSimdWidth = 16;
	p->numEUsPerSubslice = 8;
	p->numSubslicesPerSlice = 8;
	p->numSlices = 1;
	/* Nanoseconds, or cycles per second for the 1.2 structure: one clock. */
	p->timerResolution = p->stype == ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2 ? 1000000000u : 1;
	p->timestampValidBits = 64;
	p->kernelTimestampValidBits = 32;
	memset(p->uuid.id, 0, sizeof p->uuid.id);
	memcpy(p->uuid.id, "fakeze", 6);
	p->uuid.id[ZE_MAX_DEVICE_UUID_SIZE - 1] = (uint8_t)hDevice->phys;
	/* The physical ordinal in the name lets a test see ZE_AFFINITY_MASK at work. */
	snprintf(p->name, sizeof p->name, "Fake Level Zero device %d", hDevice->phys);
	return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetMemoryProperties(ze_device_handle_t hDevice, uint32_t *pCount,
					ze_device_memory_properties_t *pMemProperties)
{
	ze_result_t res;

	ENTER(zeDeviceGetMemoryProperties);
	if ((res = check_device(hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (!pCount)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (count_idiom(pCount, pMemProperties, 1)) {
		pMemProperties->flags = 0;
		pMemProperties->maxClockRate = 3200;
		pMemProperties->maxBusWidth = 4096;
		pMemProperties->totalSize = capacity;
		snprintf(pMemProperties->name, sizeof pMemProperties->name, "HBM");
	}
	return ZE_RESULT_SUCCESS;
}

ze_result_t zeDevicePciGetPropertiesExt(ze_device_handle_t hDevice, ze_pci_ext_properties_t *pPciProperties)
{
	ze_result_t res;

	ENTER(zeDevicePciGetPropertiesExt);
	if ((res = check_device(hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (!pPciProperties)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	/* A bus per physical device, as the HIP fake numbers them. */
	pPciProperties->address = (ze_pci_address_ext_t){
		.domain = 0, .bus = (uint32_t)hDevice->phys + 1, .device = 0, .function = 0};
	pPciProperties->maxSpeed = (ze_pci_speed_ext_t){
		.genVersion = 4, .width = 16, .maxBandwidth = (int64_t)32 << 30};
	return ZE_RESULT_SUCCESS;
}

static const struct {
	ze_command_queue_group_property_flags_t flags;
	size_t fill;
	uint32_t queues;
} groups[N_GROUPS] = {
	{ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE | ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY |
		 ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COOPERATIVE_KERNELS |
		 ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_METRICS,
	 128, 1},
	{ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY, 4, 1},
};

ze_result_t zeDeviceGetCommandQueueGroupProperties(
	ze_device_handle_t hDevice, uint32_t *pCount,
	ze_command_queue_group_properties_t *pCommandQueueGroupProperties)
{
	ze_result_t res;
	uint32_t n;

	ENTER(zeDeviceGetCommandQueueGroupProperties);
	if ((res = check_device(hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (!pCount)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	n = count_idiom(pCount, pCommandQueueGroupProperties, N_GROUPS);
	for (uint32_t i = 0; i < n; i++) {
		pCommandQueueGroupProperties[i].flags = groups[i].flags;
		pCommandQueueGroupProperties[i].maxMemoryFillPatternSize = groups[i].fill;
		pCommandQueueGroupProperties[i].numQueues = groups[i].queues;
	}
	return ZE_RESULT_SUCCESS;
}

/* ---- contexts ---- */

ze_result_t zeContextCreate(ze_driver_handle_t hDriver, const ze_context_desc_t *desc,
			    ze_context_handle_t *phContext)
{
	ze_context_handle_t ctx;
	ze_result_t res;

	ENTER(zeContextCreate);
	if ((res = check_driver(hDriver)) != ZE_RESULT_SUCCESS)
		return res;
	if (!desc || !phContext)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (desc->flags > ZE_CONTEXT_FLAG_TBD)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (!(ctx = calloc(1, sizeof *ctx)) ||
	    !fake_handle_register(&lock, &contexts, ctx, &live_contexts))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	*phContext = ctx;
	return ZE_RESULT_SUCCESS;
}

/* Stricter than Intel's driver, which frees what the context still holds: a
 * backend that leaves objects behind its context should be told. */
ze_result_t zeContextDestroy(ze_context_handle_t hContext)
{
	ze_result_t res;

	ENTER(zeContextDestroy);
	pthread_mutex_lock(&lock);
	res = check_handle(&contexts, hContext);
	if (res == ZE_RESULT_SUCCESS && hContext->objects)
		res = misuse(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE);
	if (res == ZE_RESULT_SUCCESS) {
		fake_handle_remove(&contexts, hContext, &live_contexts);
	}
	pthread_mutex_unlock(&lock);
	if (res == ZE_RESULT_SUCCESS)
		free(hContext);
	return res;
}

/* ---- memory ---- */

#define DEVICE_ALLOC_FLAGS                                                                         \
	(ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_CACHED | ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_UNCACHED |           \
	 ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_INITIAL_PLACEMENT)

/* The largest size zeMemAllocDevice takes with device_desc's pNext chain:
 * maxMemAllocSize, unless the chain relaxes it; 0 for a chain the driver
 * refuses (an unknown structure, the extension off, a flag not defined). */
static size_t alloc_limit(const ze_device_mem_alloc_desc_t *device_desc)
{
	size_t limit = __atomic_load_n(&max_alloc, __ATOMIC_RELAXED);
	int relaxed_on = __atomic_load_n(&relaxed_limits, __ATOMIC_RELAXED);

	for (const ze_base_desc_t *d = device_desc->pNext; d; d = d->pNext) {
		const ze_relaxed_allocation_limits_exp_desc_t *relax = (const void *)d;

		if (d->stype != ZE_STRUCTURE_TYPE_RELAXED_ALLOCATION_LIMITS_EXP_DESC || !relaxed_on ||
		    (relax->flags & ~(ze_relaxed_allocation_limits_exp_flags_t)
					     ZE_RELAXED_ALLOCATION_LIMITS_EXP_FLAG_MAX_SIZE))
			return 0;
		if (relax->flags & ZE_RELAXED_ALLOCATION_LIMITS_EXP_FLAG_MAX_SIZE)
			limit = capacity;
	}
	return limit;
}

/* What a shared memory helper's status is in the API's terms: an owner gone
 * is a context the caller destroyed meanwhile, a race in the caller, refused. */
static ze_result_t vmm_result(enum fake_vmm_status st)
{
	switch (st) {
	case FAKE_VMM_OK:
		return ZE_RESULT_SUCCESS;
	case FAKE_VMM_NO_DEVICE_MEMORY:
		return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
	case FAKE_VMM_NO_OWNER:
		return misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	default:
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	}
}

/* The owner a context is to the shared memory helpers. */
static struct fake_vmm_owner owner_of(ze_context_handle_t ctx)
{
	return (struct fake_vmm_owner){&contexts, ctx, &ctx->objects};
}

ze_result_t zeMemAllocDevice(ze_context_handle_t hContext, const ze_device_mem_alloc_desc_t *device_desc,
			     size_t size, size_t alignment, ze_device_handle_t hDevice, void **pptr)
{
	struct fake_vmm_owner owner;
	enum fake_vmm_status st;
	ze_result_t res;
	struct range *r;
	size_t align;
	int phys;

	ENTER(zeMemAllocDevice);
	if ((res = check_context_device(hContext, hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (!device_desc || !pptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (device_desc->flags & ~(ze_device_mem_alloc_flags_t)DEVICE_ALLOC_FLAGS)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	/* One memory ordinal per device. */
	if (device_desc->ordinal != 0)
		return misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	size_t limit = alloc_limit(device_desc);
	if (limit == 0)
		return misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	/* Past maxMemAllocSize, unless relaxed, and past the device's capacity
	 * Intel's driver says unsupported size; within it, and past what is
	 * left, out of memory.  The backend knows the limit: asking past it is
	 * its misuse. */
	if (size == 0 || size > limit || size > capacity)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	if (!power_of_two_or_zero(alignment))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	align = alignment > DEVICE_ALIGN ? alignment : DEVICE_ALIGN;
	if (size > SIZE_MAX - align)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	phys = hDevice->phys;
	if ((r = malloc(sizeof *r)))
		*r = (struct range){.ctx = hContext, .phys = phys};
	owner = owner_of(hContext);
	st = fake_vmm_alloc_device(&vmem, r ? &r->span : NULL, R_DEVICE, size, align, &used[phys],
				   capacity, &owner);
	if (st != FAKE_VMM_OK) {
		free(r);
		return vmm_result(st);
	}
	*pptr = (void *)r->span.base;
	return ZE_RESULT_SUCCESS;
}

#define HOST_ALLOC_FLAGS                                                                           \
	(ZE_HOST_MEM_ALLOC_FLAG_BIAS_CACHED | ZE_HOST_MEM_ALLOC_FLAG_BIAS_UNCACHED |               \
	 ZE_HOST_MEM_ALLOC_FLAG_BIAS_WRITE_COMBINED | ZE_HOST_MEM_ALLOC_FLAG_BIAS_INITIAL_PLACEMENT)

ze_result_t zeMemAllocHost(ze_context_handle_t hContext, const ze_host_mem_alloc_desc_t *host_desc,
			   size_t size, size_t alignment, void **pptr)
{
	struct fake_vmm_owner owner;
	enum fake_vmm_status st;
	ze_result_t res;
	struct range *r;
	size_t len;
	void *p;

	ENTER(zeMemAllocHost);
	if ((res = check_context(hContext)) != ZE_RESULT_SUCCESS)
		return res;
	if (!host_desc || !pptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (host_desc->flags & ~(ze_host_mem_alloc_flags_t)HOST_ALLOC_FLAGS)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (size == 0)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	if (!power_of_two_or_zero(alignment))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	if (!(r = malloc(sizeof *r)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	/* Page aligned, as Intel's driver gives host allocations. */
	if (!(p = fake_map_aligned(size, alignment, PROT_READ | PROT_WRITE, &len))) {
		free(r);
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	}
	*r = (struct range){.span = {.base = (uintptr_t)p, .size = size, .kind = R_HOST},
			    .mapped = len, .ctx = hContext};
	owner = owner_of(hContext);
	if ((st = fake_vmm_add(&vmem, &r->span, &owner)) != FAKE_VMM_OK) {
		munmap(p, len);
		free(r);
		return vmm_result(st);
	}
	*pptr = p;
	return ZE_RESULT_SUCCESS;
}

/* Frees device and host allocations, by their base address and through the
 * context that made them (stricter than Intel's driver, which takes any
 * context of the driver). Reservations are zeVirtualMemFree's. */
ze_result_t zeMemFree(ze_context_handle_t hContext, void *ptr)
{
	ze_result_t res;
	struct range *r = NULL;

	ENTER(zeMemFree);
	pthread_mutex_lock(&lock);
	res = check_context_pointers(hContext, ptr != NULL);
	if (res == ZE_RESULT_SUCCESS) {
		r = range_at(ptr);
		if (!r || r->span.base != (uintptr_t)ptr || r->span.kind > R_HOST ||
		    r->ctx != hContext)
			res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	}
	if (res == ZE_RESULT_SUCCESS) {
		fake_range_remove(&registry, &ranges, &r->span);
		hContext->objects--;
	}
	pthread_mutex_unlock(&lock);
	if (res != ZE_RESULT_SUCCESS)
		return res;
	if (r->span.kind == R_DEVICE)
		free(ptr);
	else
		munmap(ptr, r->mapped);
	free(r);
	return ZE_RESULT_SUCCESS;
}

static ze_device_handle_t device_of(int phys)
{
	for (int i = 0; i < n_visible; i++)
		if (device_table[i].phys == phys)
			return &device_table[i];
	return NULL;
}

/* Any pointer may be asked about: one the driver does not know is of type
 * ZE_MEMORY_TYPE_UNKNOWN, with success, as the spec says. Mapped pages of a
 * reservation are device memory, of the physical memory's device. */
ze_result_t zeMemGetAllocProperties(ze_context_handle_t hContext, const void *ptr,
				    ze_memory_allocation_properties_t *pMemAllocProperties,
				    ze_device_handle_t *phDevice)
{
	ze_memory_allocation_properties_t *p = pMemAllocProperties;
	ze_device_handle_t dev = NULL;
	struct fake_mapping *m = NULL;
	struct fake_range *span;
	ze_result_t res;
	struct range *r;

	ENTER(zeMemGetAllocProperties);
	pthread_mutex_lock(&lock);
	res = check_context_pointers(hContext, ptr && p);
	if (res != ZE_RESULT_SUCCESS) {
		pthread_mutex_unlock(&lock);
		return res;
	}
	p->type = ZE_MEMORY_TYPE_UNKNOWN;
	p->id = 0;
	p->pageSize = 0;
	r = range_at(ptr);
	span = r ? &r->span : NULL;
	if (r && r->span.kind == R_RESERVED)
		span = (m = fake_vmm_mapping_at(&vmem, (uintptr_t)ptr)) ? &m->span : NULL;
	if (span && span->kind == R_DEVICE) {
		p->type = ZE_MEMORY_TYPE_DEVICE;
		p->pageSize = DEVICE_PAGE;
		dev = device_of(r->phys);
	} else if (span && span->kind == R_HOST) {
		p->type = ZE_MEMORY_TYPE_HOST;
		p->pageSize = (uint64_t)sysconf(_SC_PAGESIZE);
	} else if (m) {
		p->type = ZE_MEMORY_TYPE_DEVICE;
		p->pageSize = VM_PAGE;
		dev = device_of(m->pm->dev);
	}
	if (span)
		p->id = span->serial;
	pthread_mutex_unlock(&lock);
	if (phDevice)
		*phDevice = dev;
	return ZE_RESULT_SUCCESS;
}

/* The allocation a pointer lies in: its base and size.  A pointer in no
 * allocation is ZE_RESULT_ERROR_INVALID_ARGUMENT (the spec's "not a valid
 * allocation"). */
ze_result_t zeMemGetAddressRange(ze_context_handle_t hContext, const void *ptr, void **pBase,
				 size_t *pSize)
{
	struct fake_range *span;
	ze_result_t res;

	ENTER(zeMemGetAddressRange);
	pthread_mutex_lock(&lock);
	res = check_context_pointers(hContext, ptr != NULL);
	if (res == ZE_RESULT_SUCCESS) {
		span = fake_range_in(&ranges, (uintptr_t)ptr, 1);
		if (span && span->kind == R_RESERVED)
			span = fake_range_in(&vmem.mappings, (uintptr_t)ptr, 1);
		if (!span || (span->kind != R_DEVICE && span->kind != R_HOST &&
			      span->kind != R_MAPPED)) {
			res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
		} else {
			if (pBase)
				*pBase = (void *)span->base;
			if (pSize)
				*pSize = span->size;
		}
	}
	pthread_mutex_unlock(&lock);
	return res;
}

/* ---- command lists ---- */

#define QUEUE_FLAGS (ZE_COMMAND_QUEUE_FLAG_EXPLICIT_ONLY)

ze_result_t zeCommandListCreateImmediate(ze_context_handle_t hContext, ze_device_handle_t hDevice,
					 const ze_command_queue_desc_t *altdesc,
					 ze_command_list_handle_t *phCommandList)
{
	ze_command_list_handle_t l;
	ze_result_t res;

	ENTER(zeCommandListCreateImmediate);
	if ((res = check_context_device(hContext, hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (!altdesc || !phCommandList)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if ((altdesc->flags & ~(ze_command_queue_flags_t)QUEUE_FLAGS) ||
	    (unsigned)altdesc->mode > ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS ||
	    (unsigned)altdesc->priority > ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_HIGH)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (altdesc->ordinal >= N_GROUPS || altdesc->index >= groups[altdesc->ordinal].queues)
		return misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	if (!(l = malloc(sizeof *l)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	*l = (struct _ze_command_list_handle_t){.ctx = hContext, .dev = hDevice,
						 .ordinal = altdesc->ordinal};
	if ((res = context_adopt(hContext, &lists, l, &live_lists)) != ZE_RESULT_SUCCESS) {
		free(l);
		return res;
	}
	*phCommandList = l;
	return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListDestroy(ze_command_list_handle_t hCommandList)
{
	ze_result_t res;

	ENTER(zeCommandListDestroy);
	pthread_mutex_lock(&lock);
	res = check_handle(&lists, hCommandList);
	if (res == ZE_RESULT_SUCCESS) {
		fake_handle_remove(&lists, hCommandList, &live_lists);
		hCommandList->ctx->objects--;
	}
	pthread_mutex_unlock(&lock);
	if (res == ZE_RESULT_SUCCESS)
		free(hCommandList);
	return res;
}

/* Whether event e may be used by list l: live, and of the list's context. */
static ze_result_t check_event_for(ze_command_list_handle_t l, ze_event_handle_t e)
{
	ze_result_t res = check_handle(&events, e);

	if (res == ZE_RESULT_SUCCESS && e->pool->ctx != l->ctx)
		res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	return res;
}

/* The checks every append makes, under lock: the list, its optional signal
 * event, and its wait list. */
static ze_result_t check_append(ze_command_list_handle_t l, ze_event_handle_t signal,
				uint32_t n_wait, ze_event_handle_t *wait)
{
	ze_result_t res = check_handle(&lists, l);

	if (res != ZE_RESULT_SUCCESS)
		return res;
	if (n_wait && !wait)
		return misuse(ZE_RESULT_ERROR_INVALID_SIZE);
	if (signal && (res = check_event_for(l, signal)) != ZE_RESULT_SUCCESS)
		return res;
	for (uint32_t i = 0; i < n_wait; i++)
		if ((res = check_event_for(l, wait[i])) != ZE_RESULT_SUCCESS)
			return res;
	return ZE_RESULT_SUCCESS;
}

/* Work completes when it is appended; while events are held, its event is
 * signalled but pending, and reads as not ready until waited for (or until
 * events are no longer held). Under lock. */
static void signal_event(ze_event_handle_t e)
{
	if (!e)
		return;
	e->signalled = 1;
	e->pending = __atomic_load_n(&hold_events, __ATOMIC_RELAXED) != 0;
	pthread_cond_broadcast(&event_cond);
}

/* An append with no work but its signal: checked, and the event signalled;
 * takes the lock. */
static ze_result_t append_signal(ze_command_list_handle_t l, ze_event_handle_t signal,
				 uint32_t n_wait, ze_event_handle_t *wait)
{
	ze_result_t res;

	pthread_mutex_lock(&lock);
	res = check_append(l, signal, n_wait, wait);
	if (res == ZE_RESULT_SUCCESS)
		signal_event(signal);
	pthread_mutex_unlock(&lock);
	return res;
}

/* Whether [p, p + size) may be copied, under lock: where it touches a known
 * range it must lie inside it (and, in a reservation, on mapped pages that
 * allow the access); elsewhere it is the caller's host memory, which a copy
 * may use as on Intel's driver. */
static int copy_side_ok(const void *p, size_t size, int prot)
{
	uintptr_t a = (uintptr_t)p, end = a + size;
	struct range *r = fake_range_in(&ranges, (uintptr_t)p, size);

	if (!r)
		return 1;
	if (a < r->span.base || size > r->span.base + r->span.size - a)
		return 0;
	if (r->span.kind != R_RESERVED)
		return 1;
	while (a < end) {
		struct fake_mapping *m = fake_vmm_mapping_at(&vmem, a);

		if (!m || (m->prot & prot) != prot)
			return 0;
		a = m->span.base + m->span.size;
	}
	return 1;
}

/* The copy is done before this returns, in the calling thread: the work on
 * an immediate list then completes in order, and is done whenever anyone
 * could wait for it. The wait events are checked but not waited for: the
 * fake cannot run work later. */
ze_result_t zeCommandListAppendMemoryCopy(ze_command_list_handle_t hCommandList, void *dstptr,
					  const void *srcptr, size_t size, ze_event_handle_t hSignalEvent,
					  uint32_t numWaitEvents, ze_event_handle_t *phWaitEvents)
{
	ze_result_t res;

	ENTER(zeCommandListAppendMemoryCopy);
	if (!hCommandList)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
	if (!dstptr || !srcptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	pthread_mutex_lock(&lock);
	res = check_append(hCommandList, hSignalEvent, numWaitEvents, phWaitEvents);
	if (res == ZE_RESULT_SUCCESS && size &&
	    (size > UINTPTR_MAX - (uintptr_t)dstptr || size > UINTPTR_MAX - (uintptr_t)srcptr ||
	     !copy_side_ok(dstptr, size, PROT_READ | PROT_WRITE) ||
	     !copy_side_ok(srcptr, size, PROT_READ)))
		res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	if (res == ZE_RESULT_SUCCESS) {
		/* Under the lock, so that a racing free fails instead of faulting here. */
		if (size)
			memmove(dstptr, srcptr, size);
		signal_event(hSignalEvent);
	}
	pthread_mutex_unlock(&lock);
	return res;
}

ze_result_t zeCommandListAppendBarrier(ze_command_list_handle_t hCommandList, ze_event_handle_t hSignalEvent,
				       uint32_t numWaitEvents, ze_event_handle_t *phWaitEvents)
{
	ENTER(zeCommandListAppendBarrier);
	return append_signal(hCommandList, hSignalEvent, numWaitEvents, phWaitEvents);
}

ze_result_t zeCommandListAppendSignalEvent(ze_command_list_handle_t hCommandList, ze_event_handle_t hEvent)
{
	ENTER(zeCommandListAppendSignalEvent);
	if (!hCommandList || !hEvent)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
	return append_signal(hCommandList, hEvent, 0, NULL);
}

/* ---- events ---- */

#define POOL_FLAGS                                                                                 \
	(ZE_EVENT_POOL_FLAG_HOST_VISIBLE | ZE_EVENT_POOL_FLAG_IPC | ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP)
#define SCOPE_FLAGS (ZE_EVENT_SCOPE_FLAG_SUBDEVICE | ZE_EVENT_SCOPE_FLAG_DEVICE | ZE_EVENT_SCOPE_FLAG_HOST)

ze_result_t zeEventPoolCreate(ze_context_handle_t hContext, const ze_event_pool_desc_t *desc,
			      uint32_t numDevices, ze_device_handle_t *phDevices,
			      ze_event_pool_handle_t *phEventPool)
{
	ze_event_pool_handle_t pool;
	ze_result_t res;

	ENTER(zeEventPoolCreate);
	if ((res = check_context(hContext)) != ZE_RESULT_SUCCESS)
		return res;
	if (!desc || !phEventPool)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (desc->flags & ~(ze_event_pool_flags_t)POOL_FLAGS)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (desc->count == 0 || (numDevices && !phDevices))
		return misuse(ZE_RESULT_ERROR_INVALID_SIZE);
	for (uint32_t i = 0; i < numDevices; i++)
		if ((res = check_device(phDevices[i])) != ZE_RESULT_SUCCESS)
			return res;
	if (!(pool = malloc(sizeof *pool)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	*pool = (struct _ze_event_pool_handle_t){.ctx = hContext, .flags = desc->flags,
						  .count = desc->count};
	if (!(pool->used = calloc(desc->count, 1))) {
		free(pool);
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	}
	if ((res = context_adopt(hContext, &pools, pool, &live_pools)) != ZE_RESULT_SUCCESS) {
		free(pool->used);
		free(pool);
		return res;
	}
	*phEventPool = pool;
	return ZE_RESULT_SUCCESS;
}

/* The spec has the application destroy a pool's events first: refused otherwise. */
ze_result_t zeEventPoolDestroy(ze_event_pool_handle_t hEventPool)
{
	ze_result_t res;

	ENTER(zeEventPoolDestroy);
	pthread_mutex_lock(&lock);
	res = check_handle(&pools, hEventPool);
	if (res == ZE_RESULT_SUCCESS && hEventPool->live)
		res = misuse(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE);
	if (res == ZE_RESULT_SUCCESS) {
		fake_handle_remove(&pools, hEventPool, &live_pools);
		hEventPool->ctx->objects--;
	}
	pthread_mutex_unlock(&lock);
	if (res == ZE_RESULT_SUCCESS) {
		free(hEventPool->used);
		free(hEventPool);
	}
	return res;
}

/* An index already held by a live event is refused with
 * ZE_RESULT_ERROR_INVALID_ARGUMENT, as is one past the pool's count. */
ze_result_t zeEventCreate(ze_event_pool_handle_t hEventPool, const ze_event_desc_t *desc,
			  ze_event_handle_t *phEvent)
{
	ze_event_handle_t e;
	ze_result_t res;

	ENTER(zeEventCreate);
	if (!hEventPool)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
	if (!desc || !phEvent)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if ((desc->signal & ~(ze_event_scope_flags_t)SCOPE_FLAGS) ||
	    (desc->wait & ~(ze_event_scope_flags_t)SCOPE_FLAGS))
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (!(e = malloc(sizeof *e)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	*e = (struct _ze_event_handle_t){.pool = hEventPool, .index = desc->index};
	pthread_mutex_lock(&lock);
	res = check_handle(&pools, hEventPool);
	if (res == ZE_RESULT_SUCCESS &&
	    (desc->index >= hEventPool->count || hEventPool->used[desc->index]))
		res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	if (res == ZE_RESULT_SUCCESS && !fake_handle_add(&events, e, &live_events))
		res = ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	if (res == ZE_RESULT_SUCCESS) {
		hEventPool->used[desc->index] = 1;
		hEventPool->live++;
	}
	pthread_mutex_unlock(&lock);
	if (res != ZE_RESULT_SUCCESS) {
		free(e);
		return res;
	}
	*phEvent = e;
	return ZE_RESULT_SUCCESS;
}

ze_result_t zeEventDestroy(ze_event_handle_t hEvent)
{
	ze_result_t res;

	ENTER(zeEventDestroy);
	pthread_mutex_lock(&lock);
	res = check_handle(&events, hEvent);
	if (res == ZE_RESULT_SUCCESS) {
		fake_handle_remove(&events, hEvent, &live_events);
		hEvent->pool->used[hEvent->index] = 0;
		hEvent->pool->live--;
		/* A thread waiting on it must see it gone. */
		pthread_cond_broadcast(&event_cond);
	}
	pthread_mutex_unlock(&lock);
	if (res == ZE_RESULT_SUCCESS)
		free(hEvent);
	return res;
}

/* Whether e reads as signalled, under lock. */
static int event_ready(ze_event_handle_t e)
{
	return e->signalled && !(e->pending && __atomic_load_n(&hold_events, __ATOMIC_RELAXED));
}

/* The deadline timeout nanoseconds from now; 0 if it is too far to matter. */
static int deadline_after(uint64_t timeout, struct timespec *ts)
{
	/* Past a century, waiting is waiting for ever. */
	if (timeout > (uint64_t)100 * 365 * 86400 * 1000000000u)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(timeout / 1000000000u);
	ts->tv_nsec += (long)(timeout % 1000000000u);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
	return 1;
}

/* Timeout 0 only queries. Any other waits for a signal from another thread
 * (timeout UINT64_MAX for ever, as the real one does); a signalled event that
 * is held is released by the wait, so that a single-threaded test does not
 * hang on it. */
ze_result_t zeEventHostSynchronize(ze_event_handle_t hEvent, uint64_t timeout)
{
	struct timespec deadline;
	int timed = 0;
	ze_result_t res;

	ENTER(zeEventHostSynchronize);
	if (timeout)
		timed = deadline_after(timeout, &deadline);
	pthread_mutex_lock(&lock);
	for (;;) {
		if ((res = check_handle(&events, hEvent)) != ZE_RESULT_SUCCESS)
			break;
		if (timeout && hEvent->signalled)
			hEvent->pending = 0;
		if (event_ready(hEvent)) {
			res = ZE_RESULT_SUCCESS;
			break;
		}
		if (!timeout) {
			res = ZE_RESULT_NOT_READY;
			break;
		}
		if (!timed) {
			pthread_cond_wait(&event_cond, &lock);
		} else if (pthread_cond_timedwait(&event_cond, &lock, &deadline) == ETIMEDOUT) {
			timeout = 0; /* one last look */
		}
	}
	pthread_mutex_unlock(&lock);
	return res;
}

ze_result_t zeEventQueryStatus(ze_event_handle_t hEvent)
{
	ze_result_t res;

	ENTER(zeEventQueryStatus);
	pthread_mutex_lock(&lock);
	res = check_handle(&events, hEvent);
	if (res == ZE_RESULT_SUCCESS && !event_ready(hEvent))
		res = ZE_RESULT_NOT_READY;
	pthread_mutex_unlock(&lock);
	return res;
}

ze_result_t zeEventHostReset(ze_event_handle_t hEvent)
{
	ze_result_t res;

	ENTER(zeEventHostReset);
	pthread_mutex_lock(&lock);
	res = check_handle(&events, hEvent);
	if (res == ZE_RESULT_SUCCESS)
		hEvent->signalled = hEvent->pending = 0;
	pthread_mutex_unlock(&lock);
	return res;
}

/* Holding ends with every held event complete; waiters are woken to see it. */
/* maxMemAllocSize (0: the device's capacity) and whether the driver has
 * the relaxed-limits extension, from now on, whatever FAKE_ZE_MAX_ALLOC_MB
 * and FAKE_ZE_RELAXED_LIMITS said; the backend reads them as it enumerates. */
void fake_ze_limits(size_t max_alloc_bytes, int relaxed)
{
	pthread_once(&devices_once, devices_init);
	pthread_mutex_lock(&lock);
	__atomic_store_n(&max_alloc, max_alloc_bytes ? max_alloc_bytes : capacity, __ATOMIC_RELAXED);
	__atomic_store_n(&relaxed_limits, relaxed != 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&lock);
}

void fake_ze_hold_events(int hold)
{
	pthread_mutex_lock(&lock);
	__atomic_store_n(&hold_events, hold, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&event_cond);
	pthread_mutex_unlock(&lock);
}

/* ---- IPC ---- */

/* As the spec says, only the base of a device allocation can be exported. */
ze_result_t zeMemGetIpcHandle(ze_context_handle_t hContext, const void *ptr, ze_ipc_mem_handle_t *pIpcHandle)
{
	struct ipc_handle h;
	ze_result_t res;
	struct range *r;

	ENTER(zeMemGetIpcHandle);
	pthread_mutex_lock(&lock);
	res = check_context_pointers(hContext, ptr && pIpcHandle);
	if (res == ZE_RESULT_SUCCESS) {
		r = range_at(ptr);
		if (r && r->span.kind == R_DEVICE && r->span.base == (uintptr_t)ptr) {
			memset(&h, 0, sizeof h);
			memcpy(h.magic, ipc_magic, sizeof h.magic);
			h.pid = getpid();
			h.base = r->span.base;
			h.serial = r->span.serial;
		} else {
			res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
		}
	}
	pthread_mutex_unlock(&lock);
	if (res != ZE_RESULT_SUCCESS)
		return res;
	memset(pIpcHandle, 0, sizeof *pIpcHandle);
	memcpy(pIpcHandle->data, &h, sizeof h);
	return ZE_RESULT_SUCCESS;
}

/* The memory is this process's heap, so only this process can open a handle:
 * it gets the exporter's own address back. A handle from another process,
 * or naming an allocation since freed, is refused with
 * ZE_RESULT_ERROR_INVALID_ARGUMENT. */
ze_result_t zeMemOpenIpcHandle(ze_context_handle_t hContext, ze_device_handle_t hDevice,
			       ze_ipc_mem_handle_t handle, ze_ipc_memory_flags_t flags, void **pptr)
{
	struct ipc_handle h;
	ze_result_t res;
	struct range *r;

	ENTER(zeMemOpenIpcHandle);
	if ((res = check_context_device(hContext, hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (flags & ~(ze_ipc_memory_flags_t)(ZE_IPC_MEMORY_FLAG_BIAS_CACHED |
					     ZE_IPC_MEMORY_FLAG_BIAS_UNCACHED))
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (!pptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	memcpy(&h, handle.data, sizeof h);
	if (memcmp(h.magic, ipc_magic, sizeof h.magic) != 0 || h.pid != getpid())
		return misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	res = ZE_RESULT_ERROR_INVALID_ARGUMENT;
	pthread_mutex_lock(&lock);
	r = fake_ipc_open(&registry, &ranges, h.base, h.serial, R_DEVICE);
	if (r) {
		*pptr = (void *)r->span.base;
		res = ZE_RESULT_SUCCESS;
	}
	pthread_mutex_unlock(&lock);
	/* Nothing matched: the caller named what is not there. */
	return res == ZE_RESULT_SUCCESS ? res : misuse(res);
}

ze_result_t zeMemCloseIpcHandle(ze_context_handle_t hContext, const void *ptr)
{
	ze_result_t res;

	ENTER(zeMemCloseIpcHandle);
	pthread_mutex_lock(&lock);
	res = check_context_pointers(hContext, ptr != NULL);
	if (res == ZE_RESULT_SUCCESS && !fake_vmm_ipc_close(&vmem, (uintptr_t)ptr, R_DEVICE, 1))
		res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	pthread_mutex_unlock(&lock);
	return res;
}

/* ---- virtual memory ---- */

ze_result_t zeVirtualMemQueryPageSize(ze_context_handle_t hContext, ze_device_handle_t hDevice, size_t size,
				     size_t *pagesize)
{
	ze_result_t res;

	ENTER(zeVirtualMemQueryPageSize);
	if ((res = check_context_device(hContext, hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (!pagesize)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (size == 0)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	*pagesize = VM_PAGE;
	return ZE_RESULT_SUCCESS;
}

static int vm_aligned(uintptr_t n)
{
	return fake_vmm_aligned(n, VM_PAGE);
}

/* Address space only, PROT_NONE, aligned to the page size. The header lists
 * a null pStart as an error but also says null lets the driver choose, which
 * is what Intel's driver does: null is taken. A start address is a hint, as
 * the spec says: where it is taken, the reservation is elsewhere. An address
 * that is not page aligned is refused with ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT,
 * a size that is not, with ZE_RESULT_ERROR_UNSUPPORTED_SIZE. */
ze_result_t zeVirtualMemReserve(ze_context_handle_t hContext, const void *pStart, size_t size, void **pptr)
{
	struct fake_vmm_owner owner;
	enum fake_vmm_status st;
	ze_result_t res;
	struct range *r;

	ENTER(zeVirtualMemReserve);
	if ((res = check_context(hContext)) != ZE_RESULT_SUCCESS)
		return res;
	if (!pptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (size == 0 || !vm_aligned(size))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	if (!vm_aligned((uintptr_t)pStart))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	if (!(r = malloc(sizeof *r)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	*r = (struct range){.ctx = hContext};
	owner = owner_of(hContext);
	st = fake_vmm_reserve(&vmem, &r->span, pStart, size, VM_PAGE, &r->mapped, &owner);
	if (st != FAKE_VMM_OK) {
		free(r);
		return vmm_result(st);
	}
	*pptr = (void *)r->span.base;
	return ZE_RESULT_SUCCESS;
}

/* Whole reservations only (the spec allows part of one; the backend frees
 * what it reserved). Mappings still in it are unmapped, as the spec says; the
 * physical memory behind them stays. */
ze_result_t zeVirtualMemFree(ze_context_handle_t hContext, const void *ptr, size_t size)
{
	ze_result_t res;
	struct range *r;

	ENTER(zeVirtualMemFree);
	if ((res = check_context(hContext)) != ZE_RESULT_SUCCESS)
		return res;
	if (!ptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (size == 0)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	if (!vm_aligned((uintptr_t)ptr) || !vm_aligned(size))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	pthread_mutex_lock(&lock);
	r = fake_vmm_reservation(&vmem, (uintptr_t)ptr, size);
	if (!r || r->ctx != hContext) {
		pthread_mutex_unlock(&lock);
		return misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	}
	fake_vmm_unmap(&vmem, (uintptr_t)ptr, size);
	fake_range_remove(&registry, &ranges, &r->span);
	hContext->objects--;
	pthread_mutex_unlock(&lock);
	munmap((void *)ptr, r->mapped);
	free(r);
	return ZE_RESULT_SUCCESS;
}

/* Backed by a memfd, so that the bytes outlive a mapping and two mappings of
 * one object share them, as on a device; counted against the device's
 * capacity like zeMemAllocDevice. */
ze_result_t zePhysicalMemCreate(ze_context_handle_t hContext, ze_device_handle_t hDevice,
			       ze_physical_mem_desc_t *desc, ze_physical_mem_handle_t *phPhysicalMemory)
{
	struct fake_vmm_owner owner;
	ze_physical_mem_handle_t pm;
	enum fake_vmm_status st;
	ze_result_t res;

	ENTER(zePhysicalMemCreate);
	if ((res = check_context_device(hContext, hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (!desc || !phPhysicalMemory)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (desc->flags & ~(ze_physical_mem_flags_t)ZE_PHYSICAL_MEM_FLAG_TBD)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (desc->size == 0)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	if (!vm_aligned(desc->size))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	if (!(pm = malloc(sizeof *pm)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	*pm = (struct _ze_physical_mem_handle_t){.ctx = hContext};
	owner = owner_of(hContext);
	st = fake_physical_create(&vmem, &pm->phys, hDevice->phys, desc->size, &used[hDevice->phys],
				  capacity, &owner);
	if (st != FAKE_VMM_OK) {
		free(pm);
		return vmm_result(st);
	}
	*phPhysicalMemory = pm;
	return ZE_RESULT_SUCCESS;
}

/* Refused while mapped: the real driver would leave the mapping dangling. */
ze_result_t zePhysicalMemDestroy(ze_context_handle_t hContext, ze_physical_mem_handle_t hPhysicalMemory)
{
	ze_result_t res;

	ENTER(zePhysicalMemDestroy);
	pthread_mutex_lock(&lock);
	res = check_handle(&contexts, hContext);
	if (res == ZE_RESULT_SUCCESS)
		res = check_handle(&vmem.physicals, hPhysicalMemory);
	if (res == ZE_RESULT_SUCCESS && hPhysicalMemory->ctx != hContext)
		res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	if (res == ZE_RESULT_SUCCESS && hPhysicalMemory->phys.maps)
		res = misuse(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE);
	if (res == ZE_RESULT_SUCCESS) {
		fake_physical_free(&vmem, &hPhysicalMemory->phys);
		hContext->objects--;
	}
	pthread_mutex_unlock(&lock);
	return res;
}

/* The range must lie in one reservation of the context and overlap no
 * mapping; misaligned addresses, sizes and offsets are
 * ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT, a range past the physical memory's
 * end ZE_RESULT_ERROR_INVALID_ARGUMENT. */
ze_result_t zeVirtualMemMap(ze_context_handle_t hContext, const void *ptr, size_t size,
			   ze_physical_mem_handle_t hPhysicalMemory, size_t offset,
			   ze_memory_access_attribute_t access)
{
	static const int prots[] = {PROT_NONE, PROT_READ | PROT_WRITE, PROT_READ};
	uintptr_t a = (uintptr_t)ptr;
	ze_physical_mem_handle_t pm = hPhysicalMemory;
	struct fake_mapping *m;
	ze_result_t res;
	struct range *r;

	ENTER(zeVirtualMemMap);
	if (!hPhysicalMemory)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
	if (!ptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if ((unsigned)access > ZE_MEMORY_ACCESS_ATTRIBUTE_READONLY)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (size == 0)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	if (!vm_aligned(a) || !vm_aligned(size) || !vm_aligned(offset))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	if (!(m = malloc(sizeof *m)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	pthread_mutex_lock(&lock);
	res = check_handle(&contexts, hContext);
	if (res == ZE_RESULT_SUCCESS)
		res = check_handle(&vmem.physicals, pm);
	if (res == ZE_RESULT_SUCCESS) {
		r = fake_vmm_map_target(&vmem, a, size, &pm->phys, offset);
		if (pm->ctx != hContext || !r || r->ctx != hContext)
			res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	}
	if (res == ZE_RESULT_SUCCESS &&
	    !fake_vmm_map(&vmem, m, a, size, &pm->phys, offset, prots[access], hContext))
		res = ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	pthread_mutex_unlock(&lock);
	if (res != ZE_RESULT_SUCCESS)
		free(m);
	return res;
}

/* Whole mappings only (the spec allows part of one): every mapping the range
 * touches must lie inside it, and it must touch one at least; otherwise
 * ZE_RESULT_ERROR_INVALID_ARGUMENT, and nothing is unmapped. */
ze_result_t zeVirtualMemUnmap(ze_context_handle_t hContext, const void *ptr, size_t size)
{
	uintptr_t a = (uintptr_t)ptr, end;
	struct fake_mapping *m;
	ze_result_t res;

	ENTER(zeVirtualMemUnmap);
	if (!ptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (!vm_aligned(a))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	if (size == 0 || !vm_aligned(size) || size > UINTPTR_MAX - a)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	end = a + size;
	pthread_mutex_lock(&lock);
	res = check_handle(&contexts, hContext);
	if (res == ZE_RESULT_SUCCESS) {
		/* The first and last mappings touched are the only ones that could stick out. */
		struct fake_mapping *first = fake_vmm_mapping_at(&vmem, a);
		struct fake_mapping *last = fake_vmm_mapping_at(&vmem, end - 1);

		if ((first && first->span.base < a) ||
		    (last && last->span.base + last->span.size > end) ||
		    !(m = fake_range_in(&vmem.mappings, a, size)) || m->owner != hContext)
			res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	}
	if (res == ZE_RESULT_SUCCESS)
		fake_vmm_unmap(&vmem, a, size);
	pthread_mutex_unlock(&lock);
	return res;
}

/* ---- leaks ---- */

size_t fake_ze_live(void)
{
	size_t n;

	pthread_mutex_lock(&lock);
	n = registry.live_count[R_DEVICE] + registry.live_count[R_HOST] +
	    registry.live_count[R_RESERVED] + vmem.live_physicals +
	    live_lists + live_pools + live_events + live_contexts;
	pthread_mutex_unlock(&lock);
	return n;
}

/* What the report says beyond the ranges, under lock. */
static void unload_report(void)
{
	const struct fake_leak others[] = {
		{"physical memory object", vmem.live_physicals, 1, vmem.physical_bytes, "live"},
		{"command list", live_lists, 0, 0, "live"},
		{"event", live_events, 0, 0, "live"},
		{"event pool", live_pools, 0, 0, "live"},
		{"context", live_contexts, 0, 0, "live"},
	};

	fake_registry_unload(&registry, others, sizeof others / sizeof *others);
}

__attribute__((destructor)) static void fake_ze_unload(void)
{
	pthread_mutex_lock(&lock);
	unload_report();
	pthread_mutex_unlock(&lock);
}

#pragma GCC visibility pop
