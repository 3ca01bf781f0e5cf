/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* staging.c - streaming file ranges to a device through a ring of pinned staging buffers, several reader threads at once. */
#include "model-cache.h"
#include "backend-call.h"
#include "model-file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * The plan: the items (runs of a file bound for the device) are cut into
 * chunks, each at most one staging buffer of one file, and each chunk into
 * pieces, each one contiguous copy to the device.  Workers (the calling
 * thread and up to load_workers - 1 others) take the next chunk, wait for a
 * free buffer, read the chunk into it, queue its pieces' copies on the
 * stream and record the buffer's event; a buffer is reused once its event
 * has completed.  Only the calling thread reports progress.  Locking: one
 * mutex guards the chunk counter, the ring's busy flags, the progress
 * figures and the first error; reads and copies run outside it.
 */

/* O_DIRECT reads go in units of the logical block size; 4 KiB covers the
 * disks in use. */
#define DIRECT_ALIGN ((uint64_t)4096)

struct piece {
	uint64_t buf_off, len;
	char *dst;
};

struct chunk {
	size_t file;
	uint64_t file_off, len;
	size_t first_piece, n_pieces;
};

struct staging {
	void *buf;
	devcache_event_t event;
	bool busy;
};

struct upload {
	struct stage_job *job;
	int *direct_fd;     /* per file; -1: read plainly */
	struct chunk *chunks;
	size_t n_chunks, next_chunk;
	struct piece *pieces;
	size_t n_pieces;
	struct staging *ring;
	size_t n_ring;
	uint64_t buf_size, done, total;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool direct_failed; /* atomic: O_DIRECT refused, read plainly */
	int error;          /* the first failure, or 0 */
	char why[512];      /* its detail message */
	bool cancelled;
	uint64_t reported;  /* the reporter's last figure */
	size_t running;     /* workers besides the calling thread */
};

static void upload_fail(struct upload *u, int rc)
{
	pthread_mutex_lock(&u->lock);
	if (!u->error) {
		u->error = rc;
		snprintf(u->why, sizeof u->why, "%s", devcache_last_error());
	}
	pthread_cond_broadcast(&u->cond);
	pthread_mutex_unlock(&u->lock);
}

/* Read a chunk into buf.  With O_DIRECT the read covers the aligned
 * superset of the chunk into an aligned part of the buffer (plan left room
 * for both); a file system that refuses it turns direct reads off for the
 * rest of the upload, and the chunk is read plainly. */
static int read_chunk(struct upload *u, const struct chunk *ch, char *buf, char **data_p)
{
	const struct stage_file *f = &u->job->files[ch->file];
	bool direct = u->direct_fd[ch->file] >= 0 &&
		      !__atomic_load_n(&u->direct_failed, __ATOMIC_RELAXED);
	int fd = direct ? u->direct_fd[ch->file] : f->fd;
	uint64_t start = ch->file_off, end = ch->file_off + ch->len;

	if (direct) {
		start &= ~(DIRECT_ALIGN - 1);
		end = (end + DIRECT_ALIGN - 1) & ~(DIRECT_ALIGN - 1);
		buf = (char *)(((uintptr_t)buf + (uintptr_t)(DIRECT_ALIGN - 1)) &
			       ~(uintptr_t)(DIRECT_ALIGN - 1));
	}
	*data_p = buf + (ch->file_off - start);
	for (uint64_t pos = start; pos < end;) {
		ssize_t n = pread(fd, buf + (pos - start), (size_t)(end - pos), (off_t)pos);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EINVAL && direct) {
			if (!__atomic_exchange_n(&u->direct_failed, true, __ATOMIC_RELAXED))
				log_msg(&u->job->dev->ctx->log, DEVCACHE_LOG_DEBUG,
					_("%s: O_DIRECT reads fail (%s); reading through the page cache"),
					f->path, strerror(errno));
			return read_chunk(u, ch, buf, data_p);
		}
		if (n < 0)
			return err_set(DEVCACHE_EIO, _("%s: cannot read at byte %llu: %s"), f->path,
				       (unsigned long long)pos, strerror(errno));
		if (n == 0) {
			if (pos >= ch->file_off + ch->len)
				break; /* O_DIRECT: the aligned end lies past the end of the file */
			return err_set(DEVCACHE_EFORMAT,
				       _("%s: the file ends at byte %llu, but tensor data runs to "
					 "byte %llu: was it truncated while being loaded?"),
				       f->path, (unsigned long long)pos,
				       (unsigned long long)(ch->file_off + ch->len));
		}
		pos += (uint64_t)n;
	}
	return 0;
}

