/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-ze-memory.c - the fake Level Zero loader's memory: device and host allocations, IPC, virtual memory. */
#define _GNU_SOURCE /* see fake-ze.h */
#include "fake-ze.h"

/* What an IPC handle carries; it must fit ZE_MAX_IPC_HANDLE_SIZE. */
struct ipc_handle {
	char magic[8];
	pid_t pid;
	uintptr_t base;
	unsigned long serial;
};
_Static_assert(sizeof(struct ipc_handle) <= sizeof(ze_ipc_mem_handle_t), "IPC handle too large");
static const char ipc_magic[8] = "fakeze";

/* ---- memory ---- */

#define DEVICE_ALLOC_FLAGS                                                                         \
	(ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_CACHED | ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_UNCACHED |           \
	 ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_INITIAL_PLACEMENT)

/* The largest size zeMemAllocDevice takes with device_desc's pNext chain:
 * maxMemAllocSize, unless the chain relaxes it; 0 for a chain the driver
 * refuses (an unknown structure, the extension off, a flag not defined). */
static size_t alloc_limit(const ze_device_mem_alloc_desc_t *device_desc)
{
	size_t limit = __atomic_load_n(&fake.max_alloc, __ATOMIC_RELAXED);
	int relaxed_on = __atomic_load_n(&fake.relaxed_limits, __ATOMIC_RELAXED);

	for (const ze_base_desc_t *d = device_desc->pNext; d; d = d->pNext) {
		const ze_relaxed_allocation_limits_exp_desc_t *relax = (const void *)d;

		if (d->stype != ZE_STRUCTURE_TYPE_RELAXED_ALLOCATION_LIMITS_EXP_DESC || !relaxed_on ||
		    (relax->flags & ~(ze_relaxed_allocation_limits_exp_flags_t)
					     ZE_RELAXED_ALLOCATION_LIMITS_EXP_FLAG_MAX_SIZE))
			return 0;
		if (relax->flags & ZE_RELAXED_ALLOCATION_LIMITS_EXP_FLAG_MAX_SIZE)
			limit = fake.capacity;
	}
	return limit;
}

/* What a shared memory helper's status is in the API's terms: an owner gone
 * is a context the caller destroyed meanwhile, a race in the caller, refused. */
static ze_result_t vmm_result(enum fake_vmm_status st)
{
	switch (st) {
	case FAKE_VMM_OK:
		return ZE_RESULT_SUCCESS;
	case FAKE_VMM_NO_DEVICE_MEMORY:
		return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
	case FAKE_VMM_NO_OWNER:
		return misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	default:
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	}
}

/* The owner a context is to the shared memory helpers. */
static struct fake_vmm_owner owner_of(ze_context_handle_t ctx)
{
	return (struct fake_vmm_owner){&fake.contexts, ctx, &ctx->objects};
}

