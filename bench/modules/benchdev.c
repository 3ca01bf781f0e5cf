/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* benchdev.c - a bench-only backend module: one emulated device of a fixed size whose memory is mmap()ed host memory, for the model cache's staging path and the allocator's minimum-memory runs without a GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <devcache-backend.h>

/* Large enough for the 4 GiB model with the allocator's rounding and the
 * model cache's headroom (device_working_mem); only what is touched
 * becomes resident, so RSS shows what a load really writes. */
#define BENCHDEV_MEMORY ((uint64_t)16 << 30)
/* Each mapping starts with a page holding its length, for munmap(). */
#define BENCHDEV_HEADER ((size_t)4096)

const struct devcache_backend_ops *devcache_backend_module(void);

static uint64_t used;

static int bd_init(const struct devcache_backend_host *host, void **state_p, int *n_devices_p,
		   char *why, size_t why_size)
{
	(void)why, (void)why_size;
	*state_p = (void *)host;
	*n_devices_p = 1;
	return 0;
}

static void bd_fini(void *state)
{
	(void)state;
}

static int bd_device_info(void *state, int dev, devcache_backend_device_t *info)
{
	(void)state, (void)dev;
	memset(info, 0, sizeof *info);
	snprintf(info->name, sizeof info->name, "Bench device (mmap()ed host memory)");
	snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "0000:bd:00.0");
	info->total_memory = BENCHDEV_MEMORY;
	info->caps = DEVCACHE_CAP_ASYNC_COPY | DEVCACHE_CAP_VMM;
	return 0;
}

static int bd_mem_get_info(void *state, int dev, uint64_t *free_p, uint64_t *total_p)
{
	(void)state, (void)dev;
	*total_p = BENCHDEV_MEMORY;
	*free_p = BENCHDEV_MEMORY - __atomic_load_n(&used, __ATOMIC_RELAXED);
	return 0;
}

/* Anonymous memory straight from the kernel, given back by munmap(): never
 * the malloc heap, whose free() may keep pages resident. */
