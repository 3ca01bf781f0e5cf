/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* ze.c - the Level Zero backend: Intel GPUs through the oneAPI Level Zero loader, which it dlopen()s; built against the Level Zero headers, linked against nothing of Intel's. */
#include "../runtime.h"

#include <level_zero/ze_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Level Zero 1.4 has no error-string function: the names of the results. */
static const char *result_name(ze_result_t r)
{
	switch (r) {
#define NAME(x) case x: return #x;
		NAME(ZE_RESULT_SUCCESS) NAME(ZE_RESULT_NOT_READY) NAME(ZE_RESULT_ERROR_DEVICE_LOST)
		NAME(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY) NAME(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)
		NAME(ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET) NAME(ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS)
		NAME(ZE_RESULT_ERROR_NOT_AVAILABLE) NAME(ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE)
		NAME(ZE_RESULT_ERROR_UNINITIALIZED) NAME(ZE_RESULT_ERROR_UNSUPPORTED_VERSION)
		NAME(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE) NAME(ZE_RESULT_ERROR_INVALID_ARGUMENT)
		NAME(ZE_RESULT_ERROR_INVALID_NULL_HANDLE) NAME(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE)
		NAME(ZE_RESULT_ERROR_INVALID_NULL_POINTER) NAME(ZE_RESULT_ERROR_INVALID_SIZE)
		NAME(ZE_RESULT_ERROR_UNSUPPORTED_SIZE) NAME(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT)
		NAME(ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT)
		NAME(ZE_RESULT_ERROR_INVALID_ENUMERATION) NAME(ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION)
		NAME(ZE_RESULT_ERROR_OVERLAPPING_REGIONS) NAME(ZE_RESULT_ERROR_UNKNOWN)
#undef NAME
	default:
		return _("an unknown Level Zero result");
	}
}

static int fail(struct ze_state *s, ze_result_t r, const char *what, int dev)
{
	int code = r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY || r == ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY
			   ? DEVCACHE_ENOMEM
		   : r == ZE_RESULT_NOT_READY ? DEVCACHE_EAGAIN
		   : r == ZE_RESULT_ERROR_UNSUPPORTED_FEATURE ? DEVCACHE_ENOTSUP
							    : DEVCACHE_EBACKEND;

	const char *text = r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY ? _("out of device memory")
			 : r == ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY ? _("out of host memory")
			 : r == ZE_RESULT_ERROR_DEVICE_LOST      ? _("device lost")
			 : r == ZE_RESULT_ERROR_UNINITIALIZED    ? _("not initialised")
								 : NULL;

	char where[16] = "ze";

	if (dev >= 0)
		snprintf(where, sizeof where, "ze:%d", dev);
	if (text)
		return s->host->error(code, "%s: %s: %s (%s)", where, what, text, result_name(r));
	return s->host->error(code, "%s: %s: %s (0x%x)", where, what, result_name(r), (unsigned)r);
}

/* The loader would not give an object back: nothing else can be done than
 * to say so; what holds it (a pool, the context) is then left too.  what is
 * the whole sentence ("the loader refused to ..."), translated. */
static void left(struct ze_state *s, int dev, const char *what, const char *call, ze_result_t r)
{
	s->host->log(s->host->cookie, DEVCACHE_LOG_ERROR, "ze:%d: %s: %s: %s (0x%x)", dev, what,
		     call, result_name(r), (unsigned)r);
}

#define CHECK(s, call, what, dev)                                                          \
	do {                                                                               \
		ze_result_t r_ = (call);                                                   \
		if (r_ != ZE_RESULT_SUCCESS)                                               \
			return fail((s), r_, (what), (dev));                               \
	} while (0)

/* ---- loading -------------------------------------------------------------------- */

