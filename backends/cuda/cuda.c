/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cuda.c - the CUDA backend: NVIDIA GPUs through the CUDA driver API, which it dlopen()s; built against the toolkit's cuda.h, linked against nothing of NVIDIA's. */
#include "../runtime.h"

#include <cuda.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every driver function the backend calls, resolved by name when the driver
 * is loaded.  cuda.h maps each name to its current versioned entry point
 * (cuMemAlloc to cuMemAlloc_v2, cuCtxPushCurrent to cuCtxPushCurrent_v2...),
 * so the pointer types, the field names and the symbols looked up all follow
 * the header: a mismatch is a compile error, not a crash. */
#define CU_FUNCTIONS(X)                                                                            \
	X(cuGetErrorString) X(cuGetErrorName) X(cuInit) X(cuDriverGetVersion)                      \
	X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceTotalMem)                  \
	X(cuDeviceGetPCIBusId) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)                 \
	X(cuDevicePrimaryCtxRelease) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxPushCurrent)    \
	X(cuCtxPopCurrent)                                                                          \
	X(cuMemGetInfo) X(cuMemAlloc) X(cuMemFree) X(cuMemHostAlloc) X(cuMemFreeHost)              \
	X(cuMemHostRegister) X(cuMemHostUnregister) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)      \
	X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuEventCreate)               \
	X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize)

/* Virtual memory management (CUDA 10.2 and later): expandable segments. */
#define CU_VMM_FUNCTIONS(X)                                                                        \
	X(cuMemGetAllocationGranularity) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate) \
	X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)

/* Inter-process sharing of device memory. */
#define CU_IPC_FUNCTIONS(X) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle)

/* The exported name of a function: cuda.h's macro expanded, then quoted. */
#define SYMBOL_(name) #name
#define SYMBOL(name) SYMBOL_(name)

struct cuda_device {
	CUdevice handle;
	CUcontext ctx; /* the primary context, retained at first use; under lock */
	bool vmm;
	size_t granularity;
};

struct cuda_state {
	const struct devcache_backend_host *host;
	void *lib;
	char lib_name[256];
	int n_devices;
	struct cuda_device *devices;
	bool vmm, ipc; /* the driver has those entry points */
	pthread_mutex_t lock;
#define FIELD(name) __typeof__(name) *name;
	CU_FUNCTIONS(FIELD)
	CU_VMM_FUNCTIONS(FIELD)
	CU_IPC_FUNCTIONS(FIELD)
#undef FIELD
};

/* The names and texts of the codes a driver that cannot describe them gives
 * (the toolkit's stub answers every call, cuGetErrorString too, with
 * CUDA_ERROR_STUB_LIBRARY): the words the real driver uses for them. */
