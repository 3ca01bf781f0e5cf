/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* interpose.c - malloc, pread and pthread_create of the test executable, which count, fail on demand and follow leaks (tests/interpose.h). */
/* The wrappers are the functions themselves, never fortified calls of them. */
#undef _FORTIFY_SOURCE
#include "config.h"

#include "interpose.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

/*
 * Every wrapper finds the function it stands for with dlsym(RTLD_NEXT) on
 * its first call.  dlsym may itself allocate (its error state), so while
 * the allocation functions are being looked up, allocations come from a
 * small static arena, whose blocks free() then ignores.  No wrapper calls
 * anything that allocates.  The counts, the armed fault and the window are
 * atomics: the library's load workers call these from their own threads.
 * The leak table (pointer -> size, caller) has a lock of its own, taken
 * only while it holds blocks or the window is open.
 */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define IP_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
	__has_feature(memory_sanitizer)
#define IP_SANITIZED 1
#endif
#endif
#ifndef IP_SANITIZED
#define IP_SANITIZED 0
#endif

static bool window;
static unsigned long calls[IP_KINDS], fired;
static struct ip_fault armed; /* nth 0: none */
static pthread_mutex_t arm_lock = PTHREAD_MUTEX_INITIALIZER;

static void *next_fn(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);

	if (!f) {
		static const char msg[] = "interpose: dlsym(RTLD_NEXT) found no definition\n";

		if (write(2, msg, sizeof msg - 1) < 0)
			_exit(99);
		abort();
	}
	return f;
}

/* Count a call of kind; true when it is the one to fail. */
static bool strikes(enum ip_kind kind, struct ip_fault *how)
{
	if (!__atomic_load_n(&window, __ATOMIC_ACQUIRE))
		return false;
	unsigned long n = __atomic_add_fetch(&calls[kind], 1, __ATOMIC_RELAXED);
	bool hit;

	pthread_mutex_lock(&arm_lock);
	hit = armed.nth && armed.kind == kind &&
	      (n == armed.nth || (armed.from_nth && n > armed.nth));
	if (hit) {
		*how = armed;
		fired++;
	}
	pthread_mutex_unlock(&arm_lock);
	return hit;
}

bool ip_have_alloc(void)
{
	return !IP_SANITIZED;
}

void ip_window(bool open)
{
	__atomic_store_n(&window, open, __ATOMIC_RELEASE);
}

void ip_reset(void)
{
	pthread_mutex_lock(&arm_lock);
	for (int i = 0; i < IP_KINDS; i++)
		__atomic_store_n(&calls[i], 0, __ATOMIC_RELAXED);
	fired = 0;
	armed.nth = 0;
	pthread_mutex_unlock(&arm_lock);
}

void ip_arm(const struct ip_fault *f)
{
	pthread_mutex_lock(&arm_lock);
	armed = *f;
	pthread_mutex_unlock(&arm_lock);
}

void ip_disarm(void)
{
	pthread_mutex_lock(&arm_lock);
	armed.nth = 0;
	pthread_mutex_unlock(&arm_lock);
}

unsigned long ip_calls(enum ip_kind kind)
{
	return __atomic_load_n(&calls[kind], __ATOMIC_RELAXED);
}

unsigned long ip_fired(void)
{
	pthread_mutex_lock(&arm_lock);
	unsigned long n = fired;
	pthread_mutex_unlock(&arm_lock);
	return n;
}

/* ---- reads ----------------------------------------------------------------- */

/* A short read: about half of what was read, in whole blocks when it
 * was a large read (O_DIRECT reads stay aligned). */
static ssize_t shorten(ssize_t n)
{
	if (n <= 1)
		return n;
	if (n >= 8192)
		return (n / 2) & ~(ssize_t)4095;
	return n / 2;
}

static char fired_file[4096];
/* Reads struck from the Nth on strike in several load workers at once. */
static pthread_mutex_t fired_lock = PTHREAD_MUTEX_INITIALIZER;

/* The file of the read that failed, for the test to look for in the
 * message (readlink allocates nothing). */
