/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-model-lease.c - a mapped model file rewritten or truncated by any process: the program's tensor pointers keep their bytes, through a read lease whose signal reaches the library's own thread alone. */
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <devcache.h>

TEST_TMPDIR_FIXTURE("model-lease");

/* Tensors over several pages, the second past the first 256 KiB. */
static const struct mw_tensor tensors[] = {{"a", 300000, 0}, {"b", 70000, 0}};
#define N_TENSORS (sizeof tensors / sizeof tensors[0])

static void write_model(char *path, size_t size, const char *name, unsigned seed)
{
	snprintf(path, size, "%s/%s", dir, name);
	mw_safetensors(path, tensors, N_TENSORS, seed, NULL);
}

/* Why the kernel gives no read lease here at all, or NULL. */
static const char *no_leases(void)
{
	static char why[600];
	char path[512], *text;
	int fd;

	text = test_slurp("/proc/sys/fs/leases-enable");
	if (text && atoi(text) == 0) {
		free(text);
		return "fs.leases-enable is 0";
	}
	free(text);
	snprintf(path, sizeof path, "%s/trial", dir);
	mw_text(path, "x");
	if ((fd = open(path, O_RDONLY)) < 0 || fcntl(fd, F_SETLEASE, F_RDLCK) != 0) {
		snprintf(why, sizeof why, "the kernel gives no read lease on %s: %s", dir,
			 strerror(errno));
		return why;
	}
	fcntl(fd, F_SETLEASE, F_UNLCK);
	close(fd);
	unlink(path);
	return NULL;
}

#define NEED_LEASES()                                                                          \
	do {                                                                                   \
		const char *why_ = no_leases();                                                \
		if (why_)                                                                      \
			skip_because("%s", why_);                                              \
	} while (0)

/* ---- the writer, in another process ------------------------------------------------ */

struct writer {
	pid_t pid;
	int rd; /* the seconds its open() took come through this pipe */
};

/* A child that opens path for writing, truncating it, and writes garbage:
 * what a download or a converter does to a model file. */
static struct writer rewrite_in_child(const char *path)
{
	struct writer w;
	int p[2];

	assert_int_equal(pipe(p), 0);
	w.pid = fork();
	assert_true(w.pid >= 0);
	if (w.pid == 0) {
		struct timespec t0, t1;
		int fd;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		fd = open(path, O_WRONLY | O_TRUNC);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
		if (fd < 0 || write(fd, "garbage", 7) != 7 || write(p[1], &s, sizeof s) != sizeof s)
			_exit(1);
		_exit(0);
	}
	close(p[1]);
	w.rd = p[0];
	return w;
}

/* Wait for the writer.  The kernel lets it on either when the lease is
 * given back or when lease-break-time runs out: the latter means the
 * library never answered, which its open() having waited that long shows. */
static void wait_writer(struct writer w)
{
	char *text = test_slurp("/proc/sys/fs/lease-break-time");
	int status, break_time = text ? atoi(text) : 0;
	double s = -1;

	free(text);
	assert_int_equal(waitpid(w.pid, &status, 0), w.pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(read(w.rd, &s, sizeof s), sizeof s);
	close(w.rd);
	if (break_time >= 10 && s >= break_time)
		fail_msg("the writer waited %.1f s, the kernel's lease-break-time: the library never "
			 "gave the lease back",
			 s);
}

/* ---- helpers -------------------------------------------------------------------------- */

static char *summary(devcache_ctx_t *ctx)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	assert_non_null(f);
	assert_int_equal(devcache_cache_summary(ctx, f), 0);
	fclose(f);
	return text;
}

static void summary_has(devcache_ctx_t *ctx, const char *what, bool has)
{
	char *text = summary(ctx);

	if (has)
		assert_contains(text, what);
	else
		assert_not_contains(text, what);
	free(text);
}

static const unsigned char *tensor(devcache_model_t *m, const char *name)
{
	devcache_tensor_info_t info;
	void *data;

	assert_int_equal(devcache_model_tensor(m, name, &info, &data), 0);
	assert_int_equal(info.place, DEVCACHE_PLACE_HOST);
	return data;
}

static uint64_t models(devcache_ctx_t *ctx)
{
	devcache_cache_stats_t s;

	assert_int_equal(devcache_cache_stats(ctx, &s), 0);
	return s.models;
}

