/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-cuda.c - a host-memory stand-in for libcuda.so.1, for the CUDA backend's tests: state, controls, devices, contexts. */
#define _GNU_SOURCE /* see fake-cuda.h */
#include "fake-cuda.h"

/* The fake is built from three files: this one keeps the state, the
 * controls, the devices (CUDA_VISIBLE_DEVICES) and the contexts;
 * fake-cuda-memory.c the device, host and virtual memory and IPC;
 * fake-cuda-streams.c the copies, streams and events. Every entry point
 * begins with ENTER, which counts it and fails it on demand; everything
 * the calls share is under fake.lock. */

static const char *const kind_names[R_KINDS] = {"device allocation", "host allocation",
						"host registration", "address reservation",
						"mapping"};

struct fake_cuda fake = {
	.devices_once = PTHREAD_ONCE_INIT,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.registry = FAKE_REGISTRY_INIT(cuda, CUDA, kind_names),
	.vmem = FAKE_VMM_INIT(&fake.lock, &fake.registry, &fake.ranges, R_RESERVED, R_MAPPED,
			      "fake-cuda-physical"),
};
__thread struct fake_cuda_thread this_thread;

#define X(name) STR(name),
static const char *const function_names[F_COUNT] = {FAKE_CUDA_FUNCTIONS(X)};
#undef X

/* ---- errors ---- */

