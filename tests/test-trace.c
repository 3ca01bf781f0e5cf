/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-trace.c - allocation traces: the library's writer (names, header, lines, threads, write errors) and the replay's reader (plain, gzip, every bad line). */
#include "config.h"

#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "internal.h"
#include "trace.h"
#include "trace-read.h"

TEST_TMPDIR_FIXTURE("trace");

static char *path_of(const char *name)
{
	static char path[4][256];
	static int next;
	char *p = path[next++ % 4];

	snprintf(p, sizeof path[0], "%s/%s", dir, name);
	return p;
}

static void write_file(const char *path, const char *text, size_t len)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static void write_gzip(const char *path, const char *text, size_t len)
{
	gzFile gz = gzopen(path, "wb");

	assert_non_null(gz);
	assert_int_equal(gzwrite(gz, text, (unsigned)len), (int)len);
	assert_int_equal(gzclose(gz), Z_OK);
}

/* Every event read since start(), every batch of every file. */
static struct {
	struct trace_event *ev;
	size_t n, cap;
} got;

static void start(struct trace_set *set)
{
	trace_set_init(set);
	got.n = 0;
}

/* The file at path read to its end, its events appended to got. */
static int read_trace(struct trace_set *set, const char *path, char *err, size_t err_size)
{
	int rc = trace_set_open(set, path, err, err_size);

	while (!rc && !(rc = trace_set_next(set, err, err_size)) && set->n_events) {
		assert_true(set->n_events <= TRACE_BATCH);
		if (got.n + set->n_events > got.cap) {
			got.cap = (got.n + set->n_events) * 2;
			assert_non_null(got.ev = realloc(got.ev, got.cap * sizeof *got.ev));
		}
		memcpy(got.ev + got.n, set->events, set->n_events * sizeof *got.ev);
		got.n += set->n_events;
	}
	return rc;
}

/* ---- a log that the tests can read ------------------------------------------- */

struct captured {
	int count;
	char last[1024];
};

static void capture(void *user, enum devcache_log_level level, const char *msg)
{
	struct captured *c = user;

	(void)level;
	c->count++;
	snprintf(c->last, sizeof c->last, "%s", msg);
}

static void start_log(struct log_state *log, struct captured *c)
{
	memset(c, 0, sizeof *c);
	log_init(log, capture, c);
	log_flush(log, DEVCACHE_LOG_DEBUG);
}

/* ---- the writer ------------------------------------------------------------------ */

static void names_expand(void **state)
{
	char *path, expect[128];

	(void)state;
	assert_int_equal(trace_expand("/tmp/t-%p-%d-%%.trace", "cuda:0", &path), 0);
	snprintf(expect, sizeof expect, "/tmp/t-%ld-cuda:0-%%.trace", (long)getpid());
	assert_string_equal(path, expect);
	free(path);
	assert_int_equal(trace_expand("%d%d%p", "host", &path), 0);
	snprintf(expect, sizeof expect, "hosthost%ld", (long)getpid());
	assert_string_equal(path, expect);
	free(path);
	assert_int_equal(trace_expand("plain", "host", &path), 0);
	assert_string_equal(path, "plain");
	free(path);

	assert_int_equal(trace_expand("/tmp/%x.trace", "host", &path), DEVCACHE_ECONFIG);
	assert_null(path);
	assert_string_equal(devcache_last_error(),
			    "trace: '%x' in '/tmp/%x.trace' is not one of %p (the process ID), "
			    "%d (the device) and %% (a '%')");
	assert_int_equal(trace_expand("/tmp/end%", "host", &path), DEVCACHE_ECONFIG);
	assert_contains(devcache_last_error(), "trace: '%' in '/tmp/end%' is not one of");
	assert_int_equal(trace_expand("", "host", &path), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), "trace: the file name is empty");
}

static void comm(char *buf, size_t size)
{
	FILE *f = fopen("/proc/self/comm", "r");

	assert_non_null(f);
	assert_non_null(fgets(buf, (int)size, f));
	buf[strcspn(buf, "\n")] = '\0';
	fclose(f);
}

static void header_and_lines(void **state)
{
	struct log_state log;
	struct captured c;
	struct trace *t;
	char name[64], expect[1024], tmpl[256], *text;

	(void)state;
	start_log(&log, &c);
	snprintf(tmpl, sizeof tmpl, "%s/h-%%p-%%d.trace", dir);
	assert_int_equal(trace_open(&t, tmpl, "host", 0, &log), 0);
	snprintf(expect, sizeof expect, "%s/h-%ld-host.trace", dir, (long)getpid());
	assert_string_equal(trace_path(t), expect);
	trace_alloc(t, 1, 100, 0);
	trace_alloc(t, 2, 4096, 3);
	trace_free(t, 1);
	trace_free(t, 2);
	trace_alloc(t, UINT64_MAX, SIZE_MAX, 65535);
	trace_add_device(t, "cuda:1");
	trace_free(t, UINT64_MAX);
	trace_alloc(t, 0, 1, 1);
	trace_close(t);

	text = test_slurp_must(expect);
	comm(name, sizeof name);
	snprintf(expect, sizeof expect,
		 "# libdevcache %s allocation trace\n"
		 "# program: %s\n"
		 "# pid: %ld\n"
		 "# device: host\n"
		 "+ 1 100\n"
		 "+ 2 4096 3\n"
		 "- 1\n"
		 "- 2\n"
		 "+ 18446744073709551615 18446744073709551615 65535\n"
		 "# device: cuda:1\n"
		 "- 18446744073709551615\n"
		 "+ 0 1 1\n",
		 devcache_version_string(), name, (long)getpid());
	assert_string_equal(text, expect);
	free(text);
	assert_int_equal(c.count, 0);
	log_destroy(&log);
	/* The calls are safe on no trace at all. */
	trace_alloc(NULL, 1, 1, 0);
	trace_free(NULL, 1);
	trace_add_device(NULL, "host");
	trace_close(NULL);
	assert_null(trace_path(NULL));
}