static void note_file(int fd)
{
	char link[64], path[sizeof fired_file];
	ssize_t n;

	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof path - 1);
	path[n > 0 ? n : 0] = '\0';
	pthread_mutex_lock(&fired_lock);
	memcpy(fired_file, path, sizeof fired_file);
	pthread_mutex_unlock(&fired_lock);
}

/* Read once the workload is over, its threads joined. */
const char *ip_fired_file(void)
{
	return fired_file;
}

/* The read's bytes past what a short read returns are scribbled over, as
 * a kernel's short read leaves them unwritten: a caller that took them
 * for read would find out. */
static void scribble(const struct iovec *iov, int iovcnt, size_t from, size_t to)
{
	for (int i = 0; i < iovcnt && from < to; i++) {
		size_t len = iov[i].iov_len;

		if (from < len)
			memset((char *)iov[i].iov_base + from, 0x5a,
			       (to < len ? to : len) - from);
		from = from > len ? from - len : 0;
		to = to > len ? to - len : 0;
	}
}

static ssize_t faulty_read(int fd, const struct ip_fault *how, ssize_t n,
			   const struct iovec *iov, int iovcnt)
{
	int e = errno;
	ssize_t k;

	note_file(fd);
	errno = e;
	if (how->err) {
		errno = how->err;
		return -1;
	}
	if ((k = shorten(n)) < n)
		scribble(iov, iovcnt, (size_t)k, (size_t)n);
	return k;
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset)
{
	static ssize_t (*real)(int, void *, size_t, off_t);
	struct ip_fault how;

	if (!real)
		real = (ssize_t (*)(int, void *, size_t, off_t))next_fn("pread");
	if (!strikes(IP_READ, &how))
		return real(fd, buf, count, offset);
	struct iovec iov = {buf, count};

	return faulty_read(fd, &how, how.err ? -1 : real(fd, buf, count, offset), &iov, 1);
}

/* Where _FORTIFY_SOURCE or a 64-bit off_t renames the call.  (On 32-bit
 * machines with _FILE_OFFSET_BITS=64, pread above is pread64 itself.) */
#ifdef __LP64__
ssize_t pread64(int fd, void *buf, size_t count, off64_t offset);
ssize_t pread64(int fd, void *buf, size_t count, off64_t offset)
{
	return pread(fd, buf, count, offset);
}

ssize_t __pread64_chk(int fd, void *buf, size_t count, off64_t offset, size_t buflen);
ssize_t __pread64_chk(int fd, void *buf, size_t count, off64_t offset, size_t buflen)
{
	if (count > buflen)
		abort();
	return pread(fd, buf, count, offset);
}
#endif

ssize_t __pread_chk(int fd, void *buf, size_t count, off_t offset, size_t buflen);
ssize_t __pread_chk(int fd, void *buf, size_t count, off_t offset, size_t buflen)
{
	if (count > buflen)
		abort();
	return pread(fd, buf, count, offset);
}

ssize_t preadv(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	static ssize_t (*real)(int, const struct iovec *, int, off_t);
	struct ip_fault how;

	if (!real)
		real = (ssize_t (*)(int, const struct iovec *, int, off_t))next_fn("preadv");
	if (!strikes(IP_READ, &how))
		return real(fd, iov, iovcnt, offset);
	return faulty_read(fd, &how, how.err ? -1 : real(fd, iov, iovcnt, offset), iov, iovcnt);
}

ssize_t read(int fd, void *buf, size_t count)
{
	static ssize_t (*real)(int, void *, size_t);
	struct ip_fault how;

	if (!real)
		real = (ssize_t (*)(int, void *, size_t))next_fn("read");
	if (!strikes(IP_READ, &how))
		return real(fd, buf, count);
	struct iovec iov = {buf, count};

	if (how.err)
		return faulty_read(fd, &how, -1, &iov, 1);
	/* A short read leaves the file offset after what it returned: the
	 * rest is given back, where the file can seek. */
	ssize_t n = real(fd, buf, count), k = n > 0 ? shorten(n) : n;
	int e = errno;

	note_file(fd);
	if (k < n && lseek(fd, (off_t)k - (off_t)n, SEEK_CUR) == (off_t)-1)
		k = n; /* a pipe: what it gave stays given */
	else if (k < n)
		scribble(&iov, 1, (size_t)k, (size_t)n);
	errno = e;
	return k;
}

ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen);
ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen)
{
	if (count > buflen)
		abort();
	return read(fd, buf, count);
}

