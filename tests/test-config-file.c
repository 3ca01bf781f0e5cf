/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-config-file.c - configuration files: syntax, origins and errors by line, what cannot be read, checking. */
#include "config.h"

#include "config-fixture.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- configuration files ------------------------------------------------------- */

static void file_syntax(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX];

	write_file(fx, "syntax.conf",
		   "# libdevcache test configuration\n"
		   "   # an indented comment\n"
		   "\n"
		   "load_workers = 8\n"
		   "log_level: debug\n"
		   "staging_buffers=6   # six buffers\n"
		   "trace = /tmp/a#b\n"
		   "backends = [cuda, hip]   \n"
		   "\tkeep_ram_copy\t=\tfalse\n"
		   "mmap = false\r\n"
		   "max_split_size_mb:512\t# PyTorch's unit\n"
		   "roundup_power2_divisions = [256:1,512:2,>:8]",
		   path, sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), 0);
	assert_string_equal(value(fx, TUN_load_workers), "8");
	assert_string_equal(origin(fx, TUN_load_workers), at(path, 4));
	assert_string_equal(value(fx, TUN_log_level), "debug");
	assert_string_equal(origin(fx, TUN_log_level), at(path, 5));
	assert_string_equal(value(fx, TUN_staging_buffers), "6");
	assert_string_equal(origin(fx, TUN_staging_buffers), at(path, 6));
	assert_string_equal(value(fx, TUN_trace), "/tmp/a#b");
	assert_string_equal(value(fx, TUN_backends), "[cuda,hip]");
	assert_string_equal(origin(fx, TUN_backends), at(path, 8));
	assert_string_equal(value(fx, TUN_keep_ram_copy), "false");
	assert_string_equal(origin(fx, TUN_keep_ram_copy), at(path, 9));
	assert_string_equal(value(fx, TUN_mmap), "false");
	assert_string_equal(origin(fx, TUN_mmap), at(path, 10));
	assert_int_equal(fx->set.v[TUN_max_split_size_mb].u.size, 512 * MiB);
	assert_string_equal(origin(fx, TUN_max_split_size_mb), at(path, 11));
	assert_int_equal(fx->set.v[TUN_roundup_power2_divisions].divisions[9], 8);
	assert_string_equal(origin(fx, TUN_roundup_power2_divisions), at(path, 12));
	assert_string_equal(origin(fx, TUN_caching), "default");
}

static void file_crlf(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX];

	write_file(fx, "crlf.conf",
		   "# written on Windows\r\nload_workers: 7\r\n\r\nlog_level = info  # note\r\n"
		   "trace = /tmp/t\r\n",
		   path, sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 7);
	assert_string_equal(origin(fx, TUN_load_workers), at(path, 2));
	assert_int_equal(fx->set.v[TUN_log_level].u.e, DEVCACHE_LOG_INFO);
	assert_string_equal(origin(fx, TUN_log_level), at(path, 4));
	assert_string_equal(fx->set.v[TUN_trace].str, "/tmp/t");
}

static void file_errors_carry_line(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[PATH_MAX + 256];

	write_file(fx, "range.conf", "log_level = info\n\nload_workers = 0\nstaging_buffers = 8\n", path,
		   sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect,
		 "%s:3: load_workers: '0' is out of range (accepted: at least 1 and at most 64)", path);
	assert_string_equal(devcache_last_error(), expect);
	/* lines before the error are applied, lines after it are not */
	assert_string_equal(origin(fx, TUN_log_level), at(path, 1));
	assert_string_equal(origin(fx, TUN_staging_buffers), "default");

	write_file(fx, "nosep.conf", "# c\nload_workers 8\n", path, sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect, "%s:2: expected 'KEY = VALUE', found 'load_workers 8'", path);
	assert_string_equal(devcache_last_error(), expect);

	write_file(fx, "nokey.conf", "= 5\n", path, sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect, "%s:1: expected 'KEY = VALUE', found '= 5'", path);
	assert_string_equal(devcache_last_error(), expect);

	write_file(fx, "typo.conf", "log_levle = debug\n", path, sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect, "%s:1: unknown tunable 'log_levle' (did you mean 'log_level'?)",
		 path);
	assert_string_equal(devcache_last_error(), expect);
}

