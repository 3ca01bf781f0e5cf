/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-hip-memory.c - the fake HIP runtime's memory: device and host allocations, registrations, virtual memory, IPC. */
#define _GNU_SOURCE /* see fake-hip.h */
#include "fake-hip.h"

_Static_assert(sizeof(struct fake_ipc_handle) <= sizeof(hipIpcMemHandle_t), "IPC handle too large");
static const char ipc_magic[8] = "fakehip";

/* ---- memory ---- */

hipError_t hipMalloc(void **ptr, size_t size)
{
	struct range *r;
	int dev;

	ENTER(hipMalloc);
	NEED_DEVICES();
	if (!ptr)
		return done(misuse(hipErrorInvalidValue));
	*ptr = NULL;
	if (size == 0)
		return done(hipSuccess);
	dev = fake.visible[this_thread.current_device];
	if ((r = malloc(sizeof *r)))
		*r = (struct range){.dev = dev};
	if (fake_vmm_alloc_device(&fake.vmem, r ? &r->span : NULL, R_DEVICE, size, DEVICE_ALIGN, &fake.used[dev],
				  fake.capacity, NULL) != FAKE_VMM_OK) {
		free(r);
		return done(hipErrorOutOfMemory);
	}
	*ptr = (void *)r->span.base;
	return done(hipSuccess);
}

/* Removes the range based at ptr if it is of kind; under no lock. */
static struct range *take_range(void *ptr, enum range_kind kind)
{
	return fake_vmm_take(&fake.vmem, (uintptr_t)ptr, kind);
}

hipError_t hipFree(void *ptr)
{
	struct range *r;

	ENTER(hipFree);
	NEED_DEVICES();
	if (!ptr)
		return done(hipSuccess);
	/* Stricter than ROCm, which also frees hipHostMalloc memory here: a
	 * backend that mixes the two is wrong on CUDA and should be told. */
	if (!(r = take_range(ptr, R_DEVICE)))
		return done(misuse(hipErrorInvalidValue));
	free(ptr);
	free(r);
	return done(hipSuccess);
}

#define HOST_MALLOC_FLAGS                                                                          \
	(hipHostMallocPortable | hipHostMallocMapped | hipHostMallocWriteCombined |                \
	 hipHostMallocNumaUser | hipHostMallocCoherent | hipHostMallocNonCoherent)

hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags)
{
	struct range *r;

	ENTER(hipHostMalloc);
	NEED_DEVICES();
	if (!ptr)
		return done(misuse(hipErrorInvalidValue));
	*ptr = NULL;
	if ((flags & ~(unsigned)HOST_MALLOC_FLAGS) ||
	    (flags & hipHostMallocCoherent && flags & hipHostMallocNonCoherent))
		return done(misuse(hipErrorInvalidValue));
	if (size == 0)
		return done(hipSuccess);
	if (!(r = malloc(sizeof *r)))
		return done(hipErrorOutOfMemory);
	*r = (struct range){0};
	if (fake_vmm_alloc_host(&fake.vmem, &r->span, R_HOST, size, &r->mapped) != FAKE_VMM_OK) {
		free(r);
		return done(hipErrorOutOfMemory);
	}
	*ptr = (void *)r->span.base;
	return done(hipSuccess);
}

hipError_t hipHostFree(void *ptr)
{
	struct range *r;

	ENTER(hipHostFree);
	NEED_DEVICES();
	if (!ptr)
		return done(hipSuccess);
	if (!(r = take_range(ptr, R_HOST)))
		return done(misuse(hipErrorInvalidValue));
	munmap(ptr, r->mapped);
	free(r);
	return done(hipSuccess);
}

#define HOST_REGISTER_FLAGS (hipHostRegisterPortable | hipHostRegisterMapped | hipHostRegisterIoMemory)

