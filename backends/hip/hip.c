/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* hip.c - the HIP backend: AMD GPUs through the HIP runtime, which it dlopen()s; built against the HIP headers, linked against nothing of AMD's. */
#include "../runtime.h"

#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
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

/* Virtual memory: expandable segments, where every one of these resolves
 * (ROCm 5.2's header declares them all) and the device says it maps.
 * hipDeviceGetAttribute is asked only whether it does. */
#define HIP_VMM_FUNCTIONS(X)                                                               \
	X(hipDeviceGetAttribute) X(hipMemGetAllocationGranularity) X(hipMemAddressReserve)  \
	X(hipMemAddressFree) X(hipMemCreate) X(hipMemRelease) X(hipMemMap) X(hipMemUnmap)    \
	X(hipMemSetAccess)

/* Inter-process sharing: a capability, present where these resolve. */
#define HIP_IPC_FUNCTIONS(X) X(hipIpcGetMemHandle) X(hipIpcOpenMemHandle) X(hipIpcCloseMemHandle)

/*
 * The two ABIs of the virtual-memory API.  ROCm 6.0 reordered
 * hipMemAllocationProp to CUDA's order (type, handle types, location, ...);
 * ROCm 5 has compressionType first and type after the location.  The
 * header the module is built against declares one of them; the runtime
 * loaded reads the other as readily, so the module fills the one its
 * runtime's major version names.  The numbers it puts in them (a pinned
 * allocation, a device location, read-write access, no shareable handle)
 * are the same in both; the ones that changed in 6.0, hipMemoryType's,
 * appear in none of these calls.  The attribute that says whether a device
 * maps, hipDeviceAttributeVirtualMemoryManagementSupported, came after 5.2's
 * last (88), as 89: 5.2 refuses it, and is asked for a granularity instead.
 */
struct hip5_alloc_prop {
	unsigned char compression_type;
	hipMemLocation location;
	int requested_handle_type;
	int type;
	unsigned short usage;
	void *win32_handle_meta_data;
};

struct hip6_alloc_prop {
	int type;
	int requested_handle_types;
	hipMemLocation location;
	void *win32_handle_meta_data;
	struct {
		unsigned char compression_type, gpu_direct_rdma_capable;
		unsigned short usage;
	} alloc_flags;
};

union hip_alloc_prop {
	struct hip5_alloc_prop v5;
	struct hip6_alloc_prop v6;
};

#define HIP_ATTRIBUTE_VMM_SUPPORTED ((hipDeviceAttribute_t)89)

_Static_assert(hipMemAllocationTypePinned == 1 && hipMemLocationTypeDevice == 1 &&
		       hipMemAccessFlagsProtReadWrite == 3 && hipMemHandleTypeNone == 0,
	       "the numbers both ABIs share");
#if HIP_VERSION_MAJOR < 6
_Static_assert(sizeof(hipMemAllocationProp) == sizeof(struct hip5_alloc_prop) &&
		       offsetof(hipMemAllocationProp, location) ==
			       offsetof(struct hip5_alloc_prop, location) &&
		       offsetof(hipMemAllocationProp, type) == offsetof(struct hip5_alloc_prop, type),
	       "ROCm 5's hipMemAllocationProp, as this header declares it");
#else
_Static_assert(sizeof(hipMemAllocationProp) == sizeof(struct hip6_alloc_prop) &&
		       offsetof(hipMemAllocationProp, location) ==
			       offsetof(struct hip6_alloc_prop, location) &&
		       offsetof(hipMemAllocationProp, type) == offsetof(struct hip6_alloc_prop, type),
	       "ROCm 6's hipMemAllocationProp, as this header declares it");
#endif

struct hip_device {
	bool vmm;
	size_t granularity;
};

struct hip_state {
	const struct devcache_backend_host *host;
	void *lib;
	char lib_name[256];
	int n_devices;
	int major; /* the runtime's major version; 0 where it cannot say */
	struct hip_device *devices;
	bool ipc, vmm; /* the runtime has those entry points */
#define FIELD(name) __typeof__(name) *name;
	HIP_FUNCTIONS(FIELD)
	HIP_VMM_FUNCTIONS(FIELD)
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
		 : e == hipErrorNotSupported ? DEVCACHE_ENOTSUP
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
	s->vmm = s->ipc = true;
#define RESOLVE_VMM(name) s->vmm &= (*(void **)&s->name = dlsym(s->lib, #name)) != NULL;
	HIP_VMM_FUNCTIONS(RESOLVE_VMM)
#undef RESOLVE_VMM
#define RESOLVE_IPC(name) s->ipc &= (*(void **)&s->name = dlsym(s->lib, #name)) != NULL;
	HIP_IPC_FUNCTIONS(RESOLVE_IPC)
#undef RESOLVE_IPC
	return true;
}

