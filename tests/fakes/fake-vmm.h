/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-vmm.h - the fake vendor runtimes' shared memory bookkeeping: allocations, reservations, physical memory, mappings. */
#ifndef FAKE_VMM_H
#define FAKE_VMM_H

/* memfd_create and MAP_FIXED_NOREPLACE want the _GNU_SOURCE each fake defines
 * before any include. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "fake-registry.h"

/* Everything here is static inline, as in fake-registry.h.  What the three
 * memory APIs share lives here: device and host allocations, address space reserved PROT_NONE,
 * physical memory backed by a memfd and counted against a device's capacity,
 * and mappings of the one in the other.  Each fake keeps its entry points,
 * its argument checks, its error codes and its misuse reports: the helpers
 * answer with a status or a pointer, and the fake says what that means in
 * its vendor's terms.  Names say when a helper wants the fake's lock held. */

/* What a helper that can fail in several ways answers. */
enum fake_vmm_status {
	FAKE_VMM_OK,
	FAKE_VMM_NO_DEVICE_MEMORY, /* the device's capacity is used up */
	FAKE_VMM_NO_HOST_MEMORY,   /* malloc, mmap, memfd_create or tsearch failed */
	FAKE_VMM_NO_OWNER,         /* the owner is gone (see struct fake_vmm_owner) */
};

/* Physical memory: each fake's handle begins with one. A memfd, so that the
 * bytes outlive a mapping and two mappings of one handle share them. */
struct fake_physical {
	int dev; /* the fake's own device number (visible or physical ordinal) */
	size_t size;
	int fd;
	size_t *used; /* what counts the device's capacity in use: size is given back to it */
	unsigned long maps;
	int released; /* released while mapped: freed at the last unmap */
};

/* A mapping of physical memory into a reservation, in the mappings tree. */
struct fake_mapping {
	struct fake_range span; /* first, for the registry; its kind is the fake's mapped kind */
	struct fake_physical *pm;
	const void *owner;         /* the owner it was made in, where the fake has owners */
	int prot;                  /* what the pages allow */
	uint64_t readers, writers; /* devices given access, where the fake keeps it per device */
};

/* One fake's virtual memory: the trees and counts, all under *lock. */
struct fake_vmm {
	pthread_mutex_t *lock;
	struct fake_registry *registry;
	void **ranges;          /* the fake's address ranges, reservations among them */
	unsigned reserved_kind; /* the fake's range kinds for reservations and mappings */
	unsigned mapped_kind;
	const char *memfd_name; /* "fake-cuda-physical" */
	void *mappings;         /* struct fake_mapping, inside reservations */
	void *physicals;        /* handles of struct fake_physical */
	unsigned long live_physicals;
	size_t physical_bytes;
};

/* A fake's struct fake_vmm, on its lock, registry and tree of ranges. */
#define FAKE_VMM_INIT(lock_, registry_, ranges_, reserved_kind_, mapped_kind_, memfd_name_)        \
	{                                                                                          \
		.lock = (lock_), .registry = (registry_), .ranges = (ranges_),                     \
		.reserved_kind = (reserved_kind_), .mapped_kind = (mapped_kind_),                  \
		.memfd_name = (memfd_name_)                                                        \
	}

/* What a fake's objects may belong to (a Level Zero context): checked to be
 * live, and counted, under the lock, as an object is made in it. NULL where
 * the fake has no owners. */
struct fake_vmm_owner {
	void *const *tree; /* where the live owners' handles are */
	const void *handle;
	unsigned long *objects; /* what it owns */
};

/* Whether o is live, under lock; a fake without owners has them all. */
static inline int fake_vmm_owner_known(const struct fake_vmm_owner *o)
{
	return !o || fake_handle_known(o->tree, o->handle);
}

/* One more object made in o, under lock. */
static inline void fake_vmm_owner_count(const struct fake_vmm_owner *o)
{
	if (o)
		++*o->objects;
}

/* Whether n is a multiple of align, a power of two. */
static inline int fake_vmm_aligned(uintptr_t n, size_t align)
{
	return (n & (align - 1)) == 0;
}

