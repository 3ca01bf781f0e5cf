/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-events.c - streams: blocks used on other streams wait for events before they are free. */
#include "alloc.h"
#include "backend-call.h"

#include <stdlib.h>

/* ---- events for blocks used on other streams ------------------------------- */

void process_events(struct allocator *a, bool wait)
{
	struct pending_event **link = &a->events_head, *prev = NULL;

	while (*link) {
		struct pending_event *pe = *link;
		int rc = wait ? bk_event_synchronize(a->dev, pe->event)
			      : bk_event_query(a->dev, pe->event);

		if (rc == DEVCACHE_EAGAIN) {
			prev = pe;
			link = &pe->next;
			continue;
		}
		/* A failed query cannot tell us when the stream is done with the
		 * block; only a completed one frees it. */
		if (rc) {
			log_msg(&a->dev->ctx->log, DEVCACHE_LOG_WARNING,
				_("%s: event query failed, block %p kept: %s"), a->dev->id,
				(void *)pe->block->addr, devcache_last_error());
			prev = pe;
			link = &pe->next;
			if (!wait)
				continue;
			break;
		}
		device_event_destroy(a->dev, pe->event);
		/* A hit reads the list's head without the lock (events_pending). */
		__atomic_store_n(link, pe->next, __ATOMIC_RELAXED);
		if (a->events_tail == pe)
			a->events_tail = prev;
		if (--pe->block->pending_events == 0)
			pool_return(a, pe->block);
		free(pe);
	}
}

/* Record an event on each stream that used b; b is free once all complete. */
int defer_free(struct allocator *a, struct block *b)
{
	while (b->uses) {
		struct stream_use *u = b->uses;
		struct pending_event *pe = calloc(1, sizeof *pe);
		int rc = pe ? bk_event_create(a->dev, &pe->event)
			    : DEVCACHE_ENOMEM;

		if (rc == 0) {
			rc = bk_event_record(a->dev, pe->event, u->stream);
			if (rc)
				device_event_destroy(a->dev, pe->event);
		}
		if (rc) {
			/* Without an event the only safe way is to wait for the stream. */
			free(pe);
			if (bk_stream_synchronize(a->dev, u->stream))
				return err_set(DEVCACHE_EBACKEND,
					       _("%s: cannot track the use of %p on a stream: %s"),
					       a->dev->id, (void *)b->addr, devcache_last_error());
		} else {
			pe->block = b;
			b->pending_events++;
			if (a->events_tail)
				a->events_tail->next = pe;
			else
				__atomic_store_n(&a->events_head, pe, __ATOMIC_RELAXED);
			a->events_tail = pe;
		}
		b->uses = u->next;
		free(u);
	}
	if (b->pending_events == 0)
		pool_return(a, b);
	return 0;
}

int devcache_record_stream(devcache_device_t *dev, void *ptr, devcache_stream_t stream)
{
	int rc = alloc_check_dev(dev, "devcache_record_stream");
	struct allocator *a;

	if (rc)
		return rc;
	a = dev->alloc;
	world_lock(a);
	tcache_flush_own(a);
	struct block *b = tcache_lookup(a, (uintptr_t)ptr, false);
	if (!b) {
		rc = err_set(DEVCACHE_EINVAL, _("%s: %p is not an allocated block of this device"),
			     dev->id, ptr);
	} else {
		bool known = stream == b->seg->pool->stream;

		for (struct stream_use *u = b->uses; u && !known; u = u->next)
			known = u->stream == stream;
		if (!known) {
			struct stream_use *u = malloc(sizeof *u);

			if (!u) {
				rc = err_oom();
			} else {
				u->stream = stream;
				u->next = b->uses;
				b->uses = u;
			}
		}
	}
	world_unlock(a);
	return rc;
}

/* ---- streams ------------------------------------------------------------------ */

int devcache_stream_create(devcache_device_t *dev, devcache_stream_t *stream_p)
{
	if (!dev || !stream_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_stream_create: NULL argument"));
	return bk_stream_create(dev, stream_p);
}

int devcache_stream_destroy(devcache_device_t *dev, devcache_stream_t stream)
{
	if (!dev)
		return err_set(DEVCACHE_EINVAL, _("devcache_stream_destroy: NULL device"));
	if (!stream)
		return 0; /* the default stream is not destroyed */
	return bk_stream_destroy(dev, stream);
}

int devcache_stream_synchronize(devcache_device_t *dev, devcache_stream_t stream)
{
	if (!dev)
		return err_set(DEVCACHE_EINVAL, _("devcache_stream_synchronize: NULL device"));
	return bk_stream_synchronize(dev, stream);
}
