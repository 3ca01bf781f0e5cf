/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* benchdev.c - a bench-only backend module: one emulated device whose memory is mmap()ed host memory, for timing the model cache's staging path without a GPU. */
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
	info->caps = DEVCACHE_CAP_ASYNC_COPY;
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
};

const struct devcache_backend_ops *devcache_backend_module(void)
{
	return &benchdev_ops;
}