static void file_missing(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[PATH_MAX + 128];

	xsnprintf(path, sizeof path, "%s/nope.conf", fx->dir);
	assert_int_equal(config_apply_file(&fx->set, path, false, &fx->log, NULL, NULL), 0);
	assert_int_equal(config_apply_file(&fx->set, path, false, &fx->log, report_fn, fx), 0);
	assert_int_equal(fx->n_reports, 0);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect, "%s: cannot open configuration file: %s",
		 path, strerror(ENOENT));
	assert_string_equal(devcache_last_error(), expect);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, report_fn, fx),
			 DEVCACHE_ECONFIG);
	assert_int_equal(fx->n_reports, 1);
	assert_string_equal(fx->reports[0], expect);
}

static void file_directory(void **state)
{
	struct fixture *fx = *state;
	char expect[PATH_MAX + 64];

	xsnprintf(expect, sizeof expect, "%s: not a regular file", fx->dir);
	/* a directory is an error even where a missing file would be skipped */
	assert_int_equal(config_apply_file(&fx->set, fx->dir, false, &fx->log, NULL, NULL), DEVCACHE_EIO);
	assert_string_equal(devcache_last_error(), expect);
}

/* A FIFO would block the open until a writer came, /dev/zero would never
 * end: anything but a regular file is refused at once, named.  The alarm
 * turns a hang into a failure. */
static void file_not_regular(void **state)
{
	struct fixture *fx = *state;
	char fifo[PATH_MAX], expect[PATH_MAX + 64];
	const char *paths[] = {fifo, "/dev/null", "/dev/zero"};

	xsnprintf(fifo, sizeof fifo, "%s/fifo.conf", fx->dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
		xsnprintf(expect, sizeof expect, "%s: not a regular file", paths[i]);
		for (int must_exist = 0; must_exist < 2; must_exist++) {
			alarm(10);
			int rc = config_apply_file(&fx->set, paths[i], must_exist, &fx->log, NULL, NULL);
			alarm(0);
			assert_int_equal(rc, DEVCACHE_EIO);
			assert_string_equal(devcache_last_error(), expect);
		}
	}
	/* DEVCACHE_CONF naming the FIFO: devcache_open fails, naming it. */
	setenv("DEVCACHE_CONF", fifo, 1);
	alarm(10);
	int rc = devcache_open(&fx->ctx, NULL);
	alarm(0);
	assert_int_equal(rc, DEVCACHE_EIO);
	xsnprintf(expect, sizeof expect, "%s: not a regular file", fifo);
	assert_string_equal(devcache_last_error(), expect);
}

/* Write a file of exactly size bytes: comment lines, then a setting. */
static void write_sized(const char *path, size_t size)
{
	static const char setting[] = "load_workers = 7\n";
	FILE *f = fopen(path, "w");
	size_t left = size - (sizeof setting - 1);

	assert_non_null(f);
	while (left > 0) {
		size_t n = left > 80 ? 80 : left;

		/* a line of n bytes: '#', spaces, newline */
		fprintf(f, "%s%*s\n", n > 1 ? "#" : "", (int)(n > 1 ? n - 2 : 0), "");
		left -= n;
	}
	fputs(setting, f);
	assert_int_equal(fclose(f), 0);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, size);
}

/* A configuration file of CONFIG_FILE_MAX bytes is read; one byte more is
 * refused before anything is read, and the message names the limit. */
static void file_size_limit(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[PATH_MAX + 128];

	xsnprintf(path, sizeof path, "%s/big.conf", fx->dir);
	write_sized(path, CONFIG_FILE_MAX);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, NULL, NULL), 0);
	assert_int_equal(fx->set.v[TUN_load_workers].u.i, 7);
	write_sized(path, CONFIG_FILE_MAX + 1);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, report_fn, fx),
			 DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect,
		  "%s: configuration file of %u bytes is larger than the limit of %u bytes", path,
		  CONFIG_FILE_MAX + 1, CONFIG_FILE_MAX);
	assert_string_equal(devcache_last_error(), expect);
	assert_int_equal(fx->n_reports, 1);
	assert_string_equal(fx->reports[0], expect);
}