/* The allocation properties of pinned memory on dev, laid out as the
 * runtime reads them. */
static const hipMemAllocationProp *alloc_prop(struct hip_state *s, int dev,
					      union hip_alloc_prop *prop)
{
	memset(prop, 0, sizeof *prop);
	if (s->major >= 6) {
		prop->v6.type = hipMemAllocationTypePinned;
		prop->v6.requested_handle_types = hipMemHandleTypeNone;
		prop->v6.location = (hipMemLocation){.type = hipMemLocationTypeDevice, .id = dev};
	} else {
		prop->v5.type = hipMemAllocationTypePinned;
		prop->v5.requested_handle_type = hipMemHandleTypeNone;
		prop->v5.location = (hipMemLocation){.type = hipMemLocationTypeDevice, .id = dev};
	}
	return (const hipMemAllocationProp *)prop;
}

/* Whether dev can back expandable segments, and with what granularity;
 * where it cannot, why goes to why (up to size bytes), for devcache info. */
static void probe_vmm(struct hip_state *s, int dev, char *why, size_t size)
{
	struct hip_device *d = &s->devices[dev];
	union hip_alloc_prop prop;
	char text[256];
	int supported = 0;
	hipError_t e;

	if (!s->vmm) {
		snprintf(why, size, _("%s has no virtual-memory API"), s->lib_name);
		return;
	}
	if (s->major == 0) {
		/* Then which ABI its calls take is not known either. */
		snprintf(why, size, _("%s gives no version"), s->lib_name);
		return;
	}
	/* ROCm 6 says; 5.2 knows no such attribute, and is asked below. */
	if (s->hipDeviceGetAttribute(&supported, HIP_ATTRIBUTE_VMM_SUPPORTED, dev) == hipSuccess &&
	    !supported) {
		snprintf(why, size, "hipDeviceAttributeVirtualMemoryManagementSupported: 0");
		return;
	}
	e = s->hipMemGetAllocationGranularity(&d->granularity, alloc_prop(s, dev, &prop),
					      hipMemAllocationGranularityMinimum);
	if (e != hipSuccess) {
		describe(s, e, text, sizeof text);
		snprintf(why, size, "hipMemGetAllocationGranularity: %s", text);
		return;
	}
	if (d->granularity == 0 || (d->granularity & (d->granularity - 1))) {
		snprintf(why, size, "hipMemGetAllocationGranularity: %zu", d->granularity);
		return;
	}
	d->vmm = true;
}

/* Probes every device; those that cannot map are named in why, which a
 * backend with devices gives as its note in devcache info: devices that
 * give the same reason share it ("hip:0, hip:1: no expandable segments:
 * ..."), as a machine's devices of one kind do. */
static int probe_devices(struct hip_state *s, char *why, size_t why_size)
{
	enum { REASON = 384 };
	size_t n = 0, count = (size_t)s->n_devices;
	char *reasons;

	if (!(s->devices = calloc(count, sizeof *s->devices)) ||
	    !(reasons = calloc(count ? count : 1, REASON)))
		return s->host->error(DEVCACHE_ENOMEM, _("hip: out of memory"));
	for (size_t i = 0; i < count; i++)
		probe_vmm(s, (int)i, reasons + i * REASON, REASON);
	for (size_t i = 0; i < count && n < why_size; i++) {
		const char *r = reasons + i * REASON;
		char ids[256] = "";
		size_t k = 0;

		if (!*r)
			continue;
		for (size_t j = i; j < count; j++) {
			char *rj = reasons + j * REASON;

			if (strcmp(rj, r) != 0 || k >= sizeof ids)
				continue;
			k += (size_t)snprintf(ids + k, sizeof ids - k, "%ship:%zu", k ? ", " : "", j);
			if (j > i)
				*rj = '\0'; /* said with device i */
		}
		n += (size_t)snprintf(why + n, why_size - n, "%s", n ? "; " : "");
		if (n < why_size)
			/* TRANSLATORS: the devices (hip:0, hip:1), then the runtime's reason. */
			n += (size_t)snprintf(why + n, why_size - n, _("%s: no expandable segments: %s"),
					      ids, r);
	}
	free(reasons);
	return 0;
}