/* Names and texts as the driver's cuGetErrorName and cuGetErrorString give them. */
#define ERR(code, text) {code, #code, text}
static const struct fake_code error_table[] = {
	ERR(CUDA_SUCCESS, "no error"),
	ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
	ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
	ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
	ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
	ERR(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
	ERR(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
	ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
	ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
	ERR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
	ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
	ERR(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
	ERR(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
	ERR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
	ERR(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
	ERR(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
	ERR(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
	ERR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
	ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
	ERR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
	ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
	ERR(CUDA_ERROR_NOT_READY, "device not ready"),
	ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
	ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
	ERR(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
	ERR(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
	ERR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
	ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
	ERR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
	    "part or all of the requested memory range is already mapped"),
	ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
	    "pointer does not correspond to a registered memory region"),
	ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
	ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
	ERR(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
	ERR(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
	    "system has unsupported display driver / cuda driver combination"),
	ERR(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
	ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef ERR

/* ---- call counting and fault injection ---- */
const struct fake_controls controls =
	FAKE_CONTROLS_INIT(cuda, CUDA, "error", INT_MAX, function_names, fake.counters, error_table);


FAKE_CONTROLS_EXPORTS(cuda, controls)


__attribute__((constructor)) static void fake_cuda_load(void)
{
	fake_controls_load(&controls);
}

/* ---- devices ---- */

/* A fixed UUID per physical ordinal; the byte after the fixed four is the
 * ordinal, so "GPU-facec0da-01" names physical device 1 unambiguously. */
static void uuid_of(int phys, unsigned char bytes[16])
{
	static const unsigned char head[4] = {0xfa, 0xce, 0xc0, 0xda};

	memcpy(bytes, head, sizeof head);
	bytes[4] = (unsigned char)phys;
	for (int i = 5; i < 16; i++)
		bytes[i] = (unsigned char)(phys * 37 + i * 11);
}

/* "GPU-" and the 16 bytes in hex, dashed as nvidia-smi shows them. */
static void uuid_text(int phys, char text[41])
{
	unsigned char b[16];
	char *p = text + 4;

	uuid_of(phys, b);
	memcpy(text, "GPU-", 4);
	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*p++ = '-';
		p += sprintf(p, "%02x", b[i]);
	}
}

/* The physical device one CUDA_VISIBLE_DEVICES entry names, or -1. A number
 * is read as strtoul would, so that "1gpu" is 1; "GPU-" starts a UUID, of
 * which a prefix naming one device is enough. The fake has no MIG devices. */
static int visible_entry(const char *s, size_t len)
{
	char text[41];
	int found = -1;
	long v = 0;

	while (len && (*s == ' ' || *s == '\t')) {
		s++;
		len--;
	}
	if (len >= 4 && strncmp(s, "GPU-", 4) == 0) {
		if (len > 40)
			return -1;
		for (int p = 0; p < fake.n_physical; p++) {
			uuid_text(p, text);
			if (strncasecmp(s, text, len) != 0)
				continue;
			if (found >= 0)
				return -1; /* ambiguous */
			found = p;
		}
		return found;
	}
	if (!len || *s < '0' || *s > '9')
		return -1;
	for (; len && *s >= '0' && *s <= '9'; s++, len--)
		if ((v = v * 10 + (*s - '0')) >= fake.n_physical)
			return -1;
	return (int)v;
}

/* CUDA_VISIBLE_DEVICES as the driver reads it: comma-separated entries,
 * enumerated in the order given; the first invalid entry (not a device,
 * out of range, an ambiguous UUID prefix) ends the list, and the devices
 * before it stay visible. A device named twice hides every device: the
 * driver then finds none, and cuInit fails with CUDA_ERROR_NO_DEVICE. That
 * is the behaviour PyTorch reproduces without initializing CUDA, in
 * _parse_visible_devices ("Repeated ordinal results in empty set") and
 * _transform_uuid_to_ordinals ("Duplicates result in empty set"). */
static void parse_visible(const char *list)
{
	const char *p = list;

	fake.n_visible = 0;
	for (;;) {
		const char *end = strchrnul(p, ',');
		int phys = visible_entry(p, (size_t)(end - p));

		if (phys < 0)
			return;
		for (int i = 0; i < fake.n_visible; i++)
			if (fake.visible[i] == phys) {
				fake.n_visible = 0;
				return;
			}
		fake.visible[fake.n_visible++] = phys;
		if (!*end)
			return;
		p = end + 1;
	}
}

static void devices_init(void)
{
	const char *list = getenv("CUDA_VISIBLE_DEVICES");

	fake.n_physical = (int)fake_controls_env_number(&controls, "FAKE_CUDA_DEVICES", 2, 0, MAX_DEVICES);
	fake.capacity = (size_t)fake_controls_env_number(&controls, "FAKE_CUDA_MEMORY_MB", 1024, 0,
						    (long)(SIZE_MAX >> 21)) << 20;
	fake.vmm_supported = (int)fake_controls_env_number(&controls, "FAKE_CUDA_VMM", 1, 0, 1);
	fake.copy_ms = fake_controls_env_number(&controls, "FAKE_CUDA_COPY_MS", 0, 0, 10000);
	/* Set but empty hides every device, as with the driver. */
	if (list) {
		parse_visible(list);
	} else {
		fake.n_visible = fake.n_physical;
		for (int i = 0; i < fake.n_physical; i++)
			fake.visible[i] = i;
	}
	for (int i = 0; i < fake.n_visible; i++)
		fake.primaries[i].dev = i;
}

CUresult check_device(CUdevice dev)
{
	return dev < 0 || dev >= fake.n_visible ? misuse(CUDA_ERROR_INVALID_DEVICE) : CUDA_SUCCESS;
}


/* ---- contexts ---- */

static int context_known(CUcontext ctx)
{
	uintptr_t p = (uintptr_t)ctx, first = (uintptr_t)fake.primaries;

	return p >= first && p < first + (size_t)fake.n_visible * sizeof *fake.primaries &&
	       (p - first) % sizeof *fake.primaries == 0;
}

CUresult current_device(int *dev_p)
{
	CUcontext ctx = current_context();
	unsigned refs;

	if (!ctx)
		return misuse(CUDA_ERROR_INVALID_CONTEXT);
	pthread_mutex_lock(&fake.lock);
	refs = ctx->refs;
	pthread_mutex_unlock(&fake.lock);
	/* Released to nothing, the primary context is gone until retained again. */
	if (!refs)
		return misuse(CUDA_ERROR_CONTEXT_IS_DESTROYED);
	if (dev_p)
		*dev_p = ctx->dev;
	return CUDA_SUCCESS;
}

/* ---- errors, init and versions ---- */

/* An unknown code gives NULL and CUDA_ERROR_INVALID_VALUE, as the driver does. */
static CUresult error_info(CUresult error, const char **pStr, int text)
{
	int i = fake_controls_code_index(&controls, (int)error);

	if (!pStr)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	*pStr = i < 0 ? NULL : text ? error_table[i].text : error_table[i].name;
	/* A code newer than the fake is no misuse. */
	return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	ENTER_ANYTIME(cuGetErrorString);
	return error_info(error, pStr, 1);
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	ENTER_ANYTIME(cuGetErrorName);
	return error_info(error, pStr, 0);
}

/* With no visible device, cuInit fails with CUDA_ERROR_NO_DEVICE, every time,
 * and the other calls keep answering CUDA_ERROR_NOT_INITIALIZED, as the
 * driver does with CUDA_VISIBLE_DEVICES="" (cuDeviceGetCount included). */
CUresult cuInit(unsigned int Flags)
{
	ENTER(cuInit);
	if (Flags != 0)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	pthread_once(&fake.devices_once, devices_init);
	if (fake.n_visible == 0)
		return CUDA_ERROR_NO_DEVICE;
	__atomic_store_n(&fake.initialized, 1, __ATOMIC_RELEASE);
	return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
	ENTER_ANYTIME(cuDriverGetVersion);
	if (!driverVersion)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	*driverVersion = CUDA_VERSION;
	return CUDA_SUCCESS;
}

/* ---- devices ---- */

CUresult cuDeviceGetCount(int *count)
{
	ENTER(cuDeviceGetCount);
	if (!count)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	*count = fake.n_visible;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	ENTER(cuDeviceGet);
	if (!device)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(check_device(ordinal));
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	ENTER(cuDeviceGetName);
	TRY(check_device(dev));
	if (!name || len <= 0)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	/* The physical ordinal in the name lets a test see CUDA_VISIBLE_DEVICES at work. */
	snprintf(name, (size_t)len, "Fake CUDA device %d", fake.visible[dev]);
	return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
	ENTER(cuDeviceTotalMem);
	TRY(check_device(dev));
	if (!bytes)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	*bytes = fake.capacity;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	ENTER(cuDeviceGetPCIBusId);
	TRY(check_device(dev));
	/* Room for all of "dddd:bb:dd.f" and its NUL. */
	if (!pciBusId || len < 13)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", fake.visible[dev] + 1);
	return CUDA_SUCCESS;
}

/* What the fake's devices say of themselves: an H100-like part (compute
 * capability 9.0) on PCI bus P + 1, with unified addressing and host memory
 * registration, and no shareable handles, pools or RDMA. */
static const struct {
	CUdevice_attribute attrib;
	int value;
} attribute_table[] = {
	{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
	{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
	{CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
	{CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0},
	{CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0},
	{CU_DEVICE_ATTRIBUTE_INTEGRATED, 0},
	{CU_DEVICE_ATTRIBUTE_TCC_DRIVER, 0},
	{CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
	{CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
	{CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 1},
	{CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1},
	{CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, 1},
	{CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0},
	{CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0},
	{CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0},
};

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	ENTER(cuDeviceGetAttribute);
	TRY(check_device(dev));
	if (!pi)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (attrib == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) {
		*pi = fake.vmm_supported;
		return CUDA_SUCCESS;
	}
	if (attrib == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) {
		*pi = fake.visible[dev] + 1;
		return CUDA_SUCCESS;
	}
	for (size_t i = 0; i < sizeof attribute_table / sizeof *attribute_table; i++)
		if (attribute_table[i].attrib == attrib) {
			*pi = attribute_table[i].value;
			return CUDA_SUCCESS;
		}
	/* An attribute the fake does not know: asking is no misuse. */
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
	unsigned char b[16];

	TRY(check_device(dev));
	if (!uuid)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	uuid_of(fake.visible[dev], b);
	memcpy(uuid->bytes, b, sizeof uuid->bytes);
	return CUDA_SUCCESS;
}

/* The two differ only for MIG instances, which the fake has none of. */
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	ENTER(cuDeviceGetUuid);
	return device_uuid(uuid, dev);
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	ENTER(cuDeviceGetUuid_v2);
	return device_uuid(uuid, dev);
}

/* ---- contexts ---- */

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	ENTER(cuDevicePrimaryCtxRetain);
	TRY(check_device(dev));
	if (!pctx)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	pthread_mutex_lock(&fake.lock);
	fake.primaries[dev].refs++;
	pthread_mutex_unlock(&fake.lock);
	*pctx = &fake.primaries[dev];
	return CUDA_SUCCESS;
}

/* At 0 the context is inactive: the calls that need it fail until it is
 * retained again. Unlike the driver, which frees what the context held, the
 * fake keeps it, so that the leak report names what the caller forgot. */
CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	CUresult err = CUDA_SUCCESS;

	ENTER(cuDevicePrimaryCtxRelease);
	TRY(check_device(dev));
	pthread_mutex_lock(&fake.lock);
	if (fake.primaries[dev].refs)
		fake.primaries[dev].refs--;
	else
		err = misuse(CUDA_ERROR_INVALID_CONTEXT);
	pthread_mutex_unlock(&fake.lock);
	return err;
}

/* Replaces the top of the stack; NULL pops it, and on an empty stack does nothing. */
CUresult cuCtxSetCurrent(CUcontext ctx)
{
	ENTER(cuCtxSetCurrent);
	if (ctx && !context_known(ctx))
		return misuse(CUDA_ERROR_INVALID_CONTEXT);
	if (this_thread.ctx_depth == 0) {
		if (ctx)
			this_thread.ctx_stack[this_thread.ctx_depth++] = ctx;
	} else if (ctx) {
		this_thread.ctx_stack[this_thread.ctx_depth - 1] = ctx;
	} else {
		this_thread.ctx_depth--;
	}
	return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	ENTER(cuCtxGetCurrent);
	if (!pctx)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	*pctx = current_context();
	return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
	int dev;

	ENTER(cuCtxGetDevice);
	if (!device)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	*device = dev;
	return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx)
{
	ENTER(cuCtxPushCurrent);
	if (!ctx)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (!context_known(ctx))
		return misuse(CUDA_ERROR_INVALID_CONTEXT);
	if (this_thread.ctx_depth == CTX_STACK_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	this_thread.ctx_stack[this_thread.ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext *pctx)
{
	ENTER(cuCtxPopCurrent);
	if (this_thread.ctx_depth == 0)
		return misuse(CUDA_ERROR_INVALID_CONTEXT);
	this_thread.ctx_depth--;
	if (pctx)
		*pctx = this_thread.ctx_stack[this_thread.ctx_depth];
	return CUDA_SUCCESS;
}

/* Copies run at once, so waiting for the device is waiting for held events. */
CUresult cuCtxSynchronize(void)
{
	struct fake_release_filter f = {.dev = -1};

	ENTER(cuCtxSynchronize);
	TRY(current_device(&f.dev));
	fake_events_release(&fake.lock, &fake.events, &f);
	return CUDA_SUCCESS;
}

/* The calling thread's context stack becomes the primary context of
 * device dev alone (visible ordinal), or empty for dev < 0, without a
 * counted call: a program's own context, for a test to call the library
 * under. */
void fake_cuda_context_current(int dev)
{
	this_thread.ctx_depth = 0;
	if (dev >= 0 && dev < fake.n_visible)
		this_thread.ctx_stack[this_thread.ctx_depth++] = &fake.primaries[dev];
}

/* ---- leaks ---- */

/* Retained primary contexts, one per device however often; under lock. */
static unsigned long live_contexts(void)
{
	unsigned long n = 0;

	for (int i = 0; i < fake.n_visible; i++)
		n += fake.primaries[i].refs != 0;
	return n;
}

size_t fake_cuda_live(void)
{
	size_t n = 0;

	pthread_mutex_lock(&fake.lock);
	for (int k = 0; k < R_KINDS; k++)
		n += fake.registry.live_count[k];
	n += fake.live_streams + fake.live_events + fake.vmem.live_physicals + live_contexts();
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
		{"primary context", live_contexts(), 0, 0, "retained"},
	};

	fake_registry_unload(&fake.registry, others, sizeof others / sizeof *others);
}

__attribute__((destructor)) static void fake_cuda_unload(void)
{
	pthread_mutex_lock(&fake.lock);
	unload_report();
	pthread_mutex_unlock(&fake.lock);
}
