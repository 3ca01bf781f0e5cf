/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* ze-vm.c - the Level Zero backend's virtual memory: what expandable segments reserve, create and map. */
#include "ze.h"

int ze_vm_granularity(void *state, int dev, size_t *granularity_p)
{
	struct ze_state *s = state;
	struct ze_dev *d = &s->devs[dev];

	/* The page size the driver uses for 2 MiB mappings, the allocator's
	 * smallest unit. */
	CHECK(s, s->zeVirtualMemQueryPageSize(d->context, d->device, 2u << 20, granularity_p),
	      "zeVirtualMemQueryPageSize", dev);
	return 0;
}

int ze_vm_reserve(void *state, int dev, size_t size, void **va_p)
{
	struct ze_state *s = state;

	CHECK(s, s->zeVirtualMemReserve(s->devs[dev].context, NULL, size, va_p), "zeVirtualMemReserve",
	      dev);
	return 0;
}

int ze_vm_release(void *state, int dev, void *va, size_t size)
{
	struct ze_state *s = state;

	ze_result_t r = s->zeVirtualMemFree(s->devs[dev].context, va, size);

	if (r != ZE_RESULT_SUCCESS) {
		__atomic_add_fetch(&s->devs[dev].lost, 1, __ATOMIC_RELAXED);
		return fail(s, r, "zeVirtualMemFree", dev);
	}
	return 0;
}

int ze_vm_create(void *state, int dev, size_t size, void **handle_p)
{
	struct ze_state *s = state;
	struct ze_dev *d = &s->devs[dev];
	ze_physical_mem_desc_t desc = {.stype = ZE_STRUCTURE_TYPE_PHYSICAL_MEM_DESC, .size = size};

	CHECK(s, s->zePhysicalMemCreate(d->context, d->device, &desc,
					(ze_physical_mem_handle_t *)handle_p),
	      "zePhysicalMemCreate", dev);
	return 0;
}

int ze_vm_destroy(void *state, int dev, void *handle)
{
	struct ze_state *s = state;

	ze_result_t r = s->zePhysicalMemDestroy(s->devs[dev].context, (ze_physical_mem_handle_t)handle);

	if (r != ZE_RESULT_SUCCESS) {
		__atomic_add_fetch(&s->devs[dev].lost, 1, __ATOMIC_RELAXED);
		return fail(s, r, "zePhysicalMemDestroy", dev);
	}
	return 0;
}

int ze_vm_map(void *state, int dev, void *va, size_t size, void *handle)
{
	struct ze_state *s = state;

	CHECK(s, s->zeVirtualMemMap(s->devs[dev].context, va, size, (ze_physical_mem_handle_t)handle, 0,
				    ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE),
	      "zeVirtualMemMap", dev);
	/* Mapped memory is in use, as an allocation is (ze_mem_get_info). */
	__atomic_add_fetch(&s->devs[dev].allocated, size, __ATOMIC_RELAXED);
	return 0;
}

int ze_vm_unmap(void *state, int dev, void *va, size_t size)
{
	struct ze_state *s = state;

	CHECK(s, s->zeVirtualMemUnmap(s->devs[dev].context, va, size), "zeVirtualMemUnmap", dev);
	__atomic_sub_fetch(&s->devs[dev].allocated, size, __ATOMIC_RELAXED);
	return 0;
}