static const struct {
	CUresult code;
	const char *name, *text;
} known_errors[] = {
	{CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	{CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	{CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
	 "CUDA-capable device(s) is/are busy or unavailable"},
	{CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM",
	 "OS call failed or operation not supported on this OS"},
	{CUDA_ERROR_SYSTEM_NOT_READY, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
	{CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	 "system has unsupported display driver / cuda driver combination"},
	{CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	 "forward compatibility was attempted on non supported HW"},
	{CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* The driver's own words for an error: "text (NAME)". */
static void describe(struct cuda_state *s, CUresult e, char *buf, size_t size)
{
	const char *text = NULL, *name = NULL;

	if (s->cuGetErrorString(e, &text) != CUDA_SUCCESS)
		text = NULL;
	if (s->cuGetErrorName(e, &name) != CUDA_SUCCESS)
		name = NULL;
	for (size_t i = 0; i < sizeof known_errors / sizeof *known_errors && (!text || !name); i++)
		if (known_errors[i].code == e) {
			text = text ? text : known_errors[i].text;
			name = name ? name : known_errors[i].name;
		}
	if (text && name)
		snprintf(buf, size, "%s (%s)", text, name);
	else
		snprintf(buf, size, _("CUDA error %d"), (int)e);
}

/* The driver's own words for an error, and the matching libdevcache code. */
static int fail(struct cuda_state *s, CUresult e, const char *what, int dev)
{
	int code = e == CUDA_ERROR_OUT_OF_MEMORY ? DEVCACHE_ENOMEM
		 : e == CUDA_ERROR_NOT_READY	 ? DEVCACHE_EAGAIN
		 : e == CUDA_ERROR_INVALID_DEVICE || e == CUDA_ERROR_NO_DEVICE ? DEVCACHE_ENODEV
		 : e == CUDA_ERROR_NOT_SUPPORTED ? DEVCACHE_ENOTSUP
						 : DEVCACHE_EBACKEND;
	char text[256];

	describe(s, e, text, sizeof text);
	if (dev < 0)
		return s->host->error(code, "cuda: %s: %s", what, text);
	return s->host->error(code, "cuda:%d: %s: %s", dev, what, text);
}

#define CHECK(s, call, what, dev)                                                                  \
	do {                                                                                       \
		CUresult e_ = (call);                                                              \
		if (e_ != CUDA_SUCCESS)                                                            \
			return fail((s), e_, (what), (dev));                                       \
	} while (0)

/* dev's primary context, retained at the first call that needs it: a
 * context costs device memory, so devices never used get none. */
static int primary_context(struct cuda_state *s, int dev, CUcontext *ctx_p)
{
	struct cuda_device *d = &s->devices[dev];
	CUresult e = CUDA_SUCCESS;

	if ((*ctx_p = __atomic_load_n(&d->ctx, __ATOMIC_ACQUIRE)))
		return 0;
	pthread_mutex_lock(&s->lock);
	if (!d->ctx) {
		CUcontext ctx = NULL;

		if ((e = s->cuDevicePrimaryCtxRetain(&ctx, d->handle)) == CUDA_SUCCESS)
			__atomic_store_n(&d->ctx, ctx, __ATOMIC_RELEASE);
	}
	*ctx_p = d->ctx;
	pthread_mutex_unlock(&s->lock);
	if (e != CUDA_SUCCESS)
		return fail(s, e, "cuDevicePrimaryCtxRetain", dev);
	return 0;
}

/* Whether ctx is the primary context of one of the backend's devices. */
static bool own_context(struct cuda_state *s, CUcontext ctx)
{
	for (int i = 0; i < s->n_devices; i++)
		if (__atomic_load_n(&s->devices[i].ctx, __ATOMIC_ACQUIRE) == ctx)
			return true;
	return false;
}

/* Makes dev's primary context current for a call.  A thread with no context
 * current, or with another device's primary context, is left with dev's, as
 * the CUDA runtime leaves it (one driver call per entry in the steady
 * state).  A context of the program's own is pushed over and popped after
 * the call: *pushed_p says leave() must pop. */
static int enter(struct cuda_state *s, int dev, bool *pushed_p)
{
	CUcontext ctx, current = NULL;
	int rc;

	*pushed_p = false;
	if ((rc = primary_context(s, dev, &ctx)))
		return rc;
	CHECK(s, s->cuCtxGetCurrent(&current), "cuCtxGetCurrent", dev);
	if (current == ctx)
		return 0;
	if (!current || own_context(s, current)) {
		CHECK(s, s->cuCtxSetCurrent(ctx), "cuCtxSetCurrent", dev);
		return 0;
	}
	CHECK(s, s->cuCtxPushCurrent(ctx), "cuCtxPushCurrent", dev);
	*pushed_p = true;
	return 0;
}

/* Pops what enter() pushed.  The call made between has done its work,
 * so a pop the driver refuses is no failure of it; but the program's own
 * context is then no longer current on this thread, which it must hear. */
static void leave(struct cuda_state *s, int dev, bool pushed)
{
	CUcontext popped;
	CUresult e;
	char text[256];

	if (!pushed || (e = s->cuCtxPopCurrent(&popped)) == CUDA_SUCCESS)
		return;
	describe(s, e, text, sizeof text);
	s->host->log(s->host->cookie, DEVCACHE_LOG_ERROR,
		     _("cuda:%d: cuCtxPopCurrent: %s: the program's own context, under the "
		       "device's primary context, is no longer current on this thread"),
		     dev, text);
}

/* Runs call with dev's primary context current; a failure is reported as
 * what, in the driver's words. */
#define ON_DEVICE(s, dev, call, what)                                                              \
	do {                                                                                       \
		bool pushed_;                                                                      \
		int rc_ = enter((s), (dev), &pushed_);                                             \
		if (rc_)                                                                           \
			return rc_;                                                                \
		CUresult e_ = (call);                                                              \
		leave((s), (dev), pushed_);                                                               \
		if (e_ != CUDA_SUCCESS)                                                            \
			return fail((s), e_, (what), (dev));                                       \
	} while (0)

/* Host memory belongs to no device: pinned buffers and registrations are
 * made in the first device's context, portable to every other. */
#define HOST_DEVICE 0

static bool resolve(struct cuda_state *s, char *why, size_t why_size)
{
#define RESOLVE(name)                                                                              \
	if (!(*(void **)&s->name = dlsym(s->lib, SYMBOL(name)))) {                                 \
		snprintf(why, why_size, _("%s has no %s: not a CUDA driver this backend can use"),  \
			 s->lib_name, SYMBOL(name));                                               \
		return false;                                                                      \
	}
	CU_FUNCTIONS(RESOLVE)
#undef RESOLVE
	s->vmm = s->ipc = true;
#define RESOLVE_VMM(name) s->vmm &= (*(void **)&s->name = dlsym(s->lib, SYMBOL(name))) != NULL;
	CU_VMM_FUNCTIONS(RESOLVE_VMM)
#undef RESOLVE_VMM
#define RESOLVE_IPC(name) s->ipc &= (*(void **)&s->name = dlsym(s->lib, SYMBOL(name))) != NULL;
	CU_IPC_FUNCTIONS(RESOLVE_IPC)
#undef RESOLVE_IPC
	return true;
}

/* Whether dev can back expandable segments, and with what granularity. */
static void probe_vmm(struct cuda_state *s, struct cuda_device *d)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d->handle}};
	int supported = 0;

	if (!s->vmm ||
	    s->cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
				    d->handle) != CUDA_SUCCESS ||
	    !supported)
		return;
	if (s->cuMemGetAllocationGranularity(&d->granularity, &prop,
					     CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
	    d->granularity == 0 || (d->granularity & (d->granularity - 1)))
		return;
	d->vmm = true;
}

/* Why the backend has no device: the library, the call, the driver's words. */
static void no_device(struct cuda_state *s, CUresult e, const char *call, char *why,
		      size_t why_size)
{
	char text[256];

	describe(s, e, text, sizeof text);
	snprintf(why, why_size, "%s: %s: %s", s->lib_name, call, text);
}

/* Finds the devices; a failure leaves the backend with none and says why. */
static int find_devices(struct cuda_state *s, char *why, size_t why_size)
{
	CUresult e;
	int n = 0;

	if ((e = s->cuInit(0)) != CUDA_SUCCESS) {
		no_device(s, e, "cuInit", why, why_size);
		return 0;
	}
	if ((e = s->cuDeviceGetCount(&n)) != CUDA_SUCCESS || n < 0) {
		no_device(s, e, "cuDeviceGetCount", why, why_size);
		return 0;
	}
	if (n == 0) {
		snprintf(why, why_size, _("%s: no device"), s->lib_name);
		return 0;
	}
	if (!(s->devices = calloc((size_t)n, sizeof *s->devices)))
		return s->host->error(DEVCACHE_ENOMEM, _("cuda: out of memory"));
	for (int i = 0; i < n; i++) {
		if ((e = s->cuDeviceGet(&s->devices[i].handle, i)) != CUDA_SUCCESS) {
			char call[32];

			snprintf(call, sizeof call, "cuDeviceGet(%d)", i);
			no_device(s, e, call, why, why_size);
			free(s->devices);
			s->devices = NULL;
			return 0;
		}
		probe_vmm(s, &s->devices[i]);
	}
	s->n_devices = n;
	return 0;
}

/* No driver, a stub, a driver without a device: the backend loads with zero
 * devices and says why in the driver's own words. */
static void cuda_fini(void *state);

static int cuda_init(const struct devcache_backend_host *host, void **state_p, int *n_devices_p,
		       char *why, size_t why_size)
{
	struct cuda_state *s = calloc(1, sizeof *s);
	int version = 0, rc;

	if (!s)
		return host->error(DEVCACHE_ENOMEM, _("cuda: out of memory"));
	s->host = host;
	pthread_mutex_init(&s->lock, NULL);
	*state_p = s;
	*n_devices_p = 0;
	if (!(s->lib = runtime_open(host, "cuda_library", _("the CUDA driver"), s->lib_name,
				     sizeof s->lib_name, why, why_size)))
		return 0;
	if (!resolve(s, why, why_size)) {
		dlclose(s->lib);
		s->lib = NULL;
		return 0;
	}
	if ((rc = find_devices(s, why, why_size))) {
		/* A failed init releases what it made: fini is not called. */
		cuda_fini(s);
		*state_p = NULL;
		return rc;
	}
	s->cuDriverGetVersion(&version);
	host->log(host->cookie, DEVCACHE_LOG_DEBUG, _("cuda: %s, driver version %d.%d, devices: %d"),
		  s->lib_name, version / 1000, version % 1000 / 10, s->n_devices);
	*n_devices_p = s->n_devices;
	return 0;
}

static void cuda_fini(void *state)
{
	struct cuda_state *s = state;

	for (int i = 0; i < s->n_devices; i++) {
		CUresult e;
		char text[256];

		if (!s->devices[i].ctx ||
		    (e = s->cuDevicePrimaryCtxRelease(s->devices[i].handle)) == CUDA_SUCCESS)
			continue;
		/* Nothing else can be done: the context stays retained. */
		describe(s, e, text, sizeof text);
		s->host->log(s->host->cookie, DEVCACHE_LOG_ERROR,
			     "cuda:%d: cuDevicePrimaryCtxRelease: %s", i, text);
	}
	/* The driver stays loaded: it has threads of its own, and unloading
	 * it under them is what crashes programs at exit. */
	free(s->devices);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static int cuda_device_info(void *state, int dev, devcache_backend_device_t *info)
{
	struct cuda_state *s = state;
	struct cuda_device *d = &s->devices[dev];
	size_t total = 0;

	memset(info, 0, sizeof *info);
	CHECK(s, s->cuDeviceGetName(info->name, (int)sizeof info->name, d->handle), "cuDeviceGetName",
	      dev);
	CHECK(s, s->cuDeviceTotalMem(&total, d->handle), "cuDeviceTotalMem", dev);
	if (s->cuDeviceGetPCIBusId(info->pci_bus_id, (int)sizeof info->pci_bus_id, d->handle) !=
	    CUDA_SUCCESS)
		info->pci_bus_id[0] = '\0';
	info->total_memory = total;
	info->caps = DEVCACHE_CAP_ASYNC_COPY | (d->vmm ? DEVCACHE_CAP_VMM : 0) |
		     (s->ipc ? DEVCACHE_CAP_IPC : 0);
	return 0;
}

static int cuda_mem_get_info(void *state, int dev, uint64_t *free_p, uint64_t *total_p)
{
	struct cuda_state *s = state;
	size_t free_mem = 0, total = 0;

	ON_DEVICE(s, dev, s->cuMemGetInfo(&free_mem, &total), "cuMemGetInfo");
	*free_p = free_mem;
	*total_p = total;
	return 0;
}

static int cuda_mem_alloc(void *state, int dev, size_t size, void **ptr_p)
{
	struct cuda_state *s = state;
	CUdeviceptr p = 0;

	ON_DEVICE(s, dev, s->cuMemAlloc(&p, size), "cuMemAlloc");
	*ptr_p = (void *)(uintptr_t)p;
	return 0;
}

static int cuda_mem_free(void *state, int dev, void *ptr)
{
	struct cuda_state *s = state;

	ON_DEVICE(s, dev, s->cuMemFree((CUdeviceptr)(uintptr_t)ptr), "cuMemFree");
	return 0;
}

static int cuda_host_alloc(void *state, size_t size, void **ptr_p)
{
	struct cuda_state *s = state;

	if (s->n_devices == 0)
		return s->host->error(DEVCACHE_ENODEV, _("cuda: no device to pin host memory for"));
	ON_DEVICE(s, HOST_DEVICE, s->cuMemHostAlloc(ptr_p, size, CU_MEMHOSTALLOC_PORTABLE),
		  "cuMemHostAlloc");
	return 0;
}

static int cuda_host_free(void *state, void *ptr)
{
	struct cuda_state *s = state;

	ON_DEVICE(s, HOST_DEVICE, s->cuMemFreeHost(ptr), "cuMemFreeHost");
	return 0;
}

static int cuda_memcpy_htod(void *state, int dev, void *dst, const void *src, size_t size,
			    devcache_stream_t stream)
{
	struct cuda_state *s = state;

	ON_DEVICE(s, dev,
		  s->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, size, (CUstream)stream),
		  "cuMemcpyHtoDAsync");
	return 0;
}

static int cuda_memcpy_dtoh(void *state, int dev, void *dst, const void *src, size_t size,
			    devcache_stream_t stream)
{
	struct cuda_state *s = state;

	ON_DEVICE(s, dev,
		  s->cuMemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, size, (CUstream)stream),
		  "cuMemcpyDtoHAsync");
	return 0;
}

static int cuda_stream_create(void *state, int dev, devcache_stream_t *stream_p)
{
	struct cuda_state *s = state;
	CUstream st = NULL;

	/* Non-blocking: it does not wait for the legacy default stream's work. */
	ON_DEVICE(s, dev, s->cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	*stream_p = st;
	return 0;
}

static int cuda_stream_destroy(void *state, int dev, devcache_stream_t stream)
{
	struct cuda_state *s = state;

	ON_DEVICE(s, dev, s->cuStreamDestroy((CUstream)stream), "cuStreamDestroy");
	return 0;
}

static int cuda_stream_synchronize(void *state, int dev, devcache_stream_t stream)
{
	struct cuda_state *s = state;

	ON_DEVICE(s, dev, s->cuStreamSynchronize((CUstream)stream), "cuStreamSynchronize");
	return 0;
}

static int cuda_event_create(void *state, int dev, devcache_event_t *event_p)
{
	struct cuda_state *s = state;
	CUevent ev = NULL;

	/* Only ordering is asked of these events, never timing. */
	ON_DEVICE(s, dev, s->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
	*event_p = ev;
	return 0;
}

static int cuda_event_destroy(void *state, int dev, devcache_event_t event)
{
	struct cuda_state *s = state;

	ON_DEVICE(s, dev, s->cuEventDestroy((CUevent)event), "cuEventDestroy");
	return 0;
}

static int cuda_event_record(void *state, int dev, devcache_event_t event, devcache_stream_t stream)
{
	struct cuda_state *s = state;

	ON_DEVICE(s, dev, s->cuEventRecord((CUevent)event, (CUstream)stream), "cuEventRecord");
	return 0;
}

static int cuda_event_query(void *state, int dev, devcache_event_t event)
{
	struct cuda_state *s = state;
	bool pushed;
	CUresult e;
	int rc;

	if ((rc = enter(s, dev, &pushed)))
		return rc;
	e = s->cuEventQuery((CUevent)event);
	leave(s, dev, pushed);
	if (e == CUDA_ERROR_NOT_READY)
		return DEVCACHE_EAGAIN;
	CHECK(s, e, "cuEventQuery", dev);
	return 0;
}

static int cuda_event_synchronize(void *state, int dev, devcache_event_t event)
{
	struct cuda_state *s = state;

	ON_DEVICE(s, dev, s->cuEventSynchronize((CUevent)event), "cuEventSynchronize");
	return 0;
}

/* ---- virtual memory: only on devices with DEVCACHE_CAP_VMM ---- */

static int cuda_vm_granularity(void *state, int dev, size_t *granularity_p)
{
	struct cuda_state *s = state;

	*granularity_p = s->devices[dev].granularity;
	return 0;
}

static int cuda_vm_reserve(void *state, int dev, size_t size, void **va_p)
{
	struct cuda_state *s = state;
	CUdeviceptr va = 0;

	ON_DEVICE(s, dev, s->cuMemAddressReserve(&va, size, 0, 0, 0), "cuMemAddressReserve");
	*va_p = (void *)(uintptr_t)va;
	return 0;
}

static int cuda_vm_release(void *state, int dev, void *va, size_t size)
{
	struct cuda_state *s = state;

	ON_DEVICE(s, dev, s->cuMemAddressFree((CUdeviceptr)(uintptr_t)va, size), "cuMemAddressFree");
	return 0;
}

static int cuda_vm_create(void *state, int dev, size_t size, void **handle_p)
{
	struct cuda_state *s = state;
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = s->devices[dev].handle}};
	CUmemGenericAllocationHandle h = 0;

	_Static_assert(sizeof h <= sizeof(void *), "an allocation handle must fit a pointer");
	ON_DEVICE(s, dev, s->cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
	*handle_p = (void *)(uintptr_t)h;
	return 0;
}

static int cuda_vm_destroy(void *state, int dev, void *handle)
{
	struct cuda_state *s = state;

	ON_DEVICE(s, dev, s->cuMemRelease((CUmemGenericAllocationHandle)(uintptr_t)handle),
		  "cuMemRelease");
	return 0;
}

/* Mapped memory is inaccessible until access is granted: both, or neither. */
static int cuda_vm_map(void *state, int dev, void *va, size_t size, void *handle)
{
	struct cuda_state *s = state;
	CUmemAccessDesc access = {
		.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = s->devices[dev].handle},
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)va;
	bool pushed;
	CUresult e;
	int rc;

	if ((rc = enter(s, dev, &pushed)))
		return rc;
	e = s->cuMemMap(p, size, 0, (CUmemGenericAllocationHandle)(uintptr_t)handle, 0);
	if (e != CUDA_SUCCESS) {
		leave(s, dev, pushed);
		return fail(s, e, "cuMemMap", dev);
	}
	if ((e = s->cuMemSetAccess(p, size, &access, 1)) != CUDA_SUCCESS)
		s->cuMemUnmap(p, size);
	leave(s, dev, pushed);
	if (e != CUDA_SUCCESS)
		return fail(s, e, "cuMemSetAccess", dev);
	return 0;
}

static int cuda_vm_unmap(void *state, int dev, void *va, size_t size)
{
	struct cuda_state *s = state;

	ON_DEVICE(s, dev, s->cuMemUnmap((CUdeviceptr)(uintptr_t)va, size), "cuMemUnmap");
	return 0;
}

/* Declared in tunables.def, documented from there. */
static const struct devcache_backend_tunable cuda_tunables[] = {
#define TUNABLE MODULE_TUNABLE
#include "tunables.def"
#undef TUNABLE
	{.name = NULL},
};

static const struct devcache_backend_ops cuda_ops = {
	.abi_version = DEVCACHE_BACKEND_ABI_VERSION,
	.abi_minor = DEVCACHE_BACKEND_ABI_MINOR,
	.name = "cuda",
	.dlpack_device_type = 2, /* kDLCUDA */
	.priority = 300,
	.tunables = cuda_tunables,
	.init = cuda_init,
	.fini = cuda_fini,
	.device_info = cuda_device_info,
	.mem_get_info = cuda_mem_get_info,
	.mem_alloc = cuda_mem_alloc,
	.mem_free = cuda_mem_free,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
	.memcpy_htod = cuda_memcpy_htod,
	.memcpy_dtoh = cuda_memcpy_dtoh,
	.stream_create = cuda_stream_create,
	.stream_destroy = cuda_stream_destroy,
	.stream_synchronize = cuda_stream_synchronize,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.event_record = cuda_event_record,
	.event_query = cuda_event_query,
	.event_synchronize = cuda_event_synchronize,
	.vm_granularity = cuda_vm_granularity,
	.vm_reserve = cuda_vm_reserve,
	.vm_release = cuda_vm_release,
	.vm_create = cuda_vm_create,
	.vm_destroy = cuda_vm_destroy,
	.vm_map = cuda_vm_map,
	.vm_unmap = cuda_vm_unmap,
};

__attribute__((visibility("default"))) const struct devcache_backend_ops *
devcache_backend_module(void);

const struct devcache_backend_ops *devcache_backend_module(void)
{
	return &cuda_ops;
}