ze_result_t zeMemAllocDevice(ze_context_handle_t hContext, const ze_device_mem_alloc_desc_t *device_desc,
			     size_t size, size_t alignment, ze_device_handle_t hDevice, void **pptr)
{
	struct fake_vmm_owner owner;
	enum fake_vmm_status st;
	ze_result_t res;
	struct range *r;
	size_t align;
	int phys;

	ENTER(zeMemAllocDevice);
	if ((res = check_context_device(hContext, hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (!device_desc || !pptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (device_desc->flags & ~(ze_device_mem_alloc_flags_t)DEVICE_ALLOC_FLAGS)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	/* One memory ordinal per device. */
	if (device_desc->ordinal != 0)
		return misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	size_t limit = alloc_limit(device_desc);
	if (limit == 0)
		return misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	/* Past maxMemAllocSize, unless relaxed, and past the device's capacity
	 * Intel's driver says unsupported size; within it, and past what is
	 * left, out of memory.  The backend knows the limit: asking past it is
	 * its misuse. */
	if (size == 0 || size > limit || size > fake.capacity)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	if (!power_of_two_or_zero(alignment))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	align = alignment > DEVICE_ALIGN ? alignment : DEVICE_ALIGN;
	if (size > SIZE_MAX - align)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	phys = hDevice->phys;
	if ((r = malloc(sizeof *r)))
		*r = (struct range){.ctx = hContext, .phys = phys};
	owner = owner_of(hContext);
	st = fake_vmm_alloc_device(&fake.vmem, r ? &r->span : NULL, R_DEVICE, size, align, &fake.used[phys],
				   fake.capacity, &owner);
	if (st != FAKE_VMM_OK) {
		free(r);
		return vmm_result(st);
	}
	*pptr = (void *)r->span.base;
	return ZE_RESULT_SUCCESS;
}

#define HOST_ALLOC_FLAGS                                                                           \
	(ZE_HOST_MEM_ALLOC_FLAG_BIAS_CACHED | ZE_HOST_MEM_ALLOC_FLAG_BIAS_UNCACHED |               \
	 ZE_HOST_MEM_ALLOC_FLAG_BIAS_WRITE_COMBINED | ZE_HOST_MEM_ALLOC_FLAG_BIAS_INITIAL_PLACEMENT)

ze_result_t zeMemAllocHost(ze_context_handle_t hContext, const ze_host_mem_alloc_desc_t *host_desc,
			   size_t size, size_t alignment, void **pptr)
{
	struct fake_vmm_owner owner;
	enum fake_vmm_status st;
	ze_result_t res;
	struct range *r;
	size_t len;
	void *p;

	ENTER(zeMemAllocHost);
	if ((res = check_context(hContext)) != ZE_RESULT_SUCCESS)
		return res;
	if (!host_desc || !pptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (host_desc->flags & ~(ze_host_mem_alloc_flags_t)HOST_ALLOC_FLAGS)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (size == 0)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	if (!power_of_two_or_zero(alignment))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	if (!(r = malloc(sizeof *r)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	/* Page aligned, as Intel's driver gives host allocations. */
	if (!(p = fake_map_aligned(size, alignment, PROT_READ | PROT_WRITE, &len))) {
		free(r);
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	}
	*r = (struct range){.span = {.base = (uintptr_t)p, .size = size, .kind = R_HOST},
			    .mapped = len, .ctx = hContext};
	owner = owner_of(hContext);
	if ((st = fake_vmm_add(&fake.vmem, &r->span, &owner)) != FAKE_VMM_OK) {
		munmap(p, len);
		free(r);
		return vmm_result(st);
	}
	*pptr = p;
	return ZE_RESULT_SUCCESS;
}

/* Frees device and host allocations, by their base address and through the
 * context that made them (stricter than Intel's driver, which takes any
 * context of the driver). Reservations are zeVirtualMemFree's. */
ze_result_t zeMemFree(ze_context_handle_t hContext, void *ptr)
{
	ze_result_t res;
	struct range *r = NULL;

	ENTER(zeMemFree);
	pthread_mutex_lock(&fake.lock);
	res = check_context_pointers(hContext, ptr != NULL);
	if (res == ZE_RESULT_SUCCESS) {
		r = range_at(ptr);
		if (!r || r->span.base != (uintptr_t)ptr || r->span.kind > R_HOST ||
		    r->ctx != hContext)
			res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	}
	if (res == ZE_RESULT_SUCCESS) {
		fake_range_remove(&fake.registry, &fake.ranges, &r->span);
		hContext->objects--;
	}
	pthread_mutex_unlock(&fake.lock);
	if (res != ZE_RESULT_SUCCESS)
		return res;
	if (r->span.kind == R_DEVICE)
		free(ptr);
	else
		munmap(ptr, r->mapped);
	free(r);
	return ZE_RESULT_SUCCESS;
}

static ze_device_handle_t device_of(int phys)
{
	for (int i = 0; i < fake.n_visible; i++)
		if (fake.device_table[i].phys == phys)
			return &fake.device_table[i];
	return NULL;
}

/* Any pointer may be asked about: one the driver does not know is of type
 * ZE_MEMORY_TYPE_UNKNOWN, with success, as the spec says. Mapped pages of a
 * reservation are device memory, of the physical memory's device. */
ze_result_t zeMemGetAllocProperties(ze_context_handle_t hContext, const void *ptr,
				    ze_memory_allocation_properties_t *pMemAllocProperties,
				    ze_device_handle_t *phDevice)
{
	ze_memory_allocation_properties_t *p = pMemAllocProperties;
	ze_device_handle_t dev = NULL;
	struct fake_mapping *m = NULL;
	struct fake_range *span;
	ze_result_t res;
	struct range *r;

	ENTER(zeMemGetAllocProperties);
	pthread_mutex_lock(&fake.lock);
	res = check_context_pointers(hContext, ptr && p);
	if (res != ZE_RESULT_SUCCESS) {
		pthread_mutex_unlock(&fake.lock);
		return res;
	}
	p->type = ZE_MEMORY_TYPE_UNKNOWN;
	p->id = 0;
	p->pageSize = 0;
	r = range_at(ptr);
	span = r ? &r->span : NULL;
	if (r && r->span.kind == R_RESERVED)
		span = (m = fake_vmm_mapping_at(&fake.vmem, (uintptr_t)ptr)) ? &m->span : NULL;
	if (span && span->kind == R_DEVICE) {
		p->type = ZE_MEMORY_TYPE_DEVICE;
		p->pageSize = DEVICE_PAGE;
		dev = device_of(r->phys);
	} else if (span && span->kind == R_HOST) {
		p->type = ZE_MEMORY_TYPE_HOST;
		p->pageSize = (uint64_t)sysconf(_SC_PAGESIZE);
	} else if (m) {
		p->type = ZE_MEMORY_TYPE_DEVICE;
		p->pageSize = VM_PAGE;
		dev = device_of(m->pm->dev);
	}
	if (span)
		p->id = span->serial;
	pthread_mutex_unlock(&fake.lock);
	if (phDevice)
		*phDevice = dev;
	return ZE_RESULT_SUCCESS;
}

/* The allocation a pointer lies in: its base and size.  A pointer in no
 * allocation is ZE_RESULT_ERROR_INVALID_ARGUMENT (the spec's "not a valid
 * allocation"). */
ze_result_t zeMemGetAddressRange(ze_context_handle_t hContext, const void *ptr, void **pBase,
				 size_t *pSize)
{
	struct fake_range *span;
	ze_result_t res;

	ENTER(zeMemGetAddressRange);
	pthread_mutex_lock(&fake.lock);
	res = check_context_pointers(hContext, ptr != NULL);
	if (res == ZE_RESULT_SUCCESS) {
		span = fake_range_in(&fake.ranges, (uintptr_t)ptr, 1);
		if (span && span->kind == R_RESERVED)
			span = fake_range_in(&fake.vmem.mappings, (uintptr_t)ptr, 1);
		if (!span || (span->kind != R_DEVICE && span->kind != R_HOST &&
			      span->kind != R_MAPPED)) {
			res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
		} else {
			if (pBase)
				*pBase = (void *)span->base;
			if (pSize)
				*pSize = span->size;
		}
	}
	pthread_mutex_unlock(&fake.lock);
	return res;
}

/* ---- IPC ---- */

/* As the spec says, only the base of a device allocation can be exported. */
ze_result_t zeMemGetIpcHandle(ze_context_handle_t hContext, const void *ptr, ze_ipc_mem_handle_t *pIpcHandle)
{
	struct ipc_handle h;
	ze_result_t res;
	struct range *r;

	ENTER(zeMemGetIpcHandle);
	pthread_mutex_lock(&fake.lock);
	res = check_context_pointers(hContext, ptr && pIpcHandle);
	if (res == ZE_RESULT_SUCCESS) {
		r = range_at(ptr);
		if (r && r->span.kind == R_DEVICE && r->span.base == (uintptr_t)ptr) {
			memset(&h, 0, sizeof h);
			memcpy(h.magic, ipc_magic, sizeof h.magic);
			h.pid = getpid();
			h.base = r->span.base;
			h.serial = r->span.serial;
		} else {
			res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
		}
	}
	pthread_mutex_unlock(&fake.lock);
	if (res != ZE_RESULT_SUCCESS)
		return res;
	memset(pIpcHandle, 0, sizeof *pIpcHandle);
	memcpy(pIpcHandle->data, &h, sizeof h);
	return ZE_RESULT_SUCCESS;
}

/* The memory is this process's heap, so only this process can open a handle:
 * it gets the exporter's own address back. A handle from another process,
 * or naming an allocation since freed, is refused with
 * ZE_RESULT_ERROR_INVALID_ARGUMENT. */
ze_result_t zeMemOpenIpcHandle(ze_context_handle_t hContext, ze_device_handle_t hDevice,
			       ze_ipc_mem_handle_t handle, ze_ipc_memory_flags_t flags, void **pptr)
{
	struct ipc_handle h;
	ze_result_t res;
	struct range *r;

	ENTER(zeMemOpenIpcHandle);
	if ((res = check_context_device(hContext, hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (flags & ~(ze_ipc_memory_flags_t)(ZE_IPC_MEMORY_FLAG_BIAS_CACHED |
					     ZE_IPC_MEMORY_FLAG_BIAS_UNCACHED))
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (!pptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	memcpy(&h, handle.data, sizeof h);
	if (memcmp(h.magic, ipc_magic, sizeof h.magic) != 0 || h.pid != getpid())
		return misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	res = ZE_RESULT_ERROR_INVALID_ARGUMENT;
	pthread_mutex_lock(&fake.lock);
	r = fake_ipc_open(&fake.registry, &fake.ranges, h.base, h.serial, R_DEVICE);
	if (r) {
		*pptr = (void *)r->span.base;
		res = ZE_RESULT_SUCCESS;
	}
	pthread_mutex_unlock(&fake.lock);
	/* Nothing matched: the caller named what is not there. */
	return res == ZE_RESULT_SUCCESS ? res : misuse(res);
}

ze_result_t zeMemCloseIpcHandle(ze_context_handle_t hContext, const void *ptr)
{
	ze_result_t res;

	ENTER(zeMemCloseIpcHandle);
	pthread_mutex_lock(&fake.lock);
	res = check_context_pointers(hContext, ptr != NULL);
	if (res == ZE_RESULT_SUCCESS && !fake_vmm_ipc_close(&fake.vmem, (uintptr_t)ptr, R_DEVICE, 1))
		res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	pthread_mutex_unlock(&fake.lock);
	return res;
}

/* ---- virtual memory ---- */

ze_result_t zeVirtualMemQueryPageSize(ze_context_handle_t hContext, ze_device_handle_t hDevice, size_t size,
				     size_t *pagesize)
{
	ze_result_t res;

	ENTER(zeVirtualMemQueryPageSize);
	if ((res = check_context_device(hContext, hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (!pagesize)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (size == 0)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	*pagesize = VM_PAGE;
	return ZE_RESULT_SUCCESS;
}

static int vm_aligned(uintptr_t n)
{
	return fake_vmm_aligned(n, VM_PAGE);
}

/* Address space only, PROT_NONE, aligned to the page size. The header lists
 * a null pStart as an error but also says null lets the driver choose, which
 * is what Intel's driver does: null is taken. A start address is a hint, as
 * the spec says: where it is taken, the reservation is elsewhere. An address
 * that is not page aligned is refused with ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT,
 * a size that is not, with ZE_RESULT_ERROR_UNSUPPORTED_SIZE. */
ze_result_t zeVirtualMemReserve(ze_context_handle_t hContext, const void *pStart, size_t size, void **pptr)
{
	struct fake_vmm_owner owner;
	enum fake_vmm_status st;
	ze_result_t res;
	struct range *r;

	ENTER(zeVirtualMemReserve);
	if ((res = check_context(hContext)) != ZE_RESULT_SUCCESS)
		return res;
	if (!pptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (size == 0 || !vm_aligned(size))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	if (!vm_aligned((uintptr_t)pStart))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	if (!(r = malloc(sizeof *r)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	*r = (struct range){.ctx = hContext};
	owner = owner_of(hContext);
	st = fake_vmm_reserve(&fake.vmem, &r->span, pStart, size, VM_PAGE, &r->mapped, &owner);
	if (st != FAKE_VMM_OK) {
		free(r);
		return vmm_result(st);
	}
	*pptr = (void *)r->span.base;
	return ZE_RESULT_SUCCESS;
}

/* Whole reservations only (the spec allows part of one; the backend frees
 * what it reserved). Mappings still in it are unmapped, as the spec says; the
 * physical memory behind them stays. */
ze_result_t zeVirtualMemFree(ze_context_handle_t hContext, const void *ptr, size_t size)
{
	ze_result_t res;
	struct range *r;

	ENTER(zeVirtualMemFree);
	if ((res = check_context(hContext)) != ZE_RESULT_SUCCESS)
		return res;
	if (!ptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (size == 0)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	if (!vm_aligned((uintptr_t)ptr) || !vm_aligned(size))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	pthread_mutex_lock(&fake.lock);
	r = fake_vmm_reservation(&fake.vmem, (uintptr_t)ptr, size);
	if (!r || r->ctx != hContext) {
		pthread_mutex_unlock(&fake.lock);
		return misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	}
	fake_vmm_unmap(&fake.vmem, (uintptr_t)ptr, size);
	fake_range_remove(&fake.registry, &fake.ranges, &r->span);
	hContext->objects--;
	pthread_mutex_unlock(&fake.lock);
	munmap((void *)ptr, r->mapped);
	free(r);
	return ZE_RESULT_SUCCESS;
}

/* Backed by a memfd, so that the bytes outlive a mapping and two mappings of
 * one object share them, as on a device; counted against the device's
 * capacity like zeMemAllocDevice. */
ze_result_t zePhysicalMemCreate(ze_context_handle_t hContext, ze_device_handle_t hDevice,
			       ze_physical_mem_desc_t *desc, ze_physical_mem_handle_t *phPhysicalMemory)
{
	struct fake_vmm_owner owner;
	ze_physical_mem_handle_t pm;
	enum fake_vmm_status st;
	ze_result_t res;

	ENTER(zePhysicalMemCreate);
	if ((res = check_context_device(hContext, hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (!desc || !phPhysicalMemory)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (desc->flags & ~(ze_physical_mem_flags_t)ZE_PHYSICAL_MEM_FLAG_TBD)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (desc->size == 0)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	if (!vm_aligned(desc->size))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	if (!(pm = malloc(sizeof *pm)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	*pm = (struct _ze_physical_mem_handle_t){.ctx = hContext};
	owner = owner_of(hContext);
	st = fake_physical_create(&fake.vmem, &pm->phys, hDevice->phys, desc->size, &fake.used[hDevice->phys],
				  fake.capacity, &owner);
	if (st != FAKE_VMM_OK) {
		free(pm);
		return vmm_result(st);
	}
	*phPhysicalMemory = pm;
	return ZE_RESULT_SUCCESS;
}

/* Refused while mapped: the real driver would leave the mapping dangling. */
ze_result_t zePhysicalMemDestroy(ze_context_handle_t hContext, ze_physical_mem_handle_t hPhysicalMemory)
{
	ze_result_t res;

	ENTER(zePhysicalMemDestroy);
	pthread_mutex_lock(&fake.lock);
	res = check_handle(&fake.contexts, hContext);
	if (res == ZE_RESULT_SUCCESS)
		res = check_handle(&fake.vmem.physicals, hPhysicalMemory);
	if (res == ZE_RESULT_SUCCESS && hPhysicalMemory->ctx != hContext)
		res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	if (res == ZE_RESULT_SUCCESS && hPhysicalMemory->phys.maps)
		res = misuse(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE);
	if (res == ZE_RESULT_SUCCESS) {
		fake_physical_free(&fake.vmem, &hPhysicalMemory->phys);
		hContext->objects--;
	}
	pthread_mutex_unlock(&fake.lock);
	return res;
}

/* The range must lie in one reservation of the context and overlap no
 * mapping; misaligned addresses, sizes and offsets are
 * ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT, a range past the physical memory's
 * end ZE_RESULT_ERROR_INVALID_ARGUMENT. */
ze_result_t zeVirtualMemMap(ze_context_handle_t hContext, const void *ptr, size_t size,
			   ze_physical_mem_handle_t hPhysicalMemory, size_t offset,
			   ze_memory_access_attribute_t access)
{
	static const int prots[] = {PROT_NONE, PROT_READ | PROT_WRITE, PROT_READ};
	uintptr_t a = (uintptr_t)ptr;
	ze_physical_mem_handle_t pm = hPhysicalMemory;
	struct fake_mapping *m;
	ze_result_t res;
	struct range *r;

	ENTER(zeVirtualMemMap);
	if (!hPhysicalMemory)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
	if (!ptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if ((unsigned)access > ZE_MEMORY_ACCESS_ATTRIBUTE_READONLY)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (size == 0)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	if (!vm_aligned(a) || !vm_aligned(size) || !vm_aligned(offset))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	if (!(m = malloc(sizeof *m)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	pthread_mutex_lock(&fake.lock);
	res = check_handle(&fake.contexts, hContext);
	if (res == ZE_RESULT_SUCCESS)
		res = check_handle(&fake.vmem.physicals, pm);
	if (res == ZE_RESULT_SUCCESS) {
		r = fake_vmm_map_target(&fake.vmem, a, size, &pm->phys, offset);
		if (pm->ctx != hContext || !r || r->ctx != hContext)
			res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	}
	if (res == ZE_RESULT_SUCCESS &&
	    !fake_vmm_map(&fake.vmem, m, a, size, &pm->phys, offset, prots[access], hContext))
		res = ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	pthread_mutex_unlock(&fake.lock);
	if (res != ZE_RESULT_SUCCESS)
		free(m);
	return res;
}

/* Whole mappings only (the spec allows part of one): every mapping the range
 * touches must lie inside it, and it must touch one at least; otherwise
 * ZE_RESULT_ERROR_INVALID_ARGUMENT, and nothing is unmapped. */
ze_result_t zeVirtualMemUnmap(ze_context_handle_t hContext, const void *ptr, size_t size)
{
	uintptr_t a = (uintptr_t)ptr, end;
	struct fake_mapping *m;
	ze_result_t res;

	ENTER(zeVirtualMemUnmap);
	if (!ptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (!vm_aligned(a))
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
	if (size == 0 || !vm_aligned(size) || size > UINTPTR_MAX - a)
		return misuse(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
	end = a + size;
	pthread_mutex_lock(&fake.lock);
	res = check_handle(&fake.contexts, hContext);
	if (res == ZE_RESULT_SUCCESS) {
		/* The first and last mappings touched are the only ones that could stick out. */
		struct fake_mapping *first = fake_vmm_mapping_at(&fake.vmem, a);
		struct fake_mapping *last = fake_vmm_mapping_at(&fake.vmem, end - 1);

		if ((first && first->span.base < a) ||
		    (last && last->span.base + last->span.size > end) ||
		    !(m = fake_range_in(&fake.vmem.mappings, a, size)) || m->owner != hContext)
			res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	}
	if (res == ZE_RESULT_SUCCESS)
		fake_vmm_unmap(&fake.vmem, a, size);
	pthread_mutex_unlock(&fake.lock);
	return res;
}
