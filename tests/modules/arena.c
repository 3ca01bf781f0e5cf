/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* arena.c - a deterministic test device for the differential test: first-fit addresses in never-touched address space, capacity enforced. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <devcache-backend.h>

#include "../first-fit.h"

/* One device of ARENA_TOTAL bytes.  Device memory and virtual address
 * space both come from one first-fit allocator (tests/first-fit.h, which
 * has both figures) over a range of FF_SPACE_FACTOR times that, reserved
 * PROT_NONE and never touched: the differential test only compares the
 * allocator's decisions, so addresses have to be real and deterministic
 * but need no memory behind them.  Like a driver, the device refuses an
 * allocation (mem_alloc, or the physical memory of vm_create) when the
 * bytes in use and the request would pass its total.  The model in
 * tests/pytorch-model.c has the same driver. */
#define ARENA_GRANULARITY ((size_t)FF_UNIT)
/* Where the reservation is asked for, a hint that the kernel honours when
 * the range is free and ignores otherwise (a 39-bit arm64 kernel, say).
 * Natively, each context's reservation lands where the last one's was
 * anyway.  qemu-user 7.2 (CI's arm64 step) instead places each mapping
 * above the last and keeps its per-page bookkeeping (about 200 MB for
 * these 32 GiB) after munmap(): without the hint, the 167 contexts of
 * test-alloc-pytorch cost it 30 GB and the kernel's OOM killer.  With it,
 * every context reuses the one range. */
#define ARENA_HINT ((void *)((uintptr_t)1 << 44))

const struct devcache_backend_ops *devcache_backend_module(void);
/* Reached with dlsym() by the test: the address that offset 0 of the
 * first-fit allocator stands for, so that it can compare the allocator's
 * addresses with the model's offsets; 0 while no context has the module
 * initialised. */
uintptr_t arena_base(void);

struct arena {
	const struct devcache_backend_host *host;
	pthread_mutex_t lock;
	void *map;      /* what mmap returned */
	size_t map_size;
	uintptr_t base; /* map, aligned to the granularity */
	struct first_fit space;
	uint64_t used; /* device memory in use: mem_alloc and vm_create */
	struct arena_handle *mapped; /* handles mapped, for vm_unmap */
};

struct arena_handle {
	size_t size;
	uintptr_t mapped_at; /* 0 while not mapped */
	struct arena_handle *next; /* on the mapped list while mapped */
};

static struct arena *current; /* for arena_base() */

uintptr_t arena_base(void)
{
	struct arena *a = __atomic_load_n(&current, __ATOMIC_ACQUIRE);

	return a ? a->base : 0;
}

static int arena_init(const struct devcache_backend_host *host, void **state_p, int *n_devices_p,
		      char *why, size_t why_size)
{
	struct arena *a = calloc(1, sizeof *a);
	uint64_t space = ARENA_TOTAL * FF_SPACE_FACTOR;

	(void)why, (void)why_size;
	if (!a)
		return host->error(DEVCACHE_ENOMEM, "arena: out of memory");
	a->host = host;
	a->map_size = (size_t)space + ARENA_GRANULARITY;
	a->map = mmap(ARENA_HINT, a->map_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		      -1, 0);
	if (a->map == MAP_FAILED) {
		free(a);
		return host->error(DEVCACHE_ENOMEM, "arena: cannot reserve %llu bytes of address space",
				   (unsigned long long)space);
	}
	a->base = ((uintptr_t)a->map + ARENA_GRANULARITY - 1) & ~(uintptr_t)(ARENA_GRANULARITY - 1);
	ff_init(&a->space, space, FF_UNIT);
	pthread_mutex_init(&a->lock, NULL);
	__atomic_store_n(&current, a, __ATOMIC_RELEASE);
	*state_p = a;
	*n_devices_p = 1;
	return 0;
}

static void arena_fini(void *state)
{
	struct arena *a = state;

	__atomic_compare_exchange_n(&current, &a, NULL, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	ff_fini(&a->space);
	munmap(a->map, a->map_size);
	pthread_mutex_destroy(&a->lock);
	free(a);
}

static int arena_device_info(void *state, int dev, devcache_backend_device_t *info)
{
	(void)state;
	memset(info, 0, sizeof *info);
	snprintf(info->name, sizeof info->name, "Arena device %d", dev);
	snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "0000:%02x:00.0", dev + 0x40);
	info->total_memory = ARENA_TOTAL;
	info->caps = DEVCACHE_CAP_ASYNC_COPY | DEVCACHE_CAP_VMM;
	return 0;
}

static int arena_mem_get_info(void *state, int dev, uint64_t *free_p, uint64_t *total_p)
{
	struct arena *a = state;

	(void)dev;
	pthread_mutex_lock(&a->lock);
	*total_p = ARENA_TOTAL;
	*free_p = ARENA_TOTAL - a->used;
	pthread_mutex_unlock(&a->lock);
	return 0;
}