/* A program thread that reads tensor "a" through its pointer all along,
 * counting the bytes that are not as loaded. */
struct reader {
	const volatile unsigned char *p;
	unsigned seed;
	int stop;          /* atomic */
	unsigned long bad; /* of the last pass */
	unsigned long passes;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;

	while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE) || r->passes == 0) {
		unsigned long bad = 0;

		for (size_t j = 0; j < tensors[0].size; j += 509)
			bad += r->p[j] != mw_byte("a", j, r->seed);
		r->bad += bad;
		r->passes++;
	}
	return NULL;
}

/* ---- the cases ------------------------------------------------------------------------ */

/* Another process truncates and rewrites the file of a locked model while
 * a thread reads it: no SIGBUS, the bytes as loaded, and the next load
 * reads the new file. */
static void rewritten_by_another_process(void **state)
{
	char path[512], buf[70000];
	devcache_model_t *m, *again;
	struct reader r = {.seed = 1};
	struct stat st;
	pthread_t t;

	(void)state;
	NEED_LEASES();
	write_model(path, sizeof path, "m.safetensors", 1);
	assert_int_equal(stat(path, &st), 0);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	devcache_device_t *host = mw_device(ctx, "host");
	assert_int_equal(devcache_model_load(ctx, path, host, NULL, &m), 0);
	summary_has(ctx, "unprotected", false);
	r.p = tensor(m, "a");
	assert_int_equal(pthread_create(&t, NULL, reader_main, &r), 0);
	wait_writer(rewrite_in_child(path));
	__atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	assert_int_equal(r.bad, 0);
	/* The file now holds 7 bytes; the pointers still the model. */
	mw_check("a", tensor(m, "a"), tensors[0].size, 1);
	mw_check("b", tensor(m, "b"), tensors[1].size, 1);
	assert_int_equal(devcache_model_tensor_copy(m, "b", buf, sizeof buf), 0);
	mw_check("b", buf, sizeof buf, 1);
	summary_has(ctx, "file rewritten", true);
	/* No hit on the old model: the new file is read, garbage and all. */
	assert_int_equal(devcache_model_load(ctx, path, host, NULL, &again), DEVCACHE_EFORMAT);
	assert_contains(devcache_last_error(), path);
	/* Rewritten to the same size and given its old time back, the file
	 * looks the same to the identity check: the lease is what tells. */
	mw_safetensors(path, tensors, N_TENSORS, 2, NULL);
	const struct timespec times[2] = {st.st_atim, st.st_mtim};
	assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
	assert_int_equal(devcache_model_load(ctx, path, host, NULL, &again), 0);
	assert_ptr_not_equal(again, m);
	mw_check("a", tensor(again, "a"), tensors[0].size, 2);
	mw_check("a", tensor(m, "a"), tensors[0].size, 1);
	/* Released, the old one goes at once; the new one stays cached. */
	assert_int_equal(models(ctx), 2);
	devcache_model_release(m);
	assert_int_equal(models(ctx), 1);
	devcache_model_release(again);
	assert_int_equal(models(ctx), 1);
	devcache_close(ctx);
}

/* truncate(2) from the program itself, on a writable model it patched:
 * the patch stays, and so does the rest. */
static void truncated_by_this_process_writable(void **state)
{
	devcache_load_args_t args = {.struct_size = sizeof args, .flags = DEVCACHE_LOAD_WRITABLE};
	char path[512];
	devcache_model_t *m;
	unsigned char *a;

	(void)state;
	NEED_LEASES();
	write_model(path, sizeof path, "w.safetensors", 3);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), &args, &m), 0);
	a = (unsigned char *)tensor(m, "a");
	a[4096] ^= 0xff;
	assert_int_equal(truncate(path, 0), 0);
	assert_int_equal(a[4096], mw_byte("a", 4096, 3) ^ 0xff);
	a[4096] ^= 0xff;
	mw_check("a", a, tensors[0].size, 3);
	mw_check("b", tensor(m, "b"), tensors[1].size, 3);
	a[0] = 7; /* still writable */
	summary_has(ctx, "file rewritten", true);
	devcache_model_release(m);
	devcache_close(ctx);
}

