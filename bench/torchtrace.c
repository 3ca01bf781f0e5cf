/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* torchtrace.c - an LD_PRELOAD shim that records a PyTorch CPU program's tensor allocations (libc10's posix_memalign and their free) as a devcache-trace(5) file. */

/*
 * Debian's python3-torch (CPU) allocates every tensor storage with
 * posix_memalign(&p, 64, n) from libc10 (c10::alloc_cpu) and releases it
 * with free().  Preloaded, this library sees every posix_memalign() and
 * free() of the process and writes to $TORCHTRACE_FILE:
 *
 *   "+ ID SIZE"  a posix_memalign() whose caller (its return address) lies
 *                in an object whose file name contains $TORCHTRACE_CALLER
 *                (default "libc10.so"), SIZE as asked; a size of 0 is not
 *                an allocation in devcache-trace(5) and is left out;
 *   "- ID"       the free() of a pointer recorded so, by whoever frees it;
 *                the frees of every other pointer are not written.
 *
 * The caller's object is found once by dladdr() and kept as an address
 * range (the object's PT_LOAD segments, from dl_iterate_phdr()), so that
 * later calls compare two addresses.
 *
 * Locking rule: one mutex guards the table of recorded pointers and the
 * output buffer.  A free is written, under the mutex, before the real
 * free() releases the memory, and an allocation after the real
 * posix_memalign() returned it: another thread can only be given that
 * address after the free was written, so the file's order is one that
 * happened.
 *
 * Recursion: nothing here calls malloc() while recording.  The table lives
 * in mmap()ed memory, the buffer is static, the file is written with
 * write(2), the guard is an initial-exec thread-local (a dynamic TLS access
 * may itself allocate), and the recording functions are left at once by a
 * thread already inside them (dladdr() or dlsym() might call free()).
 */
#include <config.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef void (*free_fn)(void *);

static posix_memalign_fn real_posix_memalign;
static free_fn real_free;
static __thread int busy __attribute__((tls_model("initial-exec")));

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int out_fd = -1;
static char caller_name[256] = "libc10.so";
/* The caller's object, once found: [lo, hi) of its mapped segments. */
static _Atomic uintptr_t caller_lo, caller_hi;
static _Atomic size_t n_live; /* recorded and not yet freed */
static uint64_t next_id = 1;

/* ---- the table of recorded pointers: open addressing, linear probing ---- */

struct slot {
	uintptr_t ptr; /* 0: empty */
	uint64_t id;
};

static struct slot *table;
static size_t table_cap; /* a power of two */

static size_t hash_ptr(uintptr_t p)
{
	return (size_t)((p >> 6) * 0x9e3779b97f4a7c15ull);
}

static struct slot *table_alloc(size_t cap)
{
	void *m = mmap(NULL, cap * sizeof(struct slot), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return m == MAP_FAILED ? NULL : m;
}

static void table_put(struct slot *t, size_t cap, uintptr_t p, uint64_t id)
{
	size_t i = hash_ptr(p) & (cap - 1);

	while (t[i].ptr)
		i = (i + 1) & (cap - 1);
	t[i].ptr = p;
	t[i].id = id;
}

/* Keeps the load at most one half; false when no memory is to be had (the
 * allocation is then not recorded, and its free ignored). */
static bool table_reserve(size_t live)
{
	size_t cap = table_cap ? table_cap : 4096;
	struct slot *t;

	while (2 * (live + 1) > cap)
		cap *= 2;
	if (cap == table_cap)
		return true;
	if (!(t = table_alloc(cap)))
		return false;
	for (size_t i = 0; i < table_cap; i++)
		if (table[i].ptr)
			table_put(t, cap, table[i].ptr, table[i].id);
	if (table)
		munmap(table, table_cap * sizeof *table);
	table = t;
	table_cap = cap;
	return true;
}

/* Removes p, shifting back the entries after it (no tombstones); false
 * when p was not recorded. */
static bool table_take(uintptr_t p, uint64_t *id_p)
{
	size_t mask = table_cap - 1, i, j;

	if (!table)
		return false;
	for (i = hash_ptr(p) & mask; table[i].ptr != p; i = (i + 1) & mask)
		if (!table[i].ptr)
			return false;
	*id_p = table[i].id;
	for (j = (i + 1) & mask; table[j].ptr; j = (j + 1) & mask) {
		size_t home = hash_ptr(table[j].ptr) & mask;

		/* j's entry may move to i when its home is not in (i, j]. */
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			table[i] = table[j];
			i = j;
		}
	}
	table[i].ptr = 0;
	return true;
}