/* Count size bytes of device memory as used, unless that passes the total. */
static bool take_memory(struct arena *a, uint64_t size)
{
	if (a->used + size > ARENA_TOTAL)
		return false;
	a->used += size;
	return true;
}

/* Address space for size bytes; 0 or a negative code, with the reason set. */
static int take_space(struct arena *a, uint64_t size, void **ptr_p)
{
	uint64_t offset;
	int rc = ff_alloc(&a->space, size, &offset);

	if (rc)
		return a->host->error(DEVCACHE_ENOMEM, "arena: %s for %llu bytes",
				      rc == -1 ? "no address space left" : "out of host memory",
				      (unsigned long long)size);
	*ptr_p = (void *)(a->base + (uintptr_t)offset);
	return 0;
}

/* Device memory is counted in whole granules, as the address space is;
 * the caching allocator asks for multiples of 2 MiB anyway. */
static uint64_t granules(uint64_t size)
{
	return (size + ARENA_GRANULARITY - 1) / ARENA_GRANULARITY * ARENA_GRANULARITY;
}

static int arena_mem_alloc(void *state, int dev, size_t size, void **ptr_p)
{
	struct arena *a = state;
	int rc;

	(void)dev;
	if (size == 0)
		return a->host->error(DEVCACHE_EINVAL, "arena: allocation of 0 bytes");
	pthread_mutex_lock(&a->lock);
	if (!take_memory(a, granules(size)))
		rc = a->host->error(DEVCACHE_ENOMEM, "arena: out of memory: %zu bytes", size);
	else if ((rc = take_space(a, size, ptr_p)))
		a->used -= granules(size);
	pthread_mutex_unlock(&a->lock);
	return rc;
}

static int arena_mem_free(void *state, int dev, void *ptr)
{
	struct arena *a = state;
	uint64_t size;

	(void)dev;
	if (!ptr)
		return 0;
	pthread_mutex_lock(&a->lock);
	size = (uintptr_t)ptr >= a->base ? ff_free(&a->space, (uintptr_t)ptr - a->base) : 0;
	a->used -= size; /* the extent: whole granules, as mem_alloc counted */
	pthread_mutex_unlock(&a->lock);
	return size ? 0 : a->host->error(DEVCACHE_EINVAL, "arena: %p was not allocated", ptr);
}

/* Pinned host memory is not part of the test; plain malloc serves it. */
static int arena_host_alloc(void *state, size_t size, void **ptr_p)
{
	(void)state;
	*ptr_p = malloc(size ? size : 1);
	return *ptr_p ? 0 : DEVCACHE_ENOMEM;
}

static int arena_host_free(void *state, void *ptr)
{
	(void)state;
	free(ptr);
	return 0;
}

/* The memory is never touched: copies are refused. */
static int arena_copy(void *state, int dev, void *dst, const void *src, size_t size,
		      devcache_stream_t stream)
{
	struct arena *a = state;

	(void)dev, (void)dst, (void)src, (void)stream;
	return a->host->error(DEVCACHE_ENOTSUP, "arena: no copies (%zu bytes): the memory is not real",
			      size);
}

/* Streams and events: distinct handles, and all work is complete at once. */
static int arena_handle_create(void *state, int dev, void **handle_p)
{
	(void)state, (void)dev;
	*handle_p = malloc(1);
	return *handle_p ? 0 : DEVCACHE_ENOMEM;
}

static int arena_handle_destroy(void *state, int dev, void *handle)
{
	(void)state, (void)dev;
	free(handle);
	return 0;
}

static int arena_done(void *state, int dev, void *handle)
{
	(void)state, (void)dev, (void)handle;
	return 0;
}

static int arena_record(void *state, int dev, devcache_event_t event, devcache_stream_t stream)
{
	(void)state, (void)dev, (void)event, (void)stream;
	return 0;
}

/* ---- virtual memory: 2 MiB granularity, physical memory counted from
 * vm_create to vm_destroy, address space from the same first-fit range --- */

static int arena_vm_granularity(void *state, int dev, size_t *granularity_p)
{
	(void)state, (void)dev;
	*granularity_p = ARENA_GRANULARITY;
	return 0;
}

static int arena_vm_reserve(void *state, int dev, size_t size, void **va_p)
{
	struct arena *a = state;
	int rc;

	(void)dev;
	if (size == 0 || size % ARENA_GRANULARITY)
		return a->host->error(DEVCACHE_EINVAL, "arena: reserve of %zu bytes", size);
	pthread_mutex_lock(&a->lock);
	rc = take_space(a, size, va_p);
	pthread_mutex_unlock(&a->lock);
	return rc;
}