/* The program's name is the program's to choose; it cannot break the header. */
static void program_name_stays_one_line(void **state)
{
	struct log_state log;
	struct captured c;
	struct trace *t;
	char old[64], *text;

	(void)state;
	comm(old, sizeof old);
	assert_int_equal(prctl(PR_SET_NAME, "evil\n+ 1 1"), 0);
	start_log(&log, &c);
	assert_int_equal(trace_open(&t, path_of("comm.trace"), "host", 25769803776u, &log), 0);
	trace_close(t);
	prctl(PR_SET_NAME, old);
	text = test_slurp_must(path_of("comm.trace"));
	assert_contains(text, "\n# program: evil?+ 1 1\n# pid: ");
	/* The device's memory, for devcache replay and tune to emulate. */
	assert_contains(text, "\n# device: host\n# device_memory: 25769803776\n");
	free(text);
	log_destroy(&log);
}

static void cannot_create(void **state)
{
	struct log_state log;
	struct captured c;
	struct trace *t = (struct trace *)&c;

	(void)state;
	start_log(&log, &c);
	assert_int_equal(trace_open(&t, "/nonexistent-dir/t.trace", "host", 0, &log), DEVCACHE_EIO);
	assert_null(t);
	assert_string_equal(devcache_last_error(),
			    "trace: cannot create /nonexistent-dir/t.trace: No such file or directory");
	assert_int_equal(trace_open(&t, "bad-%q", "host", 0, &log), DEVCACHE_ECONFIG);
	assert_null(t);
	log_destroy(&log);
}

/* A full disk: one message, the program goes on, the events are dropped. */
static void write_error_logged_once(void **state)
{
	struct log_state log;
	struct captured c;
	struct trace *t;

	(void)state;
	if (access("/dev/full", W_OK) != 0)
		skip_because("no /dev/full to write to");
	start_log(&log, &c);
	assert_int_equal(trace_open(&t, "/dev/full", "host", 0, &log), 0);
	for (uint64_t i = 0; i < 100000; i++) {
		trace_alloc(t, i, 1000 + i, 0);
		trace_free(t, i);
	}
	assert_int_equal(c.count, 1);
	assert_string_equal(c.last, "trace /dev/full: write error: No space left on device; no "
				    "further events are recorded");
	trace_close(t);
	assert_int_equal(c.count, 1);

	/* Met only when closing: still reported, once. */
	start_log(&log, &c);
	assert_int_equal(trace_open(&t, "/dev/full", "host", 0, &log), 0);
	trace_alloc(t, 1, 1, 0);
	assert_int_equal(c.count, 0);
	trace_close(t);
	assert_int_equal(c.count, 1);
	assert_contains(c.last, "write error: No space left on device");
	log_destroy(&log);
}

#define THREADS 8
#define PER_THREAD 20000

struct writer {
	struct trace *trace;
	unsigned index;
};

static void *write_events(void *arg)
{
	struct writer *w = arg;

	for (uint64_t i = 0; i < PER_THREAD; i++) {
		uint64_t id = (uint64_t)w->index * 1000000 + i;

		trace_alloc(w->trace, id, (size_t)i + 1, w->index);
		trace_free(w->trace, id);
	}
	return NULL;
}

/* Many threads at once: whole lines only, each thread's in its order, and
 * the result reads back. */
