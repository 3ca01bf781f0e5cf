/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-guard.c - mapped model files that another process shrinks or rewrites: a SIGBUS in a mapping of the cache's becomes zero pages and marks the model changed, which every later use of it reports. */
#include "model-cache.h"
#include "model-file.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
 * A host-placed model is its files' mapping, and a mapped page past the end
 * of a file that another process truncated raises SIGBUS when it is read.
 * Nothing the cache could ask of the kernel beforehand keeps every process
 * from shrinking the file (a read lease makes the others wait, fails their
 * truncate(), and is refused for a file already open for writing), so the
 * cache lets the fault happen and answers it:
 *
 *   1. map_file() registers each mapping here (guard_add): a slot in a
 *      registry of address ranges.  The first registration in the process
 *      installs the SIGBUS handler (SA_SIGINFO, SA_ONSTACK, SA_NODEFER),
 *      saving the action it replaces; a later one that finds another
 *      handler installed since (a test framework's, Python's
 *      faulthandler.enable()) installs it again in front of that one.
 *   2. A fault inside a registered range: the handler maps anonymous zero
 *      pages, with the mapping's protection, from the faulting page to the
 *      end of that file's mapping (MAP_FIXED), sets the slot's changed
 *      flag and returns; the access is retried and reads zeros.  To the
 *      end, not the one page: the file is gone past that point anyway, a
 *      scan of a truncated tensor takes one fault instead of one a page,
 *      and the mapping is split in two pieces, not thousands.
 *   3. Any other SIGBUS goes where it went before: to the saved handler,
 *      called with the same arguments; with SIG_DFL or SIG_IGN saved, that
 *      action is put back and the fault, retried, kills the process as it
 *      would have (a signal sent by a process is raised again, or ignored).
 *      A saved handler that puts its own saved action (ours) back and
 *      raises the signal, as faulthandler does, reaches ours again while
 *      passing is counted: the default action then, not a loop.  (One
 *      that longjmp()s out, as cmocka's does, leaves passing counted until
 *      the next install: a SIGBUS sent meanwhile takes the default action.)
 *   4. Every later use of the model through the library (a tensor's
 *      pointer, its copy, an upload of a partial model's tensor, a load
 *      that would be a hit) first checks the flag, and the file's size and
 *      modification time against the ones it was loaded with (a file
 *      rewritten, or shrunk and regrown, before any read faulted):
 *      either fails DEVCACHE_EIO naming the file, and sets the flag for
 *      good.  A changed model is never a hit again, and leaves the cache
 *      once released.
 *
 * The registry is the one exception to "no global mutable state outside a
 * context": a signal handler has no context to look in, so the ranges of
 * every context in the process are in one list.  The handler may run in
 * any thread at any moment, so it takes no lock and follows no pointer to
 * a model: the registry is a list of fixed-size chunks of slots, linked
 * once and never freed while the library is loaded, and a slot holds its
 * range, its protection and its flag as atomics.  Slots are claimed and
 * chunks appended under reg_lock, which the handler never takes.  A
 * handler that found a range counts itself in the slot's busy before it
 * maps, and checks the range again; guard_remove() clears the range and
 * waits for busy to be 0 before the caller unmaps, so zero pages are never
 * mapped over a range that has been given back to the system.
 */

struct guard_slot {
	uintptr_t start, end; /* the range, page-aligned; 0, 0 when free or going */
	int prot;
	int claimed; /* under reg_lock */
	int busy;    /* handlers between their lookup and their mmap */
	int changed; /* the file changed under the mapping */
};

/* A chunk fills a page (of 4 KiB or more). */
#define SLOTS_PER_CHUNK ((4096 - sizeof(void *)) / sizeof(struct guard_slot))

