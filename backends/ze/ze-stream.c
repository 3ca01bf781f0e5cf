/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* ze-stream.c - the Level Zero backend's streams, copies and events. */
#include "ze.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * A stream is an immediate command list with a lock of its own, and each
 * copy on it is followed by a barrier, so that it runs in order.  Events
 * come from per-device pools of POOL_EVENTS: a bit in used for each one
 * taken and in lost for each one the loader would not destroy, both under
 * the device's pool_lock.  An event never recorded is complete.
 */

int stream_open(struct ze_state *s, int dev, struct ze_stream *st)
{
	struct ze_dev *d = &s->devs[dev];
	ze_command_queue_desc_t desc = {.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
					.ordinal = d->copy_ordinal,
					.mode = ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
					.priority = ZE_COMMAND_QUEUE_PRIORITY_NORMAL};

	CHECK(s, s->zeCommandListCreateImmediate(d->context, d->device, &desc, &st->list),
	      "zeCommandListCreateImmediate", dev);
	pthread_mutex_init(&st->lock, NULL);
	st->dev = dev;
	return 0;
}

static struct ze_stream *stream_of(struct ze_state *s, int dev, devcache_stream_t stream)
{
	return stream ? stream : &s->devs[dev].dflt;
}

/* A copy, then a barrier: immediate lists of Level Zero 1.4 do not promise
 * to run in order, and a stream must. */
static int copy(struct ze_state *s, int dev, void *dst, const void *src, size_t size,
		devcache_stream_t stream, const char *direction)
{
	struct ze_stream *st = stream_of(s, dev, stream);
	const char *call = "zeCommandListAppendMemoryCopy";
	char what[80];
	ze_result_t r;

	pthread_mutex_lock(&st->lock);
	r = s->zeCommandListAppendMemoryCopy(st->list, dst, src, size, NULL, 0, NULL);
	if (r == ZE_RESULT_SUCCESS) {
		call = "zeCommandListAppendBarrier";
		r = s->zeCommandListAppendBarrier(st->list, NULL, 0, NULL);
	}
	pthread_mutex_unlock(&st->lock);
	if (r == ZE_RESULT_SUCCESS)
		return 0;
	snprintf(what, sizeof what, "%s (%s)", call, direction);
	return fail(s, r, what, dev);
}

int ze_memcpy_htod(void *state, int dev, void *dst, const void *src, size_t size,
		   devcache_stream_t stream)
{
	return copy(state, dev, dst, src, size, stream, _("a copy to the device"));
}

int ze_memcpy_dtoh(void *state, int dev, void *dst, const void *src, size_t size,
		   devcache_stream_t stream)
{
	return copy(state, dev, dst, src, size, stream, _("a copy to the host"));
}

int ze_stream_create(void *state, int dev, devcache_stream_t *stream_p)
{
	struct ze_state *s = state;
	struct ze_stream *st = calloc(1, sizeof *st);
	int rc;

	if (!st)
		return s->host->error(DEVCACHE_ENOMEM, _("ze: out of memory"));
	if ((rc = stream_open(s, dev, st))) {
		free(st);
		return rc;
	}
	*stream_p = st;
	return 0;
}

int ze_stream_destroy(void *state, int dev, devcache_stream_t stream)
{
	struct ze_state *s = state;
	struct ze_stream *st = stream;

	ze_result_t r;

	if (!st)
		return 0;
	/* Refused, the list is the loader's for good: the stream is gone
	 * all the same, and its context cannot be destroyed. */
	if ((r = s->zeCommandListDestroy(st->list)) != ZE_RESULT_SUCCESS)
		__atomic_add_fetch(&s->devs[dev].lost, 1, __ATOMIC_RELAXED);
	pthread_mutex_destroy(&st->lock);
	free(st);
	return r == ZE_RESULT_SUCCESS ? 0 : fail(s, r, "zeCommandListDestroy", dev);
}

/* An event from the device's pools: a free index, or a new pool. */
static int event_take(struct ze_state *s, int dev, struct ze_event *e)
{
	struct ze_dev *d = &s->devs[dev];
	struct ze_pool *p;
	ze_result_t r = ZE_RESULT_SUCCESS;

	pthread_mutex_lock(&d->pool_lock);
	for (p = d->pools; p && p->used == UINT64_MAX; p = p->next)
		;
	if (!p && (p = calloc(1, sizeof *p))) {
		ze_event_pool_desc_t desc = {.stype = ZE_STRUCTURE_TYPE_EVENT_POOL_DESC,
					     .flags = ZE_EVENT_POOL_FLAG_HOST_VISIBLE,
					     .count = POOL_EVENTS};

		r = s->zeEventPoolCreate(d->context, &desc, 1, &d->device, &p->pool);
		if (r != ZE_RESULT_SUCCESS) {
			free(p);
			p = NULL;
		} else {
			p->next = d->pools;
			d->pools = p;
		}
	}
	if (p) {
		e->index = (uint32_t)__builtin_ctzll(~p->used);
		e->pool = p;
		p->used |= 1ull << e->index;
	}
	pthread_mutex_unlock(&d->pool_lock);
	if (!p)
		return r ? fail(s, r, "zeEventPoolCreate", dev)
			 : s->host->error(DEVCACHE_ENOMEM, _("ze: out of memory"));
	ze_event_desc_t desc = {.stype = ZE_STRUCTURE_TYPE_EVENT_DESC,
				.index = e->index,
				.signal = ZE_EVENT_SCOPE_FLAG_HOST,
				.wait = ZE_EVENT_SCOPE_FLAG_HOST};
	r = s->zeEventCreate(e->pool->pool, &desc, &e->event);
	if (r != ZE_RESULT_SUCCESS) {
		pthread_mutex_lock(&d->pool_lock);
		e->pool->used &= ~(1ull << e->index);
		pthread_mutex_unlock(&d->pool_lock);
		return fail(s, r, "zeEventCreate", dev);
	}
	return 0;
}