/* Takes size bytes of a device's capacity, which *used counts; takes the lock. */
static inline enum fake_vmm_status fake_vmm_capacity_take(struct fake_vmm *vmm, size_t size,
							  size_t *used, size_t capacity)
{
	enum fake_vmm_status st = FAKE_VMM_OK;

	pthread_mutex_lock(vmm->lock);
	if (size > capacity - *used)
		st = FAKE_VMM_NO_DEVICE_MEMORY;
	else
		*used += size;
	pthread_mutex_unlock(vmm->lock);
	return st;
}

/* Enters r, the first member of the fake's range, which the caller has
 * made and filled, in the fake's ranges, counted in owner. Takes the lock.
 * On failure r is the caller's to free. */
static inline enum fake_vmm_status fake_vmm_add(struct fake_vmm *vmm, struct fake_range *r,
						const struct fake_vmm_owner *owner)
{
	enum fake_vmm_status st = FAKE_VMM_OK;

	pthread_mutex_lock(vmm->lock);
	if (!fake_vmm_owner_known(owner))
		st = FAKE_VMM_NO_OWNER;
	else if (fake_range_add(vmm->registry, vmm->ranges, r) != r)
		st = FAKE_VMM_NO_HOST_MEMORY;
	else
		fake_vmm_owner_count(owner);
	pthread_mutex_unlock(vmm->lock);
	return st;
}

/* The range of kind based at a, taken out of the fake's ranges (device
 * memory goes back to its device), taking the lock; NULL if none. It is
 * the fake's own range, hence void: the caller frees what it holds, and it. */
static inline void *fake_vmm_take(struct fake_vmm *vmm, uintptr_t a, unsigned kind)
{
	struct fake_range *r;

	pthread_mutex_lock(vmm->lock);
	r = fake_range_in(vmm->ranges, a, 1);
	if (r && (r->base != a || r->kind != kind))
		r = NULL;
	if (r)
		fake_range_remove(vmm->registry, vmm->ranges, r);
	pthread_mutex_unlock(vmm->lock);
	return r;
}

/* ---- allocations ---- */

/* Device memory: size bytes aligned to align (a power of two), taken from
 * the capacity *used counts -- the bytes asked for, so that a test can fill a
 * device exactly -- and entered as r of kind, the first member of the
 * fake's range, which the caller has made (NULL where malloc failed) and
 * filled but for r. r->base is then the memory, which the caller free()s
 * when it takes the range out; the removal gives the bytes back to the
 * device. Takes the lock. On failure r is the caller's to free. */
static inline enum fake_vmm_status fake_vmm_alloc_device(struct fake_vmm *vmm, struct fake_range *r,
							 unsigned kind, size_t size, size_t align,
							 size_t *used, size_t capacity,
							 const struct fake_vmm_owner *owner)
{
	enum fake_vmm_status st = FAKE_VMM_OK;
	void *p;

	if ((st = fake_vmm_capacity_take(vmm, size, used, capacity)) != FAKE_VMM_OK)
		return st;
	p = size > SIZE_MAX - align ? NULL : aligned_alloc(align, (size + align - 1) & ~(align - 1));
	pthread_mutex_lock(vmm->lock);
	if (!r || !p) {
		st = FAKE_VMM_NO_HOST_MEMORY;
	} else if (!fake_vmm_owner_known(owner)) {
		st = FAKE_VMM_NO_OWNER;
	} else {
		*r = (struct fake_range){.base = (uintptr_t)p, .size = size, .kind = kind, .used = used};
		if (fake_range_add(vmm->registry, vmm->ranges, r) != r)
			st = FAKE_VMM_NO_HOST_MEMORY;
		else
			fake_vmm_owner_count(owner);
	}
	if (st != FAKE_VMM_OK)
		*used -= size;
	pthread_mutex_unlock(vmm->lock);
	if (st != FAKE_VMM_OK)
		free(p);
	return st;
}

/* Host memory: size bytes of page-aligned, mmap()ed pages, entered as r of
 * kind (as in fake_vmm_alloc_device); the length to munmap() goes to
 * *mapped_p. Takes the lock. On failure r is the caller's to free. */
static inline enum fake_vmm_status fake_vmm_alloc_host(struct fake_vmm *vmm, struct fake_range *r,
						       unsigned kind, size_t size, size_t *mapped_p)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len;
	enum fake_vmm_status st;
	void *p;

	if (size > SIZE_MAX - page)
		return FAKE_VMM_NO_HOST_MEMORY;
	len = (size + page - 1) & ~(page - 1);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return FAKE_VMM_NO_HOST_MEMORY;
	*r = (struct fake_range){.base = (uintptr_t)p, .size = size, .kind = kind};
	st = fake_vmm_add(vmm, r, NULL);
	if (st != FAKE_VMM_OK)
		munmap(p, len);
	else
		*mapped_p = len;
	return st;
}