static int arena_vm_release(void *state, int dev, void *va, size_t size)
{
	struct arena *a = state;
	uint64_t had;

	(void)dev;
	pthread_mutex_lock(&a->lock);
	had = (uintptr_t)va >= a->base ? ff_free(&a->space, (uintptr_t)va - a->base) : 0;
	pthread_mutex_unlock(&a->lock);
	if (had != size)
		return a->host->error(DEVCACHE_EINVAL, "arena: bad release of %zu bytes at %p", size, va);
	return 0;
}

static int arena_vm_create(void *state, int dev, size_t size, void **handle_p)
{
	struct arena *a = state;
	struct arena_handle *h;
	int rc = 0;

	(void)dev;
	if (size == 0 || size % ARENA_GRANULARITY)
		return a->host->error(DEVCACHE_EINVAL, "arena: handle of %zu bytes", size);
	if (!(h = calloc(1, sizeof *h)))
		return a->host->error(DEVCACHE_ENOMEM, "arena: out of host memory");
	pthread_mutex_lock(&a->lock);
	if (!take_memory(a, size))
		rc = a->host->error(DEVCACHE_ENOMEM, "arena: out of memory: %zu bytes", size);
	pthread_mutex_unlock(&a->lock);
	if (rc) {
		free(h);
		return rc;
	}
	h->size = size;
	*handle_p = h;
	return 0;
}

static int arena_vm_destroy(void *state, int dev, void *handle)
{
	struct arena *a = state;
	struct arena_handle *h = handle;

	(void)dev;
	if (h->mapped_at)
		return a->host->error(DEVCACHE_EBUSY, "arena: handle destroyed while mapped");
	pthread_mutex_lock(&a->lock);
	a->used -= h->size;
	pthread_mutex_unlock(&a->lock);
	free(h);
	return 0;
}

/* Nothing is really mapped: the range stays PROT_NONE.  The handles keep
 * where they are mapped, so that unmapping can be checked to cover whole
 * mappings, as with cuMemUnmap, and destroying to follow unmapping. */
static int arena_vm_map(void *state, int dev, void *va, size_t size, void *handle)
{
	struct arena *a = state;
	struct arena_handle *h = handle;
	uintptr_t at = (uintptr_t)va;

	(void)dev;
	if (at % ARENA_GRANULARITY || size != h->size || h->mapped_at || at < a->base ||
	    at - a->base + size > a->space.limit)
		return a->host->error(DEVCACHE_EINVAL, "arena: bad map of %zu bytes at %p", size, va);
	pthread_mutex_lock(&a->lock);
	h->mapped_at = at;
	h->next = a->mapped;
	a->mapped = h;
	pthread_mutex_unlock(&a->lock);
	return 0;
}

static int arena_vm_unmap(void *state, int dev, void *va, size_t size)
{
	struct arena *a = state;
	uintptr_t lo = (uintptr_t)va, hi = lo + size;
	size_t covered = 0;

	(void)dev;
	if (lo % ARENA_GRANULARITY || size % ARENA_GRANULARITY)
		return a->host->error(DEVCACHE_EINVAL, "arena: bad unmap of %zu bytes at %p", size, va);
	pthread_mutex_lock(&a->lock);
	for (struct arena_handle **l = &a->mapped; *l;) {
		struct arena_handle *h = *l;

		if (h->mapped_at >= lo && h->mapped_at + h->size <= hi) {
			covered += h->size;
			h->mapped_at = 0;
			*l = h->next;
		} else {
			l = &h->next;
		}
	}
	pthread_mutex_unlock(&a->lock);
	if (covered != size)
		return a->host->error(DEVCACHE_EINVAL, "arena: unmap of %zu bytes at %p covers %zu mapped",
				      size, va, covered);
	return 0;
}

static const struct devcache_backend_ops arena_ops = {
	.abi_version = DEVCACHE_BACKEND_ABI_VERSION,
	.abi_minor = DEVCACHE_BACKEND_ABI_MINOR,
	.name = "arena",
	.init = arena_init,
	.fini = arena_fini,
	.device_info = arena_device_info,
	.mem_get_info = arena_mem_get_info,
	.mem_alloc = arena_mem_alloc,
	.mem_free = arena_mem_free,
	.host_alloc = arena_host_alloc,
	.host_free = arena_host_free,
	.memcpy_htod = arena_copy,
	.memcpy_dtoh = arena_copy,
	.stream_create = arena_handle_create,
	.stream_destroy = arena_handle_destroy,
	.stream_synchronize = arena_done,
	.event_create = arena_handle_create,
	.event_destroy = arena_handle_destroy,
	.event_record = arena_record,
	.event_query = arena_done,
	.event_synchronize = arena_done,
	.vm_granularity = arena_vm_granularity,
	.vm_reserve = arena_vm_reserve,
	.vm_release = arena_vm_release,
	.vm_create = arena_vm_create,
	.vm_destroy = arena_vm_destroy,
	.vm_map = arena_vm_map,
	.vm_unmap = arena_vm_unmap,
};

const struct devcache_backend_ops *devcache_backend_module(void)
{
	return &arena_ops;
}