/* Run config_apply_file in a child without root's right to read every file. */
static int apply_as_nobody(const char *path, char *message, size_t size)
{
	int fds[2], status;
	pid_t pid;

	if (pipe(fds))
		return INT_MIN;
	pid = fork();
	if (pid == 0) {
		struct tunable_set set;
		int rc;

		close(fds[0]);
		if (setgid(65534) || setuid(65534))
			_exit(77);
		if (tunable_set_defaults(&set))
			_exit(78);
		rc = config_apply_file(&set, path, false, NULL, NULL, NULL);
		tunable_set_free(&set);
		if (write(fds[1], devcache_last_error(), strlen(devcache_last_error()) + 1) < 0)
			_exit(79);
		_exit(-rc);
	}
	close(fds[1]);
	ssize_t got = pid > 0 ? read(fds[0], message, size - 1) : -1;
	message[got > 0 ? got : 0] = '\0';
	close(fds[0]);
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return INT_MIN;
	return WEXITSTATUS(status) >= 77 ? WEXITSTATUS(status) : -WEXITSTATUS(status);
}

static void file_unreadable(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[PATH_MAX + 128];
	int rc;

	write_file(fx, "secret.conf", "load_workers = 8\n", path, sizeof path);
	assert_int_equal(chmod(path, 0), 0);
	xsnprintf(expect, sizeof expect, "%s: cannot open configuration file: %s", path, strerror(EACCES));
	if (geteuid() != 0) {
		rc = config_apply_file(&fx->set, path, false, &fx->log, NULL, NULL);
		assert_int_equal(rc, DEVCACHE_EIO);
		assert_string_equal(devcache_last_error(), expect);
		assert_string_equal(origin(fx, TUN_load_workers), "default");
		return;
	}
	/* Root reads every file: check as nobody instead, or skip. */
	char message[PATH_MAX + 256];

	assert_int_equal(chmod(fx->dir, 0755), 0);
	rc = apply_as_nobody(path, message, sizeof message);
	if (rc == 77) {
		print_message("# SKIP running as root, which reads every file, and cannot become "
			      "nobody to check an unreadable one\n");
		skip();
	}
	assert_int_equal(rc, DEVCACHE_EIO);
	assert_string_equal(message, expect);
}

static void file_report_mode(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[PATH_MAX + 256];

	write_file(fx, "many.conf",
		   "load_workers = 0\n"
		   "staging_buffers = 8\n"
		   "log_levle = debug\n"
		   "nonsense\n"
		   "max_split_size_mb = 10\n"
		   "caching = no\n",
		   path, sizeof path);
	assert_int_equal(config_apply_file(&fx->set, path, true, &fx->log, report_fn, fx),
			 DEVCACHE_ECONFIG);
	assert_int_equal(fx->n_reports, 4);
	xsnprintf(expect, sizeof expect,
		 "%s:1: load_workers: '0' is out of range (accepted: at least 1 and at most 64)", path);
	assert_string_equal(fx->reports[0], expect);
	xsnprintf(expect, sizeof expect, "%s:3: unknown tunable 'log_levle' (did you mean 'log_level'?)",
		 path);
	assert_string_equal(fx->reports[1], expect);
	xsnprintf(expect, sizeof expect, "%s:4: expected 'KEY = VALUE', found 'nonsense'", path);
	assert_string_equal(fx->reports[2], expect);
	xsnprintf(expect, sizeof expect,
		 "%s:5: max_split_size_mb: '10' is out of range (accepted: greater than 20M, or unlimited)",
		 path);
	assert_string_equal(fx->reports[3], expect);
	/* the good lines around the errors still apply */
	assert_string_equal(origin(fx, TUN_staging_buffers), at(path, 2));
	assert_false(fx->set.v[TUN_caching].u.b);
	assert_string_equal(origin(fx, TUN_caching), at(path, 6));
	assert_string_equal(origin(fx, TUN_load_workers), "default");
}

