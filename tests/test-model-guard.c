/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-model-guard.c - a mapped model file that another process truncates or rewrites: the program survives every read of it, the model then fails with an error naming the file, and the other process never waits nor fails. */
#include "config.h"

#include "tap.h"
#include "model-writer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <devcache.h>

TEST_TMPDIR_FIXTURE("model-guard");

/* Tensors over many pages; the file is cut inside the first. */
static const struct mw_tensor tensors[] = {{"a", 300000, 0}, {"b", 70000, 0}};
#define N_TENSORS (sizeof tensors / sizeof tensors[0])
#define CUT_INTO_A 100123 /* bytes of "a" the cut file keeps: not a page boundary */

static void write_model(char *path, size_t size, const char *name, unsigned seed)
{
	snprintf(path, size, "%s/%s", dir, name);
	mw_safetensors(path, tensors, N_TENSORS, seed, NULL);
}

static size_t page(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- the other process ------------------------------------------------------------ */

/* A child that does to the file what it is told, one step at a time, and
 * answers each with 0 or the errno of the call that failed. */
struct other {
	pid_t pid;
	int cmd, ans;
};

enum step {
	OPEN_FOR_WRITING = 'o', /* open(O_WRONLY | O_NONBLOCK), kept open */
	FTRUNCATE = 'f',        /* ftruncate() through that descriptor */
	TRUNCATE = 't',         /* truncate() by name */
	WRITER_OPEN = 'w',      /* open(O_WRONLY | O_NONBLOCK) and close, as truncate(1) does */
	RESTORE = 'r',          /* write the bytes the file had when the child started */
};

static int do_step(int step, const char *path, off_t cut, const char *orig, size_t len, int *fd)
{
	int w;

	switch (step) {
	case OPEN_FOR_WRITING:
		return (*fd = open(path, O_WRONLY | O_NONBLOCK)) < 0 ? errno : 0;
	case FTRUNCATE:
		return ftruncate(*fd, cut) != 0 ? errno : 0;
	case TRUNCATE:
		return truncate(path, cut) != 0 ? errno : 0;
	case WRITER_OPEN:
		if ((w = open(path, O_WRONLY | O_NONBLOCK)) < 0)
			return errno;
		close(w);
		return 0;
	case RESTORE:
		if ((w = open(path, O_WRONLY | O_NONBLOCK)) < 0)
			return errno;
		if (pwrite(w, orig, len, 0) != (ssize_t)len) {
			close(w);
			return errno ? errno : EIO;
		}
		close(w);
		return 0;
	}
	return EINVAL;
}

static struct other other_start(const char *path, off_t cut)
{
	int to[2], from[2];
	struct other o;

	assert_int_equal(pipe(to), 0);
	assert_int_equal(pipe(from), 0);
	o.pid = fork();
	assert_true(o.pid >= 0);
	if (o.pid == 0) {
		char *orig = test_slurp(path);
		struct stat st;
		int fd = -1;
		char c;

		close(to[1]);
		close(from[0]);
		if (!orig || stat(path, &st) != 0)
			_exit(2);
		while (read(to[0], &c, 1) == 1) {
			int ans = do_step(c, path, cut, orig, (size_t)st.st_size, &fd);

			if (write(from[1], &ans, sizeof ans) != sizeof ans)
				_exit(3);
		}
		_exit(0);
	}
	close(to[0]);
	close(from[1]);
	o.cmd = to[1];
	o.ans = from[0];
	return o;
}

/* The other process does step, which must succeed. */
static void other_do(struct other *o, enum step step)
{
	char c = (char)step;
	int ans = -1;

	assert_int_equal(write(o->cmd, &c, 1), 1);
	assert_int_equal(read(o->ans, &ans, sizeof ans), sizeof ans);
	if (ans)
		fail_msg("the other process's step '%c' failed: %s", c, strerror(ans));
}

static void other_end(struct other *o)
{
	int status;

	close(o->cmd);
	close(o->ans);
	assert_int_equal(waitpid(o->pid, &status, 0), o->pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* No process holds a lease on path: none appears in /proc/locks. */
static void no_lease_on(const char *path)
{
	char *locks = test_slurp("/proc/locks"), ino[64];
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	snprintf(ino, sizeof ino, ":%lu ", (unsigned long)st.st_ino);
	for (char *line = locks ? strtok(locks, "\n") : NULL; line; line = strtok(NULL, "\n"))
		if (strstr(line, "LEASE") && strstr(line, ino))
			fail_msg("a lease on %s: %s", path, line);
	free(locks);
}

/* ---- what the program sees -------------------------------------------------------- */

struct view {
	const volatile unsigned char *p[N_TENSORS];
	uint64_t offset[N_TENSORS]; /* of each tensor in the file */
	unsigned seed;
	int patched; /* a writable model's byte 5 of "a" was changed: -1 none */
};

static struct view take_view(devcache_model_t *m, unsigned seed)
{
	struct view v = {.seed = seed, .patched = -1};

	for (size_t i = 0; i < N_TENSORS; i++) {
		devcache_tensor_info_t info;
		void *data;

		assert_int_equal(devcache_model_tensor(m, tensors[i].name, &info, &data), 0);
		assert_int_equal(info.place, DEVCACHE_PLACE_HOST);
		v.p[i] = data;
		v.offset[i] = info.offset;
	}
	return v;
}

/* Read every byte of every tensor through the mapping: a byte at file
 * offset below keep is as loaded (the file's bytes), any other is 0. */
static void read_all(const struct view *v, uint64_t keep)
{
	for (size_t i = 0; i < N_TENSORS; i++)
		for (size_t j = 0; j < tensors[i].size; j++) {
			unsigned char want = v->offset[i] + j < keep
						     ? mw_byte(tensors[i].name, j, v->seed)
						     : 0;
			if (i == 0 && (int)j == v->patched && v->offset[i] + j < keep)
				want ^= 0xff;
			if (v->p[i][j] != want)
				fail_msg("tensor %s byte %zu (file offset %llu): %u, not %u",
					 tensors[i].name, j, (unsigned long long)(v->offset[i] + j),
					 v->p[i][j], want);
		}
}

/* Every use of m through the library now fails, naming the file. */
static void api_refuses(devcache_ctx_t *ctx, devcache_model_t *m, const char *path)
{
	devcache_tensor_info_t info;
	unsigned char *buf = malloc(tensors[0].size);
	void *data = buf;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	assert_non_null(buf);
	for (size_t i = 0; i < N_TENSORS; i++) {
		assert_int_equal(devcache_model_tensor(m, tensors[i].name, &info, &data),
				 DEVCACHE_EIO);
		assert_null(data);
		assert_contains(devcache_last_error(), path);
		assert_contains(devcache_last_error(), "changed while it was mapped");
		assert_int_equal(devcache_model_tensor_copy(m, tensors[i].name, buf,
							    tensors[i].size),
				 DEVCACHE_EIO);
		assert_contains(devcache_last_error(), path);
	}
	free(buf);
	assert_non_null(f = open_memstream(&text, &len));
	assert_int_equal(devcache_cache_summary(ctx, f), 0);
	fclose(f);
	assert_contains(text, "(file changed while mapped)");
	free(text);
}

/* A thread of the program's that reads tensor "a" all along, while the
 * other process cuts the file: each byte is as loaded or 0. */
struct reader {
	const struct view *v;
	pthread_t thread;
	int stop; /* atomic */
	unsigned long passes, bad;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;

	while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE) || r->passes < 2) {
		for (size_t j = 0; j < tensors[0].size; j += 97) {
			unsigned char c = r->v->p[0][j];

			r->bad += c != 0 && c != mw_byte("a", j, r->v->seed) && (int)j != r->v->patched;
		}
		r->passes++;
	}
	return NULL;
}

static uint64_t models(devcache_ctx_t *ctx)
{
	devcache_cache_stats_t s;

	assert_int_equal(devcache_cache_stats(ctx, &s), 0);
	return s.models;
}

/* ---- the cases -------------------------------------------------------------------- */

enum how {
	HELD_OPEN,   /* open for writing from before the load, cut through that descriptor */
	BY_NAME,     /* truncate(2) by name */
	SHRINK_REGROW /* cut, read, then written back whole */
};

static void one_case(enum how how, unsigned flags)
{
	devcache_load_args_t args = {.struct_size = sizeof args, .flags = flags};
	const unsigned seed = 11 + how;
	devcache_load_result_t res;
	devcache_model_t *m, *again;
	char path[512];
	struct view v;

	write_model(path, sizeof path, "m.safetensors", seed);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	devcache_device_t *host = mw_device(ctx, "host");
	/* The cut: CUT_INTO_A bytes into "a", found by a first look at it. */
	assert_int_equal(devcache_model_load(ctx, path, host, &args, &m), 0);
	v = take_view(m, seed);
	devcache_model_release(m);
	assert_int_equal(devcache_cache_evict_all(ctx), 1);
	uint64_t cut = v.offset[0] + CUT_INTO_A;
	struct other o = other_start(path, (off_t)cut);

	if (how == HELD_OPEN)
		other_do(&o, OPEN_FOR_WRITING);
	assert_int_equal(devcache_model_load(ctx, path, host, &args, &m), 0);
	v = take_view(m, seed);
	read_all(&v, UINT64_MAX);
	if (flags & DEVCACHE_LOAD_WRITABLE) {
		((volatile unsigned char *)v.p[0])[5] ^= 0xff; /* a private page of the program's */
		v.patched = 5;
	}
	no_lease_on(path);
	struct reader r = {.v = &v};
	if (how == BY_NAME)
		assert_int_equal(pthread_create(&r.thread, NULL, reader_main, &r), 0);
	/* The other process's writer open and its cut go through at once. */
	other_do(&o, WRITER_OPEN);
	other_do(&o, how == HELD_OPEN ? FTRUNCATE : TRUNCATE);
	if (how == BY_NAME) {
		__atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
		assert_int_equal(pthread_join(r.thread, NULL), 0);
		assert_int_equal(r.bad, 0);
	}
	read_all(&v, cut);
	if (how == SHRINK_REGROW) {
		/* Written back: the page that held the cut is the file's again;
		 * from the first page that faulted on, the mapping is zeros. */
		other_do(&o, RESTORE);
		read_all(&v, (cut + page() - 1) / page() * page());
	}
	other_end(&o);
	api_refuses(ctx, m, path);
	/* Never a hit again, even with the file as it was. */
	if (how == SHRINK_REGROW) {
		args.result = &res;
		assert_int_equal(devcache_model_load(ctx, path, host, &args, &again), 0);
		assert_int_equal(res.hit, 0);
		assert_ptr_not_equal(again, m);
		struct view w = take_view(again, seed);
		read_all(&w, UINT64_MAX);
		devcache_model_release(again);
		assert_int_equal(models(ctx), 2);
	} else {
		assert_int_equal(devcache_model_load(ctx, path, host, &args, &again),
				 DEVCACHE_EFORMAT);
	}
	/* Released, the changed model leaves the cache. */
	uint64_t before = models(ctx);
	devcache_model_release(m);
	assert_int_equal(models(ctx), before - 1);
	devcache_close(ctx);
}

static void held_open_and_cut(void **state)
{
	(void)state;
	one_case(HELD_OPEN, 0);
	one_case(HELD_OPEN, DEVCACHE_LOAD_WRITABLE);
}

static void cut_by_name(void **state)
{
	(void)state;
	one_case(BY_NAME, 0);
	one_case(BY_NAME, DEVCACHE_LOAD_WRITABLE);
}

static void shrunk_and_regrown(void **state)
{
	(void)state;
	one_case(SHRINK_REGROW, 0);
	one_case(SHRINK_REGROW, DEVCACHE_LOAD_WRITABLE);
}

/* ---- sets and partial models ------------------------------------------------------- */

static const struct mw_tensor four[] = {
	{"t0", 100000, 0}, {"t1", 100000, 0}, {"t2", 100000, 1}, {"t3", 100000, 1},
};

/* One shard of a set cut by another process: its tensors read zeros and
 * fail, the other shard's still serve; a partial model then refuses to
 * upload from the changed file. */
static void shard_of_a_set_and_partial_models(void **state)
{
	const char *places[][2] = {{"host", NULL},
				   {"good:0", "max_cache_vram:150K,partial_loading:true"}};
	const char *t2[] = {"t2"};

	(void)state;
	for (size_t k = 0; k < 2; k++) {
		char index[512], stem[16], shard[600], name[64];
		const volatile unsigned char *host[4] = {NULL};
		devcache_tensor_info_t info;
		devcache_model_t *m;
		void *data;

		snprintf(stem, sizeof stem, "set%zu", k);
		mw_sharded(dir, stem, four, 4, 2, 8, 0, index, sizeof index);
		mw_shard_name(name, sizeof name, stem, 1, 2, "safetensors");
		snprintf(shard, sizeof shard, "%s/%s", dir, name);
		devcache_ctx_t *ctx = mw_open_ctx(places[k][1]);
		assert_int_equal(devcache_model_load(ctx, index, mw_device(ctx, places[k][0]), NULL, &m),
				 0);
		for (size_t i = 0; i < 4; i++) {
			assert_int_equal(devcache_model_tensor(m, four[i].name, &info, &data), 0);
			if (info.place == DEVCACHE_PLACE_HOST)
				host[i] = data;
		}
		struct other o = other_start(shard, 0);
		other_do(&o, TRUNCATE);
		other_end(&o);
		for (size_t i = 0; i < 4; i++) {
			if (!host[i])
				continue;
			for (size_t j = 0; j < four[i].size; j++)
				if (host[i][j] != (four[i].shard ? 0 : mw_byte(four[i].name, j, 8)))
					fail_msg("%s byte %zu: %u", four[i].name, j, host[i][j]);
			int rc = devcache_model_tensor(m, four[i].name, &info, &data);
			assert_int_equal(rc, four[i].shard ? DEVCACHE_EIO : 0);
			if (rc)
				assert_contains(devcache_last_error(), shard);
		}
		if (k == 1) {
			/* t0 went to the device at load: it stays usable. */
			assert_int_equal(devcache_model_tensor(m, "t0", &info, &data), 0);
			assert_int_equal(info.place, DEVCACHE_PLACE_DEVICE);
			assert_int_equal(devcache_model_make_resident(m, t2, 1, NULL), DEVCACHE_EIO);
			assert_contains(devcache_last_error(), shard);
			assert_contains(devcache_last_error(), "changed while it was mapped");
		}
		devcache_model_release(m);
		devcache_close(ctx);
	}
}

/* ---- faults that are not the cache's ------------------------------------------------ */

/* SIGBUS's action when the program started (a sanitizer's handler, or
 * SIG_DFL), before cmocka put its own in for each test. */
static struct sigaction at_start;

static void program_handler(int sig)
{
	(void)sig;
	_exit(42);
}

enum before { NOTHING, A_MODEL, HANDLER_THEN_MODEL };

/* A child that reads a page of a file of its own that it has cut: the
 * fault is nobody's but the program's.  Before that, with A_MODEL it loads
 * a model and reads it cut, which the cache answers, and says so through
 * the pipe; with HANDLER_THEN_MODEL it first installs a handler of its
 * own.  Its wait status. */
static int outside_fault(enum before before)
{
	int status, pp[2];
	char said = 0;

	assert_int_equal(pipe(pp), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pp[0]);
		char path[512], own[600];
		devcache_model_t *m;

		/* As the program started: not cmocka's handler of the test. */
		sigaction(SIGBUS, &at_start, NULL);
		if (before == HANDLER_THEN_MODEL) {
			struct sigaction sa = {.sa_handler = program_handler};

			sigemptyset(&sa.sa_mask);
			if (sigaction(SIGBUS, &sa, NULL) != 0)
				_exit(2);
		}
		if (before != NOTHING) {
			write_model(path, sizeof path, "inside.safetensors", 5);
			devcache_ctx_t *ctx = mw_open_ctx(NULL);
			if (devcache_model_load(ctx, path, mw_device(ctx, "host"), NULL, &m)) {
				fprintf(stderr, "# %s\n", devcache_last_error());
				_exit(3);
			}
			struct view v = take_view(m, 5);
			if (truncate(path, 0) != 0)
				_exit(4);
			for (size_t j = 0; j < tensors[1].size; j++)
				if (v.p[1][j] != 0)
					_exit(5);
			if (write(pp[1], "i", 1) != 1)
				_exit(5);
		}
		snprintf(own, sizeof own, "%s/own-%d", dir, (int)before);
		int fd = open(own, O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || ftruncate(fd, (off_t)(2 * page())) != 0)
			_exit(6);
		volatile unsigned char *p = mmap(NULL, 2 * page(), PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED || ftruncate(fd, 0) != 0)
			_exit(7);
		(void)p[page()];
		_exit(0); /* survived a fault that should have ended it */
	}
	close(pp[1]);
	if (read(pp[0], &said, 1) != 1)
		said = 0;
	close(pp[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	/* The cut model read zeros, in the child too. */
	if (before != NOTHING && said != 'i')
		fail_msg("the child did not survive reading its cut model: status %#x", status);
	return status;
}

static void a_fault_elsewhere_is_not_answered(void **state)
{
	(void)state;
	/* First in the program, so that the reference child below runs before
	 * this process ever installed the cache's handler. */
	int plain = outside_fault(NOTHING), with_model = outside_fault(A_MODEL);

	print_message("# without the cache: status %#x; with a model mapped: %#x\n", plain,
		      with_model);
	/* In a plain build the fault kills by SIGBUS; under a sanitizer, its
	 * own report ends the process: either way, as before. */
	assert_false(WIFEXITED(plain) && WEXITSTATUS(plain) == 0);
	assert_int_equal(with_model, plain);
	/* The program's own handler, installed before the cache's, still gets
	 * the faults that are not the cache's. */
	int chained = outside_fault(HANDLER_THEN_MODEL);
	assert_true(WIFEXITED(chained));
	assert_int_equal(WEXITSTATUS(chained), 42);
}

int main(void)
{
	sigaction(SIGBUS, NULL, &at_start);
	const struct CMUnitTest tests[] = {
		TMPDIR_TEST(a_fault_elsewhere_is_not_answered),
		TMPDIR_TEST(held_open_and_cut),
		TMPDIR_TEST(cut_by_name),
		TMPDIR_TEST(shrunk_and_regrown),
		TMPDIR_TEST(shard_of_a_set_and_partial_models),
	};

	return RUN_TAP(tests);
}