static bool resolve(struct ze_state *s, char *why, size_t why_size)
{
#define RESOLVE(name)                                                                      \
	if (!(*(void **)&s->name = dlsym(s->lib, #name))) {                                \
		snprintf(why, why_size, _("%s has no %s: not a Level Zero loader this backend can use"), \
			 s->lib_name, #name);                                              \
		return false;                                                              \
	}
	ZE_FUNCTIONS(RESOLVE)
#undef RESOLVE
#define RESOLVE_CAP(name) ok &= (*(void **)&s->name = dlsym(s->lib, #name)) != NULL;
	bool ok = true;
	ZE_IPC_FUNCTIONS(RESOLVE_CAP)
	s->ipc = ok;
	ok = true;
	ZE_VMM_FUNCTIONS(RESOLVE_CAP)
	s->vmm = ok;
	ZE_OPTIONAL_FUNCTIONS(RESOLVE_CAP)
#undef RESOLVE_CAP
	return true;
}

/* Copies go to a copy-only engine where there is one (it runs beside the
 * compute work), else to any group that can copy. */
static uint32_t copy_ordinal(struct ze_state *s, ze_device_handle_t device)
{
	ze_command_queue_group_properties_t props[16];
	uint32_t n = 0, best = 0;
	bool found = false;

	if (s->zeDeviceGetCommandQueueGroupProperties(device, &n, NULL) != ZE_RESULT_SUCCESS)
		return 0;
	n = n > 16 ? 16 : n;
	for (uint32_t i = 0; i < n; i++)
		props[i] = (ze_command_queue_group_properties_t){
			.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES};
	if (s->zeDeviceGetCommandQueueGroupProperties(device, &n, props) != ZE_RESULT_SUCCESS)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		bool copy = props[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
		bool compute = props[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE;

		if (copy && (!found || !compute)) {
			best = i;
			found = true;
			if (!compute)
				break;
		}
	}
	return best;
}

static int stream_open(struct ze_state *s, int dev, struct ze_stream *st)
{
	struct ze_dev *d = &s->devs[dev];
	ze_command_queue_desc_t desc = {.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
					.ordinal = d->copy_ordinal,
					.mode = ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
					.priority = ZE_COMMAND_QUEUE_PRIORITY_NORMAL};

	CHECK(s, s->zeCommandListCreateImmediate(d->context, d->device, &desc, &st->list),
	      "zeCommandListCreateImmediate", dev);
	pthread_mutex_init(&st->lock, NULL);
	st->dev = dev;
	return 0;
}

static void teardown(struct ze_state *s)
{
	ze_result_t r;

	for (int i = 0; i < s->n_devices; i++) {
		struct ze_dev *d = &s->devs[i];

		if (d->dflt.list) {
			if ((r = s->zeCommandListDestroy(d->dflt.list)) != ZE_RESULT_SUCCESS) {
				left(s, i, _("the loader refused to destroy the default command list"),
				     "zeCommandListDestroy", r);
				d->lost++;
			}
			pthread_mutex_destroy(&d->dflt.lock);
		}
		while (d->pools) {
			struct ze_pool *p = d->pools;

			d->pools = p->next;
			/* A pool must outlive its events. */
			if (p->lost) {
				s->host->log(s->host->cookie, DEVCACHE_LOG_ERROR,
					     _("ze:%d: an event pool is left: the loader refused to destroy "
					       "some of its events (%d)"),
					     i, __builtin_popcountll(p->lost));
				d->lost++;
			} else if ((r = s->zeEventPoolDestroy(p->pool)) != ZE_RESULT_SUCCESS) {
				left(s, i, _("the loader refused to destroy an event pool"),
				     "zeEventPoolDestroy", r);
				d->lost++;
			}
			free(p);
		}
		pthread_mutex_destroy(&d->pool_lock);
	}
	for (uint32_t i = 0; i < s->n_contexts; i++) {
		unsigned lost = 0;

		if (!s->contexts[i])
			continue;
		/* Memory still allocated or mapped counts as one: its free or
		 * unmap was refused. */
		for (int k = 0; k < s->n_devices; k++)
			if (s->devs[k].context == s->contexts[i])
				lost += __atomic_load_n(&s->devs[k].lost, __ATOMIC_RELAXED) +
					(__atomic_load_n(&s->devs[k].allocated, __ATOMIC_RELAXED) != 0);
		/* What the loader would not free is still in the context:
		 * destroying it would be refused too, or free what the loader
		 * said it could not. */
		if (lost)
			s->host->log(s->host->cookie, DEVCACHE_LOG_ERROR,
				     _("a context is left: the loader refused to free objects in it (%u), "
				       "or to say how large"),
				     lost);
		else if ((r = s->zeContextDestroy(s->contexts[i])) != ZE_RESULT_SUCCESS)
			s->host->log(s->host->cookie, DEVCACHE_LOG_ERROR,
				     _("the loader refused to destroy a context: zeContextDestroy: %s (0x%x)"),
				     result_name(r), (unsigned)r);
	}
	free(s->devs);
	free(s->contexts);
	s->devs = NULL;
	s->contexts = NULL;
	s->n_devices = 0;
	s->n_contexts = 0;
}

/* A driver or a device that the loader would not describe is passed over,
 * and said to be: in the log, and in passed, for the reason the backend
 * gives where it has no GPU. */
static void skipped(struct ze_state *s, const char *what, const char *call, ze_result_t r,
		    char *passed, size_t size)
{
	s->host->log(s->host->cookie, DEVCACHE_LOG_WARNING, _("%s is passed over: %s: %s (0x%x)"),
		     what, call, result_name(r), (unsigned)r);
	snprintf(passed, size, _(" (%s passed over: %s: %s)"), what, call, result_name(r));
}

/* Whether the driver has ZE_experimental_relaxed_allocation_limits: an
 * allocation can then pass maxMemAllocSize (4 GiB on Intel's GPUs) when it
 * asks to, and the device has no limit below its memory. */
static bool relaxes_limits(struct ze_state *s, ze_driver_handle_t driver)
{
	ze_driver_extension_properties_t *ext = NULL;
	uint32_t n = 0;
	bool found = false;
	ze_result_t r;

	if (!s->zeDriverGetExtensionProperties)
		return false;
	if ((r = s->zeDriverGetExtensionProperties(driver, &n, NULL)) == ZE_RESULT_SUCCESS && n &&
	    (ext = calloc(n, sizeof *ext)) &&
	    (r = s->zeDriverGetExtensionProperties(driver, &n, ext)) == ZE_RESULT_SUCCESS)
		for (uint32_t i = 0; i < n && !found; i++)
			found = strncmp(ext[i].name, ZE_RELAXED_ALLOCATION_LIMITS_EXP_NAME,
					sizeof ext[i].name) == 0;
	if (r != ZE_RESULT_SUCCESS)
		s->host->log(s->host->cookie, DEVCACHE_LOG_WARNING,
			     "ze: zeDriverGetExtensionProperties: %s (0x%x): allocations stay within "
			     "maxMemAllocSize",
			     result_name(r), (unsigned)r);
	free(ext);
	return found;
}

/* Every GPU of every driver, in the loader's order (ZE_AFFINITY_MASK,
 * which the loader and drivers apply, has already chosen them). */
static int enumerate(struct ze_state *s, char *why, size_t why_size)
{
	uint32_t n_drivers = 0;
	ze_driver_handle_t drivers[16];
	ze_result_t r;
	char passed[160] = "";

	if ((r = s->zeDriverGet(&n_drivers, NULL)) != ZE_RESULT_SUCCESS || n_drivers == 0) {
		snprintf(why, why_size, "%s: zeDriverGet: %s", s->lib_name,
			 r ? result_name(r) : _("no driver"));
		return 0;
	}
	n_drivers = n_drivers > 16 ? 16 : n_drivers;
	if ((r = s->zeDriverGet(&n_drivers, drivers)) != ZE_RESULT_SUCCESS) {
		snprintf(why, why_size, "%s: zeDriverGet: %s", s->lib_name, result_name(r));
		return 0;
	}
	if (!(s->contexts = calloc(n_drivers, sizeof *s->contexts)))
		return s->host->error(DEVCACHE_ENOMEM, _("ze: out of memory"));
	s->n_contexts = n_drivers;
	for (uint32_t i = 0; i < n_drivers; i++) {
		uint32_t n = 0;
		ze_device_handle_t *devices;
		bool relaxed;

		if ((r = s->zeDeviceGet(drivers[i], &n, NULL)) != ZE_RESULT_SUCCESS) {
			skipped(s, _("a driver"), "zeDeviceGet", r, passed, sizeof passed);
			continue;
		}
		if (n == 0)
			continue;
		relaxed = relaxes_limits(s, drivers[i]);
		ze_context_desc_t cdesc = {.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC};
		if ((r = s->zeContextCreate(drivers[i], &cdesc, &s->contexts[i])) != ZE_RESULT_SUCCESS)
			return fail(s, r, "zeContextCreate", -1);
		if (!(devices = calloc(n, sizeof *devices)))
			return s->host->error(DEVCACHE_ENOMEM, _("ze: out of memory"));
		struct ze_dev *grown = realloc(s->devs, (s->n_devices + n) * sizeof *grown);
		if (!grown) {
			free(devices);
			return s->host->error(DEVCACHE_ENOMEM, _("ze: out of memory"));
		}
		s->devs = grown;
		if ((r = s->zeDeviceGet(drivers[i], &n, devices)) != ZE_RESULT_SUCCESS) {
			free(devices);
			return fail(s, r, "zeDeviceGet", -1);
		}
		for (uint32_t k = 0; k < n; k++) {
			ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};

			if ((r = s->zeDeviceGetProperties(devices[k], &p)) != ZE_RESULT_SUCCESS) {
				skipped(s, _("a device"), "zeDeviceGetProperties", r, passed,
					sizeof passed);
				continue;
			}
			if (p.type != ZE_DEVICE_TYPE_GPU)
				continue;
			int idx = s->n_devices++;
			struct ze_dev *d = &s->devs[idx];

			memset(d, 0, sizeof *d);
			d->driver = drivers[i];
			d->device = devices[k];
			d->context = s->contexts[i];
			d->max_alloc = p.maxMemAllocSize;
			d->relaxed = relaxed;
			d->copy_ordinal = copy_ordinal(s, devices[k]);
			pthread_mutex_init(&d->pool_lock, NULL);
			int rc = stream_open(s, idx, &d->dflt);
			if (rc) {
				free(devices);
				return rc;
			}
		}
		free(devices);
	}
	if (s->n_devices == 0)
		snprintf(why, why_size, _("%s: no GPU%s"), s->lib_name, passed);
	return 0;
}

static void ze_fini(void *state);

static int ze_init(const struct devcache_backend_host *host, void **state_p, int *n_devices_p,
		     char *why, size_t why_size)
{
	struct ze_state *s = calloc(1, sizeof *s);
	ze_result_t r;
	int rc;

	if (!s)
		return host->error(DEVCACHE_ENOMEM, _("ze: out of memory"));
	s->host = host;
	*state_p = s;
	*n_devices_p = 0;
	if (!(s->lib = runtime_open(host, "ze_library", _("the Level Zero loader"), s->lib_name,
				     sizeof s->lib_name, why, why_size)))
		return 0;
	if (!resolve(s, why, why_size)) {
		dlclose(s->lib);
		s->lib = NULL;
		return 0;
	}
	/* No driver or no GPU: the loader says so here. */
	if ((r = s->zeInit(ZE_INIT_FLAG_GPU_ONLY)) != ZE_RESULT_SUCCESS) {
		snprintf(why, why_size, "%s: zeInit: %s", s->lib_name, result_name(r));
		return 0;
	}
	if ((rc = enumerate(s, why, why_size))) {
		/* A failed init releases what it made: fini is not called. */
		ze_fini(s);
		*state_p = NULL;
		return rc;
	}
	host->log(host->cookie, DEVCACHE_LOG_DEBUG, _("ze: %s, GPUs: %d"), s->lib_name, s->n_devices);
	*n_devices_p = s->n_devices;
	return 0;
}

static void ze_fini(void *state)
{
	struct ze_state *s = state;

	if (s->lib)
		teardown(s);
	/* The loader stays loaded: drivers run threads of their own. */
	free(s);
}

static int ze_device_info(void *state, int dev, devcache_backend_device_t *info)
{
	struct ze_state *s = state;
	struct ze_dev *d = &s->devs[dev];
	ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
	ze_device_memory_properties_t mem[8];
	uint32_t n = 0;

	memset(info, 0, sizeof *info);
	CHECK(s, s->zeDeviceGetProperties(d->device, &p), "zeDeviceGetProperties", dev);
	snprintf(info->name, sizeof info->name, "%s", p.name);
	d->max_alloc = p.maxMemAllocSize;
	info->max_alloc_size = d->relaxed ? 0 : p.maxMemAllocSize;
	CHECK(s, s->zeDeviceGetMemoryProperties(d->device, &n, NULL), "zeDeviceGetMemoryProperties",
	      dev);
	n = n > 8 ? 8 : n;
	for (uint32_t i = 0; i < n; i++)
		mem[i] = (ze_device_memory_properties_t){
			.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES};
	CHECK(s, s->zeDeviceGetMemoryProperties(d->device, &n, mem), "zeDeviceGetMemoryProperties",
	      dev);
	for (uint32_t i = 0; i < n; i++)
		info->total_memory += mem[i].totalSize;
	d->total = info->total_memory;
	if (s->zeDevicePciGetPropertiesExt) {
		ze_pci_ext_properties_t pci = {.stype = ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES};

		if (s->zeDevicePciGetPropertiesExt(d->device, &pci) == ZE_RESULT_SUCCESS)
			snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "%04x:%02x:%02x.%x",
				 pci.address.domain, pci.address.bus, pci.address.device,
				 pci.address.function);
	}
	info->caps = DEVCACHE_CAP_ASYNC_COPY | (s->ipc ? DEVCACHE_CAP_IPC : 0) |
		     (s->vmm ? DEVCACHE_CAP_VMM : 0);
	return 0;
}

/* The core API has no free-memory query (Sysman's needs
 * ZES_ENABLE_SYSMAN): free is what this process has not allocated here. */
static int ze_mem_get_info(void *state, int dev, uint64_t *free_p, uint64_t *total_p)
{
	struct ze_state *s = state;
	struct ze_dev *d = &s->devs[dev];
	uint64_t used = __atomic_load_n(&d->allocated, __ATOMIC_RELAXED);

	if (!d->total) {
		devcache_backend_device_t info;
		int rc = ze_device_info(state, dev, &info);

		if (rc)
			return rc;
	}
	*total_p = d->total;
	*free_p = used < d->total ? d->total - used : 0;
	return 0;
}

static int ze_mem_alloc(void *state, int dev, size_t size, void **ptr_p)
{
	struct ze_state *s = state;
	struct ze_dev *d = &s->devs[dev];
	ze_device_mem_alloc_desc_t desc = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
	ze_relaxed_allocation_limits_exp_desc_t relax = {
		.stype = ZE_STRUCTURE_TYPE_RELAXED_ALLOCATION_LIMITS_EXP_DESC,
		.flags = ZE_RELAXED_ALLOCATION_LIMITS_EXP_FLAG_MAX_SIZE};

	/* Only above the limit: the spec leaves what relaxing costs to the driver. */
	if (d->relaxed && size > d->max_alloc)
		desc.pNext = &relax;
	CHECK(s, s->zeMemAllocDevice(d->context, &desc, size, 0, d->device, ptr_p), "zeMemAllocDevice",
	      dev);
	__atomic_add_fetch(&d->allocated, size, __ATOMIC_RELAXED);
	return 0;
}

static int ze_mem_free(void *state, int dev, void *ptr)
{
	struct ze_state *s = state;
	struct ze_dev *d = &s->devs[dev];
	void *base = NULL;
	size_t size = 0;

	ze_result_t r;

	if (!ptr)
		return 0;
	/* Only ze_mem_get_info's figure needs the size. */
	if ((r = s->zeMemGetAddressRange(d->context, ptr, &base, &size)) != ZE_RESULT_SUCCESS) {
		s->host->log(s->host->cookie, DEVCACHE_LOG_WARNING,
			     _("ze:%d: zeMemGetAddressRange: %s (0x%x): the memory freed at %p is "
			       "still counted as in use"),
			     dev, result_name(r), (unsigned)r, ptr);
		size = 0;
	}
	if ((r = s->zeMemFree(d->context, ptr)) != ZE_RESULT_SUCCESS) {
		__atomic_add_fetch(&d->lost, 1, __ATOMIC_RELAXED);
		return fail(s, r, "zeMemFree", dev);
	}
	__atomic_sub_fetch(&d->allocated, size, __ATOMIC_RELAXED);
	return 0;
}

/* Pinned host memory belongs to a context: the first driver's. */
static ze_context_handle_t host_context(struct ze_state *s)
{
	return s->n_devices ? s->devs[0].context : NULL;
}

static int ze_host_alloc(void *state, size_t size, void **ptr_p)
{
	struct ze_state *s = state;
	ze_host_mem_alloc_desc_t desc = {.stype = ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC};

	CHECK(s, s->zeMemAllocHost(host_context(s), &desc, size, 64, ptr_p), "zeMemAllocHost", -1);
	return 0;
}

static int ze_host_free(void *state, void *ptr)
{
	struct ze_state *s = state;

	ze_result_t r;

	if (!ptr)
		return 0;
	if ((r = s->zeMemFree(host_context(s), ptr)) != ZE_RESULT_SUCCESS) {
		__atomic_add_fetch(&s->devs[0].lost, 1, __ATOMIC_RELAXED);
		return fail(s, r, "zeMemFree (host)", -1);
	}
	return 0;
}

/* ---- streams and events ------------------------------------------------------------ */

static struct ze_stream *stream_of(struct ze_state *s, int dev, devcache_stream_t stream)
{
	return stream ? stream : &s->devs[dev].dflt;
}

/* A copy, then a barrier: immediate lists of Level Zero 1.4 do not promise
 * to run in order, and a stream must. */
static int copy(struct ze_state *s, int dev, void *dst, const void *src, size_t size,
		devcache_stream_t stream, const char *direction)
{
	struct ze_stream *st = stream_of(s, dev, stream);
	const char *call = "zeCommandListAppendMemoryCopy";
	char what[80];
	ze_result_t r;

	pthread_mutex_lock(&st->lock);
	r = s->zeCommandListAppendMemoryCopy(st->list, dst, src, size, NULL, 0, NULL);
	if (r == ZE_RESULT_SUCCESS) {
		call = "zeCommandListAppendBarrier";
		r = s->zeCommandListAppendBarrier(st->list, NULL, 0, NULL);
	}
	pthread_mutex_unlock(&st->lock);
	if (r == ZE_RESULT_SUCCESS)
		return 0;
	snprintf(what, sizeof what, "%s (%s)", call, direction);
	return fail(s, r, what, dev);
}

static int ze_memcpy_htod(void *state, int dev, void *dst, const void *src, size_t size,
			  devcache_stream_t stream)
{
	return copy(state, dev, dst, src, size, stream, _("a copy to the device"));
}

static int ze_memcpy_dtoh(void *state, int dev, void *dst, const void *src, size_t size,
			  devcache_stream_t stream)
{
	return copy(state, dev, dst, src, size, stream, _("a copy to the host"));
}

static int ze_stream_create(void *state, int dev, devcache_stream_t *stream_p)
{
	struct ze_state *s = state;
	struct ze_stream *st = calloc(1, sizeof *st);
	int rc;

	if (!st)
		return s->host->error(DEVCACHE_ENOMEM, _("ze: out of memory"));
	if ((rc = stream_open(s, dev, st))) {
		free(st);
		return rc;
	}
	*stream_p = st;
	return 0;
}

static int ze_stream_destroy(void *state, int dev, devcache_stream_t stream)
{
	struct ze_state *s = state;
	struct ze_stream *st = stream;

	ze_result_t r;

	if (!st)
		return 0;
	/* Refused, the list is the loader's for good: the stream is gone
	 * all the same, and its context cannot be destroyed. */
	if ((r = s->zeCommandListDestroy(st->list)) != ZE_RESULT_SUCCESS)
		__atomic_add_fetch(&s->devs[dev].lost, 1, __ATOMIC_RELAXED);
	pthread_mutex_destroy(&st->lock);
	free(st);
	return r == ZE_RESULT_SUCCESS ? 0 : fail(s, r, "zeCommandListDestroy", dev);
}

/* An event from the device's pools: a free index, or a new pool. */
static int event_take(struct ze_state *s, int dev, struct ze_event *e)
{
	struct ze_dev *d = &s->devs[dev];
	struct ze_pool *p;
	ze_result_t r = ZE_RESULT_SUCCESS;

	pthread_mutex_lock(&d->pool_lock);
	for (p = d->pools; p && p->used == UINT64_MAX; p = p->next)
		;
	if (!p && (p = calloc(1, sizeof *p))) {
		ze_event_pool_desc_t desc = {.stype = ZE_STRUCTURE_TYPE_EVENT_POOL_DESC,
					     .flags = ZE_EVENT_POOL_FLAG_HOST_VISIBLE,
					     .count = POOL_EVENTS};

		r = s->zeEventPoolCreate(d->context, &desc, 1, &d->device, &p->pool);
		if (r != ZE_RESULT_SUCCESS) {
			free(p);
			p = NULL;
		} else {
			p->next = d->pools;
			d->pools = p;
		}
	}
	if (p) {
		e->index = (uint32_t)__builtin_ctzll(~p->used);
		e->pool = p;
		p->used |= 1ull << e->index;
	}
	pthread_mutex_unlock(&d->pool_lock);
	if (!p)
		return r ? fail(s, r, "zeEventPoolCreate", dev)
			 : s->host->error(DEVCACHE_ENOMEM, _("ze: out of memory"));
	ze_event_desc_t desc = {.stype = ZE_STRUCTURE_TYPE_EVENT_DESC,
				.index = e->index,
				.signal = ZE_EVENT_SCOPE_FLAG_HOST,
				.wait = ZE_EVENT_SCOPE_FLAG_HOST};
	r = s->zeEventCreate(e->pool->pool, &desc, &e->event);
	if (r != ZE_RESULT_SUCCESS) {
		pthread_mutex_lock(&d->pool_lock);
		e->pool->used &= ~(1ull << e->index);
		pthread_mutex_unlock(&d->pool_lock);
		return fail(s, r, "zeEventCreate", dev);
	}
	return 0;
}

/* An event back to its pool; one the loader would not destroy keeps its
 * index, which a new event cannot then take, and its pool. */
static void event_give(struct ze_state *s, int dev, struct ze_event *e)
{
	struct ze_dev *d = &s->devs[dev];
	ze_result_t r = s->zeEventDestroy(e->event);

	if (r != ZE_RESULT_SUCCESS)
		left(s, dev, _("the loader refused to destroy an event"), "zeEventDestroy", r);
	pthread_mutex_lock(&d->pool_lock);
	if (r == ZE_RESULT_SUCCESS)
		e->pool->used &= ~(1ull << e->index);
	else
		e->pool->lost |= 1ull << e->index;
	pthread_mutex_unlock(&d->pool_lock);
}

/* Signal ev once everything queued on the stream so far is done. */
static int record(struct ze_state *s, int dev, ze_event_handle_t ev, devcache_stream_t stream)
{
	struct ze_stream *st = stream_of(s, dev, stream);
	ze_result_t r;

	CHECK(s, s->zeEventHostReset(ev), "zeEventHostReset", dev);
	pthread_mutex_lock(&st->lock);
	r = s->zeCommandListAppendBarrier(st->list, ev, 0, NULL);
	pthread_mutex_unlock(&st->lock);
	CHECK(s, r, "zeCommandListAppendBarrier", dev);
	return 0;
}

static int ze_stream_synchronize(void *state, int dev, devcache_stream_t stream)
{
	struct ze_state *s = state;
	struct ze_event e;
	int rc = event_take(s, dev, &e);

	if (rc)
		return rc;
	if ((rc = record(s, dev, e.event, stream)) == 0) {
		ze_result_t r = s->zeEventHostSynchronize(e.event, UINT64_MAX);

		if (r != ZE_RESULT_SUCCESS)
			rc = fail(s, r, "zeEventHostSynchronize", dev);
	}
	event_give(s, dev, &e);
	return rc;
}

static int ze_event_create(void *state, int dev, devcache_event_t *event_p)
{
	struct ze_state *s = state;
	struct ze_event *e = malloc(sizeof *e);
	int rc;

	if (!e)
		return s->host->error(DEVCACHE_ENOMEM, _("ze: out of memory"));
	if ((rc = event_take(s, dev, e))) {
		free(e);
		return rc;
	}
	e->recorded = false;
	*event_p = e;
	return 0;
}

static int ze_event_destroy(void *state, int dev, devcache_event_t event)
{
	struct ze_event *e = event;

	event_give(state, dev, e);
	free(e);
	return 0;
}

static int ze_event_record(void *state, int dev, devcache_event_t event, devcache_stream_t stream)
{
	struct ze_event *e = event;
	int rc = record(state, dev, e->event, stream);

	if (rc == 0)
		__atomic_store_n(&e->recorded, true, __ATOMIC_RELEASE);
	return rc;
}

static int ze_event_query(void *state, int dev, devcache_event_t event)
{
	struct ze_state *s = state;
	struct ze_event *e = event;

	if (!__atomic_load_n(&e->recorded, __ATOMIC_ACQUIRE))
		return 0;
	ze_result_t r = s->zeEventQueryStatus(e->event);
	if (r == ZE_RESULT_NOT_READY)
		return DEVCACHE_EAGAIN;
	CHECK(s, r, "zeEventQueryStatus", dev);
	return 0;
}

static int ze_event_synchronize(void *state, int dev, devcache_event_t event)
{
	struct ze_state *s = state;
	struct ze_event *e = event;

	if (!__atomic_load_n(&e->recorded, __ATOMIC_ACQUIRE))
		return 0;
	CHECK(s, s->zeEventHostSynchronize(e->event, UINT64_MAX), "zeEventHostSynchronize", dev);
	return 0;
}

/* ---- virtual memory: expandable segments ------------------------------------------- */

static int ze_vm_granularity(void *state, int dev, size_t *granularity_p)
{
	struct ze_state *s = state;
	struct ze_dev *d = &s->devs[dev];

	/* The page size the driver uses for 2 MiB mappings, the allocator's
	 * smallest unit. */
	CHECK(s, s->zeVirtualMemQueryPageSize(d->context, d->device, 2u << 20, granularity_p),
	      "zeVirtualMemQueryPageSize", dev);
	return 0;
}

static int ze_vm_reserve(void *state, int dev, size_t size, void **va_p)
{
	struct ze_state *s = state;

	CHECK(s, s->zeVirtualMemReserve(s->devs[dev].context, NULL, size, va_p), "zeVirtualMemReserve",
	      dev);
	return 0;
}

static int ze_vm_release(void *state, int dev, void *va, size_t size)
{
	struct ze_state *s = state;

	ze_result_t r = s->zeVirtualMemFree(s->devs[dev].context, va, size);

	if (r != ZE_RESULT_SUCCESS) {
		__atomic_add_fetch(&s->devs[dev].lost, 1, __ATOMIC_RELAXED);
		return fail(s, r, "zeVirtualMemFree", dev);
	}
	return 0;
}

static int ze_vm_create(void *state, int dev, size_t size, void **handle_p)
{
	struct ze_state *s = state;
	struct ze_dev *d = &s->devs[dev];
	ze_physical_mem_desc_t desc = {.stype = ZE_STRUCTURE_TYPE_PHYSICAL_MEM_DESC, .size = size};

	CHECK(s, s->zePhysicalMemCreate(d->context, d->device, &desc,
					(ze_physical_mem_handle_t *)handle_p),
	      "zePhysicalMemCreate", dev);
	return 0;
}

static int ze_vm_destroy(void *state, int dev, void *handle)
{
	struct ze_state *s = state;

	ze_result_t r = s->zePhysicalMemDestroy(s->devs[dev].context, (ze_physical_mem_handle_t)handle);

	if (r != ZE_RESULT_SUCCESS) {
		__atomic_add_fetch(&s->devs[dev].lost, 1, __ATOMIC_RELAXED);
		return fail(s, r, "zePhysicalMemDestroy", dev);
	}
	return 0;
}

static int ze_vm_map(void *state, int dev, void *va, size_t size, void *handle)
{
	struct ze_state *s = state;

	CHECK(s, s->zeVirtualMemMap(s->devs[dev].context, va, size, (ze_physical_mem_handle_t)handle, 0,
				    ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE),
	      "zeVirtualMemMap", dev);
	/* Mapped memory is in use, as an allocation is (ze_mem_get_info). */
	__atomic_add_fetch(&s->devs[dev].allocated, size, __ATOMIC_RELAXED);
	return 0;
}

static int ze_vm_unmap(void *state, int dev, void *va, size_t size)
{
	struct ze_state *s = state;

	CHECK(s, s->zeVirtualMemUnmap(s->devs[dev].context, va, size), "zeVirtualMemUnmap", dev);
	__atomic_sub_fetch(&s->devs[dev].allocated, size, __ATOMIC_RELAXED);
	return 0;
}

/* Declared in tunables.def, documented from there. */
static const struct devcache_backend_tunable ze_tunables[] = {
#define TUNABLE MODULE_TUNABLE
#include "tunables.def"
#undef TUNABLE
	{.name = NULL},
};

static const struct devcache_backend_ops ze_ops = {
	.abi_version = DEVCACHE_BACKEND_ABI_VERSION,
	.abi_minor = DEVCACHE_BACKEND_ABI_MINOR,
	.name = "ze",
	.priority = 100,
	.tunables = ze_tunables,
	.init = ze_init,
	.fini = ze_fini,
	.device_info = ze_device_info,
	.mem_get_info = ze_mem_get_info,
	.mem_alloc = ze_mem_alloc,
	.mem_free = ze_mem_free,
	.host_alloc = ze_host_alloc,
	.host_free = ze_host_free,
	.memcpy_htod = ze_memcpy_htod,
	.memcpy_dtoh = ze_memcpy_dtoh,
	.stream_create = ze_stream_create,
	.stream_destroy = ze_stream_destroy,
	.stream_synchronize = ze_stream_synchronize,
	.event_create = ze_event_create,
	.event_destroy = ze_event_destroy,
	.event_record = ze_event_record,
	.event_query = ze_event_query,
	.event_synchronize = ze_event_synchronize,
	.vm_granularity = ze_vm_granularity,
	.vm_reserve = ze_vm_reserve,
	.vm_release = ze_vm_release,
	.vm_create = ze_vm_create,
	.vm_destroy = ze_vm_destroy,
	.vm_map = ze_vm_map,
	.vm_unmap = ze_vm_unmap,
};

__attribute__((visibility("default"))) const struct devcache_backend_ops *
devcache_backend_module(void);

const struct devcache_backend_ops *devcache_backend_module(void)
{
	return &ze_ops;
}
