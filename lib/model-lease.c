/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-lease.c - read leases on mapped model files: a file about to be written has its mappings moved into anonymous memory first, so that the program's tensor reads never raise SIGBUS. */
#include "model-cache.h"
#include "model-file.h"

#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/*
 * A host-placed model is its files' mapping, and a mapped page past the end
 * of a file that was truncated raises SIGBUS when the program reads it.
 * Linux tells a process that holds a read lease (fcntl F_SETLEASE) on a
 * file before any process opens it for writing or truncates it: the writer
 * waits in open() or truncate() until the lease is given back, or at most
 * /proc/sys/fs/lease-break-time seconds.  In that time the cache moves the
 * mapping into anonymous memory in place, and gives the lease back.
 *
 * The steps:
 *   1. map_file() maps a file and calls lease_take(): the file's descriptor
 *      gets F_SETSIG lease_signal and F_SETOWN_EX F_OWNER_TID the watcher,
 *      then the lease.  In that order: taking a lease makes the process the
 *      owner only where no owner is set.
 *   2. The kernel sends the signal, with si_fd, to the watcher thread alone.
 *      The watcher, started at the first lease with every signal blocked,
 *      takes it with sigwaitinfo(): no handler is installed, and no other
 *      thread sees it.
 *   3. Under the cache lock, the watcher finds the model whose file that
 *      is.  Unlocked, the model is just dropped.  Locked, each byte is
 *      copied into a new anonymous region, which mremap() puts in the old
 *      one's place, at the same address, in one step: a concurrent reader
 *      sees the old page or its copy, never a hole.  The copy reads the
 *      file with pread(), which fails rather than faults should the writer
 *      already be past its wait; a writable model's mapping may hold the
 *      program's changes, which only it has, and is copied from itself with
 *      process_vm_readv(), which fails rather than faults likewise.
 *   4. The lease is given back, and the writer goes on.  The model is no
 *      longer its file's: it is never a hit again, and is dropped once
 *      released.  Its charge to max_cache_ram stays as it was: the file's
 *      size, now anonymous memory.
 *
 * Locking: the cache lock covers every struct host_map of a ready entry;
 * host_map.lease is also read without it (devcache_model_tensor_copy), so
 * it is read and written atomically.  A loading entry's maps are its
 * loader's until the entry is ready, so the watcher waits for that.  The
 * watcher stops before the cache is destroyed.
 */

struct lease_watch {
	struct model_cache *cache;
	pthread_t thread;
	pid_t tid;
	int sig;
	bool stop; /* atomic */
	sem_t started;
};

static int lease_state(const struct host_map *hm)
{
	return __atomic_load_n(&hm->lease, __ATOMIC_ACQUIRE);
}

static void set_lease_state(struct host_map *hm, int state)
{
	__atomic_store_n(&hm->lease, state, __ATOMIC_RELEASE);
}

/* ---- the break: moving a mapping into memory ------------------------------------ */

/* Copy len bytes of this process's memory at src, a writable model's
 * mapping, to dst.  Through the kernel, as a debugger reads: a page that
 * can no longer be read (its file shrank, past lease-break-time) is an
 * error, not SIGBUS in the library's thread.  Where the call is not
 * allowed (a seccomp filter), a plain copy. */
static int copy_mapping(const devcache_model_file_t *f, void *dst, const void *src, size_t len)
{
	for (size_t done = 0; done < len;) {
		struct iovec to = {(char *)dst + done, len - done};
		struct iovec from = {(char *)src + done, len - done};
		ssize_t n = process_vm_readv(getpid(), &to, 1, &from, 1, 0);

		if (n < 0 && done == 0 && (errno == ENOSYS || errno == EPERM)) {
			memcpy(dst, src, len);
			return 0;
		}
		if (n <= 0)
			return mf_error(f, _("the file shrank before its mapping could be copied: %s"),
					n < 0 ? strerror(errno) : _("nothing read"));
		done += (size_t)n;
	}
	return 0;
}