/* An event back to its pool; one the loader would not destroy keeps its
 * index, which a new event cannot then take, and its pool. */
static void event_give(struct ze_state *s, int dev, struct ze_event *e)
{
	struct ze_dev *d = &s->devs[dev];
	ze_result_t r = s->zeEventDestroy(e->event);

	if (r != ZE_RESULT_SUCCESS)
		left(s, dev, _("the loader refused to destroy an event"), "zeEventDestroy", r);
	pthread_mutex_lock(&d->pool_lock);
	if (r == ZE_RESULT_SUCCESS)
		e->pool->used &= ~(1ull << e->index);
	else
		e->pool->lost |= 1ull << e->index;
	pthread_mutex_unlock(&d->pool_lock);
}

/* Signal ev once everything queued on the stream so far is done. */
static int record(struct ze_state *s, int dev, ze_event_handle_t ev, devcache_stream_t stream)
{
	struct ze_stream *st = stream_of(s, dev, stream);
	ze_result_t r;

	CHECK(s, s->zeEventHostReset(ev), "zeEventHostReset", dev);
	pthread_mutex_lock(&st->lock);
	r = s->zeCommandListAppendBarrier(st->list, ev, 0, NULL);
	pthread_mutex_unlock(&st->lock);
	CHECK(s, r, "zeCommandListAppendBarrier", dev);
	return 0;
}

int ze_stream_synchronize(void *state, int dev, devcache_stream_t stream)
{
	struct ze_state *s = state;
	struct ze_event e;
	int rc = event_take(s, dev, &e);

	if (rc)
		return rc;
	if ((rc = record(s, dev, e.event, stream)) == 0) {
		ze_result_t r = s->zeEventHostSynchronize(e.event, UINT64_MAX);

		if (r != ZE_RESULT_SUCCESS)
			rc = fail(s, r, "zeEventHostSynchronize", dev);
	}
	event_give(s, dev, &e);
	return rc;
}

int ze_event_create(void *state, int dev, devcache_event_t *event_p)
{
	struct ze_state *s = state;
	struct ze_event *e = malloc(sizeof *e);
	int rc;

	if (!e)
		return s->host->error(DEVCACHE_ENOMEM, _("ze: out of memory"));
	if ((rc = event_take(s, dev, e))) {
		free(e);
		return rc;
	}
	e->recorded = false;
	*event_p = e;
	return 0;
}

int ze_event_destroy(void *state, int dev, devcache_event_t event)
{
	struct ze_event *e = event;

	event_give(state, dev, e);
	free(e);
	return 0;
}

int ze_event_record(void *state, int dev, devcache_event_t event, devcache_stream_t stream)
{
	struct ze_event *e = event;
	int rc = record(state, dev, e->event, stream);

	/* A failed record may have reset the event (zeEventHostReset, then the
	 * barrier that would signal it failed): then it is not recorded, and a
	 * wait for it would wait for ever. */
	__atomic_store_n(&e->recorded, rc == 0, __ATOMIC_RELEASE);
	return rc;
}

int ze_event_query(void *state, int dev, devcache_event_t event)
{
	struct ze_state *s = state;
	struct ze_event *e = event;

	if (!__atomic_load_n(&e->recorded, __ATOMIC_ACQUIRE))
		return 0;
	ze_result_t r = s->zeEventQueryStatus(e->event);
	if (r == ZE_RESULT_NOT_READY)
		return DEVCACHE_EAGAIN;
	CHECK(s, r, "zeEventQueryStatus", dev);
	return 0;
}

int ze_event_synchronize(void *state, int dev, devcache_event_t event)
{
	struct ze_state *s = state;
	struct ze_event *e = event;

	if (!__atomic_load_n(&e->recorded, __ATOMIC_ACQUIRE))
		return 0;
	CHECK(s, s->zeEventHostSynchronize(e->event, UINT64_MAX), "zeEventHostSynchronize", dev);
	return 0;
}
