/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-cuda-memory.c - the fake CUDA driver's memory: device and host allocations, registrations, virtual memory, IPC. */
#define _GNU_SOURCE /* see fake-cuda.h */
#include "fake-cuda.h"

_Static_assert(sizeof(struct fake_ipc_handle) <= sizeof(CUipcMemHandle), "IPC handle too large");
static const char ipc_magic[8] = "fakecu";

/* ---- device memory ---- */

CUresult cuMemGetInfo(size_t *free, size_t *total)
{
	int dev;

	ENTER(cuMemGetInfo);
	if (!free || !total)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	pthread_mutex_lock(&fake.lock);
	*free = fake.capacity - fake.used[fake.visible[dev]];
	pthread_mutex_unlock(&fake.lock);
	*total = fake.capacity;
	return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
	struct range *r;
	int dev;

	ENTER(cuMemAlloc);
	if (!dptr || bytesize == 0)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	if ((r = malloc(sizeof *r)))
		*r = (struct range){.dev = dev};
	if (fake_vmm_alloc_device(&fake.vmem, r ? &r->span : NULL, R_DEVICE, bytesize, DEVICE_ALIGN,
				  &fake.used[fake.visible[dev]], fake.capacity, NULL) != FAKE_VMM_OK) {
		free(r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = (CUdeviceptr)r->span.base;
	return CUDA_SUCCESS;
}

/* Removes the range based at p if it is of kind; takes the lock. */
static struct range *take_range(uintptr_t p, enum range_kind kind)
{
	return fake_vmm_take(&fake.vmem, p, kind);
}

/* No context needed: the pointer names its allocation. 0 is freed as
 * nothing, as the driver does. */
CUresult cuMemFree(CUdeviceptr dptr)
{
	struct range *r;

	ENTER(cuMemFree);
	if (!dptr)
		return CUDA_SUCCESS;
	if (!(r = take_range((uintptr_t)dptr, R_DEVICE)))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	free((void *)(uintptr_t)dptr);
	free(r);
	return CUDA_SUCCESS;
}

/* ---- host memory ---- */

#define HOST_ALLOC_FLAGS                                                                           \
	(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED)

/* Page-aligned mmap()ed memory. A size of 0 is refused, as cuMemAlloc
 * documents for device memory. */
static CUresult host_alloc(void **pp, size_t bytesize, unsigned flags)
{
	struct range *r;
	int dev;

	if (!pp || bytesize == 0 || (flags & ~(unsigned)HOST_ALLOC_FLAGS))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	if (!(r = malloc(sizeof *r)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*r = (struct range){.dev = dev};
	if (fake_vmm_alloc_host(&fake.vmem, &r->span, R_HOST, bytesize, &r->mapped) != FAKE_VMM_OK) {
		free(r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pp = (void *)r->span.base;
	return CUDA_SUCCESS;
}

CUresult cuMemAllocHost(void **pp, size_t bytesize)
{
	ENTER(cuMemAllocHost);
	return host_alloc(pp, bytesize, 0);
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	ENTER(cuMemHostAlloc);
	return host_alloc(pp, bytesize, Flags);
}

/* NULL is freed as nothing, as the driver does. */
CUresult cuMemFreeHost(void *p)
{
	struct range *r;

	ENTER(cuMemFreeHost);
	if (!p)
		return CUDA_SUCCESS;
	if (!(r = take_range((uintptr_t)p, R_HOST)))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	munmap(p, r->mapped);
	free(r);
	return CUDA_SUCCESS;
}

/* Whether [p, p + size) is all mapped, and writable unless read_only will
 * do: what the driver can pin. A read-only mapping needs
 * CU_MEMHOSTREGISTER_READ_ONLY, as documented. */
static int host_pinnable(uintptr_t p, size_t size, int read_only)
{
	FILE *maps = fopen("/proc/self/maps", "re");
	uintptr_t end = p + size, start, stop;
	char line[1024], perms[5];

	if (!maps)
		return 1; /* nothing to tell by */
	while (p < end && fgets(line, sizeof line, maps)) {
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %4s", &start, &stop, perms) != 3 ||
		    stop <= p)
			continue;
		if (start > p || (perms[1] != 'w' && !read_only))
			break;
		p = stop;
	}
	fclose(maps);
	return p >= end;
}

#define HOST_REGISTER_FLAGS                                                                        \
	(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |                              \
	 CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)

CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
	struct range *r, *other;
	int dev;

	ENTER(cuMemHostRegister);
	if (!p || bytesize == 0 || (Flags & ~(unsigned)HOST_REGISTER_FLAGS) ||
	    bytesize > UINTPTR_MAX - (uintptr_t)p)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	/* What the driver cannot pin is an invalid argument to it. */
	if (!host_pinnable((uintptr_t)p, bytesize, Flags & CU_MEMHOSTREGISTER_READ_ONLY))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (!(r = malloc(sizeof *r)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*r = (struct range){.span = {.base = (uintptr_t)p, .size = bytesize, .kind = R_REGISTERED},
			    .dev = dev};
	pthread_mutex_lock(&fake.lock);
	other = fake_range_add(&fake.registry, &fake.ranges, &r->span);
	pthread_mutex_unlock(&fake.lock);
	if (other == r)
		return CUDA_SUCCESS;
	free(r);
	if (!other)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* Pinned memory pinned again is the driver's error; device memory is no host memory. */
	return other->span.kind == R_HOST || other->span.kind == R_REGISTERED ?
		       misuse(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) :
		       misuse(CUDA_ERROR_INVALID_VALUE);
}

CUresult cuMemHostUnregister(void *p)
{
	struct range *r;

	ENTER(cuMemHostUnregister);
	if (!p)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (!(r = take_range((uintptr_t)p, R_REGISTERED)))
		return misuse(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	free(r);
	return CUDA_SUCCESS;
}

/* Host memory is mapped into the device's address space at the same
 * address (unified addressing), as on every 64-bit system the driver runs
 * on. */
CUresult cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	struct range *r;
	CUresult err = CUDA_SUCCESS;

	ENTER(cuMemHostGetDevicePointer);
	if (!pdptr || !p || Flags)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	pthread_mutex_lock(&fake.lock);
	r = range_at((uintptr_t)p);
	if (!r || (r->span.kind != R_HOST && r->span.kind != R_REGISTERED))
		err = misuse(CUDA_ERROR_INVALID_VALUE);
	pthread_mutex_unlock(&fake.lock);
	if (err == CUDA_SUCCESS)
		*pdptr = (CUdeviceptr)(uintptr_t)p;
	return err;
}

/* ---- virtual memory ---- */

static int vm_aligned(uintptr_t n)
{
	return fake_vmm_aligned(n, VM_GRANULARITY);
}

/* Pinned device memory of a visible device is all the fake makes. */
static CUresult check_prop(const CUmemAllocationProp *prop)
{
	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	return check_device(prop->location.id);
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
				       CUmemAllocationGranularity_flags option)
{
	ENTER(cuMemGetAllocationGranularity);
	if (!granularity || check_prop(prop) != CUDA_SUCCESS ||
	    (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
	     option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (!fake.vmm_supported)
		return CUDA_ERROR_NOT_SUPPORTED;
	*granularity = VM_GRANULARITY;
	return CUDA_SUCCESS;
}

/* Address space only, PROT_NONE. As documented, size and addr are multiples
 * of the host page size and alignment a power of two or 0; the fake aligns a
 * reservation to the granularity at least, so that its start can be mapped.
 * addr is a hint: where it is taken, or misaligned, the range is elsewhere. */
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
			     unsigned long long flags)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct range *r;
	int dev;

	ENTER(cuMemAddressReserve);
	if (!ptr || flags || size == 0 || (size & (page - 1)) || (addr & (page - 1)) ||
	    (alignment & (alignment - 1)))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	if (alignment < VM_GRANULARITY)
		alignment = VM_GRANULARITY;
	if (!(r = malloc(sizeof *r)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*r = (struct range){.dev = dev};
	if (fake_vmm_reserve(&fake.vmem, &r->span, (void *)(uintptr_t)addr, size, alignment, &r->mapped,
			     NULL) != FAKE_VMM_OK) {
		free(r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ptr = (CUdeviceptr)r->span.base;
	return CUDA_SUCCESS;
}

/* Whole reservations, as documented. One with mappings still in it is
 * refused (the documentation says nothing of that case): the caller unmaps
 * first, and the fake leaves nothing dangling. */
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	struct range *r;

	ENTER(cuMemAddressFree);
	if (!(r = fake_vmm_unreserve(&fake.vmem, (uintptr_t)ptr, size)))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	munmap((void *)(uintptr_t)ptr, r->mapped);
	free(r);
	return CUDA_SUCCESS;
}

/* Backed by a memfd, so that the bytes outlive a mapping and two mappings of
 * one handle share them; counted against the device's capacity like
 * cuMemAlloc. No shareable handle type is offered: the devices say so in
 * CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED. */
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
		     const CUmemAllocationProp *prop, unsigned long long flags)
{
	enum fake_vmm_status st;
	struct fake_physical *pm;
	int dev;

	ENTER(cuMemCreate);
	if (!handle || flags || size == 0 || !vm_aligned(size))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(check_prop(prop));
	if (!fake.vmm_supported)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE)
		return CUDA_ERROR_NOT_SUPPORTED;
	TRY(current_device(NULL));
	dev = prop->location.id;
	if (!(pm = malloc(sizeof *pm)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	st = fake_physical_create(&fake.vmem, pm, dev, size, &fake.used[fake.visible[dev]], fake.capacity, NULL);
	if (st != FAKE_VMM_OK) {
		free(pm);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)pm;
	return CUDA_SUCCESS;
}

/* The physical memory a handle names, live or not: the registry says. */
static void *physical_handle(CUmemGenericAllocationHandle handle)
{
	return (void *)(uintptr_t)handle;
}

/* As documented, memory still mapped is freed when its last mapping goes. */
CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	ENTER(cuMemRelease);
	if (fake_physical_release(&fake.vmem, physical_handle(handle)))
		return CUDA_SUCCESS;
	return misuse(CUDA_ERROR_INVALID_VALUE);
}

/* Mapped but not accessible, as documented: the pages stay PROT_NONE until
 * cuMemSetAccess. The range must lie in one reservation and overlap no
 * mapping; ptr and size are multiples of the granularity and the offset is
 * 0, as the documentation says it must be for now. */
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
		  unsigned long long flags)
{
	CUresult err = CUDA_ERROR_INVALID_VALUE;
	struct fake_physical *pm;
	struct fake_mapping *m;
	uintptr_t a = (uintptr_t)ptr;

	ENTER(cuMemMap);
	if (!ptr || size == 0 || offset || flags || !vm_aligned(a) || !vm_aligned(size))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(NULL));
	if (!(m = malloc(sizeof *m)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fake.lock);
	pm = fake_physical_of(&fake.vmem, physical_handle(handle));
	if (fake_vmm_map_target(&fake.vmem, a, size, pm, 0))
		err = fake_vmm_map(&fake.vmem, m, a, size, pm, 0, PROT_NONE, NULL) ?
			      CUDA_SUCCESS :
			      CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&fake.lock);
	if (err != CUDA_SUCCESS)
		free(m);
	/* Nothing matched: the caller named what is not there. */
	return err == CUDA_ERROR_INVALID_VALUE ? misuse(err) : err;
}

/* Whole mappings only, as documented; a range may cover several adjacent ones. */
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	int ok;

	ENTER(cuMemUnmap);
	pthread_mutex_lock(&fake.lock);
	ok = fake_vmm_whole_mappings(&fake.vmem, (uintptr_t)ptr, size);
	if (ok)
		fake_vmm_unmap(&fake.vmem, (uintptr_t)ptr, size);
	pthread_mutex_unlock(&fake.lock);
	return ok ? CUDA_SUCCESS : misuse(CUDA_ERROR_INVALID_VALUE);
}

/* Access is kept per device, for the copies to check; the pages themselves
 * allow what any device was given, since the host stands in for them all. */
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	struct fake_access acc = {0};

	ENTER(cuMemSetAccess);
	if (!desc || count == 0)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(NULL));
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
			return misuse(CUDA_ERROR_INVALID_VALUE);
		TRY(check_device(desc[i].location.id));
		if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
		    desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		    desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return misuse(CUDA_ERROR_INVALID_VALUE);
		fake_access_give(&acc, desc[i].location.id,
				 desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE,
				 desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	}
	return fake_vmm_set_access(&fake.vmem, (uintptr_t)ptr, size, &acc) ?
		       CUDA_SUCCESS :
		       misuse(CUDA_ERROR_INVALID_VALUE);
}

/* ---- IPC ---- */

/* Of cuMemAlloc memory only, as documented; a pointer inside an allocation
 * is taken too, and opening the handle gives that pointer back. */
CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	struct fake_ipc_handle h;
	struct range *r;
	int found;

	ENTER(cuIpcGetMemHandle);
	if (!pHandle || !dptr)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(NULL));
	pthread_mutex_lock(&fake.lock);
	r = range_at((uintptr_t)dptr);
	found = r && r->span.kind == R_DEVICE;
	if (found)
		fake_ipc_export(&h, ipc_magic, &r->span, r->dev, (uintptr_t)dptr);
	pthread_mutex_unlock(&fake.lock);
	if (!found)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	memset(pHandle, 0, sizeof *pHandle);
	memcpy(pHandle, &h, sizeof h);
	return CUDA_SUCCESS;
}

/* The memory is this process's heap, so only this process can open a handle
 * (the driver itself refuses that; the fake allows it, being the only way a
 * single-process test can): it gets the exporter's own address back. A handle
 * from another process is well formed but cannot be mapped here. */
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	CUresult err = CUDA_ERROR_INVALID_VALUE;
	struct fake_ipc_handle h;
	struct range *r;

	ENTER(cuIpcOpenMemHandle);
	if (!pdptr || Flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(NULL));
	memcpy(&h, &handle, sizeof h);
	if (memcmp(h.magic, ipc_magic, sizeof h.magic) != 0)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (h.pid != getpid())
		return CUDA_ERROR_MAP_FAILED;
	pthread_mutex_lock(&fake.lock);
	r = fake_ipc_open(&fake.registry, &fake.ranges, h.base, h.serial, R_DEVICE);
	if (r) {
		*pdptr = (CUdeviceptr)(r->span.base + h.offset);
		err = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&fake.lock);
	/* Nothing matched: the caller named what is not there. */
	return err == CUDA_ERROR_INVALID_VALUE ? misuse(err) : err;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	CUresult err = CUDA_ERROR_INVALID_VALUE;

	ENTER(cuIpcCloseMemHandle);
	if (!dptr)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(NULL));
	pthread_mutex_lock(&fake.lock);
	if (fake_vmm_ipc_close(&fake.vmem, (uintptr_t)dptr, R_DEVICE, 0))
		err = CUDA_SUCCESS;
	pthread_mutex_unlock(&fake.lock);
	/* Nothing matched: the caller named what is not there. */
	return err == CUDA_ERROR_INVALID_VALUE ? misuse(err) : err;
}