/* Take a staging buffer whose copies have completed. */
static int take_buffer(struct upload *u, size_t *idx_p)
{
	pthread_mutex_lock(&u->lock);
	for (;;) {
		if (u->error || u->cancelled) {
			pthread_mutex_unlock(&u->lock);
			return -1;
		}
		for (size_t i = 0; i < u->n_ring; i++)
			if (!u->ring[i].busy) {
				u->ring[i].busy = true;
				pthread_mutex_unlock(&u->lock);
				*idx_p = i;
				/* Wait for the copies out of it, outside the lock. */
				if (u->ring[i].event &&
				    bk_event_synchronize(u->job->dev, u->ring[i].event)) {
					upload_fail(u, DEVCACHE_EBACKEND);
					return -1;
				}
				return 0;
			}
		pthread_cond_wait(&u->cond, &u->lock);
	}
}

static void give_buffer(struct upload *u, size_t idx)
{
	pthread_mutex_lock(&u->lock);
	u->ring[idx].busy = false;
	pthread_cond_broadcast(&u->cond);
	pthread_mutex_unlock(&u->lock);
}

/* One worker: take the next chunk, read it into a free buffer, queue its
 * copies, record an event so the buffer is reused only once they are done.
 * The calling thread runs this too, and reports progress between chunks. */
static void work(struct upload *u, bool reporter)
{
	const struct stage_job *job = u->job;

	for (;;) {
		size_t ci, bi;

		pthread_mutex_lock(&u->lock);
		if (u->error || u->cancelled || u->next_chunk == u->n_chunks) {
			pthread_mutex_unlock(&u->lock);
			break;
		}
		ci = u->next_chunk++;
		pthread_mutex_unlock(&u->lock);
		if (take_buffer(u, &bi))
			break;
		const struct chunk *ch = &u->chunks[ci];
		char *data;
		int rc = read_chunk(u, ch, u->ring[bi].buf, &data);

		for (size_t p = 0; rc == 0 && p < ch->n_pieces; p++) {
			const struct piece *pc = &u->pieces[ch->first_piece + p];

			rc = bk_memcpy_htod(job->dev, pc->dst, data + pc->buf_off, (size_t)pc->len,
					    job->stream);
		}
		if (rc == 0)
			rc = bk_event_record(job->dev, u->ring[bi].event, job->stream);
		if (rc) {
			/* Failed first: a worker that took the buffer back before
			 * seeing the failure would wait for its event, whose
			 * record may not have happened. */
			upload_fail(u, rc);
			give_buffer(u, bi);
			break;
		}
		pthread_mutex_lock(&u->lock);
		u->done += ch->len;
		uint64_t done = u->done;
		pthread_mutex_unlock(&u->lock);
		give_buffer(u, bi); /* wakes the calling thread to report */
		if (reporter && (u->reported = done, job->progress) &&
		    job->progress(job->progress_user, done, u->total)) {
			pthread_mutex_lock(&u->lock);
			u->cancelled = true;
			pthread_cond_broadcast(&u->cond);
			pthread_mutex_unlock(&u->lock);
			break;
		}
	}
}

static void *worker_main(void *arg)
{
	struct upload *u = arg;

	work(u, false);
	pthread_mutex_lock(&u->lock);
	u->running--;
	pthread_cond_broadcast(&u->cond);
	pthread_mutex_unlock(&u->lock);
	return NULL;
}