/* ---- threads ----------------------------------------------------------------- */

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
		   void *arg)
{
	static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	struct ip_fault how;

	if (!real)
		real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *),
				void *))next_fn("pthread_create");
	if (strikes(IP_THREAD, &how))
		return EAGAIN;
	return real(thread, attr, start, arg);
}

/* ---- allocations ------------------------------------------------------------- */

/* The objects whose own allocations are neither counted nor failed. */
static struct {
	uintptr_t lo, hi;
} spared[8];
static size_t n_spared;

struct spare_find {
	const void *base;
	const char *name;
};

static int spare_segments(struct dl_phdr_info *info, size_t size, void *data)
{
	const struct spare_find *want = data;

	(void)size;
	if ((const void *)info->dlpi_addr != want->base &&
	    (!*want->name || strcmp(info->dlpi_name, want->name) != 0))
		return 0;
	for (int i = 0; i < info->dlpi_phnum && n_spared < sizeof spared / sizeof *spared; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			spared[n_spared].lo = info->dlpi_addr + ph->p_vaddr;
			spared[n_spared].hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
			n_spared++;
		}
	}
	return 1;
}

bool ip_spare(const void *addr)
{
	Dl_info info;
	struct spare_find want;

	if (!dladdr(addr, &info) || !info.dli_fbase)
		return false;
	want.base = info.dli_fbase;
	want.name = info.dli_fname ? info.dli_fname : "";
	return dl_iterate_phdr(spare_segments, &want) == 1;
}

#if !IP_SANITIZED
static bool is_spared(const void *caller)
{
	for (size_t i = 0; i < n_spared; i++)
		if ((uintptr_t)caller >= spared[i].lo && (uintptr_t)caller < spared[i].hi)
			return true;
	return false;
}

static struct {
	void *(*malloc)(size_t);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*aligned_alloc)(size_t, size_t);
	int (*posix_memalign)(void **, size_t, size_t);
	void *(*memalign)(size_t, size_t);
	void (*free)(void *);
} real;
static int resolving;

/* What dlsym allocates while the functions are being found. */
static _Alignas(64) char arena[16384];
static size_t arena_used;

static void *arena_alloc(size_t size)
{
	size_t at = (arena_used + 63) & ~(size_t)63;

	if (size > sizeof arena - at)
		return NULL;
	arena_used = at + size;
	return memset(arena + at, 0, size);
}

static bool in_arena(const void *p)
{
	return (const char *)p >= arena && (const char *)p < arena + sizeof arena;
}

/* True when the real functions are there; false while they are being
 * found, when the arena serves. */
static bool resolved(void)
{
	if (__atomic_load_n(&real.free, __ATOMIC_ACQUIRE))
		return true;
	if (resolving)
		return false;
	resolving = 1;
	real.malloc = (void *(*)(size_t))next_fn("malloc");
	real.calloc = (void *(*)(size_t, size_t))next_fn("calloc");
	real.realloc = (void *(*)(void *, size_t))next_fn("realloc");
	real.aligned_alloc = (void *(*)(size_t, size_t))next_fn("aligned_alloc");
	real.posix_memalign = (int (*)(void **, size_t, size_t))next_fn("posix_memalign");
	real.memalign = (void *(*)(size_t, size_t))next_fn("memalign");
	__atomic_store_n(&real.free, (void (*)(void *))next_fn("free"), __ATOMIC_RELEASE);
	resolving = 0;
	return true;
}

/* The leak table: open addressing, tombstones, no allocation. */
#define TABLE_SIZE (1u << 14)
#define TOMBSTONE ((void *)1)

struct live {
	void *p;
	const void *caller;
	size_t size;
};

