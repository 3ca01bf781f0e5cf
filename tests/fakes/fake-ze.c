/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-ze.c - a host-memory stand-in for libze_loader.so.1, for the Level Zero backend's tests: state, controls, devices. */
#define _GNU_SOURCE /* see fake-ze.h */
#include "fake-ze.h"

/* The fake is built from three files: this one keeps the state, the
 * controls, the driver, the devices (ZE_AFFINITY_MASK) and contexts, and
 * the checks of handles the others share; fake-ze-memory.c the device,
 * host and virtual memory and IPC; fake-ze-lists.c the immediate command
 * lists, their copies, and the event pools and events. Every entry point
 * begins with ENTER, which counts it and fails it on demand; everything
 * the calls share is under fake.lock. */

static const char *const kind_names[R_KINDS] = {"device allocation", "host allocation",
						"virtual reservation", "virtual mapping"};

struct fake_ze fake = {
	.devices_once = PTHREAD_ONCE_INIT,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.registry = FAKE_REGISTRY_INIT(ze, ZE, kind_names),
	.vmem = FAKE_VMM_INIT(&fake.lock, &fake.registry, &fake.ranges, R_RESERVED, R_MAPPED,
			      "fake-ze-physical"),
};

#define X(name) #name,
static const char *const function_names[F_COUNT] = {FAKE_ZE_FUNCTIONS(X)};
#undef X

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
const struct fake_controls controls =
	FAKE_CONTROLS_INIT(ze, ZE, "result", UINT_MAX, function_names, fake.counters, result_table);

FAKE_CONTROLS_EXPORTS(ze, controls)


__attribute__((constructor)) static void fake_ze_load(void)
{
	pthread_condattr_t attr;

	/* Timed waits count time that a clock change cannot stretch. */
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&fake.event_cond, &attr);
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
		if (v >= 0 && !errno && v < fake.n_physical && (*end == '\0' || *end == ',' || *end == '.'))
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

	fake.n_physical = (int)fake_controls_env_number(&controls, "FAKE_ZE_DEVICES", 2, 0, MAX_DEVICES);
	fake.capacity = (size_t)fake_controls_env_number(&controls, "FAKE_ZE_MEMORY_MB", 1024, 0,
						    (long)(SIZE_MAX >> 21)) << 20;
	fake.max_alloc = (size_t)fake_controls_env_number(&controls, "FAKE_ZE_MAX_ALLOC_MB",
						     (long)(fake.capacity >> 20), 1,
						     (long)(SIZE_MAX >> 21)) << 20;
	fake.relaxed_limits = (int)fake_controls_env_number(&controls, "FAKE_ZE_RELAXED_LIMITS", 1, 0, 1);
	if (mask && *mask)
		parse_affinity(mask, selected);
	else
		for (int i = 0; i < fake.n_physical; i++)
			selected[i] = 1;
	fake.n_visible = 0;
	for (int i = 0; i < fake.n_physical; i++)
		if (selected[i])
			fake.device_table[fake.n_visible++].phys = i;
}

static int driver_known(ze_driver_handle_t d)
{
	return d == &fake.the_driver;
}