struct guard_chunk {
	struct guard_slot slot[SLOTS_PER_CHUNK];
	struct guard_chunk *next;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct guard_chunk *reg_head; /* read by the handler: atomically */
/* What SIGBUS did before ours: saved_slot[saved_ix], the other one
 * written at a new install before saved_ix turns to it, so that a handler
 * running meanwhile reads a whole one. */
static struct sigaction saved_slot[2];
static int saved_ix; /* atomic */
static int installed; /* atomic */
static uintptr_t page_size;
static int passing; /* atomic: calls from ours to the saved handler under way */

/* ---- the handler ------------------------------------------------------------------ */

static uintptr_t load(const uintptr_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Anonymous zero pages in place of [start, start + len), as the kernel
 * itself would: the sanitizers' mmap() would take the new pages for a
 * write of the program's (ThreadSanitizer then reports a race with any
 * other thread that read them), and a signal handler is better off without
 * any library's bookkeeping. */
static bool zero_pages(uintptr_t start, size_t len, int prot)
{
	long flags = MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef SYS_mmap2
	long r = syscall(SYS_mmap2, start, len, (long)prot, flags, -1L, 0L);
#else
	long r = syscall(SYS_mmap, start, len, (long)prot, flags, -1L, 0L);
#endif
	return r != -1;
}

/* Zero pages over the rest of the mapping that holds addr; false when
 * addr is in none of ours (or the kernel gives no memory for the pages). */
static bool answer(uintptr_t addr)
{
	for (struct guard_chunk *c = __atomic_load_n(&reg_head, __ATOMIC_ACQUIRE); c;
	     c = __atomic_load_n(&c->next, __ATOMIC_ACQUIRE))
		for (size_t i = 0; i < SLOTS_PER_CHUNK; i++) {
			struct guard_slot *s = &c->slot[i];
			uintptr_t start = load(&s->start), end = load(&s->end);

			if (addr < start || addr >= end)
				continue;
			/* Counted, then checked again: sequentially consistent, as
			 * guard_remove() clears, then reads busy (either it sees
			 * this count, or this sees the range gone). */
			__atomic_fetch_add(&s->busy, 1, __ATOMIC_SEQ_CST);
			bool ok = false;
			if (__atomic_load_n(&s->start, __ATOMIC_SEQ_CST) == start &&
			    __atomic_load_n(&s->end, __ATOMIC_SEQ_CST) == end) {
				uintptr_t page = addr & ~(page_size - 1);
				if ((ok = zero_pages(page, end - page, s->prot)))
					__atomic_store_n(&s->changed, 1, __ATOMIC_RELEASE);
			}
			__atomic_fetch_sub(&s->busy, 1, __ATOMIC_RELEASE);
			return ok;
		}
	return false;
}

/* Not ours: what SIGBUS would have done without the cache. */
static void pass_on(int sig, siginfo_t *si, void *uc)
{
	const struct sigaction saved = saved_slot[__atomic_load_n(&saved_ix, __ATOMIC_ACQUIRE)];
	bool sent = si->si_code <= 0; /* by kill(), raise(), sigqueue() */

	if (saved.sa_flags & SA_SIGINFO) {
		saved.sa_sigaction(sig, si, uc);
	} else if (saved.sa_handler == SIG_IGN) {
		/* A fault cannot be ignored: retried, it kills as before. */
		if (!sent)
			sigaction(SIGBUS, &saved, NULL);
	} else if (saved.sa_handler == SIG_DFL) {
		sigaction(SIGBUS, &saved, NULL);
		if (sent)
			raise(sig); /* delivered once this handler returns */
	} else {
		saved.sa_handler(sig);
	}
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	int err = errno;

	if (si && si->si_code > 0 && answer((uintptr_t)si->si_addr)) {
		errno = err;
		return;
	}
	/* Raised again by the handler it was passed to, which put ours back
	 * as what it replaced (Python's faulthandler does): the default
	 * action, as that handler meant, rather than a loop between the two.
	 * SA_NODEFER delivers the signal at once. */
	if (si && si->si_code <= 0 && __atomic_load_n(&passing, __ATOMIC_ACQUIRE)) {
		signal(SIGBUS, SIG_DFL);
		raise(sig);
	}
	__atomic_fetch_add(&passing, 1, __ATOMIC_ACQ_REL);
	pass_on(sig, si, uc);
	__atomic_fetch_sub(&passing, 1, __ATOMIC_ACQ_REL);
	errno = err;
}

/* Put ours in front of whatever handles SIGBUS now: at the first mapping,
 * and again at each later one where the program (or a test framework, or
 * Python's faulthandler.enable()) has installed another handler since,
 * which then gets the faults that are not the cache's.  Called under
 * reg_lock. */
static int install(void)
{
	struct sigaction sa, cur;

	if (sigaction(SIGBUS, NULL, &cur) != 0)
		return errno;
	if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus)
		return 0;
	page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	/* The handler may run in any thread from the moment it is in place,
	 * and reads what it replaced: that is written first. */
	int ix = !__atomic_load_n(&saved_ix, __ATOMIC_ACQUIRE);
	saved_slot[ix] = cur;
	__atomic_store_n(&saved_ix, ix, __ATOMIC_RELEASE);
	__atomic_store_n(&passing, 0, __ATOMIC_RELEASE);
	if (sigaction(SIGBUS, &sa, NULL) != 0)
		return errno;
	__atomic_store_n(&installed, 1, __ATOMIC_RELEASE);
	return 0;
}

/* Unloaded (dlclose), the library takes its handler with it: what SIGBUS
 * did before comes back, where nobody has replaced the handler since. */