/* Put a copy of f's bytes in anonymous memory where hm's mapping is. */
static int move_map(const devcache_model_file_t *f, struct host_map *hm, bool writable)
{
	void *p = mmap(NULL, hm->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int rc = 0;

	if (p == MAP_FAILED)
		return err_set(DEVCACHE_ENOMEM, _("%s: cannot allocate %zu bytes: %s"), f->path,
			       hm->len, strerror(errno));
	if (writable)
		rc = copy_mapping(f, p, hm->p, (size_t)f->size);
	else
		rc = mf_read(f, p, (size_t)f->size, 0, _("the data of a mapped model"));
	if (rc == 0 && !writable && mprotect(p, hm->len, PROT_READ) != 0)
		rc = err_set(DEVCACHE_EIO, _("%s: mprotect: %s"), f->path, strerror(errno));
	if (rc == 0 && mremap(p, hm->len, hm->len, MREMAP_MAYMOVE | MREMAP_FIXED, hm->p) == MAP_FAILED)
		rc = err_set(DEVCACHE_EIO, _("%s: cannot move its mapping: %s"), f->path,
			     strerror(errno));
	if (rc)
		munmap(p, hm->len);
	return rc;
}

/* Move part's mapping of the locked model m, then let the writer go on. */
static void move_locked(struct model_cache *c, struct devcache_model *m, size_t part)
{
	const devcache_model_file_t *f = mf_part(m->mf, part);
	struct host_map *hm = &m->maps[part];

	if (move_map(f, hm, m->writable) == 0) {
		set_lease_state(hm, LEASE_MOVED);
		log_msg(&c->ctx->log, DEVCACHE_LOG_WARNING,
			_("model cache: %s is being written while a model of it is loaded: its "
			  "mapping was moved into memory, and the next load reads the new file"),
			f->path);
	} else {
		set_lease_state(hm, LEASE_NONE);
		log_msg(&c->ctx->log, DEVCACHE_LOG_ERROR,
			_("model cache: %s is being written while it is mapped, and its mapping "
			  "could not be moved into memory: %s; a read of its tensors raises SIGBUS "
			  "if the file shrinks"),
			f->path, devcache_last_error());
	}
	fcntl(f->fd, F_SETLEASE, F_UNLCK);
}

/* The model whose placement maps the file open as fd, and which file of
 * it that is.  A loading entry's maps are not read: its files' descriptors
 * are set before it is listed. */
static struct devcache_model *find_fd(struct model_cache *c, int fd, size_t *part_p)
{
	if (!c->ctx->tun.v[TUN_mmap].u.b)
		return NULL;
	for (struct devcache_model *m = c->head; m; m = m->next) {
		if (!mc_is_host(m->dev) && !m->partial)
			continue;
		for (size_t i = 0; i < mf_part_count(m->mf); i++)
			if (mf_part(m->mf, i)->fd == fd) {
				*part_p = i;
				return m;
			}
	}
	return NULL;
}

/* The lease on fd is being broken. */
static void on_break(struct model_cache *c, int fd)
{
	struct devcache_model *m;
	size_t part;

	pthread_mutex_lock(&c->lock);
	/* Wait while the model is loading: its loader owns its maps. */
	while ((m = find_fd(c, fd, &part)) && m->state != ENTRY_READY)
		pthread_cond_wait(&c->ready, &c->lock);
	/* A signal left over from a file since closed, whose descriptor was
	 * reused: its lease, if any, is not breaking. */
	if (m && m->maps && lease_state(&m->maps[part]) == LEASE_HELD &&
	    fcntl(fd, F_GETLEASE) != F_RDLCK) {
		if (m->locks == 0) {
			c->stats.evictions++;
			mc_drop(c, m); /* gives the lease back as it closes the files */
		} else {
			move_locked(c, m, part);
		}
	}
	pthread_mutex_unlock(&c->lock);
}

/* ---- the watcher thread ------------------------------------------------------------ */

static void *watch_main(void *arg)
{
	struct lease_watch *w = arg;
	siginfo_t si;
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, w->sig);
	w->tid = (pid_t)syscall(SYS_gettid);
	sem_post(&w->started);
	for (;;) {
		if (sigwaitinfo(&set, &si) < 0)
			continue;
		if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE))
			break;
		/* Sent by a process (si_code <= 0), not by the kernel for a lease. */
		if (si.si_code > 0)
			on_break(w->cache, si.si_fd);
	}
	return NULL;
}