/* ---- devcache_config_check_file ---------------------------------------------------- */

static void check_file_reports_every_error(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[4][PATH_MAX + 256];

	write_file(fx, "check.conf",
		   "# check me\n"
		   "load_workers = 0\n"
		   "staging_buffers = 8\n"
		   "log_levle = debug\n"
		   "backend = native\n"
		   "nonsense\n"
		   "max_split_size_mb = 10\n",
		   path, sizeof path);
	xsnprintf(expect[0], sizeof expect[0],
		 "%s:2: load_workers: '0' is out of range (accepted: at least 1 and at most 64)", path);
	xsnprintf(expect[1], sizeof expect[1],
		 "%s:4: unknown tunable 'log_levle' (did you mean 'log_level'?)", path);
	xsnprintf(expect[2], sizeof expect[2], "%s:6: expected 'KEY = VALUE', found 'nonsense'", path);
	xsnprintf(expect[3], sizeof expect[3],
		 "%s:7: max_split_size_mb: '10' is out of range (accepted: greater than 20M, or unlimited)",
		 path);
	assert_int_equal(devcache_config_check_file(path, capture_fn, &fx->cap), DEVCACHE_ECONFIG);
	assert_int_equal(fx->cap.n, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(fx->cap.level[i], DEVCACHE_LOG_ERROR);
		assert_string_equal(fx->cap.text[i], expect[i]);
	}
	assert_string_equal(devcache_last_error(), expect[0]);
}

static void check_file_good(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX];

	write_file(fx, "good.conf",
		   "# fine\nload_workers = 4\nbackends = cuda, hip\nbackend = native\n"
		   "roundup_power2_divisions = [256:1,512:2,>:8]\n",
		   path, sizeof path);
	assert_int_equal(devcache_config_check_file(path, capture_fn, &fx->cap), 0);
	assert_int_equal(fx->cap.n, 0);
}

static void check_file_missing(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX], expect[PATH_MAX + 128];

	xsnprintf(path, sizeof path, "%s/absent.conf", fx->dir);
	xsnprintf(expect, sizeof expect, "%s: cannot open configuration file: %s",
		 path, strerror(ENOENT));
	assert_int_equal(devcache_config_check_file(path, capture_fn, &fx->cap), DEVCACHE_ECONFIG);
	assert_int_equal(fx->cap.n, 1);
	assert_int_equal(fx->cap.level[0], DEVCACHE_LOG_ERROR);
	assert_string_equal(fx->cap.text[0], expect);
	assert_string_equal(devcache_last_error(), expect);
	assert_int_equal(devcache_config_check_file(NULL, capture_fn, &fx->cap), DEVCACHE_EINVAL);
	assert_string_equal(devcache_last_error(), "devcache_config_check_file: NULL argument");
}

/* The header promises every error goes to log_fn and the first is the detail;
 * a file that is not a regular one (a directory) must say so too. */
static void check_file_directory(void **state)
{
	struct fixture *fx = *state;
	char expect[PATH_MAX + 64];

	xsnprintf(expect, sizeof expect, "%s: not a regular file", fx->dir);
	assert_int_equal(devcache_config_check_file(fx->dir, capture_fn, &fx->cap), DEVCACHE_EIO);
	capture_show(&fx->cap);
	assert_string_equal(devcache_last_error(), expect);
	assert_int_equal(fx->cap.n, 1);
	assert_int_equal(fx->cap.level[0], DEVCACHE_LOG_ERROR);
	assert_contains(fx->cap.text[0], expect);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(file_syntax),
		T(file_crlf),
		T(file_errors_carry_line),
		T(file_missing),
		T(file_directory),
		T(file_not_regular),
		T(file_size_limit),
		T(file_unreadable),
		T(file_report_mode),
		T(check_file_reports_every_error),
		T(check_file_good),
		T(check_file_missing),
		T(check_file_directory),
	};

	no_outside_config();
	return RUN_TAP(tests);
}
