/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-hip.c - a host-memory stand-in for libamdhip64.so, for the HIP backend's tests: state, controls, devices. */
#define _GNU_SOURCE /* see fake-hip.h */
#include "fake-hip.h"

/* The fake is built from three files, twice (once per ROCm ABI): this one
 * keeps the state, the controls, the devices (HIP_VISIBLE_DEVICES), their
 * attributes and the versions; fake-hip-memory.c the device, host and
 * virtual memory and IPC; fake-hip-streams.c the copies, streams and
 * events. Every entry point begins with ENTER, which counts it and fails it
 * on demand, and returns through done(), which keeps the thread's last
 * error; everything the calls share is under fake.lock. */

static const char *const kind_names[R_KINDS] = {"device allocation", "host allocation",
						"host registration", "address reservation",
						"mapping"};

struct fake_hip fake = {
	.devices_once = PTHREAD_ONCE_INIT,
	.vmm_supported = -1,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.registry = FAKE_REGISTRY_INIT(hip, HIP, kind_names),
	.vmem = FAKE_VMM_INIT(&fake.lock, &fake.registry, &fake.ranges, R_RESERVED, R_MAPPED,
			      "fake-hip-physical"),
};
__thread struct fake_hip_thread this_thread;

#define X(name) #name,
static const char *const function_names[F_COUNT] = {FAKE_HIP_FUNCTIONS(X)};
#undef X

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

/* ---- call counting and fault injection ---- */
const struct fake_controls controls =
	FAKE_CONTROLS_INIT(hip, HIP, "error", INT_MAX, function_names, fake.counters, error_table);

FAKE_CONTROLS_EXPORTS(hip, controls)


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

	fake.n_visible = 0;
	while (*p) {
		int seen = 0;
		long v;

		if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9'))
			break;
		errno = 0;
		v = strtol(p, &end, 10);
		if (errno || (*end && *end != ',') || v >= fake.n_physical)
			break;
		for (int i = 0; i < fake.n_visible; i++)
			seen |= fake.visible[i] == v;
		if (!seen)
			fake.visible[fake.n_visible++] = (int)v;
		p = *end ? end + 1 : end;
	}
}

static void devices_init(void)
{
	const char *list = getenv("HIP_VISIBLE_DEVICES");

	fake.n_physical = (int)fake_controls_env_number(&controls, "FAKE_HIP_DEVICES", 2, 0, MAX_DEVICES);
	if (__atomic_load_n(&fake.vmm_supported, __ATOMIC_RELAXED) < 0)
		__atomic_store_n(&fake.vmm_supported,
				 (int)fake_controls_env_number(&controls, "FAKE_HIP_VMM", 1, 0, 1),
				 __ATOMIC_RELAXED);
	fake.capacity = (size_t)fake_controls_env_number(&controls, "FAKE_HIP_MEMORY_MB", 1024, 0,
						    (long)(SIZE_MAX >> 21)) << 20;
	if (!list || !*list)
		list = getenv("CUDA_VISIBLE_DEVICES");
	if (list && *list) {
		parse_visible(list);
		return;
	}
	fake.n_visible = fake.n_physical;
	for (int i = 0; i < fake.n_physical; i++)
		fake.visible[i] = i;
}

int device_count(void)
{
	pthread_once(&fake.devices_once, devices_init);
	return fake.n_visible;
}

hipError_t check_device(int device)
{
	int n = device_count();

	if (n == 0)
		return hipErrorNoDevice;
	return device < 0 || device >= n ? misuse(hipErrorInvalidDevice) : hipSuccess;
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
	hipError_t err = this_thread.last_error;

	ENTER(hipGetLastError);
	this_thread.last_error = hipSuccess;
	return err;
}

hipError_t hipPeekAtLastError(void)
{
	ENTER(hipPeekAtLastError);
	return done(this_thread.last_error);
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
	this_thread.current_device = deviceId;
	return done(hipSuccess);
}

hipError_t hipGetDevice(int *deviceId)
{
	ENTER(hipGetDevice);
	NEED_DEVICES();
	if (!deviceId)
		return done(misuse(hipErrorInvalidValue));
	*deviceId = this_thread.current_device;
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
	snprintf(name, (size_t)len, "Fake HIP device %d", fake.visible[device]);
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
	*bytes = fake.capacity;
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
	snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", fake.visible[device] + 1);
	return done(hipSuccess);
}

/* Copies run at once, so waiting for the device is waiting for held events. */
hipError_t hipDeviceSynchronize(void)
{
	struct fake_release_filter f = {.dev = -1};

	ENTER(hipDeviceSynchronize);
	NEED_DEVICES();
	f.dev = this_thread.current_device;
	fake_events_release(&fake.lock, &fake.events, &f);
	return done(hipSuccess);
}

hipError_t hipMemGetInfo(size_t *free, size_t *total)
{
	int dev;

	ENTER(hipMemGetInfo);
	NEED_DEVICES();
	if (!free || !total)
		return done(misuse(hipErrorInvalidValue));
	dev = fake.visible[this_thread.current_device];
	pthread_mutex_lock(&fake.lock);
	*free = fake.capacity - fake.used[dev];
	pthread_mutex_unlock(&fake.lock);
	*total = fake.capacity;
	return done(hipSuccess);
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
		*pi = __atomic_load_n(&fake.vmm_supported, __ATOMIC_RELAXED);
		return done(hipSuccess);
#else
		/* Past 5.2's last attribute: an invalid value to it, not a misuse. */
		return done(hipErrorInvalidValue);
#endif
	default:
		return done(misuse(hipErrorInvalidValue));
	}
}

/* ---- leaks ---- */

size_t fake_hip_live(void)
{
	size_t n;

	pthread_mutex_lock(&fake.lock);
	n = fake.registry.live_count[R_DEVICE] + fake.registry.live_count[R_HOST] +
	    fake.registry.live_count[R_RESERVED] + fake.registry.live_count[R_MAPPED] + fake.vmem.live_physicals +
	    fake.live_streams + fake.live_events;
	pthread_mutex_unlock(&fake.lock);
	return n;
}

/* What the report says beyond the ranges, under lock. */
static void unload_report(void)
{
	const struct fake_leak others[] = {
		{"physical allocation", fake.vmem.live_physicals, 1, fake.vmem.physical_bytes, "live"},
		{"stream", fake.live_streams, 0, 0, "live"},
		{"event", fake.live_events, 0, 0, "live"},
	};

	fake_registry_unload(&fake.registry, others, sizeof others / sizeof *others);
}

__attribute__((destructor)) static void fake_hip_unload(void)
{
	pthread_mutex_lock(&fake.lock);
	unload_report();
	pthread_mutex_unlock(&fake.lock);
}