/* The cache's watcher, started on first use.  Called with the cache locked. */
static int watch_get(struct model_cache *c, int sig, struct lease_watch **w_p)
{
	struct lease_watch *w = c->lease;
	sigset_t all, old;
	int rc;

	if (w) {
		*w_p = w;
		return 0;
	}
	if (!(w = calloc(1, sizeof *w)))
		return ENOMEM;
	w->cache = c;
	w->sig = sig;
	if (sem_init(&w->started, 0, 0) != 0) {
		free(w);
		return errno;
	}
	/* Born with every signal blocked: none of the program's is ever run
	 * on it, and the lease signal waits for sigwaitinfo(). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&w->thread, NULL, watch_main, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		sem_destroy(&w->started);
		free(w);
		return rc;
	}
	while (sem_wait(&w->started) != 0 && errno == EINTR)
		;
	c->lease = *w_p = w;
	return 0;
}

void lease_stop(struct model_cache *c)
{
	struct lease_watch *w = c->lease;

	if (!w)
		return;
	__atomic_store_n(&w->stop, true, __ATOMIC_RELEASE);
	pthread_kill(w->thread, w->sig);
	pthread_join(w->thread, NULL);
	sem_destroy(&w->started);
	free(w);
	c->lease = NULL;
}

/* ---- taking and giving back --------------------------------------------------------- */

static const char *refusal(int err)
{
	switch (err) {
	case EAGAIN:
		return _("it is open for writing");
	case EACCES:
	case EPERM:
		return _("the process neither owns it nor has CAP_LEASE");
	case EINVAL:
		return _("its file system has no leases, or fs.leases-enable is 0");
	default:
		return strerror(err);
	}
}

void lease_take(struct model_cache *c, const devcache_model_file_t *f, struct host_map *hm)
{
	long long n = c->ctx->tun.v[TUN_lease_signal].u.i;
	struct lease_watch *w = NULL;
	struct f_owner_ex owner;
	int err;

	if (n == 0)
		return;
	if (n > SIGRTMAX - SIGRTMIN) {
		log_msg(&c->ctx->log, DEVCACHE_LOG_INFO,
			_("model cache: %s is mapped unprotected: lease_signal %lld is past SIGRTMAX"),
			f->path, n);
		return;
	}
	pthread_mutex_lock(&c->lock);
	err = watch_get(c, SIGRTMIN + (int)n, &w);
	pthread_mutex_unlock(&c->lock);
	if (err) {
		log_msg(&c->ctx->log, DEVCACHE_LOG_INFO,
			_("model cache: %s is mapped unprotected: cannot start a thread: %s"), f->path,
			strerror(err));
		return;
	}
	owner = (struct f_owner_ex){.type = F_OWNER_TID, .pid = w->tid};
	if (fcntl(f->fd, F_SETSIG, w->sig) != 0 || fcntl(f->fd, F_SETOWN_EX, &owner) != 0 ||
	    fcntl(f->fd, F_SETLEASE, F_RDLCK) != 0) {
		err = errno;
		log_msg(&c->ctx->log, DEVCACHE_LOG_INFO,
			_("model cache: %s is mapped unprotected: no read lease (%s): a read of its "
			  "tensors raises SIGBUS if the file shrinks while it is cached"),
			f->path, refusal(err));
		return;
	}
	set_lease_state(hm, LEASE_HELD);
}

void lease_release(struct devcache_model *m)
{
	for (size_t i = 0; m->maps && i < mf_part_count(m->mf); i++)
		if (lease_state(&m->maps[i]) == LEASE_HELD) {
			/* Leases belong to the open file, which a child made by
			 * fork() may share: give it back, not only the descriptor. */
			fcntl(mf_part(m->mf, i)->fd, F_SETLEASE, F_UNLCK);
			set_lease_state(&m->maps[i], LEASE_NONE);
		}
}

bool lease_moved(const struct devcache_model *m)
{
	if (m->state != ENTRY_READY)
		return false;
	for (size_t i = 0; m->maps && i < mf_part_count(m->mf); i++)
		if (lease_state(&m->maps[i]) == LEASE_MOVED)
			return true;
	return false;
}

const char *lease_note(const struct devcache_model *m)
{
	if (m->state != ENTRY_READY || !m->maps || !m->dev->ctx->tun.v[TUN_mmap].u.b)
		return "";
	if (lease_moved(m))
		return _(" (file rewritten: kept in memory)");
	for (size_t i = 0; i < mf_part_count(m->mf); i++)
		if (lease_state(&m->maps[i]) == LEASE_NONE)
			return _(" (unprotected)");
	return "";
}
