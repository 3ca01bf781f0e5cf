/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* hip.c - the HIP backend: AMD GPUs through the HIP runtime, which it dlopen()s; built against the HIP headers, linked against nothing of AMD's. */
#include "../runtime.h"

#include <hip/hip_runtime_api.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every runtime function the backend calls, resolved by name when the
 * runtime is loaded.  The pointers take their types from the vendor's own
 * declarations, so a mismatch is a compile error, not a crash. */
#define HIP_FUNCTIONS(X)                                                                   \
	X(hipGetErrorString) X(hipGetErrorName) X(hipRuntimeGetVersion) X(hipGetDeviceCount)   \
	X(hipSetDevice) X(hipDeviceGetName) X(hipDeviceTotalMem) X(hipDeviceGetPCIBusId)       \
	X(hipMemGetInfo) X(hipMalloc) X(hipFree) X(hipHostMalloc) X(hipHostFree)             \
	X(hipHostRegister) X(hipHostUnregister) X(hipMemcpyAsync) X(hipStreamCreateWithFlags) \
	X(hipStreamDestroy) X(hipStreamSynchronize) X(hipEventCreateWithFlags)               \
	X(hipEventDestroy) X(hipEventRecord) X(hipEventQuery) X(hipEventSynchronize)

/* Inter-process sharing: a capability, present where these resolve. */
#define HIP_IPC_FUNCTIONS(X) X(hipIpcGetMemHandle) X(hipIpcOpenMemHandle) X(hipIpcCloseMemHandle)

struct hip_state {
	const struct devcache_backend_host *host;
	void *lib;
	char lib_name[256];
	int n_devices;
	bool ipc;
#define FIELD(name) __typeof__(name) *name;
	HIP_FUNCTIONS(FIELD)
	HIP_IPC_FUNCTIONS(FIELD)
#undef FIELD
};

/* The runtime's own words for an error: its message, and its code's name
 * when that says more (ROCm 5.2 gives the name for both). */
static void describe(struct hip_state *s, hipError_t e, char *buf, size_t size)
{
	const char *text = s->hipGetErrorString(e), *name = s->hipGetErrorName(e);

	if (!text || !name || strcmp(text, name) == 0)
		snprintf(buf, size, "%s", text ? text : name ? name : _("unknown HIP error"));
	else
		snprintf(buf, size, "%s (%s)", text, name);
}

/* The runtime's own words for an error, and the matching libdevcache code. */
static int fail(struct hip_state *s, hipError_t e, const char *what, int dev)
{
	int code = e == hipErrorOutOfMemory ? DEVCACHE_ENOMEM
		 : e == hipErrorNotReady   ? DEVCACHE_EAGAIN
		 : e == hipErrorInvalidDevice ? DEVCACHE_ENODEV
					      : DEVCACHE_EBACKEND;

	char text[256];

	describe(s, e, text, sizeof text);
	/* Host memory belongs to no device. */
	if (dev < 0)
		return s->host->error(code, "hip: %s: %s", what, text);
	return s->host->error(code, "hip:%d: %s: %s", dev, what, text);
}

#define CHECK(s, call, what, dev)                                                          \
	do {                                                                               \
		hipError_t e_ = (call);                                                    \
		if (e_ != hipSuccess)                                                      \
			return fail((s), e_, (what), (dev));                               \
	} while (0)

/* The runtime keeps a current device per thread; each entry sets it. */
#define ON_DEVICE(s, dev) CHECK(s, (s)->hipSetDevice(dev), "hipSetDevice", dev)