hipError_t hipHostRegister(void *hostPtr, size_t sizeBytes, unsigned int flags)
{
	struct range *r, *other;

	ENTER(hipHostRegister);
	NEED_DEVICES();
	if (!hostPtr || sizeBytes == 0 || (flags & ~(unsigned)HOST_REGISTER_FLAGS) ||
	    sizeBytes > UINTPTR_MAX - (uintptr_t)hostPtr)
		return done(misuse(hipErrorInvalidValue));
	if (!(r = malloc(sizeof *r)))
		return done(hipErrorOutOfMemory);
	*r = (struct range){
		.span = {.base = (uintptr_t)hostPtr, .size = sizeBytes, .kind = R_REGISTERED}};
	pthread_mutex_lock(&fake.lock);
	other = fake_range_add(&fake.registry, &fake.ranges, &r->span);
	pthread_mutex_unlock(&fake.lock);
	if (other == r)
		return done(hipSuccess);
	free(r);
	if (!other)
		return done(hipErrorOutOfMemory);
	/* Pinned memory pinned again is ROCm's error; device memory is no host memory. */
	return done(other->span.kind == R_DEVICE ? misuse(hipErrorInvalidValue) :
					      misuse(hipErrorHostMemoryAlreadyRegistered));
}

hipError_t hipHostUnregister(void *hostPtr)
{
	struct range *r;

	ENTER(hipHostUnregister);
	NEED_DEVICES();
	if (!hostPtr)
		return done(misuse(hipErrorInvalidValue));
	if (!(r = take_range(hostPtr, R_REGISTERED)))
		return done(misuse(hipErrorHostMemoryNotRegistered));
	free(r);
	return done(hipSuccess);
}

/* ---- virtual memory ---- */

/* The devices can map memory, or (0) cannot: the calls then answer
 * hipErrorNotSupported.  Read by the backend when it starts. */
void fake_hip_vmm(int supported)
{
	device_count(); /* FAKE_HIP_VMM is read once, before this */
	__atomic_store_n(&fake.vmm_supported, supported != 0, __ATOMIC_RELAXED);
}

static int vmm(void)
{
	device_count();
	return __atomic_load_n(&fake.vmm_supported, __ATOMIC_RELAXED);
}

static int vm_aligned(uintptr_t n)
{
	return fake_vmm_aligned(n, VM_GRANULARITY);
}

/* Pinned memory of a visible device is all the fake makes; prop is read in
 * the layout of the release the fake is. */
static hipError_t check_prop(const hipMemAllocationProp *prop)
{
	const struct abi_alloc_prop *p = (const void *)prop;

	if (!p || p->type != hipMemAllocationTypePinned ||
	    p->location.type != hipMemLocationTypeDevice)
		return misuse(hipErrorInvalidValue);
	return check_device(p->location.id);
}

hipError_t hipMemGetAllocationGranularity(size_t *granularity, const hipMemAllocationProp *prop,
					  hipMemAllocationGranularity_flags option)
{
	hipError_t err;

	ENTER(hipMemGetAllocationGranularity);
	NEED_DEVICES();
	if (!granularity || (option != hipMemAllocationGranularityMinimum &&
			     option != hipMemAllocationGranularityRecommended))
		return done(misuse(hipErrorInvalidValue));
	if ((err = check_prop(prop)) != hipSuccess)
		return done(err);
	if (!vmm())
		return done(hipErrorNotSupported);
	*granularity = VM_GRANULARITY;
	return done(hipSuccess);
}

/* Address space only, PROT_NONE, aligned to the granularity at least so that
 * its start can be mapped.  addr is a hint the fake does not take. */
hipError_t hipMemAddressReserve(void **ptr, size_t size, size_t alignment, void *addr,
				unsigned long long flags)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct range *r;

	ENTER(hipMemAddressReserve);
	NEED_DEVICES();
	(void)addr;
	if (!ptr || flags || size == 0 || (size & (page - 1)) || (alignment & (alignment - 1)))
		return done(misuse(hipErrorInvalidValue));
	if (alignment < VM_GRANULARITY)
		alignment = VM_GRANULARITY;
	if (!(r = malloc(sizeof *r)))
		return done(hipErrorOutOfMemory);
	*r = (struct range){.dev = fake.visible[this_thread.current_device]};
	if (fake_vmm_reserve(&fake.vmem, &r->span, NULL, size, alignment, &r->mapped, NULL) !=
	    FAKE_VMM_OK) {
		free(r);
		return done(hipErrorOutOfMemory);
	}
	*ptr = (void *)r->span.base;
	return done(hipSuccess);
}