static void hip_fini(void *state);

/* No runtime, a runtime without a device: the backend loads with zero
 * devices and says why in the runtime's own words. */
static int hip_init(const struct devcache_backend_host *host, void **state_p, int *n_devices_p,
		      char *why, size_t why_size)
{
	struct hip_state *s = calloc(1, sizeof *s);
	int version = 0, rc;

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
	/* The version says which ABI the virtual-memory calls take. */
	if (s->hipRuntimeGetVersion(&version) != hipSuccess || version < 0)
		version = 0;
	s->major = version / 10000000;
	host->log(host->cookie, DEVCACHE_LOG_DEBUG, _("hip: %s, runtime version %d, devices: %d"),
		  s->lib_name, version, s->n_devices);
	if (s->n_devices == 0) {
		snprintf(why, why_size, _("%s: no device"), s->lib_name);
		return 0;
	}
	if ((rc = probe_devices(s, why, why_size))) {
		/* A failed init releases what it made: fini is not called. */
		hip_fini(s);
		*state_p = NULL;
		return rc;
	}
	*n_devices_p = s->n_devices;
	return 0;
}

static void hip_fini(void *state)
{
	struct hip_state *s = state;

	/* The runtime stays loaded: it may have threads of its own, and
	 * unloading it under them is what crashes programs at exit. */
	free(s->devices);
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
	info->caps = DEVCACHE_CAP_ASYNC_COPY | (s->devices[dev].vmm ? DEVCACHE_CAP_VMM : 0) |
		     (s->ipc ? DEVCACHE_CAP_IPC : 0);
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

/* ---- virtual memory: only on devices with DEVCACHE_CAP_VMM ---- */

static int hip_vm_granularity(void *state, int dev, size_t *granularity_p)
{
	struct hip_state *s = state;

	*granularity_p = s->devices[dev].granularity;
	return 0;
}

static int hip_vm_reserve(void *state, int dev, size_t size, void **va_p)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipMemAddressReserve(va_p, size, 0, NULL, 0), "hipMemAddressReserve", dev);
	return 0;
}

static int hip_vm_release(void *state, int dev, void *va, size_t size)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipMemAddressFree(va, size), "hipMemAddressFree", dev);
	return 0;
}

static int hip_vm_create(void *state, int dev, size_t size, void **handle_p)
{
	struct hip_state *s = state;
	union hip_alloc_prop prop;
	hipMemGenericAllocationHandle_t h = NULL;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipMemCreate(&h, size, alloc_prop(s, dev, &prop), 0), "hipMemCreate", dev);
	*handle_p = h;
	return 0;
}

static int hip_vm_destroy(void *state, int dev, void *handle)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipMemRelease((hipMemGenericAllocationHandle_t)handle), "hipMemRelease", dev);
	return 0;
}

/* Mapped memory is inaccessible until access is granted: both, or neither. */
static int hip_vm_map(void *state, int dev, void *va, size_t size, void *handle)
{
	struct hip_state *s = state;
	hipMemAccessDesc access = {
		.location = {.type = hipMemLocationTypeDevice, .id = dev},
		.flags = hipMemAccessFlagsProtReadWrite};
	hipError_t e;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipMemMap(va, size, 0, (hipMemGenericAllocationHandle_t)handle, 0), "hipMemMap",
	      dev);
	if ((e = s->hipMemSetAccess(va, size, &access, 1)) != hipSuccess) {
		s->hipMemUnmap(va, size);
		return fail(s, e, "hipMemSetAccess", dev);
	}
	return 0;
}

static int hip_vm_unmap(void *state, int dev, void *va, size_t size)
{
	struct hip_state *s = state;

	ON_DEVICE(s, dev);
	CHECK(s, s->hipMemUnmap(va, size), "hipMemUnmap", dev);
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
	.dlpack_device_type = 10, /* kDLROCM */
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
	.vm_granularity = hip_vm_granularity,
	.vm_reserve = hip_vm_reserve,
	.vm_release = hip_vm_release,
	.vm_create = hip_vm_create,
	.vm_destroy = hip_vm_destroy,
	.vm_map = hip_vm_map,
	.vm_unmap = hip_vm_unmap,
};

__attribute__((visibility("default"))) const struct devcache_backend_ops *
devcache_backend_module(void);

const struct devcache_backend_ops *devcache_backend_module(void)
{
	return &hip_ops;
}