__attribute__((destructor)) static void uninstall(void)
{
	struct sigaction cur;

	if (__atomic_load_n(&installed, __ATOMIC_ACQUIRE) && sigaction(SIGBUS, NULL, &cur) == 0 &&
	    (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus)
		sigaction(SIGBUS, &saved_slot[__atomic_load_n(&saved_ix, __ATOMIC_ACQUIRE)], NULL);
}

/* ---- registering mappings --------------------------------------------------------- */

/* A free slot, claimed; NULL without memory.  Called under reg_lock. */
static struct guard_slot *claim(void)
{
	struct guard_chunk **tail = &reg_head;

	for (struct guard_chunk *c = reg_head; c; c = c->next) {
		for (size_t i = 0; i < SLOTS_PER_CHUNK; i++)
			if (!c->slot[i].claimed) {
				c->slot[i].claimed = 1;
				return &c->slot[i];
			}
		tail = &c->next;
	}
	/* Mapped, not from the heap: it is never given back, and the
	 * program's malloc has no business with a signal handler's data. */
	struct guard_chunk *c = mmap(NULL, sizeof *c, PROT_READ | PROT_WRITE,
				     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (c == MAP_FAILED)
		return NULL;
	c->slot[0].claimed = 1;
	__atomic_store_n(tail, c, __ATOMIC_RELEASE); /* never freed: the handler may be in it */
	return &c->slot[0];
}

int guard_add(const devcache_model_file_t *f, struct host_map *hm, int prot)
{
	struct guard_slot *s = NULL;
	int err;

	pthread_mutex_lock(&reg_lock);
	if ((err = install()) == 0 && !(s = claim()))
		err = ENOMEM;
	if (s) {
		s->prot = prot;
		__atomic_store_n(&s->changed, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&s->start, (uintptr_t)hm->p, __ATOMIC_RELEASE);
		__atomic_store_n(&s->end, ((uintptr_t)hm->p + hm->len + page_size - 1) & ~(page_size - 1),
				 __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&reg_lock);
	if (err)
		return err_set(err == ENOMEM ? DEVCACHE_ENOMEM : DEVCACHE_EIO,
			       _("%s: cannot guard its mapping against the file shrinking: %s"),
			       f->path, strerror(err));
	hm->guard = s;
	return 0;
}

void guard_remove(struct host_map *hm)
{
	struct guard_slot *s = hm->guard;

	if (!s)
		return;
	__atomic_store_n(&s->end, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->start, 0, __ATOMIC_SEQ_CST);
	/* A handler that found the range before it went is mapping over it. */
	while (__atomic_load_n(&s->busy, __ATOMIC_SEQ_CST))
		sched_yield();
	pthread_mutex_lock(&reg_lock);
	s->claimed = 0;
	pthread_mutex_unlock(&reg_lock);
	hm->guard = NULL;
}

/* ---- what the cache asks ------------------------------------------------------------ */

/* Whether file part of m changed under its mapping: a fault the handler
 * answered, or a size or modification time not the loaded one. */
static bool part_changed(const struct devcache_model *m, size_t part)
{
	struct guard_slot *s = m->maps ? m->maps[part].guard : NULL;
	const devcache_model_file_t *f = mf_part(m->mf, part);
	struct stat st;

	if (!s)
		return false; /* a copy, or no host placement */
	if (__atomic_load_n(&s->changed, __ATOMIC_ACQUIRE))
		return true;
	if (fstat(f->fd, &st) == 0 && (uint64_t)st.st_size == f->size &&
	    st.st_mtim.tv_sec == f->mtime.tv_sec && st.st_mtim.tv_nsec == f->mtime.tv_nsec)
		return false;
	__atomic_store_n(&s->changed, 1, __ATOMIC_RELEASE);
	return true;
}

static int changed_error(const struct devcache_model *m, size_t part)
{
	return err_set(DEVCACHE_EIO,
		       _("%s: the file changed while it was mapped (another process truncated or "
			 "rewrote it): its tensors are no longer the ones loaded; release the model "
			 "and load it again"),
		       mf_part(m->mf, part)->path);
}

int guard_check_part(const struct devcache_model *m, size_t part)
{
	return part_changed(m, part) ? changed_error(m, part) : 0;
}

int guard_check(const struct devcache_model *m)
{
	for (size_t i = 0; m->maps && i < mf_part_count(m->mf); i++)
		if (part_changed(m, i))
			return changed_error(m, i);
	return 0;
}

bool guard_changed(const struct devcache_model *m)
{
	if (m->state != ENTRY_READY)
		return false;
	for (size_t i = 0; m->maps && i < mf_part_count(m->mf); i++)
		if (part_changed(m, i))
			return true;
	return false;
}