static void threads_write_whole_lines(void **state)
{
	struct writer w[THREADS];
	pthread_t tid[THREADS];
	uint64_t next[THREADS] = {0};
	bool live[THREADS] = {false};
	struct log_state log;
	struct captured c;
	struct trace *t;
	size_t lines = 0;
	char *text, *save = NULL;

	(void)state;
	start_log(&log, &c);
	assert_int_equal(trace_open(&t, path_of("threads.trace"), "host", 0, &log), 0);
	for (unsigned i = 0; i < THREADS; i++) {
		w[i] = (struct writer){t, i};
		assert_int_equal(pthread_create(&tid[i], NULL, write_events, &w[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++)
		pthread_join(tid[i], NULL);
	trace_close(t);
	assert_int_equal(c.count, 0);

	text = test_slurp_must(path_of("threads.trace"));
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		unsigned long long id, size;
		unsigned stream;
		int end = -1;

		lines++;
		if (line[0] == '#')
			continue;
		if (line[0] == '+') {
			int n = sscanf(line, "+ %llu %llu%n %u%n", &id, &size, &end, &stream, &end);
			if (n < 2 || (size_t)end != strlen(line))
				fail_msg("line %zu: '%s' is not a whole event", lines, line);
			/* the default stream, 0, is not written */
			if (n == 3 && stream == 0)
				fail_msg("line %zu: '%s' names stream 0", lines, line);
			if (n == 2)
				stream = 0;
			unsigned th = (unsigned)(id / 1000000);
			assert_true(th < THREADS);
			assert_int_equal(stream, th);
			assert_false(live[th]);
			assert_int_equal(id % 1000000, next[th]);
			assert_int_equal(size, next[th] + 1);
			live[th] = true;
		} else {
			if (sscanf(line, "- %llu%n", &id, &end) != 1 || (size_t)end != strlen(line))
				fail_msg("line %zu: '%s' is not a whole event", lines, line);
			unsigned th = (unsigned)(id / 1000000);
			assert_true(th < THREADS);
			assert_true(live[th]);
			assert_int_equal(id % 1000000, next[th]);
			live[th] = false;
			next[th]++;
		}
	}
	free(text);
	assert_int_equal(lines, 4 + THREADS * PER_THREAD * 2);
	for (unsigned i = 0; i < THREADS; i++)
		assert_int_equal(next[i], PER_THREAD);

	struct trace_set set;
	char err[1024];
	start(&set);
	assert_int_equal(read_trace(&set, path_of("threads.trace"), err, sizeof err), 0);
	assert_int_equal(set.n_read, THREADS * PER_THREAD * 2);
	assert_int_equal(set.max_stream, THREADS - 1);
	trace_set_destroy(&set);
	log_destroy(&log);
}

/* ---- the reader ---------------------------------------------------------------------- */

static const char good_trace[] =
	"# libdevcache 0.2.0 allocation trace\n"
	"# program: test\n"
	"\n"
	"+ 10 100\n"
	"+ 11 2000000 2\n"
	"\t+   12\t300 \n"
	"- 10\r\n"
	"+ 13 400 0\n"
	"   # an indented comment\n"
	"- 12\n"
	"+ 10 007\n" /* an ID may come back once freed */
	"- 10"; /* the last line may lack its newline */

static void check_good(size_t first)
{
	const struct trace_event *ev = got.ev + first;

	/* + 10, + 11, + 12, - 10, + 13, - 12, + 10, - 10, then 11 and 13 freed */
	assert_int_equal(ev[0].op, TRACE_OP_ALLOC);
	assert_int_equal(ev[0].size, 100);
	assert_int_equal(ev[0].stream, 0);
	assert_int_equal(ev[1].size, 2000000);
	assert_int_equal(ev[1].stream, 2);
	assert_int_equal(ev[2].size, 300);
	assert_int_equal(ev[3].op, TRACE_OP_FREE);
	assert_int_equal(ev[3].slot, ev[0].slot);
	assert_int_equal(ev[4].size, 400);
	assert_int_equal(ev[4].slot, ev[0].slot); /* reused */
	assert_int_equal(ev[5].op, TRACE_OP_FREE);
	assert_int_equal(ev[5].slot, ev[2].slot);
	assert_int_equal(ev[6].size, 7);
	assert_int_equal(ev[7].slot, ev[6].slot);
	assert_false(ev[7].implicit);
	/* live at the end: freed in the order they were allocated */
	assert_int_equal(ev[8].op, TRACE_OP_FREE);
	assert_true(ev[8].implicit);
	assert_int_equal(ev[8].slot, ev[1].slot);
	assert_true(ev[9].implicit);
	assert_int_equal(ev[9].slot, ev[4].slot);
}

static void reads_plain_and_gzip(void **state)
{
	struct trace_set set;
	char err[1024] = "";

	(void)state;
	write_file(path_of("good.trace"), good_trace, strlen(good_trace));
	write_gzip(path_of("good.trace.gz"), good_trace, strlen(good_trace));
	start(&set);
	assert_int_equal(read_trace(&set, path_of("good.trace"), err, sizeof err), 0);
	assert_int_equal(set.n_read, 8);
	assert_int_equal(got.n, 10);
	assert_int_equal(set.n_slots, 3);
	assert_int_equal(set.max_stream, 2);
	assert_true(trace_stream_used(&set, 0));
	assert_false(trace_stream_used(&set, 1));
	assert_true(trace_stream_used(&set, 2));
	assert_false(trace_stream_used(&set, 70000));
	check_good(0);
	/* A second file follows the first, its IDs its own. */
	assert_int_equal(read_trace(&set, path_of("good.trace.gz"), err, sizeof err), 0);
	assert_int_equal(set.n_read, 16);
	assert_int_equal(got.n, 20);
	assert_int_equal(set.n_slots, 3);
	check_good(10);
	assert_int_equal(set.n_files, 2);
	assert_string_equal(set.path, path_of("good.trace.gz"));
	assert_int_equal(set.first, 10); /* the events of the file */
	assert_int_equal(set.lines, 12);
	assert_null(set.reader);
	trace_set_destroy(&set);

	/* Empty files and comments alone hold no event. */
	write_file(path_of("empty.trace"), "", 0);
	write_gzip(path_of("comments.trace.gz"), "# nothing\n\n", 11);
	start(&set);
	assert_int_equal(read_trace(&set, path_of("empty.trace"), err, sizeof err), 0);
	assert_int_equal(read_trace(&set, path_of("comments.trace.gz"), err, sizeof err), 0);
	assert_int_equal(got.n, 0);
	assert_int_equal(set.n_slots, 0);
	trace_set_destroy(&set);
}

/* The marks: "# warmup-end" and "# step N" as events for a reader that
 * asks for them, in their place among the allocations; every other
 * comment, and a line that only looks like a mark, stays a comment.
 * Without marks the same file reads as it always did. */
static const char marks_trace[] =
	"# libdevcache 0.2.0 allocation trace\n"
	"+ 1 100\n"
	"# step 1 batch 8 seq 512\n"
	"- 1\n"
	"\t#   warmup-end\r\n"
	"# step 2\n"
	"+ 2 200\n"
	"# step by step\n"       /* no number: a comment */
	"# step 3x\n"            /* not a number */
	"# step\n"
	"# steps 4\n"
	"# warmup-ended\n"
	"#warmup-end\n"          /* the word need not be apart from the '#' */
	"# a warmup-end\n"       /* not the first word */
	"# step 18446744073709551615 last\n"
	"# step 18446744073709551616\n" /* too large: a comment */
	"- 2\n";

static void marks(void **state)
{
	struct trace_set set;
	char err[1024] = "";
	const struct trace_event *ev;

	(void)state;
	write_file(path_of("marks.trace"), marks_trace, strlen(marks_trace));
	start(&set);
	assert_false(set.marks);
	set.marks = true;
	assert_int_equal(read_trace(&set, path_of("marks.trace"), err, sizeof err), 0);
	assert_int_equal(got.n, 9);
	ev = got.ev;
	assert_int_equal(ev[0].op, TRACE_OP_ALLOC);
	assert_int_equal(ev[1].op, TRACE_OP_STEP);
	assert_int_equal(ev[1].size, 1);
	assert_int_equal(ev[2].op, TRACE_OP_FREE);
	assert_int_equal(ev[3].op, TRACE_OP_WARMUP_END);
	assert_int_equal(ev[3].size, 0);
	assert_int_equal(ev[4].op, TRACE_OP_STEP);
	assert_int_equal(ev[4].size, 2);
	assert_int_equal(ev[5].op, TRACE_OP_ALLOC);
	assert_int_equal(ev[6].op, TRACE_OP_WARMUP_END);
	assert_int_equal(ev[7].op, TRACE_OP_STEP);
	assert_int_equal(ev[7].size, UINT64_MAX);
	assert_int_equal(ev[8].op, TRACE_OP_FREE);
	assert_false(ev[8].implicit);
	/* The marks are neither allocations nor frees, but they are events of
	 * the file: first counts them. */
	assert_int_equal(set.n_read, 4);
	assert_int_equal(set.first, 9);
	assert_int_equal(set.lines, 17);
	trace_set_destroy(&set);
	assert_false(set.marks); /* destroyed: as trace_set_init() left it */

	/* Without marks, the comments they are. */
	start(&set);
	assert_int_equal(read_trace(&set, path_of("marks.trace"), err, sizeof err), 0);
	assert_int_equal(got.n, 4);
	for (size_t i = 0; i < got.n; i++)
		assert_true(got.ev[i].op == TRACE_OP_ALLOC || got.ev[i].op == TRACE_OP_FREE);
	assert_int_equal(set.n_read, 4);
	trace_set_destroy(&set);
}

/* Each rule with its exact message; line numbers count every line. */
static const struct bad {
	const char *text;
	const char *message; /* after "FILE:" */
} bad[] = {
	{"+ 1\n", "1: an allocation needs an ID and a size: '+ ID SIZE [STREAM]'"},
	{"+\n", "1: an allocation needs an ID and a size: '+ ID SIZE [STREAM]'"},
	{"+ 1 2 3 4\n", "1: unexpected '4' after the stream index: '+ ID SIZE [STREAM]'"},
	{"-\n", "1: a free needs an ID: '- ID'"},
	{"+ 1 1\n- 1 1\n", "2: unexpected '1' after the ID: '- ID'"},
	{"+ x 5\n", "1: invalid ID 'x' (expected a decimal number)"},
	{"+ -1 5\n", "1: invalid ID '-1' (expected a decimal number)"},
	{"- 1.0\n", "1: invalid ID '1.0' (expected a decimal number)"},
	{"+ 18446744073709551616 1\n",
	 "1: ID '18446744073709551616' is too large (at most 18446744073709551615)"},
	{"+ 1 abc\n", "1: invalid size 'abc' (expected a decimal number of bytes)"},
	{"+ 1 +5\n", "1: invalid size '+5' (expected a decimal number of bytes)"},
	{"+ 1 0x10\n", "1: invalid size '0x10' (expected a decimal number of bytes)"},
	{"+ 1 1e3\n", "1: invalid size '1e3' (expected a decimal number of bytes)"},
	{"+ 1 0\n", "1: size 0: an allocation is at least 1 byte"},
	{"+ 1 000\n", "1: size 0: an allocation is at least 1 byte"},
	{"+ 1 18446744073709551616\n",
	 "1: size '18446744073709551616' is too large (at most 18446744073709551615)"},
	{"+ 1 99999999999999999999999999999999999999999999999999\n",
	 "1: size '9999999999999999999999999999999999999999...' is too large (at most "
	 "18446744073709551615)"},
	{"+ 1 10 65536\n", "1: stream index '65536' is too large (at most 65535)"},
	{"+ 1 10 -1\n", "1: invalid stream index '-1' (expected a decimal number)"},
	{"+ 1 10 s1\n", "1: invalid stream index 's1' (expected a decimal number)"},
	{"* 1 10\n", "1: unknown event '*' (a line is '+ ID SIZE [STREAM]', '- ID', a '#' comment "
		     "or blank)"},
	{"+1 10\n", "1: unknown event '+1' (a line is '+ ID SIZE [STREAM]', '- ID', a '#' comment "
		    "or blank)"},
	{"alloc\x01\x02 1\n", "1: unknown event 'alloc?\?' (a line is '+ ID SIZE [STREAM]', '- ID', "
			      "a '#' comment or blank)"},
	{"# c\n\n+ 1 10\n+ 2 10\n+ 1 20\n",
	 "5: ID 1 is allocated again without a free (allocated at line 3)"},
	{"+ 1 1\n- 5\n", "2: free of ID 5, which was never allocated"},
	{"- 0\n", "1: free of ID 0, which was never allocated"},
	{"+ 5 1\n- 5\n\n- 5\n", "4: free of ID 5, which was freed already at line 2"},
	{"+ 1 1\n+ 2 2\0junk\n", "2: a NUL byte: this is not a trace file"},
};

static void bad_lines(void **state)
{
	char err[1024], expect[2048];

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		const char *path = path_of("bad.trace");
		size_t len = strlen(bad[i].text);
		struct trace_set set;

		if (strstr(bad[i].message, "NUL"))
			len += 6; /* "junk\n" after the NUL */
		snprintf(expect, sizeof expect, "%s:%s", path, bad[i].message);
		for (int gz = 0; gz < 2; gz++) {
			if (gz)
				write_gzip(path, bad[i].text, len);
			else
				write_file(path, bad[i].text, len);
			start(&set);
			err[0] = '\0';
			int rc = read_trace(&set, path, err, sizeof err);
			if (rc != DEVCACHE_EFORMAT || strcmp(err, expect) != 0)
				fail_msg("case %zu (%s): got %d '%s', expected '%s'", i,
					 gz ? "gzip" : "plain", rc, err, expect);
			trace_set_destroy(&set);
		}
	}
}

static void long_lines(void **state)
{
	char line[TRACE_LINE_MAX + 8], err[1024], expect[512];
	struct trace_set set;

	(void)state;
	/* A comment of exactly TRACE_LINE_MAX bytes with its newline is fine... */
	memset(line, 'x', sizeof line);
	line[0] = '#';
	line[TRACE_LINE_MAX - 1] = '\n';
	write_file(path_of("long.trace"), line, TRACE_LINE_MAX);
	start(&set);
	assert_int_equal(read_trace(&set, path_of("long.trace"), err, sizeof err), 0);
	trace_set_destroy(&set);
	/* ... and so is one without the newline at the end of the file ... */
	write_file(path_of("long.trace"), line, TRACE_LINE_MAX - 1);
	start(&set);
	assert_int_equal(read_trace(&set, path_of("long.trace"), err, sizeof err), 0);
	trace_set_destroy(&set);
	/* ... one byte more is not, whether the newline comes or not. */
	snprintf(expect, sizeof expect, "%s:2: line too long (more than %d bytes)",
		 path_of("long.trace"), TRACE_LINE_MAX);
	for (size_t extra = 0; extra < 2; extra++) {
		char text[TRACE_LINE_MAX + 16] = "+ 1 1\n";

		memset(text + 6, ' ', TRACE_LINE_MAX);
		text[6 + TRACE_LINE_MAX] = '\n';
		write_file(path_of("long.trace"), text, 6 + TRACE_LINE_MAX + extra);
		start(&set);
		assert_int_equal(read_trace(&set, path_of("long.trace"), err, sizeof err),
				 DEVCACHE_EFORMAT);
		assert_string_equal(err, expect);
		trace_set_destroy(&set);
	}
	/* A file with no newline at all, megabytes long. */
	size_t big = 4 << 20;
	char *blob = malloc(big);
	assert_non_null(blob);
	memset(blob, '9', big);
	write_gzip(path_of("blob.trace.gz"), blob, big);
	free(blob);
	snprintf(expect, sizeof expect, "%s:1: line too long (more than %d bytes)",
		 path_of("blob.trace.gz"), TRACE_LINE_MAX);
	start(&set);
	assert_int_equal(read_trace(&set, path_of("blob.trace.gz"), err, sizeof err),
			 DEVCACHE_EFORMAT);
	assert_string_equal(err, expect);
	trace_set_destroy(&set);
}

static void files_that_cannot_be_read(void **state)
{
	char err[1024], expect[512];
	struct trace_set set;

	(void)state;
	start(&set);
	assert_int_equal(read_trace(&set, path_of("missing.trace"), err, sizeof err),
			 DEVCACHE_ENOENT);
	snprintf(expect, sizeof expect, "%s: No such file or directory", path_of("missing.trace"));
	assert_string_equal(err, expect);
	trace_set_destroy(&set);

	/* Anything but a regular file is refused at once, without reading:
	 * a FIFO must not wait for a writer (the alarm turns a hang into a
	 * failure), /dev/zero must not be read without end. */
	const char *fifo = path_of("fifo.trace");
	const char *not_regular[] = {dir, fifo, "/dev/null", "/dev/zero"};
	unlink(fifo);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	for (size_t i = 0; i < sizeof not_regular / sizeof *not_regular; i++) {
		start(&set);
		alarm(10);
		int rc = read_trace(&set, not_regular[i], err, sizeof err);
		alarm(0);
		assert_int_equal(rc, DEVCACHE_EIO);
		snprintf(expect, sizeof expect, "%s: not a regular file", not_regular[i]);
		assert_string_equal(err, expect);
		assert_int_equal(set.n_files, 0);
		trace_set_destroy(&set);
	}
	unlink(fifo);

	/* gzip data cut short, and gzip data damaged */
	char text[8192];
	size_t n = 0;
	for (unsigned i = 0; n < sizeof text - 32; i++)
		n += (size_t)snprintf(text + n, sizeof text - n, "+ %u %u\n- %u\n", i, i + 1, i);
	write_gzip(path_of("cut.trace.gz"), text, n);
	char *gz = test_slurp_must(path_of("cut.trace.gz"));
	struct stat st;
	assert_int_equal(stat(path_of("cut.trace.gz"), &st), 0);
	write_file(path_of("cut.trace.gz"), gz, (size_t)st.st_size / 2);
	start(&set);
	assert_int_equal(read_trace(&set, path_of("cut.trace.gz"), err, sizeof err),
			 DEVCACHE_EFORMAT);
	/* zlib's reason without zlib's name for the file, "<fd:3>" */
	snprintf(expect, sizeof expect, "%s: invalid compressed data after line %llu: "
		 "unexpected end of file", path_of("cut.trace.gz"), (unsigned long long)set.lines);
	assert_string_equal(err, expect);
	assert_true(set.lines > 0);
	trace_set_destroy(&set);

	/* the CRC at the end: every line reads, then the check fails */
	for (off_t i = st.st_size - 8; i < st.st_size - 4; i++)
		gz[i] = (char)~gz[i];
	write_file(path_of("bad.trace.gz"), gz, (size_t)st.st_size);
	free(gz);
	start(&set);
	assert_int_equal(read_trace(&set, path_of("bad.trace.gz"), err, sizeof err),
			 DEVCACHE_EFORMAT);
	snprintf(expect, sizeof expect, "%s: invalid compressed data after line %llu: "
		 "incorrect data check", path_of("bad.trace.gz"), (unsigned long long)set.lines);
	assert_string_equal(err, expect);
	trace_set_destroy(&set);
}

/* Numbers at their limits are valid: the replay, not the reader, finds out
 * that such a block cannot be had. */
static void extreme_values(void **state)
{
	static const char text[] = "+ 18446744073709551615 18446744073709551615 65535\n"
				   "+ 0 1 65535\n"
				   "- 18446744073709551615\n";
	struct trace_set set;
	char err[1024];

	(void)state;
	write_file(path_of("extreme.trace"), text, strlen(text));
	start(&set);
	assert_int_equal(read_trace(&set, path_of("extreme.trace"), err, sizeof err), 0);
	assert_int_equal(got.ev[0].size, SIZE_MAX);
	assert_int_equal(got.ev[0].stream, 65535);
	assert_int_equal(set.max_stream, 65535);
	assert_int_equal(got.n, 4);
	trace_set_destroy(&set);
}

/* A trace that lies: random garbage and random damage to a good trace give
 * a valid trace or a message naming the file and line, never a crash; and
 * what is accepted is consistent. */
static void lies_are_refused(void **state)
{
	static const char pieces[][24] = {
		"+", "-", " ", "\t", "\n", "#", "0", "1", "7", "65535", "65536", "\r",
		"18446744073709551615", "18446744073709551616", "x", "\xc3\xa9", "\xff", "00",
	};
	char text[512], err[1024];
	unsigned seed = 12345;

	(void)state;
	for (int round = 0; round < 3000; round++) {
		size_t n = 0, want = (size_t)(rand_r(&seed) % 120);
		struct trace_set set;

		while (n < want) {
			const char *p = pieces[rand_r(&seed) % (sizeof pieces / sizeof *pieces)];
			if (n + strlen(p) >= sizeof text)
				break;
			memcpy(text + n, p, strlen(p));
			n += strlen(p);
		}
		write_file(path_of("lie.trace"), text, n);
		start(&set);
		int rc = read_trace(&set, path_of("lie.trace"), err, sizeof err);
		if (rc) {
			assert_int_equal(rc, DEVCACHE_EFORMAT);
			assert_int_equal(strncmp(err, path_of("lie.trace"), strlen(path_of("lie.trace"))),
					 0);
			assert_int_equal(err[strlen(path_of("lie.trace"))], ':');
		} else {
			/* every slot freed exactly once after its allocation */
			bool *live = calloc(set.n_slots + 1, sizeof *live);
			assert_non_null(live);
			for (size_t i = 0; i < got.n; i++) {
				const struct trace_event *ev = &got.ev[i];
				assert_true(ev->slot < set.n_slots);
				assert_true(ev->op == TRACE_OP_ALLOC ? !live[ev->slot] : live[ev->slot]);
				if (ev->op == TRACE_OP_ALLOC)
					assert_true(ev->size > 0);
				live[ev->slot] = ev->op == TRACE_OP_ALLOC;
			}
			for (size_t s = 0; s < set.n_slots; s++)
				assert_false(live[s]);
			free(live);
		}
		trace_set_destroy(&set);
	}
}

/* More events than a batch holds, and more blocks live at the end than
 * one batch frees: the batches follow one another as one stream. */
static void batches(void **state)
{
	const size_t n = TRACE_BATCH + 100;
	char *text = malloc(n * 24);
	struct trace_set set;
	char err[1024];
	size_t len = 0;

	(void)state;
	assert_non_null(text);
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(text + len, "+ %zu %zu\n", i, i + 1);
	write_file(path_of("batches.trace"), text, len);
	free(text);
	start(&set);
	assert_int_equal(read_trace(&set, path_of("batches.trace"), err, sizeof err), 0);
	assert_int_equal(set.n_read, n);
	assert_int_equal(set.n_slots, n);
	assert_int_equal(set.lines, n);
	assert_int_equal(got.n, 2 * n);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(got.ev[i].op, TRACE_OP_ALLOC);
		assert_int_equal(got.ev[i].size, i + 1);
		/* freed at the end in the order of their allocation */
		assert_int_equal(got.ev[n + i].op, TRACE_OP_FREE);
		assert_true(got.ev[n + i].implicit);
		assert_int_equal(got.ev[n + i].slot, got.ev[i].slot);
	}
	trace_set_destroy(&set);
}