/* The calling thread has no chunk left: report the others' progress as
 * they finish theirs (they broadcast as buffers come back), so that the
 * callback hears of every chunk, always on this thread. */
static void report_until_done(struct upload *u)
{
	const struct stage_job *job = u->job;

	pthread_mutex_lock(&u->lock);
	while (u->running > 0 || u->reported < u->done) {
		if (u->reported < u->done && !u->error && !u->cancelled && job->progress) {
			uint64_t done = u->done;

			u->reported = done;
			pthread_mutex_unlock(&u->lock);
			int stop = job->progress(job->progress_user, done, u->total);
			pthread_mutex_lock(&u->lock);
			if (stop) {
				u->cancelled = true;
				pthread_cond_broadcast(&u->cond);
			}
			continue;
		}
		u->reported = u->done;
		if (u->running > 0)
			pthread_cond_wait(&u->cond, &u->lock);
	}
	pthread_mutex_unlock(&u->lock);
}

/* Cut the items into chunks of at most one staging buffer of one file.  A
 * chunk grows while the next piece ends within one buffer of the chunk's
 * start (gaps between items are read too: GGUF pads to its alignment). */
static int plan(struct upload *u, bool direct)
{
	const struct stage_job *job = u->job;
	/* O_DIRECT needs room to align the buffer's start and both ends. */
	uint64_t room = u->buf_size - (direct ? 3 * DIRECT_ALIGN : 0);
	/* An item that starts inside a chunk fills its rest, then whole
	 * chunks, then a last part: at most size/room + 2 pieces. */
	size_t max_pieces = 0;

	for (size_t i = 0; i < job->n_items; i++)
		max_pieces += (size_t)(job->items[i].size / room) + 2;
	u->pieces = calloc(max_pieces ? max_pieces : 1, sizeof *u->pieces);
	u->chunks = calloc(max_pieces ? max_pieces : 1, sizeof *u->chunks);
	if (!u->pieces || !u->chunks)
		return err_oom();
	struct chunk *ch = NULL;
	for (size_t i = 0; i < job->n_items; i++) {
		const struct stage_item *it = &job->items[i];

		for (uint64_t off = 0; off < it->size;) {
			uint64_t f = it->offset + off, len = it->size - off;

			if (ch && ch->file == it->file && f >= ch->file_off &&
			    f + 1 <= ch->file_off + room) {
				uint64_t fit = ch->file_off + room - f;

				len = len < fit ? len : fit;
			} else {
				ch = &u->chunks[u->n_chunks++];
				*ch = (struct chunk){.file = it->file, .file_off = f,
						     .first_piece = u->n_pieces};
				len = len < room ? len : room;
			}
			u->pieces[u->n_pieces++] = (struct piece){
				.buf_off = f - ch->file_off, .len = len, .dst = it->dst + off};
			ch->n_pieces++;
			if (f + len - ch->file_off > ch->len)
				ch->len = f + len - ch->file_off;
			off += len;
		}
	}
	for (size_t i = 0; i < u->n_chunks; i++)
		u->total += u->chunks[i].len;
	return 0;
}

/* The path opened again is the file the model was opened from: the name
 * may have been given to another file since (a download replacing it),
 * or to a FIFO, whose open would wait for a writer (hence O_NONBLOCK). */
static int reopen_same(const struct stage_file *f)
{
	int fd = open(f->path, O_RDONLY | O_DIRECT | O_CLOEXEC | O_NONBLOCK);
	struct stat now, was;

	if (fd < 0)
		return -1;
	if (fstat(fd, &now) != 0 || fstat(f->fd, &was) != 0 || now.st_dev != was.st_dev ||
	    now.st_ino != was.st_ino) {
		close(fd);
		errno = ESTALE;
		return -1;
	}
	return fd;
}

/* Open each file again with O_DIRECT when direct_io asks for it; a file
 * that will not is read plainly. */
