/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-ze-lists.c - the fake Level Zero loader's work: immediate command lists, copies, event pools, events. */
#define _GNU_SOURCE /* see fake-ze.h */
#include "fake-ze.h"

/* ---- command lists ---- */

#define QUEUE_FLAGS (ZE_COMMAND_QUEUE_FLAG_EXPLICIT_ONLY)

ze_result_t zeCommandListCreateImmediate(ze_context_handle_t hContext, ze_device_handle_t hDevice,
					 const ze_command_queue_desc_t *altdesc,
					 ze_command_list_handle_t *phCommandList)
{
	ze_command_list_handle_t l;
	ze_result_t res;

	ENTER(zeCommandListCreateImmediate);
	if ((res = check_context_device(hContext, hDevice)) != ZE_RESULT_SUCCESS)
		return res;
	if (!altdesc || !phCommandList)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if ((altdesc->flags & ~(ze_command_queue_flags_t)QUEUE_FLAGS) ||
	    (unsigned)altdesc->mode > ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS ||
	    (unsigned)altdesc->priority > ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_HIGH)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (altdesc->ordinal >= N_GROUPS || altdesc->index >= groups[altdesc->ordinal].queues)
		return misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	if (!(l = malloc(sizeof *l)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	*l = (struct _ze_command_list_handle_t){.ctx = hContext, .dev = hDevice,
						 .ordinal = altdesc->ordinal};
	if ((res = context_adopt(hContext, &fake.lists, l, &fake.live_lists)) != ZE_RESULT_SUCCESS) {
		free(l);
		return res;
	}
	*phCommandList = l;
	return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListDestroy(ze_command_list_handle_t hCommandList)
{
	ze_result_t res;

	ENTER(zeCommandListDestroy);
	pthread_mutex_lock(&fake.lock);
	res = check_handle(&fake.lists, hCommandList);
	if (res == ZE_RESULT_SUCCESS) {
		fake_handle_remove(&fake.lists, hCommandList, &fake.live_lists);
		hCommandList->ctx->objects--;
	}
	pthread_mutex_unlock(&fake.lock);
	if (res == ZE_RESULT_SUCCESS)
		free(hCommandList);
	return res;
}

/* Whether event e may be used by list l: live, and of the list's context. */
static ze_result_t check_event_for(ze_command_list_handle_t l, ze_event_handle_t e)
{
	ze_result_t res = check_handle(&fake.events, e);

	if (res == ZE_RESULT_SUCCESS && e->pool->ctx != l->ctx)
		res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	return res;
}

/* The checks every append makes, under lock: the list, its optional signal
 * event, and its wait list. */
static ze_result_t check_append(ze_command_list_handle_t l, ze_event_handle_t signal,
				uint32_t n_wait, ze_event_handle_t *wait)
{
	ze_result_t res = check_handle(&fake.lists, l);

	if (res != ZE_RESULT_SUCCESS)
		return res;
	if (n_wait && !wait)
		return misuse(ZE_RESULT_ERROR_INVALID_SIZE);
	if (signal && (res = check_event_for(l, signal)) != ZE_RESULT_SUCCESS)
		return res;
	for (uint32_t i = 0; i < n_wait; i++)
		if ((res = check_event_for(l, wait[i])) != ZE_RESULT_SUCCESS)
			return res;
	return ZE_RESULT_SUCCESS;
}

/* Work completes when it is appended; while events are held, its event is
 * signalled but pending, and reads as not ready until waited for (or until
 * events are no longer held). Under lock. */
static void signal_event(ze_event_handle_t e)
{
	if (!e)
		return;
	e->signalled = 1;
	e->pending = __atomic_load_n(&fake.hold_events, __ATOMIC_RELAXED) != 0;
	pthread_cond_broadcast(&fake.event_cond);
}

/* An append with no work but its signal: checked, and the event signalled;
 * takes the lock. */
static ze_result_t append_signal(ze_command_list_handle_t l, ze_event_handle_t signal,
				 uint32_t n_wait, ze_event_handle_t *wait)
{
	ze_result_t res;

	pthread_mutex_lock(&fake.lock);
	res = check_append(l, signal, n_wait, wait);
	if (res == ZE_RESULT_SUCCESS)
		signal_event(signal);
	pthread_mutex_unlock(&fake.lock);
	return res;
}

/* Whether [p, p + size) may be copied, under lock: where it touches a known
 * range it must lie inside it (and, in a reservation, on mapped pages that
 * allow the access); elsewhere it is the caller's host memory, which a copy
 * may use as on Intel's driver. */
static int copy_side_ok(const void *p, size_t size, int prot)
{
	uintptr_t a = (uintptr_t)p, end = a + size;
	struct range *r = fake_range_in(&fake.ranges, (uintptr_t)p, size);

	if (!r)
		return 1;
	if (a < r->span.base || size > r->span.base + r->span.size - a)
		return 0;
	if (r->span.kind != R_RESERVED)
		return 1;
	while (a < end) {
		struct fake_mapping *m = fake_vmm_mapping_at(&fake.vmem, a);

		if (!m || (m->prot & prot) != prot)
			return 0;
		a = m->span.base + m->span.size;
	}
	return 1;
}

/* The copy is done before this returns, in the calling thread: the work on
 * an immediate list then completes in order, and is done whenever anyone
 * could wait for it. The wait events are checked but not waited for: the
 * fake cannot run work later. */
ze_result_t zeCommandListAppendMemoryCopy(ze_command_list_handle_t hCommandList, void *dstptr,
					  const void *srcptr, size_t size, ze_event_handle_t hSignalEvent,
					  uint32_t numWaitEvents, ze_event_handle_t *phWaitEvents)
{
	ze_result_t res;

	ENTER(zeCommandListAppendMemoryCopy);
	if (!hCommandList)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
	if (!dstptr || !srcptr)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	pthread_mutex_lock(&fake.lock);
	res = check_append(hCommandList, hSignalEvent, numWaitEvents, phWaitEvents);
	if (res == ZE_RESULT_SUCCESS && size &&
	    (size > UINTPTR_MAX - (uintptr_t)dstptr || size > UINTPTR_MAX - (uintptr_t)srcptr ||
	     !copy_side_ok(dstptr, size, PROT_READ | PROT_WRITE) ||
	     !copy_side_ok(srcptr, size, PROT_READ)))
		res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	if (res == ZE_RESULT_SUCCESS) {
		/* Under the lock, so that a racing free fails instead of faulting here. */
		if (size)
			memmove(dstptr, srcptr, size);
		signal_event(hSignalEvent);
	}
	pthread_mutex_unlock(&fake.lock);
	return res;
}

ze_result_t zeCommandListAppendBarrier(ze_command_list_handle_t hCommandList, ze_event_handle_t hSignalEvent,
				       uint32_t numWaitEvents, ze_event_handle_t *phWaitEvents)
{
	ENTER(zeCommandListAppendBarrier);
	return append_signal(hCommandList, hSignalEvent, numWaitEvents, phWaitEvents);
}

ze_result_t zeCommandListAppendSignalEvent(ze_command_list_handle_t hCommandList, ze_event_handle_t hEvent)
{
	ENTER(zeCommandListAppendSignalEvent);
	if (!hCommandList || !hEvent)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
	return append_signal(hCommandList, hEvent, 0, NULL);
}

/* ---- events ---- */

#define POOL_FLAGS                                                                                 \
	(ZE_EVENT_POOL_FLAG_HOST_VISIBLE | ZE_EVENT_POOL_FLAG_IPC | ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP)
#define SCOPE_FLAGS (ZE_EVENT_SCOPE_FLAG_SUBDEVICE | ZE_EVENT_SCOPE_FLAG_DEVICE | ZE_EVENT_SCOPE_FLAG_HOST)

ze_result_t zeEventPoolCreate(ze_context_handle_t hContext, const ze_event_pool_desc_t *desc,
			      uint32_t numDevices, ze_device_handle_t *phDevices,
			      ze_event_pool_handle_t *phEventPool)
{
	ze_event_pool_handle_t pool;
	ze_result_t res;

	ENTER(zeEventPoolCreate);
	if ((res = check_context(hContext)) != ZE_RESULT_SUCCESS)
		return res;
	if (!desc || !phEventPool)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if (desc->flags & ~(ze_event_pool_flags_t)POOL_FLAGS)
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (desc->count == 0 || (numDevices && !phDevices))
		return misuse(ZE_RESULT_ERROR_INVALID_SIZE);
	for (uint32_t i = 0; i < numDevices; i++)
		if ((res = check_device(phDevices[i])) != ZE_RESULT_SUCCESS)
			return res;
	if (!(pool = malloc(sizeof *pool)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	*pool = (struct _ze_event_pool_handle_t){.ctx = hContext, .flags = desc->flags,
						  .count = desc->count};
	if (!(pool->used = calloc(desc->count, 1))) {
		free(pool);
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	}
	if ((res = context_adopt(hContext, &fake.pools, pool, &fake.live_pools)) != ZE_RESULT_SUCCESS) {
		free(pool->used);
		free(pool);
		return res;
	}
	*phEventPool = pool;
	return ZE_RESULT_SUCCESS;
}

/* The spec has the application destroy a pool's events first: refused otherwise. */
ze_result_t zeEventPoolDestroy(ze_event_pool_handle_t hEventPool)
{
	ze_result_t res;

	ENTER(zeEventPoolDestroy);
	pthread_mutex_lock(&fake.lock);
	res = check_handle(&fake.pools, hEventPool);
	if (res == ZE_RESULT_SUCCESS && hEventPool->live)
		res = misuse(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE);
	if (res == ZE_RESULT_SUCCESS) {
		fake_handle_remove(&fake.pools, hEventPool, &fake.live_pools);
		hEventPool->ctx->objects--;
	}
	pthread_mutex_unlock(&fake.lock);
	if (res == ZE_RESULT_SUCCESS) {
		free(hEventPool->used);
		free(hEventPool);
	}
	return res;
}

/* An index already held by a live event is refused with
 * ZE_RESULT_ERROR_INVALID_ARGUMENT, as is one past the pool's count. */
ze_result_t zeEventCreate(ze_event_pool_handle_t hEventPool, const ze_event_desc_t *desc,
			  ze_event_handle_t *phEvent)
{
	ze_event_handle_t e;
	ze_result_t res;

	ENTER(zeEventCreate);
	if (!hEventPool)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
	if (!desc || !phEvent)
		return misuse(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
	if ((desc->signal & ~(ze_event_scope_flags_t)SCOPE_FLAGS) ||
	    (desc->wait & ~(ze_event_scope_flags_t)SCOPE_FLAGS))
		return misuse(ZE_RESULT_ERROR_INVALID_ENUMERATION);
	if (!(e = malloc(sizeof *e)))
		return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	*e = (struct _ze_event_handle_t){.pool = hEventPool, .index = desc->index};
	pthread_mutex_lock(&fake.lock);
	res = check_handle(&fake.pools, hEventPool);
	if (res == ZE_RESULT_SUCCESS &&
	    (desc->index >= hEventPool->count || hEventPool->used[desc->index]))
		res = misuse(ZE_RESULT_ERROR_INVALID_ARGUMENT);
	if (res == ZE_RESULT_SUCCESS && !fake_handle_add(&fake.events, e, &fake.live_events))
		res = ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
	if (res == ZE_RESULT_SUCCESS) {
		hEventPool->used[desc->index] = 1;
		hEventPool->live++;
	}
	pthread_mutex_unlock(&fake.lock);
	if (res != ZE_RESULT_SUCCESS) {
		free(e);
		return res;
	}
	*phEvent = e;
	return ZE_RESULT_SUCCESS;
}

ze_result_t zeEventDestroy(ze_event_handle_t hEvent)
{
	ze_result_t res;

	ENTER(zeEventDestroy);
	pthread_mutex_lock(&fake.lock);
	res = check_handle(&fake.events, hEvent);
	if (res == ZE_RESULT_SUCCESS) {
		fake_handle_remove(&fake.events, hEvent, &fake.live_events);
		hEvent->pool->used[hEvent->index] = 0;
		hEvent->pool->live--;
		/* A thread waiting on it must see it gone. */
		pthread_cond_broadcast(&fake.event_cond);
	}
	pthread_mutex_unlock(&fake.lock);
	if (res == ZE_RESULT_SUCCESS)
		free(hEvent);
	return res;
}

/* Whether e reads as signalled, under lock. */
static int event_ready(ze_event_handle_t e)
{
	return e->signalled && !(e->pending && __atomic_load_n(&fake.hold_events, __ATOMIC_RELAXED));
}

/* The deadline timeout nanoseconds from now; 0 if it is too far to matter. */
static int deadline_after(uint64_t timeout, struct timespec *ts)
{
	/* Past a century, waiting is waiting for ever. */
	if (timeout > (uint64_t)100 * 365 * 86400 * 1000000000u)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(timeout / 1000000000u);
	ts->tv_nsec += (long)(timeout % 1000000000u);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
	return 1;
}

/* Timeout 0 only queries. Any other waits for a signal from another thread
 * (timeout UINT64_MAX for ever, as the real one does); a signalled event that
 * is held is released by the wait, so that a single-threaded test does not
 * hang on it. */
ze_result_t zeEventHostSynchronize(ze_event_handle_t hEvent, uint64_t timeout)
{
	struct timespec deadline;
	int timed = 0;
	ze_result_t res;

	ENTER(zeEventHostSynchronize);
	if (timeout)
		timed = deadline_after(timeout, &deadline);
	pthread_mutex_lock(&fake.lock);
	for (;;) {
		if ((res = check_handle(&fake.events, hEvent)) != ZE_RESULT_SUCCESS)
			break;
		if (timeout && hEvent->signalled)
			hEvent->pending = 0;
		if (event_ready(hEvent)) {
			res = ZE_RESULT_SUCCESS;
			break;
		}
		if (!timeout) {
			res = ZE_RESULT_NOT_READY;
			break;
		}
		if (!timed) {
			pthread_cond_wait(&fake.event_cond, &fake.lock);
		} else if (pthread_cond_timedwait(&fake.event_cond, &fake.lock, &deadline) == ETIMEDOUT) {
			timeout = 0; /* one last look */
		}
	}
	pthread_mutex_unlock(&fake.lock);
	return res;
}

ze_result_t zeEventQueryStatus(ze_event_handle_t hEvent)
{
	ze_result_t res;

	ENTER(zeEventQueryStatus);
	pthread_mutex_lock(&fake.lock);
	res = check_handle(&fake.events, hEvent);
	if (res == ZE_RESULT_SUCCESS && !event_ready(hEvent))
		res = ZE_RESULT_NOT_READY;
	pthread_mutex_unlock(&fake.lock);
	return res;
}

ze_result_t zeEventHostReset(ze_event_handle_t hEvent)
{
	ze_result_t res;

	ENTER(zeEventHostReset);
	pthread_mutex_lock(&fake.lock);
	res = check_handle(&fake.events, hEvent);
	if (res == ZE_RESULT_SUCCESS)
		hEvent->signalled = hEvent->pending = 0;
	pthread_mutex_unlock(&fake.lock);
	return res;
}

/* Holding ends with every held event complete; waiters are woken to see it. */
void fake_ze_hold_events(int hold)
{
	pthread_mutex_lock(&fake.lock);
	__atomic_store_n(&fake.hold_events, hold, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&fake.event_cond);
	pthread_mutex_unlock(&fake.lock);
}
