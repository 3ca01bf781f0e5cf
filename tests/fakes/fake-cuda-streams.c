/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-cuda-streams.c - the fake CUDA driver's work: copies, streams, waits on a word, events. */
#define _GNU_SOURCE /* see fake-cuda.h */
#include "fake-cuda.h"

/* ---- waits on a word in memory ---- */

/* Whether w is met now; a met wait is over, and is cleared.  Under lock. */
static int word_met(struct word_wait *w)
{
	uint32_t v;
	int met;

	if (!w->addr)
		return 1;
	v = __atomic_load_n(w->addr, __ATOMIC_ACQUIRE);
	switch (w->op) {
	case CU_STREAM_WAIT_VALUE_GEQ: met = (int32_t)(v - w->value) >= 0; break;
	case CU_STREAM_WAIT_VALUE_EQ: met = v == w->value; break;
	case CU_STREAM_WAIT_VALUE_AND: met = (v & w->value) != 0; break;
	default: met = ~(v | w->value) != 0; break;
	}
	if (met)
		w->addr = NULL;
	return met;
}

/* Blocks the calling thread until w is met, polling the word every
 * millisecond with the lock released: the fake runs a stream's work when
 * it is queued, so work queued behind an unmet wait waits here.  Under
 * lock. */
static void word_block(struct word_wait *w)
{
	const struct timespec ms = {0, 1000000};

	while (!word_met(w)) {
		pthread_mutex_unlock(&fake.lock);
		nanosleep(&ms, NULL);
		pthread_mutex_lock(&fake.lock);
	}
}

/* ---- copies ---- */

/* Whether device dev may copy [p, p + size) on the device side, under lock:
 * the range must lie in one device allocation, or in a run of adjacent
 * mappings of one reservation. Mapped memory that dev has not been given
 * access to (for reading from, or writing to) faults on a device; here it
 * fails the copy with CUDA_ERROR_ILLEGAL_ADDRESS instead of the fake's own
 * SIGSEGV. */
static CUresult device_side(uintptr_t p, size_t size, int dev, int write)
{
	struct range *r = range_at(p);

	if (!r || (r->span.kind != R_DEVICE && r->span.kind != R_RESERVED) ||
	    size > r->span.base + r->span.size - p)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (r->span.kind == R_DEVICE)
		return CUDA_SUCCESS;
	switch (fake_vmm_reach(&fake.vmem, p, size, dev, write)) {
	case FAKE_VMM_REACHED:
		return CUDA_SUCCESS;
	case FAKE_VMM_DENIED:
		return misuse(CUDA_ERROR_ILLEGAL_ADDRESS);
	default:
		return misuse(CUDA_ERROR_INVALID_VALUE);
	}
}

/* Host memory: pageable memory the fake does not know, or inside one host
 * allocation or registration; never device memory. Under lock. */
static CUresult host_side(uintptr_t p, size_t size)
{
	struct range *r = range_at(p);

	if (!r)
		return CUDA_SUCCESS;
	if ((r->span.kind == R_HOST || r->span.kind == R_REGISTERED) &&
	    size <= r->span.base + r->span.size - p)
		return CUDA_SUCCESS;
	return misuse(CUDA_ERROR_INVALID_VALUE);
}

/* The copy is done before this returns, in the calling thread: work on one
 * stream then completes in order, and is done whenever anyone could wait.
 * It runs under the lock, so that a racing free cannot unmap what it reads. */
static CUresult copy(uintptr_t dst, uintptr_t src, size_t size, int to_device, CUstream stream,
		     int async)
{
	CUresult err = CUDA_SUCCESS;
	int dev;

	TRY(current_device(&dev));
	pthread_mutex_lock(&fake.lock);
	/* Queued behind a wait on a word: done once the wait is over. */
	if (async && stream_known(stream) && !is_default_stream(stream))
		word_block(&stream->wait);
	if (async && !stream_known(stream))
		err = misuse(CUDA_ERROR_INVALID_HANDLE);
	else if (size && (!dst || !src || size > UINTPTR_MAX - dst || size > UINTPTR_MAX - src))
		err = misuse(CUDA_ERROR_INVALID_VALUE);
	else if (size && to_device)
		err = device_side(dst, size, dev, 1);
	else if (size)
		err = device_side(src, size, dev, 0);
	if (err == CUDA_SUCCESS && size)
		err = host_side(to_device ? src : dst, size);
	if (err == CUDA_SUCCESS && size)
		memmove((void *)dst, (const void *)src, size);
	pthread_mutex_unlock(&fake.lock);
	if (fake.copy_ms && err == CUDA_SUCCESS && size)
		nanosleep(&(struct timespec){fake.copy_ms / 1000, fake.copy_ms % 1000 * 1000000}, NULL);
	return err;
}