static bool open_direct(struct upload *u)
{
	const struct stage_job *job = u->job;
	devcache_ctx_t *ctx = job->dev->ctx;
	bool any = false;

	for (size_t i = 0; i < job->n_files; i++) {
		u->direct_fd[i] = -1;
		if (!tun_get(&ctx->tun, direct_io))
			continue;
		u->direct_fd[i] = reopen_same(&job->files[i]);
		if (u->direct_fd[i] < 0)
			log_msg(&ctx->log, DEVCACHE_LOG_DEBUG,
				_("%s: O_DIRECT reads fail (%s); reading through the page cache"),
				job->files[i].path, strerror(errno));
		any |= u->direct_fd[i] >= 0;
	}
	return any;
}

/* Start up to load_workers - 1 threads besides the caller; fewer is
 * slower, not wrong.  Returns how many started. */
static size_t start_workers(struct upload *u, pthread_t *threads, size_t n_workers)
{
	size_t started = 0;

	for (size_t i = 0; i + 1 < n_workers && u->n_chunks > i + 1; i++) {
		pthread_mutex_lock(&u->lock);
		u->running++;
		pthread_mutex_unlock(&u->lock);
		if (pthread_create(&threads[i], NULL, worker_main, u) != 0) {
			pthread_mutex_lock(&u->lock);
			u->running--;
			pthread_mutex_unlock(&u->lock);
			break;
		}
		started++;
	}
	return started;
}

int stage_upload(struct stage_job *job)
{
	devcache_ctx_t *ctx = job->dev->ctx;
	struct upload u = {.job = job};
	size_t n_workers = (size_t)tun_get(&ctx->tun, load_workers), started = 0;
	pthread_t *threads = NULL;
	int rc;

	job->bytes_read = job->bytes_uploaded = 0;
	u.buf_size = tun_get(&ctx->tun, staging_buffer_size);
	u.n_ring = (size_t)tun_get(&ctx->tun, staging_buffers);
	pthread_mutex_init(&u.lock, NULL);
	pthread_cond_init(&u.cond, NULL);
	if (!(u.direct_fd = malloc((job->n_files ? job->n_files : 1) * sizeof *u.direct_fd))) {
		rc = err_oom();
		goto out;
	}
	if ((rc = plan(&u, open_direct(&u))))
		goto out;
	if (!(u.ring = calloc(u.n_ring, sizeof *u.ring))) {
		rc = err_oom();
		goto out;
	}
	for (size_t i = 0; i < u.n_ring; i++) {
		if ((rc = devcache_host_alloc(job->dev, (size_t)u.buf_size, &u.ring[i].buf)) ||
		    (rc = bk_event_create(job->dev, &u.ring[i].event)))
			goto out;
	}
	if (n_workers > 1 && !(threads = calloc(n_workers - 1, sizeof *threads))) {
		rc = err_oom();
		goto out;
	}
	started = start_workers(&u, threads, n_workers);
	work(&u, true);
	report_until_done(&u);
	for (size_t i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	/* Every copy is queued; the upload is done when the stream is. */
	int sync = bk_stream_synchronize(job->dev, job->stream);
	if (u.error)
		rc = err_set(u.error, "%s", u.why);
	else if (u.cancelled)
		rc = err_set(DEVCACHE_ECANCELED, _("%s: load cancelled"), job->name);
	else if (sync)
		rc = sync;
	else {
		job->bytes_read = u.total;
		for (size_t i = 0; i < job->n_items; i++)
			job->bytes_uploaded += job->items[i].size;
	}
out:
	for (size_t i = 0; u.ring && i < u.n_ring; i++) {
		if (u.ring[i].event)
			device_event_destroy(job->dev, u.ring[i].event);
		devcache_host_free(job->dev, u.ring[i].buf);
	}
	free(u.ring);
	free(threads);
	free(u.pieces);
	free(u.chunks);
	for (size_t i = 0; u.direct_fd && i < job->n_files; i++)
		if (u.direct_fd[i] >= 0)
			close(u.direct_fd[i]);
	free(u.direct_fd);
	pthread_cond_destroy(&u.cond);
	pthread_mutex_destroy(&u.lock);
	return rc;
}