/* Whole reservations.  One with mappings still in it is refused: the
 * caller unmaps first, and the fake leaves nothing dangling. */
hipError_t hipMemAddressFree(void *devPtr, size_t size)
{
	struct range *r;

	ENTER(hipMemAddressFree);
	NEED_DEVICES();
	if (!(r = fake_vmm_unreserve(&fake.vmem, (uintptr_t)devPtr, size)))
		return done(misuse(hipErrorInvalidValue));
	munmap(devPtr, r->mapped);
	free(r);
	return done(hipSuccess);
}

/* Counted against the device's capacity like hipMalloc.  No shareable
 * handle type is offered. */
hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle, size_t size,
			const hipMemAllocationProp *prop, unsigned long long flags)
{
	const struct abi_alloc_prop *p = (const void *)prop;
	hipMemGenericAllocationHandle_t pm;
	hipError_t err;
	int dev;

	ENTER(hipMemCreate);
	NEED_DEVICES();
	if (!handle || flags || size == 0 || !vm_aligned(size))
		return done(misuse(hipErrorInvalidValue));
	if ((err = check_prop(prop)) != hipSuccess)
		return done(err);
	if (!vmm() || p->requested_handle_type != hipMemHandleTypeNone)
		return done(hipErrorNotSupported);
	dev = fake.visible[p->location.id];
	if (!(pm = malloc(sizeof *pm)))
		return done(hipErrorOutOfMemory);
	if (fake_physical_create(&fake.vmem, &pm->phys, dev, size, &fake.used[dev], fake.capacity, NULL) !=
	    FAKE_VMM_OK) {
		free(pm);
		return done(hipErrorOutOfMemory);
	}
	*handle = pm;
	return done(hipSuccess);
}

/* Memory still mapped is freed when its last mapping goes. */
hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle)
{
	ENTER(hipMemRelease);
	NEED_DEVICES();
	return done(fake_physical_release(&fake.vmem, handle) ? hipSuccess :
							  misuse(hipErrorInvalidValue));
}

/* Mapped but not accessible: the pages stay PROT_NONE until hipMemSetAccess.
 * The range lies in one reservation and overlaps no mapping; ptr and size
 * are multiples of the granularity, and the offset is 0. */
hipError_t hipMemMap(void *ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
		     unsigned long long flags)
{
	hipError_t err = hipErrorInvalidValue;
	uintptr_t a = (uintptr_t)ptr;
	struct fake_physical *pm;
	struct fake_mapping *m;

	ENTER(hipMemMap);
	NEED_DEVICES();
	if (!ptr || size == 0 || offset || flags || !vm_aligned(a) || !vm_aligned(size))
		return done(misuse(hipErrorInvalidValue));
	if (!(m = malloc(sizeof *m)))
		return done(hipErrorOutOfMemory);
	pthread_mutex_lock(&fake.lock);
	pm = fake_physical_of(&fake.vmem, handle);
	if (fake_vmm_map_target(&fake.vmem, a, size, pm, 0))
		err = fake_vmm_map(&fake.vmem, m, a, size, pm, 0, PROT_NONE, NULL) ? hipSuccess :
									       hipErrorOutOfMemory;
	pthread_mutex_unlock(&fake.lock);
	if (err != hipSuccess)
		free(m);
	/* Nothing matched: the caller named what is not there. */
	return done(err == hipErrorInvalidValue ? misuse(err) : err);
}

hipError_t hipMemUnmap(void *ptr, size_t size)
{
	int ok;

	ENTER(hipMemUnmap);
	NEED_DEVICES();
	pthread_mutex_lock(&fake.lock);
	ok = fake_vmm_whole_mappings(&fake.vmem, (uintptr_t)ptr, size);
	if (ok)
		fake_vmm_unmap(&fake.vmem, (uintptr_t)ptr, size);
	pthread_mutex_unlock(&fake.lock);
	return done(ok ? hipSuccess : misuse(hipErrorInvalidValue));
}