static bool resolve(struct hip_state *s, char *why, size_t why_size)
{
#define RESOLVE(name)                                                                      \
	if (!(*(void **)&s->name = dlsym(s->lib, #name))) {                                \
		snprintf(why, why_size, _("%s has no %s: not a HIP runtime this backend can use"), \
			 s->lib_name, #name);                                              \
		return false;                                                              \
	}
	HIP_FUNCTIONS(RESOLVE)
#undef RESOLVE
	s->ipc = true;
#define RESOLVE_IPC(name) s->ipc &= (*(void **)&s->name = dlsym(s->lib, #name)) != NULL;
	HIP_IPC_FUNCTIONS(RESOLVE_IPC)
#undef RESOLVE_IPC
	return true;
}

/* No runtime, a runtime without a device: the backend loads with zero
 * devices and says why in the runtime's own words. */
static int hip_init(const struct devcache_backend_host *host, void **state_p, int *n_devices_p,
		      char *why, size_t why_size)
{
	struct hip_state *s = calloc(1, sizeof *s);
	int version = 0;

	if (!s)
		return host->error(DEVCACHE_ENOMEM, _("hip: out of memory"));
	s->host = host;
	*state_p = s;
	*n_devices_p = 0;
	if (!(s->lib = runtime_open(host, "hip_library", _("the HIP runtime"), s->lib_name,
				     sizeof s->lib_name, why, why_size)))
		return 0;
	if (!resolve(s, why, why_size)) {
		dlclose(s->lib);
		s->lib = NULL;
		return 0;
	}
	hipError_t e = s->hipGetDeviceCount(&s->n_devices);
	if (e != hipSuccess || s->n_devices < 0) {
		char text[256];

		describe(s, e, text, sizeof text);
		snprintf(why, why_size, "%s: hipGetDeviceCount: %s", s->lib_name, text);
		s->n_devices = 0;
		return 0;
	}
	s->hipRuntimeGetVersion(&version);
	host->log(host->cookie, DEVCACHE_LOG_DEBUG, _("hip: %s, runtime version %d, devices: %d"),
		  s->lib_name, version, s->n_devices);
	if (s->n_devices == 0)
		snprintf(why, why_size, _("%s: no device"), s->lib_name);
	*n_devices_p = s->n_devices;
	return 0;
}

static void hip_fini(void *state)
{
	struct hip_state *s = state;

	/* The runtime stays loaded: it may have threads of its own, and
	 * unloading it under them is what crashes programs at exit. */
	free(s);
}

static int hip_device_info(void *state, int dev, devcache_backend_device_t *info)
{
	struct hip_state *s = state;
	size_t total = 0;

	memset(info, 0, sizeof *info);
	CHECK(s, s->hipDeviceGetName(info->name, (int)sizeof info->name, dev), "hipDeviceGetName",
	      dev);
	CHECK(s, s->hipDeviceTotalMem(&total, dev), "hipDeviceTotalMem", dev);
	if (s->hipDeviceGetPCIBusId(info->pci_bus_id, (int)sizeof info->pci_bus_id, dev) != hipSuccess)
		info->pci_bus_id[0] = '\0';
	info->total_memory = total;
	/* ROCm 5.2 has no virtual-memory API: no expandable segments here. */
	info->caps = DEVCACHE_CAP_ASYNC_COPY | (s->ipc ? DEVCACHE_CAP_IPC : 0);
	return 0;
}

static int hip_mem_get_info(void *state, int dev, uint64_t *free_p, uint64_t *total_p)
{
	struct hip_state *s = state;
	size_t free_mem = 0, total = 0;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipMemGetInfo(&free_mem, &total), "hipMemGetInfo", dev);
	*free_p = free_mem;
	*total_p = total;
	return 0;
}

static int hip_mem_alloc(void *state, int dev, size_t size, void **ptr_p)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipMalloc(ptr_p, size), "hipMalloc", dev);
	return 0;
}

static int hip_mem_free(void *state, int dev, void *ptr)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipFree(ptr), "hipFree", dev);
	return 0;
}

static int hip_host_alloc(void *state, size_t size, void **ptr_p)
{
	struct hip_state *s = state;

	CHECK(s, s->hipHostMalloc(ptr_p, size, hipHostMallocDefault), "hipHostMalloc", -1);
	return 0;
}

static int hip_host_free(void *state, void *ptr)
{
	struct hip_state *s = state;

	CHECK(s, s->hipHostFree(ptr), "hipHostFree", -1);
	return 0;
}

static int hip_memcpy_htod(void *state, int dev, void *dst, const void *src, size_t size,
			   devcache_stream_t stream)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipMemcpyAsync(dst, src, size, hipMemcpyHostToDevice, (hipStream_t)stream),
	      _("hipMemcpyAsync (host to device)"), dev);
	return 0;
}