/* An unlocked model whose file is rewritten is simply dropped. */
static void unlocked_model_is_dropped(void **state)
{
	char path[512];
	devcache_model_t *m;

	(void)state;
	NEED_LEASES();
	write_model(path, sizeof path, "u.safetensors", 4);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), NULL, &m), 0);
	devcache_model_release(m);
	assert_int_equal(models(ctx), 1);
	wait_writer(rewrite_in_child(path));
	assert_int_equal(models(ctx), 0);
	devcache_close(ctx);
}

/* The lease signal goes to the library's thread and nowhere else: it
 * installs no handler, and a program thread that leaves the signal
 * unblocked, at its default action (which ends the process), neither
 * dies nor finds it pending.  With the program ignoring the signal, the
 * kernel still queues it for the library's thread, which blocks it. */
struct bystander {
	int sig;
	pthread_barrier_t *before, *after;
	int pending;
};

static void *bystander_main(void *arg)
{
	struct bystander *b = arg;
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, b->sig);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	pthread_barrier_wait(b->before);
	pthread_barrier_wait(b->after);
	sigpending(&set);
	b->pending = sigismember(&set, b->sig);
	return NULL;
}

static void signal_reaches_the_library_thread_only(void **state)
{
	const int sig = SIGRTMIN + 9;

	(void)state;
	NEED_LEASES();
	for (int ignore = 0; ignore < 2; ignore++) {
		struct sigaction act = {.sa_handler = ignore ? SIG_IGN : SIG_DFL}, old;
		pthread_barrier_t before, after;
		struct bystander b = {.sig = sig, .before = &before, .after = &after};
		char path[512];
		devcache_model_t *m;
		pthread_t t;
		sigset_t set;

		assert_int_equal(sigaction(sig, &act, NULL), 0);
		sigemptyset(&set);
		sigaddset(&set, sig);
		assert_int_equal(pthread_sigmask(SIG_UNBLOCK, &set, NULL), 0);
		write_model(path, sizeof path, ignore ? "i.safetensors" : "s.safetensors", 5);
		devcache_ctx_t *ctx = mw_open_ctx("lease_signal:9");
		pthread_barrier_init(&before, NULL, 2);
		pthread_barrier_init(&after, NULL, 2);
		assert_int_equal(pthread_create(&t, NULL, bystander_main, &b), 0);
		assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), NULL, &m), 0);
		pthread_barrier_wait(&before);
		wait_writer(rewrite_in_child(path));
		pthread_barrier_wait(&after);
		pthread_join(t, NULL);
		assert_int_equal(b.pending, 0);
		sigpending(&set);
		assert_int_equal(sigismember(&set, sig), 0);
		mw_check("a", tensor(m, "a"), tensors[0].size, 5);
		summary_has(ctx, "file rewritten", true);
		assert_int_equal(sigaction(sig, NULL, &old), 0);
		assert_ptr_equal(old.sa_handler, act.sa_handler);
		devcache_model_release(m);
		devcache_close(ctx);
		pthread_barrier_destroy(&before);
		pthread_barrier_destroy(&after);
	}
	signal(sig, SIG_DFL);
}

/* ---- where there is no lease ---------------------------------------------------------- */

static void keep_log(void *user, enum devcache_log_level level, const char *msg)
{
	char *log = user;

	(void)level;
	strncat(log, msg, 4095 - strlen(log));
	strncat(log, "\n", 4095 - strlen(log));
}

/* A file already open for writing gets no lease: the load goes on,
 * unprotected, and says so. */
static void refused_lease_loads_unprotected(void **state)
{
	char path[512], log[4096] = "";
	devcache_model_t *m;
	int wfd;

	(void)state;
	write_model(path, sizeof path, "r.safetensors", 6);
	assert_true((wfd = open(path, O_WRONLY)) >= 0);
	devcache_ctx_t *ctx = mw_open_ctx("log_level:info");
	devcache_set_log_handler(ctx, keep_log, log);
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), NULL, &m), 0);
	mw_check("a", tensor(m, "a"), tensors[0].size, 6);
	summary_has(ctx, "(unprotected)", true);
	assert_contains(log, "mapped unprotected");
	if (!no_leases())
		assert_contains(log, "it is open for writing");
	close(wfd);
	devcache_model_release(m);
	devcache_close(ctx);
}