/* Access is kept per device, for the copies to check; the pages allow what
 * any device was given, since the host stands in for them all. */
hipError_t hipMemSetAccess(void *ptr, size_t size, const hipMemAccessDesc *desc, size_t count)
{
	struct fake_access acc = {0};
	hipError_t err;

	ENTER(hipMemSetAccess);
	NEED_DEVICES();
	if (!desc || count == 0)
		return done(misuse(hipErrorInvalidValue));
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != hipMemLocationTypeDevice)
			return done(misuse(hipErrorInvalidValue));
		if ((err = check_device(desc[i].location.id)) != hipSuccess)
			return done(err);
		if (desc[i].flags != hipMemAccessFlagsProtNone &&
		    desc[i].flags != hipMemAccessFlagsProtRead &&
		    desc[i].flags != hipMemAccessFlagsProtReadWrite)
			return done(misuse(hipErrorInvalidValue));
		fake_access_give(&acc, desc[i].location.id,
				 desc[i].flags != hipMemAccessFlagsProtNone,
				 desc[i].flags == hipMemAccessFlagsProtReadWrite);
	}
	return done(fake_vmm_set_access(&fake.vmem, (uintptr_t)ptr, size, &acc) ?
			    hipSuccess :
			    misuse(hipErrorInvalidValue));
}

/* ---- IPC ---- */

hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *handle, void *devPtr)
{
	struct fake_ipc_handle h;
	struct range *r;
	int found;

	ENTER(hipIpcGetMemHandle);
	NEED_DEVICES();
	if (!handle || !devPtr)
		return done(misuse(hipErrorInvalidValue));
	pthread_mutex_lock(&fake.lock);
	r = range_at(devPtr);
	found = r && r->span.kind == R_DEVICE;
	if (found)
		fake_ipc_export(&h, ipc_magic, &r->span, r->dev, (uintptr_t)devPtr);
	pthread_mutex_unlock(&fake.lock);
	if (!found)
		return done(misuse(hipErrorInvalidValue));
	memset(handle, 0, sizeof *handle);
	memcpy(handle, &h, sizeof h);
	return done(hipSuccess);
}

/* The memory is this process's heap, so only this process can open a handle:
 * it gets the exporter's own address back. A handle from another process is
 * well formed but cannot be mapped here. */
hipError_t hipIpcOpenMemHandle(void **devPtr, hipIpcMemHandle_t handle, unsigned int flags)
{
	hipError_t err = hipErrorInvalidValue;
	struct fake_ipc_handle h;
	struct range *r;

	ENTER(hipIpcOpenMemHandle);
	NEED_DEVICES();
	if (!devPtr || flags != hipIpcMemLazyEnablePeerAccess)
		return done(misuse(hipErrorInvalidValue));
	memcpy(&h, &handle, sizeof h);
	if (memcmp(h.magic, ipc_magic, sizeof h.magic) != 0)
		return done(misuse(hipErrorInvalidValue));
	if (h.pid != getpid())
		return done(hipErrorMapFailed);
	pthread_mutex_lock(&fake.lock);
	r = fake_ipc_open(&fake.registry, &fake.ranges, h.base, h.serial, R_DEVICE);
	if (r) {
		*devPtr = (char *)r->span.base + h.offset;
		err = hipSuccess;
	}
	pthread_mutex_unlock(&fake.lock);
	/* Nothing matched: the caller named what is not there. */
	return done(err == hipErrorInvalidValue ? misuse(err) : err);
}

hipError_t hipIpcCloseMemHandle(void *devPtr)
{
	hipError_t err = hipErrorInvalidValue;

	ENTER(hipIpcCloseMemHandle);
	NEED_DEVICES();
	if (!devPtr)
		return done(misuse(hipErrorInvalidValue));
	pthread_mutex_lock(&fake.lock);
	if (fake_vmm_ipc_close(&fake.vmem, (uintptr_t)devPtr, R_DEVICE, 0))
		err = hipSuccess;
	pthread_mutex_unlock(&fake.lock);
	/* Nothing matched: the caller named what is not there. */
	return done(err == hipErrorInvalidValue ? misuse(err) : err);
}