static struct live table[TABLE_SIZE];
static size_t n_live;
static bool overflowed;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(const void *p)
{
	return (size_t)(((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ull >> 48) & (TABLE_SIZE - 1);
}

static void track(void *p, size_t size, const void *caller)
{
	if (!p)
		return;
	pthread_mutex_lock(&table_lock);
	if (n_live + 1 >= TABLE_SIZE / 2) {
		overflowed = true;
	} else {
		size_t i = slot_of(p);

		while (table[i].p && table[i].p != TOMBSTONE)
			i = (i + 1) & (TABLE_SIZE - 1);
		table[i] = (struct live){p, caller, size};
		n_live++;
	}
	pthread_mutex_unlock(&table_lock);
}

/* Whether p was followed; it no longer is. */
static bool untrack(void *p)
{
	bool was = false;

	if (!p || !__atomic_load_n(&n_live, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&table_lock);
	for (size_t i = slot_of(p); table[i].p; i = (i + 1) & (TABLE_SIZE - 1))
		if (table[i].p == p) {
			table[i].p = TOMBSTONE;
			n_live--;
			was = true;
			break;
		}
	pthread_mutex_unlock(&table_lock);
	return was;
}

/* Count an allocation; true when it is to fail (errno set). */
static bool alloc_fails(const void *caller)
{
	struct ip_fault how;

	if (is_spared(caller) || !strikes(IP_ALLOC, &how))
		return false;
	errno = ENOMEM;
	return true;
}

static void *followed(void *p, size_t size, const void *caller)
{
	if (p && __atomic_load_n(&window, __ATOMIC_ACQUIRE))
		track(p, size, caller);
	return p;
}

static void *do_malloc(size_t size, const void *caller)
{
	if (!resolved())
		return arena_alloc(size);
	if (alloc_fails(caller))
		return NULL;
	return followed(real.malloc(size), size, caller);
}

void *malloc(size_t size)
{
	return do_malloc(size, __builtin_return_address(0));
}

void *calloc(size_t n, size_t size)
{
	if (!resolved())
		return size && n > SIZE_MAX / size ? NULL : arena_alloc(n * size);
	if (alloc_fails(__builtin_return_address(0)))
		return NULL;
	return followed(real.calloc(n, size), n * size, __builtin_return_address(0));
}

static void *do_realloc(void *p, size_t size, const void *caller)
{
	if (!resolved() || in_arena(p)) {
		void *q = do_malloc(size, caller);

		/* An arena block is no bigger than what is left of the arena. */
		if (q && p)
			memcpy(q, p, size < (size_t)(arena + sizeof arena - (char *)p)
					     ? size
					     : (size_t)(arena + sizeof arena - (char *)p));
		return q;
	}
	if (alloc_fails(caller))
		return NULL;
	bool was = untrack(p);
	void *q = real.realloc(p, size);

	if (!q && size) {
		if (was) /* still p's */
			track(p, size, caller);
		return NULL;
	}
	if (q && (was || __atomic_load_n(&window, __ATOMIC_ACQUIRE)))
		track(q, size, caller);
	return q;
}

void *realloc(void *p, size_t size)
{
	return do_realloc(p, size, __builtin_return_address(0));
}

void *reallocarray(void *p, size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size) {
		errno = ENOMEM;
		return NULL;
	}
	return do_realloc(p, n * size, __builtin_return_address(0));
}

void *aligned_alloc(size_t align, size_t size)
{
	if (!resolved())
		return align <= 64 ? arena_alloc(size) : NULL;
	if (alloc_fails(__builtin_return_address(0)))
		return NULL;
	return followed(real.aligned_alloc(align, size), size, __builtin_return_address(0));
}

void *memalign(size_t align, size_t size)
{
	if (!resolved())
		return align <= 64 ? arena_alloc(size) : NULL;
	if (alloc_fails(__builtin_return_address(0)))
		return NULL;
	return followed(real.memalign(align, size), size, __builtin_return_address(0));
}

int posix_memalign(void **p, size_t align, size_t size)
{
	if (!resolved())
		return align <= 64 && (*p = arena_alloc(size)) ? 0 : ENOMEM;
	if (alloc_fails(__builtin_return_address(0)))
		return ENOMEM;
	int rc = real.posix_memalign(p, align, size);

	if (rc == 0)
		followed(*p, size, __builtin_return_address(0));
	return rc;
}

void free(void *p)
{
	if (!p || in_arena(p))
		return;
	untrack(p);
	if (resolved())
		real.free(p);
}

/* libc's own would allocate from inside libc, where the leak check cannot
 * tell the library's blocks from libc's. */
#undef strdup
#undef strndup
char *strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = do_malloc(n, __builtin_return_address(0));

	return d ? memcpy(d, s, n) : NULL;
}

char *strndup(const char *s, size_t max)
{
	size_t n = strnlen(s, max);
	char *d = do_malloc(n + 1, __builtin_return_address(0));

	if (!d)
		return NULL;
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

static int do_vasprintf(char **out, const char *fmt, va_list ap, const void *caller)
	__attribute__((format(printf, 2, 0)));

static int do_vasprintf(char **out, const char *fmt, va_list ap, const void *caller)
{
	va_list again;
	int n;

	va_copy(again, ap);
	n = vsnprintf(NULL, 0, fmt, ap);
	if (n < 0 || !(*out = do_malloc((size_t)n + 1, caller))) {
		va_end(again);
		return -1;
	}
	vsnprintf(*out, (size_t)n + 1, fmt, again);
	va_end(again);
	return n;
}

int vasprintf(char **out, const char *fmt, va_list ap)
{
	return do_vasprintf(out, fmt, ap, __builtin_return_address(0));
}

int asprintf(char **out, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = do_vasprintf(out, fmt, ap, __builtin_return_address(0));
	va_end(ap);
	return n;
}

void ip_forget(void)
{
	pthread_mutex_lock(&table_lock);
	memset(table, 0, sizeof table);
	n_live = 0;
	overflowed = false;
	pthread_mutex_unlock(&table_lock);
}

bool ip_overflowed(void)
{
	return overflowed;
}

/* libc's and the dynamic loader's blocks are theirs to keep.  The loader
 * is ld-linux-*.so.N on amd64, arm64, riscv64 and loong64, ld64.so.N on
 * ppc64el (and s390x), ld.so.1 on mips64el. */
static bool libc_own(const Dl_info *info)
{
	const char *base = strrchr(info->dli_fname, '/');

	base = base ? base + 1 : info->dli_fname;
	return strncmp(base, "libc.so", 7) == 0 || strncmp(base, "ld-linux", 8) == 0 ||
	       strncmp(base, "ld64.so", 7) == 0 || strncmp(base, "ld.so", 5) == 0 ||
	       strncmp(base, "libc-", 5) == 0;
}

size_t ip_leaks(FILE *out)
{
	static struct live copy[TABLE_SIZE / 2];
	size_t n = 0, leaks = 0;

	/* dladdr and fprintf run outside the lock: a block they allocate or
	 * free would take it again. */
	pthread_mutex_lock(&table_lock);
	for (size_t i = 0; i < TABLE_SIZE && n < sizeof copy / sizeof *copy; i++)
		if (table[i].p && table[i].p != TOMBSTONE)
			copy[n++] = table[i];
	pthread_mutex_unlock(&table_lock);
	for (size_t i = 0; i < n; i++) {
		Dl_info info = {0};

		if (dladdr(copy[i].caller, &info) && info.dli_fname && libc_own(&info))
			continue;
		/* The offset in its object is what addr2line -e OBJECT reads. */
		if (out && leaks < 64)
			fprintf(out, "# leak: %zu bytes at %p, allocated from %s+%#lx%s%s\n",
				copy[i].size, copy[i].p,
				info.dli_fname ? info.dli_fname : "an unloaded object",
				(unsigned long)((uintptr_t)copy[i].caller -
						(uintptr_t)info.dli_fbase),
				info.dli_sname ? " in " : "", info.dli_sname ? info.dli_sname : "");
		leaks++;
	}
	return leaks;
}

#else /* IP_SANITIZED: the sanitizer's allocator, and its leak check */

void ip_forget(void)
{
}

bool ip_overflowed(void)
{
	return false;
}

size_t ip_leaks(FILE *out)
{
	(void)out;
	return 0;
}
#endif
