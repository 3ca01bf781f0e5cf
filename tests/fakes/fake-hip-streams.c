/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-hip-streams.c - the fake HIP runtime's work: copies, streams, events. */
#define _GNU_SOURCE /* see fake-hip.h */
#include "fake-hip.h"

/* ---- copies ---- */

/* Whether visible device dev may copy [p, p + size) in a reservation, under
 * lock: a run of adjacent mappings, each giving dev the access asked for.
 * Mapped memory a device may not touch faults on a device; here the copy
 * fails with hipErrorIllegalAddress instead of the fake's own SIGSEGV. */
static hipError_t mapped_side(uintptr_t p, size_t size, int dev, int write)
{
	switch (fake_vmm_reach(&fake.vmem, p, size, dev, write)) {
	case FAKE_VMM_REACHED:
		return hipSuccess;
	case FAKE_VMM_DENIED:
		return misuse(hipErrorIllegalAddress);
	default:
		return misuse(hipErrorInvalidValue);
	}
}

/* Whether [p, p + size) may be copied, under lock: where p is inside a known
 * range, the copy must end inside it too, as ROCm checks; where the kind says
 * p is device memory, it must be; reserved address space must be mapped for
 * the current device. */
static hipError_t copy_side(const void *p, size_t size, int must_be_device, int write)
{
	struct range *r = range_at(p);
	uintptr_t a = (uintptr_t)p;

	if (!r)
		return must_be_device ? misuse(hipErrorInvalidValue) : hipSuccess;
	if (size > r->span.base + r->span.size - a)
		return misuse(hipErrorInvalidValue);
	if (r->span.kind == R_RESERVED)
		return mapped_side(a, size, this_thread.current_device, write);
	return must_be_device && r->span.kind != R_DEVICE ? misuse(hipErrorInvalidValue)
							  : hipSuccess;
}

/* Under the lock, so that a racing unmap cannot take what it reads. */
static hipError_t copy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind)
{
	int dst_device, src_device;
	hipError_t err;

	if ((unsigned)kind > hipMemcpyDefault)
		return misuse(hipErrorInvalidMemcpyDirection);
	if (sizeBytes == 0)
		return hipSuccess;
	if (!dst || !src)
		return misuse(hipErrorInvalidValue);
	dst_device = kind == hipMemcpyHostToDevice || kind == hipMemcpyDeviceToDevice;
	src_device = kind == hipMemcpyDeviceToHost || kind == hipMemcpyDeviceToDevice;
	pthread_mutex_lock(&fake.lock);
	err = copy_side(dst, sizeBytes, dst_device, 1);
	if (err == hipSuccess)
		err = copy_side(src, sizeBytes, src_device, 0);
	if (err == hipSuccess)
		memmove(dst, src, sizeBytes);
	pthread_mutex_unlock(&fake.lock);
	return err;
}

hipError_t hipMemcpy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind)
{
	ENTER(hipMemcpy);
	NEED_DEVICES();
	return done(copy(dst, src, sizeBytes, kind));
}

/* The copy is done before this returns, in the calling thread: work on one
 * stream then completes in order, and is done whenever anyone could wait. */
hipError_t hipMemcpyAsync(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind,
			  hipStream_t stream)
{
	int known;

	ENTER(hipMemcpyAsync);
	NEED_DEVICES();
	pthread_mutex_lock(&fake.lock);
	known = stream_known(stream);
	pthread_mutex_unlock(&fake.lock);
	if (!known)
		return done(misuse(hipErrorInvalidHandle));
	return done(copy(dst, src, sizeBytes, kind));
}

/* ---- streams ---- */

static hipError_t stream_create(hipStream_t *stream, unsigned flags)
{
	struct ihipStream_t *s;

	if (!stream)
		return misuse(hipErrorInvalidValue);
	if (flags & ~(unsigned)hipStreamNonBlocking)
		return misuse(hipErrorInvalidValue);
	if (!(s = malloc(sizeof *s)))
		return hipErrorOutOfMemory;
	*s = (struct ihipStream_t){.dev = this_thread.current_device, .flags = flags};
	if (!fake_handle_register(&fake.lock, &fake.streams, s, &fake.live_streams))
		return hipErrorOutOfMemory;
	*stream = s;
	return hipSuccess;
}

hipError_t hipStreamCreate(hipStream_t *stream)
{
	ENTER(hipStreamCreate);
	NEED_DEVICES();
	return done(stream_create(stream, hipStreamDefault));
}

hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags)
{
	ENTER(hipStreamCreateWithFlags);
	NEED_DEVICES();
	return done(stream_create(stream, flags));
}

hipError_t hipStreamDestroy(hipStream_t stream)
{
	int known;

	ENTER(hipStreamDestroy);
	NEED_DEVICES();
	pthread_mutex_lock(&fake.lock);
	/* The default streams are not the caller's to destroy. */
	known = stream != hipStreamPerThread && fake_handle_remove(&fake.streams, stream, &fake.live_streams);
	if (known)
		fake_events_forget_stream(&fake.events, stream);
	pthread_mutex_unlock(&fake.lock);
	if (!known)
		return done(misuse(hipErrorInvalidHandle));
	free(stream);
	return done(hipSuccess);
}