/* ---- the output: whole lines, through a static buffer -------------------- */

static char buf[1 << 16];
static size_t buf_len;

static void flush_locked(void)
{
	size_t off = 0;

	while (out_fd >= 0 && off < buf_len) {
		ssize_t w = write(out_fd, buf + off, buf_len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			/* A full disk: stop recording, never disturb the program. */
			close(out_fd);
			out_fd = -1;
			break;
		}
		off += (size_t)w;
	}
	buf_len = 0;
}

/* Appends one line (at most 300 bytes). */
static void put_line_locked(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void put_line_locked(const char *fmt, ...)
{
	va_list ap;
	int n;

	if (sizeof buf - buf_len < 320)
		flush_locked();
	va_start(ap, fmt);
	n = vsnprintf(buf + buf_len, 320, fmt, ap);
	va_end(ap);
	if (n > 0)
		buf_len += (size_t)n < 320 ? (size_t)n : 319;
}

/* ---- who called -------------------------------------------------------- */

struct range_search {
	uintptr_t base, lo, hi;
	bool found;
};

static int find_range(struct dl_phdr_info *info, size_t size, void *data)
{
	struct range_search *s = data;

	(void)size;
	if (info->dlpi_addr != s->base)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;

		if (ph->p_type != PT_LOAD)
			continue;
		if (!s->found || lo < s->lo)
			s->lo = lo;
		if (!s->found || hi > s->hi)
			s->hi = hi;
		s->found = true;
	}
	return s->found;
}

static bool from_caller(uintptr_t ret)
{
	struct range_search s = { 0 };
	struct link_map *map = NULL;
	Dl_info info;

	if (ret >= atomic_load_explicit(&caller_lo, memory_order_relaxed) &&
	    ret < atomic_load_explicit(&caller_hi, memory_order_relaxed))
		return true;
	if (atomic_load_explicit(&caller_hi, memory_order_relaxed))
		return false; /* found already, and this is another object */
	if (!dladdr1((void *)ret, &info, (void **)&map, RTLD_DL_LINKMAP) || !map ||
	    !info.dli_fname || !strstr(info.dli_fname, caller_name))
		return false;
	s.base = map->l_addr;
	dl_iterate_phdr(find_range, &s);
	if (!s.found)
		return false;
	atomic_store(&caller_lo, s.lo);
	atomic_store(&caller_hi, s.hi);
	return true;
}

/* ---- the entry points -------------------------------------------------- */

static void header_locked(void)
{
	put_line_locked("# torchtrace: posix_memalign/free of %s (bench/torchtrace.c)\n",
			caller_name);
	put_line_locked("# program: %s\n", program_invocation_short_name);
	put_line_locked("# pid: %ld\n", (long)getpid());
	put_line_locked("# device: host\n");
}

/* TORCHTRACE_FILE names the trace; "%p" in it becomes the process ID (as
 * the trace tunable's does).  Without it nothing is recorded. */
static void open_output(void)
{
	const char *name = getenv("TORCHTRACE_FILE"), *caller = getenv("TORCHTRACE_CALLER");
	char path[4096];
	size_t n = 0;

	if (caller && *caller)
		snprintf(caller_name, sizeof caller_name, "%s", caller);
	if (!name || !*name)
		return;
	for (const char *c = name; *c && n + 24 < sizeof path; c++) {
		if (c[0] == '%' && c[1] == 'p') {
			n += (size_t)snprintf(path + n, sizeof path - n, "%ld", (long)getpid());
			c++;
		} else {
			path[n++] = *c;
		}
	}
	path[n] = '\0';
	out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out_fd < 0)
		return;
	header_locked();
}