/* Closes an IPC handle opened on the range of kind that holds a (that is
 * based at a, if exact), under lock; 0 if there is none open on it. */
static inline int fake_vmm_ipc_close(struct fake_vmm *vmm, uintptr_t a, unsigned kind, int exact)
{
	struct fake_range *r = fake_range_in(vmm->ranges, a, 1);

	if (!r || r->kind != kind || (exact && r->base != a) || !r->ipc_opens)
		return 0;
	fake_range_ipc_close(vmm->registry, r);
	return 1;
}

/* ---- reservations ---- */

/* Reserves size bytes of address space, PROT_NONE, aligned to align (a power
 * of two) at least; a hint that is so aligned is taken where it is free, and
 * otherwise the range is elsewhere. The range enters the fake's ranges as r,
 * the first member of the fake's own range, which the caller has made and
 * filled but for r; the length to munmap() goes to *mapped_p. Takes the lock.
 * On failure nothing is mapped, and r is the caller's to free. */
static inline enum fake_vmm_status fake_vmm_reserve(struct fake_vmm *vmm, struct fake_range *r,
						    const void *hint, size_t size, size_t align,
						    size_t *mapped_p,
						    const struct fake_vmm_owner *owner)
{
	enum fake_vmm_status st;
	size_t len = size;
	void *p = NULL;

	if (hint && fake_vmm_aligned((uintptr_t)hint, align)) {
		p = mmap((void *)hint, size, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		/* Kernels before 4.17 take the flag for a plain hint. */
		if (p != MAP_FAILED && p != hint)
			munmap(p, size);
		if (p != hint)
			p = NULL;
	}
	if (!p && !(p = fake_map_aligned(size, align, PROT_NONE, &len)))
		return FAKE_VMM_NO_HOST_MEMORY;
	*r = (struct fake_range){.base = (uintptr_t)p, .size = size, .kind = vmm->reserved_kind};
	st = fake_vmm_add(vmm, r, owner);
	if (st != FAKE_VMM_OK)
		munmap(p, len);
	else
		*mapped_p = len;
	return st;
}

/* The reservation that is exactly [a, a + size), under lock; NULL if none.
 * It is the fake's own range, hence void. */
static inline void *fake_vmm_reservation(struct fake_vmm *vmm, uintptr_t a, size_t size)
{
	struct fake_range *r = fake_range_in(vmm->ranges, a, 1);

	if (!a || !r || r->kind != vmm->reserved_kind || r->base != a || r->size != size)
		return NULL;
	return r;
}

/* Whether any mapping overlaps [a, a + size), under lock. */
static inline int fake_vmm_mapped(struct fake_vmm *vmm, uintptr_t a, size_t size)
{
	return fake_range_in(&vmm->mappings, a, size) != NULL;
}

/* The reservation that is exactly [a, a + size), taken out of the fake's
 * ranges unless mappings are still in it, taking the lock; NULL if not. The
 * caller munmap()s and frees it. */
static inline void *fake_vmm_unreserve(struct fake_vmm *vmm, uintptr_t a, size_t size)
{
	struct fake_range *r;

	pthread_mutex_lock(vmm->lock);
	r = fake_vmm_reservation(vmm, a, size);
	if (r && fake_vmm_mapped(vmm, r->base, r->size))
		r = NULL;
	if (r)
		fake_range_remove(vmm->registry, vmm->ranges, r);
	pthread_mutex_unlock(vmm->lock);
	return r;
}

/* ---- physical memory ---- */

/* Frees physical memory, under lock; its bytes go back to the device. */
static inline void fake_physical_free(struct fake_vmm *vmm, struct fake_physical *pm)
{
	fake_handle_remove(&vmm->physicals, pm, &vmm->live_physicals);
	vmm->physical_bytes -= pm->size;
	*pm->used -= pm->size;
	close(pm->fd);
	free(pm);
}

/* Makes pm, the first member of the fake's handle, which the caller has made
 * and filled but for pm, into size bytes of dev's memory: taken from the
 * capacity *used counts, as the fake's other allocations are. Takes the lock.
 * On failure pm is the caller's to free. */
static inline enum fake_vmm_status fake_physical_create(struct fake_vmm *vmm,
							struct fake_physical *pm, int dev,
							size_t size, size_t *used, size_t capacity,
							const struct fake_vmm_owner *owner)
{
	enum fake_vmm_status st = FAKE_VMM_OK;
	int fd;

	if ((st = fake_vmm_capacity_take(vmm, size, used, capacity)) != FAKE_VMM_OK)
		return st;
	fd = memfd_create(vmm->memfd_name, MFD_CLOEXEC);
	if (fd >= 0 && (size > (size_t)INT64_MAX || ftruncate(fd, (off_t)size) != 0)) {
		close(fd);
		fd = -1;
	}
	*pm = (struct fake_physical){.dev = dev, .size = size, .fd = fd, .used = used};
	pthread_mutex_lock(vmm->lock);
	if (fd < 0)
		st = FAKE_VMM_NO_HOST_MEMORY;
	else if (!fake_vmm_owner_known(owner))
		st = FAKE_VMM_NO_OWNER;
	else if (!fake_handle_add(&vmm->physicals, pm, &vmm->live_physicals))
		st = FAKE_VMM_NO_HOST_MEMORY;
	if (st == FAKE_VMM_OK) {
		fake_vmm_owner_count(owner);
		vmm->physical_bytes += size;
	} else {
		*used -= size;
	}
	pthread_mutex_unlock(vmm->lock);
	if (st != FAKE_VMM_OK && fd >= 0)
		close(fd);
	return st;
}

/* h, if it is live physical memory not yet released, under lock; NULL if not. */
static inline struct fake_physical *fake_physical_of(struct fake_vmm *vmm, void *h)
{
	struct fake_physical *pm = h;

	return fake_handle_known(&vmm->physicals, pm) && !pm->released ? pm : NULL;
}

/* Releases h, taking the lock: memory still mapped is freed when its last
 * mapping goes. 0 if h is not live, unreleased physical memory. */
static inline int fake_physical_release(struct fake_vmm *vmm, void *h)
{
	struct fake_physical *pm;

	pthread_mutex_lock(vmm->lock);
	if ((pm = fake_physical_of(vmm, h))) {
		if (pm->maps)
			pm->released = 1;
		else
			fake_physical_free(vmm, pm);
	}
	pthread_mutex_unlock(vmm->lock);
	return pm != NULL;
}

/* ---- mappings ---- */

/* The reservation in which size bytes of pm from offset could be mapped at
 * a, under lock: the range lies in one reservation, overlaps no mapping, and
 * pm has the bytes. NULL if not (pm NULL too). */
static inline void *fake_vmm_map_target(struct fake_vmm *vmm, uintptr_t a, size_t size,
					const struct fake_physical *pm, size_t offset)
{
	struct fake_range *r = fake_range_in(vmm->ranges, a, 1);

	if (!pm || offset > pm->size || size > pm->size - offset || !r ||
	    r->kind != vmm->reserved_kind || size > r->base + r->size - a ||
	    fake_vmm_mapped(vmm, a, size))
		return NULL;
	return r;
}

/* Maps size bytes of pm from offset at a, with prot, as m, which the caller
 * has allocated; under lock, after fake_vmm_map_target. 0 if the pages could
 * not be mapped or entered: then m is the caller's to free. */
static inline int fake_vmm_map(struct fake_vmm *vmm, struct fake_mapping *m, uintptr_t a,
			       size_t size, struct fake_physical *pm, size_t offset, int prot,
			       const void *owner)
{
	*m = (struct fake_mapping){.span = {.base = a, .size = size, .kind = vmm->mapped_kind},
				   .pm = pm, .owner = owner, .prot = prot};
	if (mmap((void *)a, size, prot, MAP_SHARED | MAP_FIXED, pm->fd, (off_t)offset) ==
	    MAP_FAILED)
		return 0;
	if (fake_range_add(vmm->registry, &vmm->mappings, &m->span) != m) {
		mmap((void *)a, size, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
		return 0;
	}
	pm->maps++;
	return 1;
}

/* The mapping holding address a, under lock; NULL if none. */
static inline struct fake_mapping *fake_vmm_mapping_at(struct fake_vmm *vmm, uintptr_t a)
{
	return fake_range_in(&vmm->mappings, a, 1);
}

/* Whether [a, a + size) is exactly a run of whole, adjacent mappings, under lock. */
static inline int fake_vmm_whole_mappings(struct fake_vmm *vmm, uintptr_t a, size_t size)
{
	uintptr_t end = a + size;
	struct fake_mapping *m;

	if (!a || size == 0 || size > UINTPTR_MAX - a)
		return 0;
	while (a < end) {
		m = fake_vmm_mapping_at(vmm, a);
		if (!m || m->span.base != a || m->span.size > end - a)
			return 0;
		a += m->span.size;
	}
	return 1;
}

/* Removes mapping m, under lock; its pages go back to reserved address space,
 * and released memory whose last mapping this was is freed. */
static inline void fake_vmm_unmap_one(struct fake_vmm *vmm, struct fake_mapping *m)
{
	struct fake_physical *pm = m->pm;

	fake_range_remove(vmm->registry, &vmm->mappings, &m->span);
	mmap((void *)m->span.base, m->span.size, PROT_NONE,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	free(m);
	if (--pm->maps == 0 && pm->released)
		fake_physical_free(vmm, pm);
}

/* Removes every mapping that overlaps [a, a + size), under lock. */
static inline void fake_vmm_unmap(struct fake_vmm *vmm, uintptr_t a, size_t size)
{
	struct fake_mapping *m;

	while ((m = fake_range_in(&vmm->mappings, a, size)))
		fake_vmm_unmap_one(vmm, m);
}

/* ---- per-device access ---- */

/* What an access call gives: devices are bits; named says which of them the
 * call names, readers and writers what each named one may do. */
struct fake_access {
	uint64_t named, readers, writers;
};

/* Device dev may read, and write, or not; a device named twice gets what
 * its last entry says. */
static inline void fake_access_give(struct fake_access *acc, int dev, int read, int write)
{
	uint64_t bit = (uint64_t)1 << dev;

	acc->named |= bit;
	acc->readers = (acc->readers & ~bit) | (read ? bit : 0);
	acc->writers = (acc->writers & ~bit) | (write ? bit : 0);
}

/* Gives acc to [a, a + size), which must be a run of whole mappings, taking
 * the lock; the devices acc does not name keep what they had. The pages
 * allow what any device was given, since the host stands in for them all.
 * 0 if the range is not whole mappings. */
static inline int fake_vmm_set_access(struct fake_vmm *vmm, uintptr_t a, size_t size,
				      const struct fake_access *acc)
{
	uintptr_t end = a + size;
	struct fake_mapping *m;
	int ok;

	pthread_mutex_lock(vmm->lock);
	ok = fake_vmm_whole_mappings(vmm, a, size);
	while (ok && a < end) {
		m = fake_vmm_mapping_at(vmm, a);
		m->readers = (m->readers & ~acc->named) | (acc->readers & acc->named);
		m->writers = (m->writers & ~acc->named) | (acc->writers & acc->named);
		m->prot = m->writers ? PROT_READ | PROT_WRITE : m->readers ? PROT_READ : PROT_NONE;
		mprotect((void *)m->span.base, m->span.size, m->prot);
		a += m->span.size;
	}
	pthread_mutex_unlock(vmm->lock);
	return ok;
}

/* What device dev may do with [p, p + size) in a reservation, under lock. */
enum fake_vmm_reach {
	FAKE_VMM_REACHED,
	FAKE_VMM_UNMAPPED, /* part of it is not mapped */
	FAKE_VMM_DENIED,   /* a mapping does not give dev the access asked for */
};

static inline enum fake_vmm_reach fake_vmm_reach(struct fake_vmm *vmm, uintptr_t p, size_t size,
						 int dev, int write)
{
	uint64_t bit = (uint64_t)1 << dev;
	struct fake_mapping *m;

	for (;;) {
		if (!(m = fake_vmm_mapping_at(vmm, p)))
			return FAKE_VMM_UNMAPPED;
		if (!((write ? m->writers : m->readers) & bit))
			return FAKE_VMM_DENIED;
		if (size <= m->span.base + m->span.size - p)
			return FAKE_VMM_REACHED;
		size -= m->span.base + m->span.size - p;
		p = m->span.base + m->span.size;
	}
}

#endif