/* The blocks live at once are bounded, with a message that names the
 * file, the line and the limit; alive as many as that, a trace is fine. */
static void live_blocks_bounded(void **state)
{
	char text[4096], err[1024], expect[512];
	struct trace_set set;
	size_t len = 0;

	(void)state;
	trace_set_init(&set);
	assert_int_equal(set.live_max, TRACE_LIVE_MAX);
	trace_set_destroy(&set);
	for (unsigned i = 0; i < 100; i++)
		len += (size_t)sprintf(text + len, "+ %u 1\n", i);
	len += (size_t)sprintf(text + len, "- 7\n+ 7 1\n");
	write_file(path_of("live.trace"), text, len);
	start(&set);
	set.live_max = 100;
	assert_int_equal(read_trace(&set, path_of("live.trace"), err, sizeof err), 0);
	assert_int_equal(set.n_slots, 100);
	trace_set_destroy(&set);

	len += (size_t)sprintf(text + len, "+ 100 1\n");
	write_file(path_of("live.trace"), text, len);
	start(&set);
	set.live_max = 100;
	assert_int_equal(read_trace(&set, path_of("live.trace"), err, sizeof err),
			 DEVCACHE_EFORMAT);
	snprintf(expect, sizeof expect, "%s:103: more than 100 blocks live at once",
		 path_of("live.trace"));
	assert_string_equal(err, expect);
	trace_set_destroy(&set);
}