/* A child of fork() records nothing: its parent's file is not its own. */
static void before_fork(void)
{
	pthread_mutex_lock(&lock);
}

static void after_fork_parent(void)
{
	pthread_mutex_unlock(&lock);
}

static void after_fork_child(void)
{
	if (out_fd >= 0)
		close(out_fd);
	out_fd = -1;
	buf_len = 0;
	pthread_mutex_unlock(&lock);
}

/* The C library's functions, looked up at the first call or in the
 * constructor, whichever comes first: another library's constructor may
 * allocate before this one runs.  dlsym() may itself call free(), which
 * then finds the lookup under way and leaves that block be. */
static void resolve(void)
{
	static int resolving;

	if (resolving)
		return;
	resolving = 1;
	real_posix_memalign = (posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
	real_free = (free_fn)dlsym(RTLD_NEXT, "free");
	resolving = 0;
}

__attribute__((constructor)) static void torchtrace_init(void)
{
	busy++;
	if (!real_posix_memalign || !real_free)
		resolve();
	pthread_atfork(before_fork, after_fork_parent, after_fork_child);
	pthread_mutex_lock(&lock);
	open_output();
	pthread_mutex_unlock(&lock);
	busy--;
}

__attribute__((destructor)) static void torchtrace_fini(void)
{
	pthread_mutex_lock(&lock);
	flush_locked();
	pthread_mutex_unlock(&lock);
}

EXPORT int posix_memalign(void **p, size_t align, size_t size)
{
	uintptr_t ret = (uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0));
	int rc;

	if (!real_posix_memalign)
		resolve();
	if (!real_posix_memalign)
		return ENOMEM; /* only while dlsym() itself allocates */
	rc = real_posix_memalign(p, align, size);
	if (rc || size == 0 || busy || out_fd < 0)
		return rc;
	busy++;
	if (from_caller(ret)) {
		pthread_mutex_lock(&lock);
		if (out_fd >= 0 && table_reserve(atomic_load(&n_live))) {
			uint64_t id = next_id++;

			table_put(table, table_cap, (uintptr_t)*p, id);
			atomic_fetch_add(&n_live, 1);
			put_line_locked("+ %llu %zu\n", (unsigned long long)id, size);
		}
		pthread_mutex_unlock(&lock);
	}
	busy--;
	return rc;
}

EXPORT void free(void *p)
{
	uint64_t id;

	/* Recorded blocks are posix_memalign()ed, and every alignment is a
	 * multiple of sizeof(void *): a pointer that is not cannot be one. */
	if (p && !busy && ((uintptr_t)p % sizeof(void *)) == 0 &&
	    atomic_load_explicit(&n_live, memory_order_relaxed)) {
		busy++;
		pthread_mutex_lock(&lock);
		if (table_take((uintptr_t)p, &id)) {
			atomic_fetch_sub(&n_live, 1);
			if (out_fd >= 0)
				put_line_locked("- %llu\n", (unsigned long long)id);
		}
		pthread_mutex_unlock(&lock);
		busy--;
	}
	if (!real_free)
		resolve();
	if (real_free)
		real_free(p);
}

/* Writes "# TEXT" (its first line, at most 200 bytes) where the program
 * is: the workloads call it through ctypes for "step N" and "warmup-end"
 * (devcache-trace(5)'s marks). */
EXPORT void torchtrace_mark(const char *text);

EXPORT void torchtrace_mark(const char *text)
{
	size_t len;

	if (!text)
		return;
	len = strcspn(text, "\r\n");
	busy++;
	pthread_mutex_lock(&lock);
	if (out_fd >= 0)
		put_line_locked("# %.*s\n", (int)(len < 200 ? len : 200), text);
	pthread_mutex_unlock(&lock);
	busy--;
}