static int hip_memcpy_dtoh(void *state, int dev, void *dst, const void *src, size_t size,
			   devcache_stream_t stream)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	/* The vendor's signature takes a non-const source for every kind. */
	CHECK(s, s->hipMemcpyAsync(dst, (void *)(uintptr_t)src, size, hipMemcpyDeviceToHost,
				   (hipStream_t)stream),
	      _("hipMemcpyAsync (device to host)"), dev);
	return 0;
}

static int hip_stream_create(void *state, int dev, devcache_stream_t *stream_p)
{
	struct hip_state *s = state;
	hipStream_t st;

	ON_DEVICE(s, dev);
	/* Non-blocking: it does not wait for the default stream's work. */
	CHECK(s, s->hipStreamCreateWithFlags(&st, hipStreamNonBlocking), "hipStreamCreateWithFlags",
	      dev);
	*stream_p = st;
	return 0;
}

static int hip_stream_destroy(void *state, int dev, devcache_stream_t stream)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipStreamDestroy((hipStream_t)stream), "hipStreamDestroy", dev);
	return 0;
}

static int hip_stream_synchronize(void *state, int dev, devcache_stream_t stream)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipStreamSynchronize((hipStream_t)stream), "hipStreamSynchronize", dev);
	return 0;
}

static int hip_event_create(void *state, int dev, devcache_event_t *event_p)
{
	struct hip_state *s = state;
	hipEvent_t ev;

	ON_DEVICE(s, dev);
	/* Only ordering is asked of these events, never timing. */
	CHECK(s, s->hipEventCreateWithFlags(&ev, hipEventDisableTiming), "hipEventCreateWithFlags",
	      dev);
	*event_p = ev;
	return 0;
}

static int hip_event_destroy(void *state, int dev, devcache_event_t event)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipEventDestroy((hipEvent_t)event), "hipEventDestroy", dev);
	return 0;
}

static int hip_event_record(void *state, int dev, devcache_event_t event, devcache_stream_t stream)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipEventRecord((hipEvent_t)event, (hipStream_t)stream), "hipEventRecord", dev);
	return 0;
}

static int hip_event_query(void *state, int dev, devcache_event_t event)
{
	struct hip_state *s = state;
	hipError_t e;

	ON_DEVICE(s, dev);
	e = s->hipEventQuery((hipEvent_t)event);
	if (e == hipErrorNotReady)
		return DEVCACHE_EAGAIN;
	CHECK(s, e, "hipEventQuery", dev);
	return 0;
}

static int hip_event_synchronize(void *state, int dev, devcache_event_t event)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipEventSynchronize((hipEvent_t)event), "hipEventSynchronize", dev);
	return 0;
}

/* Declared in tunables.def, documented from there. */
static const struct devcache_backend_tunable hip_tunables[] = {
#define TUNABLE MODULE_TUNABLE
#include "tunables.def"
#undef TUNABLE
	{.name = NULL},
};

static const struct devcache_backend_ops hip_ops = {
	.abi_version = DEVCACHE_BACKEND_ABI_VERSION,
	.abi_minor = DEVCACHE_BACKEND_ABI_MINOR,
	.name = "hip",
	.priority = 200,
	.tunables = hip_tunables,
	.init = hip_init,
	.fini = hip_fini,
	.device_info = hip_device_info,
	.mem_get_info = hip_mem_get_info,
	.mem_alloc = hip_mem_alloc,
	.mem_free = hip_mem_free,
	.host_alloc = hip_host_alloc,
	.host_free = hip_host_free,
	.memcpy_htod = hip_memcpy_htod,
	.memcpy_dtoh = hip_memcpy_dtoh,
	.stream_create = hip_stream_create,
	.stream_destroy = hip_stream_destroy,
	.stream_synchronize = hip_stream_synchronize,
	.event_create = hip_event_create,
	.event_destroy = hip_event_destroy,
	.event_record = hip_event_record,
	.event_query = hip_event_query,
	.event_synchronize = hip_event_synchronize,
};

__attribute__((visibility("default"))) const struct devcache_backend_ops *
devcache_backend_module(void);

const struct devcache_backend_ops *devcache_backend_module(void)
{
	return &hip_ops;
}