/* The ID table keeps freed IDs only while it has room for them: a free of
 * an ID it no longer knows says both what it may be. */
static void freed_ids_are_forgotten(void **state)
{
	const unsigned n = 10000;
	char *text = malloc(n * 32 + 64), err[1024], expect[512];
	struct trace_set set;
	size_t len = 0;

	(void)state;
	assert_non_null(text);
	for (unsigned i = 0; i < n; i++)
		len += (size_t)sprintf(text + len, "+ %u 1\n- %u\n", i, i);
	len += (size_t)sprintf(text + len, "- 3\n");
	write_file(path_of("forgot.trace"), text, len);
	free(text);
	start(&set);
	assert_int_equal(read_trace(&set, path_of("forgot.trace"), err, sizeof err),
			 DEVCACHE_EFORMAT);
	snprintf(expect, sizeof expect,
		 "%s:%u: free of ID 3, which was never allocated or was freed already",
		 path_of("forgot.trace"), 2 * n + 1);
	assert_string_equal(err, expect);
	trace_set_destroy(&set);
}

/* The address space the process has now, in bytes. */
static size_t address_space(void)
{
	unsigned long pages = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f || fscanf(f, "%lu", &pages) != 1)
		_exit(3);
	fclose(f);
	return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* A gzip file of a few hundred kilobytes holding millions of lines, each
 * ID new: reading it needs no more memory than a trace of a few lines.
 * The child reads it in 48 MiB more address space than it has; reading
 * it whole took 16 bytes a line and 48 an ID. */