static int map_bytes(const struct devcache_backend_host *host, size_t size, void **ptr_p)
{
	char *p = mmap(NULL, BENCHDEV_HEADER + size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		return host->error(DEVCACHE_ENOMEM, "benchdev: cannot map %zu bytes", size);
	*(size_t *)p = size;
	*ptr_p = p + BENCHDEV_HEADER;
	return 0;
}

static size_t unmap_bytes(void *ptr)
{
	char *p = (char *)ptr - BENCHDEV_HEADER;
	size_t size = *(size_t *)p;

	munmap(p, BENCHDEV_HEADER + size);
	return size;
}

static int bd_mem_alloc(void *state, int dev, size_t size, void **ptr_p)
{
	const struct devcache_backend_host *host = state;

	(void)dev;
	if (__atomic_add_fetch(&used, size, __ATOMIC_RELAXED) > BENCHDEV_MEMORY) {
		__atomic_sub_fetch(&used, size, __ATOMIC_RELAXED);
		return host->error(DEVCACHE_ENOMEM, "benchdev: out of memory: %zu bytes", size);
	}
	if (map_bytes(host, size, ptr_p)) {
		__atomic_sub_fetch(&used, size, __ATOMIC_RELAXED);
		return DEVCACHE_ENOMEM;
	}
	return 0;
}

static int bd_mem_free(void *state, int dev, void *ptr)
{
	(void)state, (void)dev;
	if (ptr)
		__atomic_sub_fetch(&used, unmap_bytes(ptr), __ATOMIC_RELAXED);
	return 0;
}

static int bd_host_alloc(void *state, size_t size, void **ptr_p)
{
	return map_bytes(state, size ? size : 1, ptr_p);
}

static int bd_host_free(void *state, void *ptr)
{
	(void)state;
	if (ptr)
		unmap_bytes(ptr);
	return 0;
}

/* Copies are done when the call returns, so streams and events never
 * have pending work. */
static int bd_memcpy(void *state, int dev, void *dst, const void *src, size_t size,
		     devcache_stream_t stream)
{
	(void)state, (void)dev, (void)stream;
	memcpy(dst, src, size);
	return 0;
}

static int bd_handle_create(void *state, int dev, void **handle_p)
{
	const struct devcache_backend_host *host = state;

	(void)dev;
	*handle_p = malloc(1);
	return *handle_p ? 0 : host->error(DEVCACHE_ENOMEM, "benchdev: out of memory");
}

static int bd_handle_destroy(void *state, int dev, void *handle)
{
	(void)state, (void)dev;
	free(handle);
	return 0;
}

static int bd_handle_done(void *state, int dev, void *handle)
{
	(void)state, (void)dev, (void)handle;
	return 0;
}

static int bd_event_record(void *state, int dev, devcache_event_t event, devcache_stream_t stream)
{
	(void)state, (void)dev, (void)event, (void)stream;
	return 0;
}

/* Virtual memory, for expandable segments (bench/replay's minimum-memory
 * runs).  As on a GPU, a handle is the physical allocation: it counts
 * against the device's memory from vm_create to vm_destroy, whatever is
 * mapped; mapping makes the range ordinary anonymous memory and unmapping
 * gives its pages back.  Reservations are address space only. */
#define BENCHDEV_VM_GRANULARITY ((size_t)2 << 20) /* CUDA's, on current GPUs */

struct bd_vm_handle {
	size_t size;
};

static int bd_vm_granularity(void *state, int dev, size_t *granularity_p)
{
	(void)state, (void)dev;
	*granularity_p = BENCHDEV_VM_GRANULARITY;
	return 0;
}

static int bd_vm_reserve(void *state, int dev, size_t size, void **va_p)
{
	const struct devcache_backend_host *host = state;
	void *va = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	(void)dev;
	if (va == MAP_FAILED)
		return host->error(DEVCACHE_ENOMEM, "benchdev: cannot reserve %zu bytes", size);
	*va_p = va;
	return 0;
}

static int bd_vm_release(void *state, int dev, void *va, size_t size)
{
	const struct devcache_backend_host *host = state;

	(void)dev;
	if (munmap(va, size) != 0)
		return host->error(DEVCACHE_EINVAL, "benchdev: cannot release %p", va);
	return 0;
}

static int bd_vm_create(void *state, int dev, size_t size, void **handle_p)
{
	const struct devcache_backend_host *host = state;
	struct bd_vm_handle *h;

	(void)dev;
	if (__atomic_add_fetch(&used, size, __ATOMIC_RELAXED) > BENCHDEV_MEMORY) {
		__atomic_sub_fetch(&used, size, __ATOMIC_RELAXED);
		return host->error(DEVCACHE_ENOMEM, "benchdev: out of memory: %zu bytes", size);
	}
	if (!(h = malloc(sizeof *h))) {
		__atomic_sub_fetch(&used, size, __ATOMIC_RELAXED);
		return host->error(DEVCACHE_ENOMEM, "benchdev: out of memory");
	}
	h->size = size;
	*handle_p = h;
	return 0;
}

static int bd_vm_destroy(void *state, int dev, void *handle)
{
	struct bd_vm_handle *h = handle;

	(void)state, (void)dev;
	__atomic_sub_fetch(&used, h->size, __ATOMIC_RELAXED);
	free(h);
	return 0;
}

static int bd_vm_map(void *state, int dev, void *va, size_t size, void *handle)
{
	const struct devcache_backend_host *host = state;
	struct bd_vm_handle *h = handle;

	(void)dev;
	if (size > h->size)
		return host->error(DEVCACHE_EINVAL, "benchdev: cannot map %zu bytes of a %zu-byte handle",
				   size, h->size);
	if (mmap(va, size, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS |
		 MAP_NORESERVE, -1, 0) == MAP_FAILED)
		return host->error(DEVCACHE_ENOMEM, "benchdev: cannot map %zu bytes at %p", size, va);
	return 0;
}

static int bd_vm_unmap(void *state, int dev, void *va, size_t size)
{
	const struct devcache_backend_host *host = state;

	(void)dev;
	if (mmap(va, size, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		 0) == MAP_FAILED)
		return host->error(DEVCACHE_EINVAL, "benchdev: cannot unmap %zu bytes at %p", size, va);
	return 0;
}

static const struct devcache_backend_ops benchdev_ops = {
	.abi_version = DEVCACHE_BACKEND_ABI_VERSION,
	.abi_minor = DEVCACHE_BACKEND_ABI_MINOR,
	.name = "benchdev",
	.init = bd_init,
	.fini = bd_fini,
	.device_info = bd_device_info,
	.mem_get_info = bd_mem_get_info,
	.mem_alloc = bd_mem_alloc,
	.mem_free = bd_mem_free,
	.host_alloc = bd_host_alloc,
	.host_free = bd_host_free,
	.memcpy_htod = bd_memcpy,
	.memcpy_dtoh = bd_memcpy,
	.stream_create = bd_handle_create,
	.stream_destroy = bd_handle_destroy,
	.stream_synchronize = bd_handle_done,
	.event_create = bd_handle_create,
	.event_destroy = bd_handle_destroy,
	.event_record = bd_event_record,
	.event_query = bd_handle_done,
	.event_synchronize = bd_handle_done,
	.vm_granularity = bd_vm_granularity,
	.vm_reserve = bd_vm_reserve,
	.vm_release = bd_vm_release,
	.vm_create = bd_vm_create,
	.vm_destroy = bd_vm_destroy,
	.vm_map = bd_vm_map,
	.vm_unmap = bd_vm_unmap,
};

const struct devcache_backend_ops *devcache_backend_module(void)
{
	return &benchdev_ops;
}