/* Held events recorded on stream: what its work still waits for. */
static hipError_t stream_wait(hipStream_t stream, int release)
{
	struct fake_release_filter f = {.dev = -1, .stream = stream};
	int known;

	pthread_mutex_lock(&fake.lock);
	known = stream_known(stream);
	pthread_mutex_unlock(&fake.lock);
	if (!known)
		return misuse(hipErrorInvalidHandle);
	if (stream == hipStreamPerThread)
		f.stream = NULL;
	return fake_events_stream_busy(&fake.lock, &fake.events, &f, release, &fake.hold_events) ?
		       hipErrorNotReady :
		       hipSuccess;
}

hipError_t hipStreamSynchronize(hipStream_t stream)
{
	ENTER(hipStreamSynchronize);
	NEED_DEVICES();
	return done(stream_wait(stream, 1));
}

hipError_t hipStreamQuery(hipStream_t stream)
{
	ENTER(hipStreamQuery);
	NEED_DEVICES();
	return done(stream_wait(stream, 0));
}

/* ---- events ---- */

#define EVENT_FLAGS                                                                                \
	(hipEventBlockingSync | hipEventDisableTiming | hipEventInterprocess |                     \
	 hipEventReleaseToDevice | hipEventReleaseToSystem)

static hipError_t event_create(hipEvent_t *event, unsigned flags)
{
	struct ihipEvent_t *e;

	if (!event || (flags & ~(unsigned)EVENT_FLAGS))
		return misuse(hipErrorInvalidValue);
	/* As in CUDA and ROCm, an interprocess event cannot time. */
	if (flags & hipEventInterprocess && !(flags & hipEventDisableTiming))
		return misuse(hipErrorInvalidValue);
	if (!(e = malloc(sizeof *e)))
		return hipErrorOutOfMemory;
	*e = (struct ihipEvent_t){.held.dev = this_thread.current_device, .flags = flags};
	if (!fake_handle_register(&fake.lock, &fake.events, e, &fake.live_events))
		return hipErrorOutOfMemory;
	*event = e;
	return hipSuccess;
}

hipError_t hipEventCreate(hipEvent_t *event)
{
	ENTER(hipEventCreate);
	NEED_DEVICES();
	return done(event_create(event, hipEventDefault));
}

hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags)
{
	ENTER(hipEventCreateWithFlags);
	NEED_DEVICES();
	return done(event_create(event, flags));
}

hipError_t hipEventDestroy(hipEvent_t event)
{
	int known;

	ENTER(hipEventDestroy);
	NEED_DEVICES();
	pthread_mutex_lock(&fake.lock);
	known = fake_handle_remove(&fake.events, event, &fake.live_events);
	pthread_mutex_unlock(&fake.lock);
	if (!known)
		return done(misuse(hipErrorInvalidHandle));
	free(event);
	return done(hipSuccess);
}

hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream)
{
	hipError_t err = hipSuccess;

	ENTER(hipEventRecord);
	NEED_DEVICES();
	pthread_mutex_lock(&fake.lock);
	if (!event_known(event) || !stream_known(stream)) {
		err = misuse(hipErrorInvalidHandle);
	} else {
		event->recorded = 1;
		event->held.pending = __atomic_load_n(&fake.hold_events, __ATOMIC_RELAXED) != 0;
		event->held.stream = stream == hipStreamPerThread ? NULL : stream;
		event->held.dev =
			stream && stream != hipStreamPerThread ? stream->dev : this_thread.current_device;
	}
	pthread_mutex_unlock(&fake.lock);
	return done(err);
}

hipError_t hipEventQuery(hipEvent_t event)
{
	hipError_t err = hipSuccess;

	ENTER(hipEventQuery);
	NEED_DEVICES();
	pthread_mutex_lock(&fake.lock);
	if (!event_known(event))
		err = misuse(hipErrorInvalidHandle);
	else if (event->held.pending && __atomic_load_n(&fake.hold_events, __ATOMIC_RELAXED))
		err = hipErrorNotReady;
	pthread_mutex_unlock(&fake.lock);
	return done(err);
}

/* Waiting for a held event is what lets it complete: a single-threaded test
 * must not hang here. */
hipError_t hipEventSynchronize(hipEvent_t event)
{
	hipError_t err = hipSuccess;

	ENTER(hipEventSynchronize);
	NEED_DEVICES();
	pthread_mutex_lock(&fake.lock);
	if (event_known(event))
		event->held.pending = 0;
	else
		err = misuse(hipErrorInvalidHandle);
	pthread_mutex_unlock(&fake.lock);
	return done(err);
}

void fake_hip_hold_events(int hold)
{
	__atomic_store_n(&fake.hold_events, hold, __ATOMIC_RELAXED);
}