static void trace_bomb_in_bounded_memory(void **state)
{
	const unsigned pairs = 1u << 20;
	const char *path = path_of("bomb.trace.gz");
	char *chunk = malloc(1 << 20);
	gzFile gz = gzopen(path, "wb1");
	size_t len = 0;
	int status;
	pid_t pid;

	(void)state;
	assert_non_null(chunk);
	assert_non_null(gz);
	for (unsigned i = 0; i < pairs; i++) {
		len += (size_t)sprintf(chunk + len, "+ %u 1\n- %u\n", i, i);
		if (len > (1 << 20) - 64 || i + 1 == pairs) {
			assert_int_equal(gzwrite(gz, chunk, (unsigned)len), (int)len);
			len = 0;
		}
	}
	assert_int_equal(gzclose(gz), Z_OK);
	free(chunk);

	assert_true((pid = fork()) >= 0);
	if (pid == 0) {
		struct rlimit lim = {address_space() + (48u << 20), RLIM_INFINITY};
		struct trace_set set;
		char err[1024];
		int rc;

		/* A sanitizer reserves terabytes at start: no bound applies. */
		if (!TEST_SANITIZED && setrlimit(RLIMIT_AS, &lim) != 0)
			_exit(3);
		trace_set_init(&set);
		rc = trace_set_open(&set, path, err, sizeof err);
		while (!rc && !(rc = trace_set_next(&set, err, sizeof err)) && set.n_events)
			;
		if (rc) {
			fprintf(stderr, "# %s\n", err);
			_exit(1);
		}
		_exit(set.n_read == 2 * (size_t)pairs && set.n_slots == 1 && set.n_files == 1 ? 0
											       : 2);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* What the header and trace_from_torch say of the traced device: its
 * memory, and the allocations that failed there ("# oom:" followed by the
 * same request tried again); an "# oom:" with no such request after it, or
 * another size, marks nothing. */
static void device_memory_and_recorded_ooms(void **state)
{
	struct trace_set set;
	char err[256];
	const char *path = path_of("recorded.trace");
	static const char text[] =
		"# device: cuda:0\n"
		"# device_memory: 68719476736\n"
		"# device_memory: 5\n" /* the first one counts */
		"+ 1 100\n"
		"# oom: PyTorch could not allocate 4096 bytes; device_free=0\n"
		"+ 2 4096 1\n"
		"- 2\n"
		"# oom: PyTorch could not allocate 777 bytes; device_free=unknown\n"
		"+ 3 778\n"
		"# oom: PyTorch could not allocate 9 bytes; device_free=0\n"
		"\n"
		"+ 4 9\n";

	(void)state;
	write_file(path, text, sizeof text - 1);
	start(&set);
	assert_int_equal(read_trace(&set, path, err, sizeof err), 0);
	assert_int_equal(set.device_memory, 68719476736u);
	assert_int_equal(set.oom_comments, 3);
	assert_int_equal(set.recorded_ooms, 1);
	assert_int_equal(got.ev[0].recorded_oom, 0);
	assert_int_equal(got.ev[1].size, 4096);
	assert_int_equal(got.ev[1].recorded_oom, 1);
	assert_int_equal(got.ev[3].size, 778);
	assert_int_equal(got.ev[3].recorded_oom, 0);
	assert_int_equal(got.ev[4].size, 9);
	assert_int_equal(got.ev[4].recorded_oom, 0);
	trace_set_destroy(&set);
	/* None said: 0. */
	write_file(path, "+ 1 1\n", 6);
	start(&set);
	assert_int_equal(read_trace(&set, path, err, sizeof err), 0);
	assert_int_equal(set.device_memory, 0);
	assert_int_equal(set.recorded_ooms, 0);
	trace_set_destroy(&set);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(names_expand),
		cmocka_unit_test(header_and_lines),
		cmocka_unit_test(program_name_stays_one_line),
		cmocka_unit_test(cannot_create),
		cmocka_unit_test(write_error_logged_once),
		cmocka_unit_test(threads_write_whole_lines),
		cmocka_unit_test(reads_plain_and_gzip),
		cmocka_unit_test(marks),
		cmocka_unit_test(bad_lines),
		cmocka_unit_test(long_lines),
		cmocka_unit_test(files_that_cannot_be_read),
		cmocka_unit_test(extreme_values),
		cmocka_unit_test(lies_are_refused),
		cmocka_unit_test(batches),
		cmocka_unit_test(live_blocks_bounded),
		cmocka_unit_test(freed_ids_are_forgotten),
		cmocka_unit_test(trace_bomb_in_bounded_memory),
		cmocka_unit_test(device_memory_and_recorded_ooms),
	};

	/* The messages are checked in English. */
	setenv("LANGUAGE", "C", 1);
	setenv("LC_ALL", "C", 1);
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
