/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-torchtrace.c - bench/torchtrace.so records exactly the posix_memalign/free calls of the chosen library, from threads, as a trace that replays; the committed bench/torch-*.trace.gz read cleanly. */
#include "tap.h"

#include <dlfcn.h>
#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spawn.h"
#include "torchtrace/caller.h"
#include "trace-read.h"

static struct result r;
TEST_TMPDIR_FIXTURE("torchtrace");

static const char *need_env(const char *name)
{
	const char *v = getenv(name);

	if (!v || !*v)
		fail_msg("%s is not set: run through make check", name);
	return v;
}

/* The child: allocations of its own, which are not the caller's and must
 * not be recorded, then the caller library's. */
static int child(const char *caller_path)
{
	int (*run)(void);
	void *h, *own, *m = malloc(7777);
	int rc;

	if (posix_memalign(&own, 64, 7777) != 0)
		return 3;
	h = dlopen(caller_path, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 3;
	}
	*(void **)&run = dlsym(h, "caller_run");
	rc = run && run() == 0 ? 0 : 3;
	free(own);
	free(m);
	return rc;
}

/* Runs this program again as the child, with the shim preloaded. */
static void record(const char *trace)
{
	char preload[4096], file[4096];
	pid_t pid;
	int status;

	/* A sanitizer's runtime intercepts posix_memalign and free itself, and
	 * must come first among the libraries: the shim cannot be preloaded
	 * before it (AddressSanitizer refuses to start; ThreadSanitizer's
	 * child dies). */
	if (TEST_SANITIZED)
		skip_because("a sanitizer build: its runtime owns posix_memalign and free, and the "
			     "shim cannot be preloaded before it");
	snprintf(preload, sizeof preload, "LD_PRELOAD=%s", need_env("TEST_TORCHTRACE"));
	snprintf(file, sizeof file, "TORCHTRACE_FILE=%s", trace);
	need_env("TEST_TORCHTRACE_CALLER");
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		putenv(preload);
		putenv(file);
		putenv((char *)"TORCHTRACE_CALLER=caller.so");
		execl("/proc/self/exe", "test-torchtrace", "--child",
		      getenv("TEST_TORCHTRACE_CALLER"), (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

struct counts {
	size_t allocs, frees, implicit;
	unsigned long long bytes;
	uint64_t first_size;
	bool saw_own;
};

/* Reads a whole trace with the tools' reader; fails the test on a fault. */
static void read_trace(const char *path, struct counts *c)
{
	struct trace_set set;
	char err[512] = "";
	int rc;

	memset(c, 0, sizeof *c);
	trace_set_init(&set);
	rc = trace_set_open(&set, path, err, sizeof err);
	while (!rc && !(rc = trace_set_next(&set, err, sizeof err)) && set.n_events)
		for (size_t i = 0; i < set.n_events; i++) {
			const struct trace_event *e = &set.events[i];

			if (e->op == TRACE_OP_ALLOC) {
				if (!c->allocs)
					c->first_size = e->size;
				c->allocs++;
				c->bytes += e->size;
				c->saw_own |= e->size == 7777;
			} else if (e->op == TRACE_OP_FREE) {
				c->frees++;
				c->implicit += e->implicit;
			}
		}
	trace_set_destroy(&set);
	if (rc)
		fail_msg("%s", err);
}

static void records_the_callers_calls(void **state)
{
	char path[256];
	struct counts c;
	unsigned long long bytes = 1000;

	(void)state;
	snprintf(path, sizeof path, "%s/caller.trace", dir);
	record(path);
	read_trace(path, &c);
	/* Every posix_memalign of the caller, sizes as asked, none of the
	 * program's own, the one of 0 bytes left out; every free of them,
	 * whichever thread made it, none left for the reader to add. */
	for (int t = 0; t < CALLER_THREADS; t++)
		bytes += (unsigned long long)CALLER_ROUNDS * (CALLER_BASE(t) + 4096) +
			 (unsigned long long)CALLER_ROUNDS * (CALLER_ROUNDS - 1) / 2;
	assert_int_equal(c.allocs, CALLER_ALLOCS);
	assert_int_equal(c.frees, CALLER_ALLOCS);
	assert_int_equal(c.implicit, 0);
	assert_int_equal(c.first_size, 1000);
	assert_int_equal(c.bytes, bytes);
	assert_false(c.saw_own);
}

static void its_trace_replays(void **state)
{
	static const char *const plain[] = { "LANGUAGE=C", "LC_ALL=C", NULL };
	char path[256], events[64];

	(void)state;
	snprintf(path, sizeof path, "%s/caller.trace", dir);
	record(path);
	RUN_TOOL(plain, "replay", path);
	assert_int_equal(r.status, 0);
	snprintf(events, sizeof events, "events:             %d ", 2 * CALLER_ALLOCS);
	assert_contains(r.out, events);
	assert_contains(r.out, "OOMs:               0");
}

/* The traces make bench replays: each reads without a fault, frees what
 * it allocates, and stays small in the tree. */
static void committed_traces_read(void **state)
{
	char pattern[4096];
	glob_t g;

	(void)state;
	snprintf(pattern, sizeof pattern, "%s/../bench/torch-*.trace.gz", need_env("TEST_SRCDIR"));
	assert_int_equal(glob(pattern, 0, NULL, &g), 0);
	assert_true(g.gl_pathc >= 4);
	for (size_t i = 0; i < g.gl_pathc; i++) {
		struct counts c;
		struct stat st;

		read_trace(g.gl_pathv[i], &c);
		assert_true(c.allocs > 500);
		assert_int_equal(c.frees, c.allocs);
		assert_int_equal(c.implicit, 0);
		assert_int_equal(stat(g.gl_pathv[i], &st), 0);
		assert_true(st.st_size < 1000000);
	}
	globfree(&g);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		TMPDIR_TEST(records_the_callers_calls),
		TMPDIR_TEST(its_trace_replays),
		cmocka_unit_test(committed_traces_read),
	};

	if (argc == 3 && strcmp(argv[1], "--child") == 0)
		return child(argv[2]);
	return RUN_TAP(tests);
}
