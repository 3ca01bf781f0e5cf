/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* ze.c - the Level Zero backend: Intel GPUs through the oneAPI Level Zero loader, which it dlopen()s; built against the Level Zero headers, linked against nothing of Intel's. */
/*
 * The backend in three files, which ze.h joins: this one dlopen()s the
 * loader, finds the GPUs, allocates device and pinned host memory and
 * holds the ops table; ze-stream.c has the streams (immediate command
 * lists), the copies and the events (from per-device pools); ze-vm.c the
 * virtual memory of expandable segments.
 */
#include "ze.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int fail(struct ze_state *s, ze_result_t r, const char *what, int dev)
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
void left(struct ze_state *s, int dev, const char *what, const char *call, ze_result_t r)
{
	s->host->log(s->host->cookie, DEVCACHE_LOG_ERROR, "ze:%d: %s: %s: %s (0x%x)", dev, what,
		     call, result_name(r), (unsigned)r);
}

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
	.dlpack_device_type = 14, /* kDLOneAPI */
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