static int device_known(ze_device_handle_t d)
{
	uintptr_t p = (uintptr_t)d, first = (uintptr_t)fake.device_table;

	return p >= first && p < first + (size_t)fake.n_visible * sizeof *fake.device_table &&
	       (p - first) % sizeof *fake.device_table == 0;
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

/* maxMemAllocSize (0: the device's capacity) and whether the driver has
 * the relaxed-limits extension, from now on, whatever FAKE_ZE_MAX_ALLOC_MB
 * and FAKE_ZE_RELAXED_LIMITS said; the backend reads them as it enumerates. */
void fake_ze_limits(size_t max_alloc_bytes, int relaxed)
{
	pthread_once(&fake.devices_once, devices_init);
	pthread_mutex_lock(&fake.lock);
	__atomic_store_n(&fake.max_alloc, max_alloc_bytes ? max_alloc_bytes : fake.capacity,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&fake.relaxed_limits, relaxed != 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&fake.lock);
}

/* ---- the registries ---- */

/* The usual first check of a handle argument, under lock. */
ze_result_t check_handle(void *const *tree, const void *h)
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

ze_result_t check_device(ze_device_handle_t d)
{
	if (!d)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
	return device_known(d) ? ZE_RESULT_SUCCESS : misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
}

/* check_handle for a context, taking the lock: for calls that need only that. */
ze_result_t check_context(ze_context_handle_t ctx)
{
	ze_result_t res;

	pthread_mutex_lock(&fake.lock);
	res = check_handle(&fake.contexts, ctx);
	pthread_mutex_unlock(&fake.lock);
	return res;
}

/* The checks of the calls that make something of a context on a device. */
ze_result_t check_context_device(ze_context_handle_t ctx, ze_device_handle_t d)
{
	ze_result_t res = check_context(ctx);

	return res != ZE_RESULT_SUCCESS ? res : check_device(d);
}

/* The usual checks of a call on a context about memory, under lock: the
 * context, and the pointers the call must be given (given: whether they are). */
ze_result_t check_context_pointers(ze_context_handle_t ctx, int given)
{
	ze_result_t res = check_handle(&fake.contexts, ctx);

	if (res == ZE_RESULT_SUCCESS && !given)
		res = misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	return res;
}

/* Enters handle h, just made in ctx, in tree, counting it in *live and in
 * the context's objects; takes the lock. The context may have gone
 * meanwhile: a race in the caller, refused. On failure h is the caller's. */
ze_result_t context_adopt(ze_context_handle_t ctx, void **tree, void *h, unsigned long *live)
{
	ze_result_t res = ZE_RESULT_SUCCESS;

	pthread_mutex_lock(&fake.lock);
	if (!fake_handle_known(&fake.contexts, ctx))
		res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	else if (!fake_handle_add(tree, h, live))
		res = ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	else
		ctx->objects++;
	pthread_mutex_unlock(&fake.lock);
	return res;
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
	pthread_once(&fake.devices_once, devices_init);
	if (fake.n_visible == 0 || flags == ZE_INIT_FLAG_VPU_ONLY)
		return ZE_RESULT_ERROR_UNINITIALIZED;
	__atomic_store_n(&fake.initialized, 1, __ATOMIC_RELEASE);
	return ZE_RESULT_SUCCESS;
}

ze_result_t zeDriverGet(uint32_t *pCount, ze_driver_handle_t *phDrivers)
{
	ENTER(zeDriverGet);
	if (!pCount)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (count_idiom(pCount, phDrivers, 1))
		phDrivers[0] = &fake.the_driver;
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
			__atomic_load_n(&fake.relaxed_limits, __ATOMIC_RELAXED) ? 1 : 0)) {
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
	n = count_idiom(pCount, phDevices, (uint32_t)fake.n_visible);
	for (uint32_t i = 0; i < n; i++)
		phDevices[i] = &fake.device_table[i];
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
	p->maxMemAllocSize = __atomic_load_n(&fake.max_alloc, __ATOMIC_RELAXED);
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
		pMemProperties->totalSize = fake.capacity;
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

const struct queue_group groups[N_GROUPS] = {
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
	    !fake_handle_register(&fake.lock, &fake.contexts, ctx, &fake.live_contexts))
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
	pthread_mutex_lock(&fake.lock);
	res = check_handle(&fake.contexts, hContext);
	if (res == ZE_RESULT_SUCCESS && hContext->objects)
		res = misuse(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE);
	if (res == ZE_RESULT_SUCCESS) {
		fake_handle_remove(&fake.contexts, hContext, &fake.live_contexts);
	}
	pthread_mutex_unlock(&fake.lock);
	if (res == ZE_RESULT_SUCCESS)
		free(hContext);
	return res;
}

/* ---- leaks ---- */

size_t fake_ze_live(void)
{
	size_t n;

	pthread_mutex_lock(&fake.lock);
	n = fake.registry.live_count[R_DEVICE] + fake.registry.live_count[R_HOST] +
	    fake.registry.live_count[R_RESERVED] + fake.vmem.live_physicals +
	    fake.live_lists + fake.live_pools + fake.live_events + fake.live_contexts;
	pthread_mutex_unlock(&fake.lock);
	return n;
}

/* What the report says beyond the ranges, under lock. */
static void unload_report(void)
{
	const struct fake_leak others[] = {
		{"physical memory object", fake.vmem.live_physicals, 1, fake.vmem.physical_bytes, "live"},
		{"command list", fake.live_lists, 0, 0, "live"},
		{"event", fake.live_events, 0, 0, "live"},
		{"event pool", fake.live_pools, 0, 0, "live"},
		{"context", fake.live_contexts, 0, 0, "live"},
	};

	fake_registry_unload(&fake.registry, others, sizeof others / sizeof *others);
}

__attribute__((destructor)) static void fake_ze_unload(void)
{
	pthread_mutex_lock(&fake.lock);
	unload_report();
	pthread_mutex_unlock(&fake.lock);
}