CUresult cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	ENTER(cuMemcpyHtoD);
	return copy((uintptr_t)dstDevice, (uintptr_t)srcHost, ByteCount, 1, NULL, 0);
}

CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	ENTER(cuMemcpyDtoH);
	return copy((uintptr_t)dstHost, (uintptr_t)srcDevice, ByteCount, 0, NULL, 0);
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
			   CUstream hStream)
{
	ENTER(cuMemcpyHtoDAsync);
	return copy((uintptr_t)dstDevice, (uintptr_t)srcHost, ByteCount, 1, hStream, 1);
}

CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
			   CUstream hStream)
{
	ENTER(cuMemcpyDtoHAsync);
	return copy((uintptr_t)dstHost, (uintptr_t)srcDevice, ByteCount, 0, hStream, 1);
}

/* ---- streams ---- */

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	struct CUstream_st *s;
	int dev;

	ENTER(cuStreamCreate);
	if (!phStream || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	if (!(s = malloc(sizeof *s)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*s = (struct CUstream_st){.dev = dev, .flags = Flags};
	if (!fake_handle_register(&fake.lock, &fake.streams, s, &fake.live_streams))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*phStream = s;
	return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream hStream)
{
	int found;

	ENTER(cuStreamDestroy);
	pthread_mutex_lock(&fake.lock);
	/* The default streams are not the caller's to destroy. */
	found = !is_default_stream(hStream) && fake_handle_remove(&fake.streams, hStream, &fake.live_streams);
	if (found)
		fake_events_forget_stream(&fake.events, hStream);
	pthread_mutex_unlock(&fake.lock);
	if (!found)
		return misuse(CUDA_ERROR_INVALID_HANDLE);
	free(hStream);
	return CUDA_SUCCESS;
}

/* The device whose work stream s orders, under lock: a default stream is the
 * current context's. */
static CUresult stream_device(CUstream s, int *dev_p)
{
	if (!stream_known(s))
		return misuse(CUDA_ERROR_INVALID_HANDLE);
	if (!is_default_stream(s)) {
		*dev_p = s->dev;
		return CUDA_SUCCESS;
	}
	if (!current_context())
		return misuse(CUDA_ERROR_INVALID_CONTEXT);
	if (!current_context()->refs)
		return misuse(CUDA_ERROR_CONTEXT_IS_DESTROYED);
	*dev_p = current_context()->dev;
	return CUDA_SUCCESS;
}

/* Held events recorded on stream: what its work still waits for. */
static CUresult stream_wait(CUstream stream, int release)
{
	struct fake_release_filter f = {.dev = -1};
	CUresult err;

	pthread_mutex_lock(&fake.lock);
	err = stream_device(stream, &f.dev);
	pthread_mutex_unlock(&fake.lock);
	if (err != CUDA_SUCCESS)
		return err;
	f.stream = is_default_stream(stream) ? NULL : stream;
	/* A wait on a word first: the stream's later work is behind it. */
	if (f.stream) {
		pthread_mutex_lock(&fake.lock);
		if (release)
			word_block(&stream->wait);
		else if (!word_met(&stream->wait))
			err = CUDA_ERROR_NOT_READY;
		pthread_mutex_unlock(&fake.lock);
		if (err != CUDA_SUCCESS)
			return err;
	}
	return fake_events_stream_busy(&fake.lock, &fake.events, &f, release, &fake.hold_events) ?
		       CUDA_ERROR_NOT_READY :
		       CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream hStream)
{
	ENTER(cuStreamSynchronize);
	return stream_wait(hStream, 1);
}

CUresult cuStreamQuery(CUstream hStream)
{
	ENTER(cuStreamQuery);
	return stream_wait(hStream, 0);
}

/* The stream's later work waits until the word at addr meets the
 * condition; the word is read where it is (host memory and device memory
 * are both host memory here).  A wait queued behind an unmet one blocks
 * the calling thread until that is met, as a copy would.  The default
 * streams are not held: CUDA_ERROR_NOT_SUPPORTED. */
CUresult cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
			     unsigned int flags)
{
	uintptr_t a = (uintptr_t)addr;
	CUresult err = CUDA_SUCCESS;
	struct range *r;

	ENTER(cuStreamWaitValue32);
	if ((flags & ~(3u | (unsigned)CU_STREAM_WAIT_VALUE_FLUSH)) || !a || a % 4)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	pthread_mutex_lock(&fake.lock);
	r = range_at(a);
	if (!stream_known(stream))
		err = misuse(CUDA_ERROR_INVALID_HANDLE);
	else if (is_default_stream(stream))
		err = CUDA_ERROR_NOT_SUPPORTED;
	else if (!r || r->span.kind == R_RESERVED || a + 4 > r->span.base + r->span.size)
		err = misuse(CUDA_ERROR_INVALID_VALUE);
	if (err == CUDA_SUCCESS) {
		word_block(&stream->wait);
		stream->wait = (struct word_wait){.addr = (const uint32_t *)a, .value = value,
						  .op = flags & 3u};
	}
	pthread_mutex_unlock(&fake.lock);
	return err;
}

/* ---- events ---- */

#define EVENT_FLAGS                                                                                \
	(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	struct CUevent_st *e;
	int dev;

	ENTER(cuEventCreate);
	if (!phEvent || (Flags & ~(unsigned)EVENT_FLAGS))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	/* An interprocess event cannot time, as documented. */
	if (Flags & CU_EVENT_INTERPROCESS && !(Flags & CU_EVENT_DISABLE_TIMING))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	if (!(e = malloc(sizeof *e)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*e = (struct CUevent_st){.held.dev = dev, .flags = Flags};
	if (!fake_handle_register(&fake.lock, &fake.events, e, &fake.live_events))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*phEvent = e;
	return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent hEvent)
{
	int found;

	ENTER(cuEventDestroy);
	pthread_mutex_lock(&fake.lock);
	found = fake_handle_remove(&fake.events, hEvent, &fake.live_events);
	pthread_mutex_unlock(&fake.lock);
	if (!found)
		return misuse(CUDA_ERROR_INVALID_HANDLE);
	free(hEvent);
	return CUDA_SUCCESS;
}

/* The event and the stream must be of one context, as documented: here,
 * of one device, since each device has only its primary context. */
CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	CUresult err;
	int dev;

	ENTER(cuEventRecord);
	pthread_mutex_lock(&fake.lock);
	err = fake_handle_known(&fake.events, hEvent) ? stream_device(hStream, &dev) :
						   misuse(CUDA_ERROR_INVALID_HANDLE);
	if (err == CUDA_SUCCESS && dev != hEvent->held.dev)
		err = misuse(CUDA_ERROR_INVALID_HANDLE);
	if (err == CUDA_SUCCESS) {
		hEvent->held.pending = __atomic_load_n(&fake.hold_events, __ATOMIC_RELAXED) != 0;
		hEvent->held.stream = is_default_stream(hStream) ? NULL : hStream;
		hEvent->wait = (struct word_wait){0};
		if (hEvent->held.stream && !word_met(&hStream->wait))
			hEvent->wait = hStream->wait;
	}
	pthread_mutex_unlock(&fake.lock);
	return err;
}

/* Waiting for a held event is what lets it complete: a single-threaded test
 * must not hang in cuEventSynchronize. */
static CUresult event_wait(CUevent e, int release)
{
	CUresult err = CUDA_SUCCESS;

	pthread_mutex_lock(&fake.lock);
	if (!fake_handle_known(&fake.events, e)) {
		err = misuse(CUDA_ERROR_INVALID_HANDLE);
	} else if (release) {
		word_block(&e->wait);
		e->held.pending = 0;
	} else if (!word_met(&e->wait)) {
		err = CUDA_ERROR_NOT_READY;
	} else if (e->held.pending && __atomic_load_n(&fake.hold_events, __ATOMIC_RELAXED)) {
		err = CUDA_ERROR_NOT_READY;
	}
	pthread_mutex_unlock(&fake.lock);
	return err;
}

CUresult cuEventQuery(CUevent hEvent)
{
	ENTER(cuEventQuery);
	return event_wait(hEvent, 0);
}

CUresult cuEventSynchronize(CUevent hEvent)
{
	ENTER(cuEventSynchronize);
	return event_wait(hEvent, 1);
}

void fake_cuda_hold_events(int hold)
{
	__atomic_store_n(&fake.hold_events, hold, __ATOMIC_RELAXED);
}