/* With lease_signal 0 no lease is taken: a write open does not wait.  With
 * the default one, it would (the O_NONBLOCK open says so at once); with mmap
 * false there is no mapping to protect. */
static void lease_signal_zero_takes_none(void **state)
{
	const char *opts[] = {"lease_signal:0", NULL, "mmap:false"};
	const bool leased[] = {false, true, false}, unprotected[] = {true, false, false};

	(void)state;
	NEED_LEASES();
	for (size_t k = 0; k < 3; k++) {
		char path[512], name[32];
		devcache_model_t *m;
		int fd;

		snprintf(name, sizeof name, "z%zu.safetensors", k);
		write_model(path, sizeof path, name, 7);
		devcache_ctx_t *ctx = mw_open_ctx(opts[k]);
		assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), NULL, &m), 0);
		summary_has(ctx, "(unprotected)", unprotected[k]);
		fd = open(path, O_WRONLY | O_NONBLOCK);
		if (leased[k])
			assert_true(fd < 0 && errno == EWOULDBLOCK);
		else
			assert_true(fd >= 0);
		if (fd >= 0)
			close(fd);
		mw_check("a", tensor(m, "a"), tensors[0].size, 7);
		devcache_model_release(m);
		devcache_close(ctx);
	}
}

/* ---- sets and partial models ------------------------------------------------------------ */

static const struct mw_tensor four[] = {
	{"t0", 100000, 0}, {"t1", 100000, 0}, {"t2", 100000, 1}, {"t3", 100000, 1},
};

/* One shard of a set rewritten: its mapping moves, the other keeps its
 * lease; a partial model's host tensors survive too, and it then refuses to
 * upload more from the rewritten file. */
static void shard_of_a_set_and_partial_models(void **state)
{
	const char *places[][2] = {{"host", NULL},
				   {"good:0", "max_cache_vram:150K,partial_loading:true"}};
	const char *t2[] = {"t2"};

	(void)state;
	NEED_LEASES();
	for (size_t k = 0; k < 2; k++) {
		char index[512], stem[16], shard[600], name[64];
		devcache_tensor_info_t info;
		devcache_model_t *m;
		void *data;
		int fd;

		snprintf(stem, sizeof stem, "set%zu", k);
		mw_sharded(dir, stem, four, 4, 2, 8, 0, index, sizeof index);
		mw_shard_name(name, sizeof name, stem, 1, 2, "safetensors");
		snprintf(shard, sizeof shard, "%s/%s", dir, name);
		devcache_ctx_t *ctx = mw_open_ctx(places[k][1]);
		assert_int_equal(devcache_model_load(ctx, index, mw_device(ctx, places[k][0]), NULL, &m),
				 0);
		wait_writer(rewrite_in_child(shard));
		for (size_t i = 0; i < 4; i++) {
			assert_int_equal(devcache_model_tensor(m, four[i].name, &info, &data), 0);
			if (info.place == DEVCACHE_PLACE_HOST)
				mw_check(four[i].name, data, four[i].size, 8);
		}
		summary_has(ctx, "file rewritten", true);
		/* The first shard keeps its lease. */
		mw_shard_name(name, sizeof name, stem, 0, 2, "safetensors");
		snprintf(shard, sizeof shard, "%s/%s", dir, name);
		fd = open(shard, O_WRONLY | O_NONBLOCK);
		assert_true(fd < 0 && errno == EWOULDBLOCK);
		if (k == 1) {
			assert_int_equal(devcache_model_make_resident(m, t2, 1, NULL), DEVCACHE_EBUSY);
			assert_contains(devcache_last_error(), "rewritten");
		}
		devcache_model_release(m);
		devcache_close(ctx);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TMPDIR_TEST(rewritten_by_another_process),
		TMPDIR_TEST(truncated_by_this_process_writable),
		TMPDIR_TEST(unlocked_model_is_dropped),
		TMPDIR_TEST(signal_reaches_the_library_thread_only),
		TMPDIR_TEST(refused_lease_loads_unprotected),
		TMPDIR_TEST(lease_signal_zero_takes_none),
		TMPDIR_TEST(shard_of_a_set_and_partial_models),
	};

	return RUN_TAP(tests);
}
